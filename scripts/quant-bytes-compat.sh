#!/usr/bin/env bash
# Checks that loom's quantizers write llama.cpp's bytes and its dequantizers read them to the
# same floats: builds scripts/quant-bytes-compat.cpp against build/lib/libloom_core.a and runs it
# on the libggml-base.so that scripts/llamacpp-compat.sh installs (node-llama-cpp's prebuilt
# llama.cpp). Developer check, not part of CI. Exit 0 when every type matches byte for byte.
# --imatrix: sets the importance-weighted quantizers against llama-quantize --imatrix's instead
# (exit 0 when no type's weighted error is more than 3% above libggml's).
#   LOOM_LLAMACPP_DIR  where node-llama-cpp is installed (as for llamacpp-compat.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${LOOM_LLAMACPP_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/loom/llamacpp-compat}
lib=$DIR/node_modules/@node-llama-cpp/linux-x64/bins/linux-x64/libggml-base.so
[ -f "$lib" ] || { echo "quant-bytes-compat: no $lib: run scripts/llamacpp-compat.sh once to install it" >&2; exit 2; }
[ -f build/lib/libloom_core.a ] || { echo "quant-bytes-compat: build first (scripts/build.sh)" >&2; exit 2; }
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
g++ -O2 -std=c++20 -I lib/core/include scripts/quant-bytes-compat.cpp build/lib/libloom_core.a -ldl -lfmt -o "$out/qc"
"$out/qc" "$lib" "$@"
