#!/usr/bin/env bash
# Checks that loom-written GGUF files work in the real llama.cpp: loads each one with the prebuilt
# libllama/libggml of the npm package @node-llama-cpp/linux-x64 (pinned, nothing is compiled) with
# tensor checks on, then compares tokenization with `loom-gguf tokenize` and 16-token greedy
# generation with `loom-run` (scripts/llamacpp-compat.mjs). Needs node (>= 20), npm and the npm
# registry on the first run, so it is a developer check, not part of CI.
# Usage: scripts/llamacpp-compat.sh [--lora FILE | --lora-scaled FILE SCALE ...] [MODEL.gguf ...]
#   (default models/loom-default.gguf); the adapters apply to every model, in both engines.
#   LOOM_BIN           loom binaries (default build/bin, relative to the repo root)
#   LOOM_LLAMACPP_DIR  where node-llama-cpp is installed (default ${XDG_CACHE_HOME:-$HOME/.cache}/loom/llamacpp-compat)
# Exit 0 when every model passes, 1 when one does not, 2 when node/npm/the install/loom is missing.
set -euo pipefail
VERSION=3.22.1
here=$PWD
cd "$(dirname "$0")/.."
BIN=$(realpath -m "${LOOM_BIN:-build/bin}")
DIR=${LOOM_LLAMACPP_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/loom/llamacpp-compat}

fail() { echo "llamacpp-compat: $*" >&2; exit 2; }

abs() { case $1 in /*) echo "$1" ;; *) echo "$here/$1" ;; esac; }  # relative to where the script was started
lora=()
while [ $# -gt 0 ]; do
  case $1 in
    --lora) [ $# -ge 2 ] || fail "--lora: expected FILE"; lora+=(--lora "$(abs "$2")"); shift 2 ;;
    --lora-scaled) [ $# -ge 3 ] || fail "--lora-scaled: expected FILE SCALE"; lora+=(--lora-scaled "$(abs "$2")" "$3"); shift 3 ;;
    *) break ;;
  esac
done
models=()
if [ $# -eq 0 ]; then
  models=(models/loom-default.gguf)
else
  for m in "$@"; do models+=("$(abs "$m")"); done
fi
for m in "${models[@]}"; do [ -f "$m" ] || fail "no such model file: $m"; done
for tool in loom-gguf loom-run; do
  [ -x "$BIN/$tool" ] || fail "no $BIN/$tool: build first (scripts/build.sh) or set LOOM_BIN"
done
[ "$(uname -sm)" = "Linux x86_64" ] || fail "only the linux-x64 prebuilt llama.cpp is pinned (this is $(uname -sm))"
command -v node >/dev/null || fail "node not found: install Node.js >= 20 and npm"
node_major=$(node -p 'process.versions.node.split(".")[0]')
[ "$node_major" -ge 20 ] || fail "node $(node --version) is too old: node-llama-cpp $VERSION needs Node.js >= 20"

# Install node-llama-cpp and its prebuilt linux-x64 binaries once (no install scripts run).
installed() {
  [ -f "$DIR/node_modules/node-llama-cpp/dist/index.js" ] &&
    [ -f "$DIR/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/llama-addon.node" ] &&
    node -e 'const fs = require("fs"), d = process.argv[1] + "/node_modules/";
             for (const p of ["node-llama-cpp", "@node-llama-cpp/linux-x64"])
               if (JSON.parse(fs.readFileSync(d + p + "/package.json")).version !== process.argv[2]) process.exit(1);' \
      "$DIR" "$VERSION" 2>/dev/null
}
if ! installed; then
  command -v npm >/dev/null || fail "npm not found: install npm (it comes with Node.js)"
  mkdir -p "$DIR" || fail "cannot create $DIR"
  [ -f "$DIR/package.json" ] || echo '{"name": "loom-llamacpp-compat", "private": true}' > "$DIR/package.json"
  echo "llamacpp-compat: installing node-llama-cpp@$VERSION + @node-llama-cpp/linux-x64@$VERSION into $DIR" >&2
  if ! npm install --prefix "$DIR" --ignore-scripts --no-audit --no-fund --omit=optional --save-exact \
      "node-llama-cpp@$VERSION" "@node-llama-cpp/linux-x64@$VERSION" > "$DIR/npm-install.log" 2>&1; then
    fail "npm install failed (it needs the npm registry): see $DIR/npm-install.log"
  fi
  installed || fail "npm install finished but node-llama-cpp $VERSION is not in $DIR/node_modules"
fi

# One node process per model, so a crash in llama.cpp on one file does not hide the others.
reports=$DIR/last-run
rm -rf "$reports"
mkdir -p "$reports"
export LOOM_LLAMACPP_DIR=$DIR
pass=0 n=0
for m in "${models[@]}"; do
  n=$((n + 1))
  report=$reports/$n-$(basename "$m" .gguf).json
  rc=0
  node scripts/llamacpp-compat.mjs --loom-bin "$BIN" ${lora[@]+"${lora[@]}"} "$m" > "$report" || rc=$?
  case $rc in
    0) pass=$((pass + 1)) ;;
    1) ;;
    2) exit 2 ;;  # setup error, already explained by the .mjs
    *) echo "$m: FAIL: node exited with status $rc (llama.cpp crashed?)" >&2 ;;
  esac
done
echo "llamacpp-compat: $pass/$n models pass; JSON reports in $reports/" >&2
[ "$pass" -eq "$n" ]
