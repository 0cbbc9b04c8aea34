#!/usr/bin/env bash
# Run HERE (a machine with apt) before scripts/device-check.sh: downloads the Debian packages of
# loom's build dependencies that the GPU machine lacks (it has nvcc, CMake and ninja, but no
# network) into .devdeps/, which git ignores and the device tool carries (carry: [".devdeps"]).
set -euo pipefail
cd "$(dirname "$0")/.."
grep -qx '/.devdeps/' .git/info/exclude 2>/dev/null || echo '/.devdeps/' >>"$(git rev-parse --git-path info/exclude)"
mkdir -p .devdeps
cd .devdeps
pkgs=(libcli11-dev libfmt-dev libfmt9 nlohmann-json3-dev libgtest-dev libgmock-dev libpcre2-dev libpcre2-8-0
      libpcre2-16-0 libpcre2-32-0 libpcre2-posix3)
apt-get download "${pkgs[@]}" >/dev/null
ls -1 *.deb
