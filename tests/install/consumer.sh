#!/usr/bin/env bash
# The library as a dependency: installs this build into a scratch prefix, builds
# examples/consumer against it with find_package(loom), runs it on the bundled model, and links
# the same object again with only pkg-config's flags. Usage: consumer.sh BUILD_DIR SOURCE_DIR
set -euo pipefail
build=$1 src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
cmake -S "$src/examples/consumer" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$work/prefix" "${launcher[@]}" >/dev/null
cmake --build "$work/build" >/dev/null
out=$("$work/build/loom-consumer" "$src/models/loom-default.gguf" "The")
echo "consumer (find_package): $out"
[ "${out#The}" != "$out" ] && [ ${#out} -gt 3 ] || { echo "the consumer printed no continuation"; exit 1; }

export PKG_CONFIG_PATH="$work/prefix/lib/pkgconfig"
obj=$(find "$work/build" -name 'main.cpp.o' | head -1)
# shellcheck disable=SC2046
g++ -o "$work/consumer-pc" "$obj" $(pkg-config --libs loom)
out_pc=$("$work/consumer-pc" "$src/models/loom-default.gguf" "The")
[ "$out_pc" = "$out" ] || { echo "pkg-config build printed '$out_pc'"; exit 1; }
# shellcheck disable=SC2046
echo '#include "loom/core/dtype.h"
int main() { return loom::dtype_name(loom::DType::Q8_0)[0] == 113 ? 0 : 1; }' |
  g++ -x c++ - -o "$work/pc-cflags" $(pkg-config --cflags --libs loom)
"$work/pc-cflags"
echo "consumer (pkg-config): $out_pc"
