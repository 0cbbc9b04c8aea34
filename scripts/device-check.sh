#!/usr/bin/env bash
# The GPU machine's check of the CUDA backend (issue 26), one prepared run under 8 minutes:
#   1. builds loom with CUDA (sm_90 + PTX), MPI and Vulkan off, the dependencies from .devdeps/
#      (made here by scripts/device-deps.sh) when the system lacks them;
#   2. loom-bench-ops test -b CUDA0 (every op case the backend claims, against the CPU);
#   3. the CUDA e2e tests (test-cuda: tiny models on CUDA0 == CPU, layer split, graph replay);
#   4. loom-bench on the ~300M llama (preset small) in F16, Q8_0 and Q4_0, all layers on CUDA0.
# Results go to ${1:-$OUT} (default device-check-out/): logs, bench JSON, a summary.
# Device tool: run(command="scripts/device-check.sh", carry=[".devdeps"], timeout_s=560).
set -uo pipefail
cd "$(dirname "$0")/.."
out=${1:-${OUT:-device-check-out}}
mkdir -p "$out"
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
step() { local name=$1; shift; local t0=$SECONDS; "$@" >"$out/$name.log" 2>&1; local rc=$?;
         note "$name: rc=$rc ($((SECONDS - t0)) s)"; return $rc; }

prefix=/tmp/loom-devdeps
if [ -d .devdeps ] && ls .devdeps/*.deb >/dev/null 2>&1; then
  mkdir -p "$prefix"
  for f in .devdeps/*.deb; do dpkg -x "$f" "$prefix"; done
  export CMAKE_PREFIX_PATH="$prefix/usr:${CMAKE_PREFIX_PATH:-}"
  export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  export PKG_CONFIG_PATH="$prefix/usr/lib/x86_64-linux-gnu/pkgconfig:$prefix/usr/share/pkgconfig:${PKG_CONFIG_PATH:-}"
fi
export PATH=/usr/local/cuda/bin:$PATH
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/gpu.txt" 2>&1
note "gpu: $(tail -1 "$out/gpu.txt")"
build=build-cuda
jobs=$(nproc)
step configure cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA=ON -DLOOM_MPI=OFF \
  -DLOOM_VULKAN=OFF -DLOOM_CUDA_ARCHS=90 || { tail -30 "$out/configure.log"; exit 1; }
step build cmake --build $build -j "$jobs" --target loom-run loom-bench loom-bench-ops loom-gguf test-cuda \
  || { grep -m5 -B2 -A5 'error' "$out/build.log"; exit 1; }
B=$build/bin
step list-devices "$B/loom-run" --list-devices
cat "$out/list-devices.log"
fails=0
step bench-ops-test "$B/loom-bench-ops" test -b CUDA0 || fails=$((fails + 1))
note "  op cases OK: $(grep -c ': OK' "$out/bench-ops-test.log"), FAIL: $(grep -c 'FAIL' "$out/bench-ops-test.log")"
step e2e "$B/test-cuda" --gtest_brief=1 || fails=$((fails + 1))
tail -3 "$out/e2e.log" | tee -a "$summary"
m=/tmp/loom-models
mkdir -p $m
for t in f16 q8_0 q4_0; do
  [ -s $m/small-$t.gguf ] || "$B/loom-gguf" new --arch llama --preset small --type $t --seed 1 -o $m/small-$t.gguf >/dev/null
  step bench-$t "$B/loom-bench" -m $m/small-$t.gguf -ngl 99 -dev CUDA0 -p 512 -n 128 -r 3 -o json || fails=$((fails + 1))
  cp "$out/bench-$t.log" "$out/bench-$t.json"
  "$B/loom-run" -m $m/small-$t.gguf -p "The quick brown fox" -n 64 --temp 0 -ngl 99 -dev CUDA0 --json \
    >"$out/run-$t.json" 2>"$out/run-$t.err"
  note "  run-$t: rc=$? $(grep -o '"graph_[a-z]*": [0-9]*' "$out/run-$t.json" | tr '\n' ' ')"
done
note "failures: $fails"
exit $((fails > 0))
