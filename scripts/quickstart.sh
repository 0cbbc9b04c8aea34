#!/usr/bin/env bash
# The main job: installs dependencies, builds Release, makes the bundled default model if it is
# absent, and runs loom-run on it.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh
./scripts/build.sh
model=models/loom-default.gguf
if [ ! -s "$model" ]; then
  mkdir -p models
  ./build/bin/loom-gguf new --arch llama --preset tiny --seed 1 -o "$model"
fi
if [ -x build/bin/loom-run ]; then
  ./build/bin/loom-run -m "$model" -p "${1:-Once upon a time}" -n 64 --temp 0
else
  ./build/bin/loom-gguf info "$model"
fi
