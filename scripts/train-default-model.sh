#!/usr/bin/env bash
# Reproduces the bundled default model, models/loom-default.gguf: a small llama trained from
# scratch by loom-train on Debian's `fortunes` corpus (public domain / freely redistributable
# quotations, ~2.5 MB) with a 2048-token byte-level BPE vocabulary learned from the same text.
# Deterministic for a given build and thread count. Usage: scripts/train-default-model.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${LOOM_BIN:-build/bin}
OUT=${1:-models/loom-default.gguf}
STEPS=${LOOM_DEFAULT_STEPS:-400}
FORTUNES=/usr/share/games/fortunes

[ -x "$BIN/loom-train" ] || { echo "no $BIN/loom-train: build first (scripts/build.sh)" >&2; exit 1; }
if [ ! -d "$FORTUNES" ]; then
  echo "installing the fortunes corpus (Debian package 'fortunes')" >&2
  if [ "$(id -u)" = 0 ]; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends fortunes >&2
  else
    sudo DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends fortunes >&2
  fi
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# Every fortune file (not the .dat indexes or the .u8 links), in a fixed order.
find "$FORTUNES" -maxdepth 1 -type f ! -name '*.dat' -print0 | LC_ALL=C sort -z | xargs -0 cat > "$work/fortunes.txt"
echo "corpus: $(wc -c < "$work/fortunes.txt") bytes from $FORTUNES" >&2

mkdir -p "$(dirname "$OUT")"
# 2 layers x 256 wide (llama:tiny), 2048-token vocabulary: 2.2M parameters, 2.4 MiB in q8_0.
# Cosine decay after a short warmup; the rest of the text (5%) is held out for the val: line.
"$BIN/loom-train" -f "$work/fortunes.txt" --init llama:tiny --vocab-size 2048 \
  -c 128 -b 16 --steps "$STEPS" -lr 2e-3 -lr-min 2e-4 --warmup 30 --seed 1 \
  --out-type q8_0 -o "$OUT"
"$BIN/loom-run" -m "$OUT" -p "The" -n 48 --temp 0 >&2 || true
