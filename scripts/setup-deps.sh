#!/usr/bin/env bash
# Installs (idempotently) the Debian packages loom's build and tests need. Runs apt-get update
# only when something is missing. No other downloads.
set -euo pipefail
packages=(cmake ninja-build ccache g++ clang pkg-config python3 libcli11-dev nlohmann-json3-dev libfmt-dev libspdlog-dev
          libgtest-dev libgmock-dev libbenchmark-dev libpcre2-dev
          libopenmpi-dev openmpi-bin python3-matplotlib
          mesa-vulkan-drivers libvulkan-dev glslc vulkan-tools vulkan-validationlayers)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup-deps: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
