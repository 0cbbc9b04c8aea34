#!/usr/bin/env bash
# The test command: installs dependencies, builds, runs every test tier that needs no GPU
# (ctest), then the acceptance checks' fuzzing step for a bounded time.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup-deps.sh
./scripts/build.sh
(cd "${LOOM_BUILD_DIR:-build}" && ctest --output-on-failure -j2 --timeout 900)
if [ -x scripts/fuzz.sh ]; then
  ./scripts/fuzz.sh "${LOOM_FUZZ_SECONDS:-60}"
fi
