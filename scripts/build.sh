#!/usr/bin/env bash
# Configures and builds loom (Release, Ninja) into ${LOOM_BUILD_DIR:-build}. Extra args go to cmake.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${LOOM_BUILD_DIR:-build}
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "$@" >/dev/null
cmake --build "$build" -j "${LOOM_JOBS:-2}"
