#!/usr/bin/env bash
# Configures and builds loom (Release, Ninja) into ${LOOM_BUILD_DIR:-build}. Extra args go to cmake.
# Where the CUDA toolkit with NCCL is installed (as on CI, which has no GPU), LOOM_CUDA is turned
# on so the NCCL communicator is compiled and linked; its tests skip without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${LOOM_BUILD_DIR:-build}
cuda=()
if [ -x /usr/local/cuda/bin/nvcc ] && ls /usr/local/cuda/lib*/libnccl.so* >/dev/null 2>&1; then
  cuda=(-DLOOM_CUDA=ON)
fi
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release "${cuda[@]}" "$@" >/dev/null
cmake --build "$build" -j "${LOOM_JOBS:-2}"
