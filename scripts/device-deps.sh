#!/usr/bin/env bash
# Run HERE (a machine with apt) before scripts/device-check.sh: downloads the Debian packages of
# loom's build dependencies that the GPU machine lacks (it has nvcc, CMake and ninja, but no
# network) into .devdeps/, which git ignores and the device tool carries (carry: [".devdeps"]).
# With --prebuilt it also builds the binaries device-check.sh runs here (build-cuda/, CUDA on) and
# packs them in .devdeps/bin.tar.xz with the folder the tests were compiled to find them in, so the GPU
# machine's few minutes go to running, not compiling (device-check.sh builds there when absent).
set -euo pipefail
prebuilt=0
[ "${1:-}" = --prebuilt ] && prebuilt=1
cd "$(dirname "$0")/.."
grep -qx '/.devdeps/' .git/info/exclude 2>/dev/null || echo '/.devdeps/' >>"$(git rev-parse --git-path info/exclude)"
mkdir -p .devdeps
cd .devdeps
pkgs=(libcli11-dev libfmt-dev libfmt9 libspdlog-dev libspdlog1.10 nlohmann-json3-dev libgtest-dev libgmock-dev
      libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 libpcre2-posix3 pkgconf pkgconf-bin libpkgconf3)
apt-get download "${pkgs[@]}" >/dev/null
ls -1 *.deb
if [ $prebuilt = 1 ]; then
  cd ..
  targets=(loom-run loom-bench loom-bench-ops loom-gguf loom-split-inspect test-cuda)
  cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA=ON -DLOOM_MPI=OFF -DLOOM_VULKAN=OFF \
    -DLOOM_CUDA_ARCHS=90 >/dev/null
  cmake --build build-cuda -j "${LOOM_JOBS:-2}" --target "${targets[@]}"
  rm -rf .devdeps/bin && mkdir -p .devdeps/bin
  for t in "${targets[@]}"; do cp build-cuda/bin/$t .devdeps/bin/; done
  strip --strip-unneeded .devdeps/bin/*
  echo "$PWD/build-cuda/bin" >.devdeps/bin/BIN_DIR
  # packed: what the device tool carries is limited to 64 MiB with the working tree
  tar -C .devdeps -cJf .devdeps/bin.tar.xz bin && rm -rf .devdeps/bin
  du -sh .devdeps
fi
