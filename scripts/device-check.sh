#!/usr/bin/env bash
# The GPU machine's check of the CUDA backend (issue 26), one prepared run under 8 minutes:
#   1. builds loom with CUDA (sm_90 + PTX), MPI and Vulkan off, the dependencies from .devdeps/
#      (made here by scripts/device-deps.sh) when the system lacks them;
#   2. loom-bench-ops test -b CUDA0 (every op case the backend claims, against the CPU);
#   3. the CUDA e2e tests (test-cuda: tiny models on CUDA0 == CPU, layer split, graph replay);
#   4. loom-bench on the ~300M llama (preset small) in F16, Q8_0 and Q4_0, all layers on CUDA0;
#   5. the decode step's splits (loom-split-inspect) and the kernels' speed (loom-bench-ops perf).
# Logs, bench JSON and a summary go to a work folder; at exit they are packed into
# ${1:-$OUT}/device-check.tgz beside summary.txt (the device tool returns at most 8 files).
# Every step has its own time limit, so one hung kernel cannot eat the run.
# Device tool: run(command="scripts/device-check.sh", carry=[".devdeps"], timeout_s=480).
set -uo pipefail
cd "$(dirname "$0")/.."
dest=${1:-${OUT:-device-check-out}}
out=$(mktemp -d /tmp/device-check.XXXXXX)
mkdir -p "$dest"
summary="$out/summary.txt"
: >"$summary"
pack() { cp "$summary" "$dest/summary.txt"; tar -czf "$dest/device-check.tgz" -C "$out" .; }
trap pack EXIT
note() { echo "$*" | tee -a "$summary"; }
# step NAME SECONDS CMD...: runs CMD under a time limit, its output in NAME.log
step() { local name=$1 limit=$2; shift 2; local t0=$SECONDS; timeout -k 5 "$limit" "$@" >"$out/$name.log" 2>&1;
         local rc=$?; note "$name: rc=$rc ($((SECONDS - t0)) s)"; pack; return $rc; }

prefix=/tmp/loom-devdeps
if [ -d .devdeps ] && ls .devdeps/*.deb >/dev/null 2>&1; then
  mkdir -p "$prefix"
  for f in .devdeps/*.deb; do dpkg -x "$f" "$prefix"; done
  export CMAKE_PREFIX_PATH="$prefix/usr:${CMAKE_PREFIX_PATH:-}"
  export LD_LIBRARY_PATH="$prefix/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  export PKG_CONFIG_PATH="$prefix/usr/lib/x86_64-linux-gnu/pkgconfig:$prefix/usr/share/pkgconfig:${PKG_CONFIG_PATH:-}"
  export PATH="$PATH:$prefix/usr/bin"  # pkg-config, where the image has none
fi
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH="${LD_LIBRARY_PATH:-}:/usr/local/cuda/lib64"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >"$out/gpu.txt" 2>&1
note "gpu: $(tail -1 "$out/gpu.txt")"
build=build-cuda
jobs=$(nproc)
# Binaries built by `scripts/device-deps.sh --prebuilt` are used where they start here: they go to
# the folder the tests were compiled to find the tools in. Otherwise build.
prebuilt=0
[ -s .devdeps/bin.tar.xz ] && tar -C .devdeps -xJf .devdeps/bin.tar.xz
if [ -x .devdeps/bin/loom-run ] && [ -s .devdeps/bin/BIN_DIR ]; then
  bindir=$(cat .devdeps/bin/BIN_DIR)
  mkdir -p "$bindir" && cp .devdeps/bin/loom-* .devdeps/bin/test-cuda "$bindir/" &&
    "$bindir/loom-run" --version >/dev/null 2>&1 && prebuilt=1
  note "prebuilt binaries: $([ $prebuilt = 1 ] && echo "used, in $bindir" || echo 'do not start here; building')"
fi
if [ $prebuilt = 1 ]; then
  B=$bindir
else
step configure 120 cmake -S . -B $build -G Ninja -DCMAKE_BUILD_TYPE=Release -DLOOM_CUDA=ON -DLOOM_MPI=OFF \
  -DLOOM_VULKAN=OFF -DLOOM_CUDA_ARCHS=90 || { tail -30 "$out/configure.log"; exit 1; }
step build 300 cmake --build $build -j "$jobs" --target loom-run loom-bench loom-bench-ops loom-gguf loom-split-inspect test-cuda \
  || { grep -m5 -B2 -A5 'error' "$out/build.log"; exit 1; }
B=$PWD/$build/bin
fi
step list-devices 30 "$B/loom-run" --list-devices
cat "$out/list-devices.log"
fails=0
step bench-ops-test 120 "$B/loom-bench-ops" test -b CUDA0 || fails=$((fails + 1))
note "  op cases OK: $(grep -c ': OK' "$out/bench-ops-test.log"), FAIL: $(grep -c 'FAIL' "$out/bench-ops-test.log")"
grep 'FAIL' "$out/bench-ops-test.log" | head -40
tail -5 "$out/bench-ops-test.log"
# (its op-case test repeats the bench-ops step above)
step e2e 120 "$B/test-cuda" --gtest_brief=1 --gtest_filter=-*EveryClaimedOpCasePasses || fails=$((fails + 1))
grep -B2 -A12 'Failure\|FAILED' "$out/e2e.log" | head -60
tail -3 "$out/e2e.log" | tee -a "$summary"
m=/tmp/loom-models
mkdir -p $m
for t in f16 q8_0 q4_0; do
  [ -s $m/small-$t.gguf ] || timeout 60 "$B/loom-gguf" new --arch llama --preset small --type $t --seed 1 -o $m/small-$t.gguf >/dev/null
  step bench-$t 60 "$B/loom-bench" -m $m/small-$t.gguf -ngl 99 -dev CUDA0 -p 512 -n 128 -r 3 -o json || fails=$((fails + 1))
  cp "$out/bench-$t.log" "$out/bench-$t.json"
  timeout 60 "$B/loom-run" -m $m/small-$t.gguf -p "The quick brown fox" -n 64 --temp 0 -ngl 99 -dev CUDA0 --json \
    >"$out/run-$t.json" 2>"$out/run-$t.err"
  note "  run-$t: rc=$? $(grep -o '"[a-z_]*\(sync\|graph\|eager\|tokens_per\)[a-z_]*": *[0-9.]*' "$out/run-$t.json" | tr '\n' ' ')"
  tail -2 "$out/run-$t.err"
done
# decode deep in the context (attention over 4096 keys), F16
step bench-f16-d4096 90 "$B/loom-bench" -m $m/small-f16.gguf -ngl 99 -dev CUDA0 -p 0 -n 64 -d 4096 -r 2 -o json || fails=$((fails + 1))
# where each node of a decode step runs (one CUDA split per token when every op has a kernel)
step split-inspect 30 "$B/loom-split-inspect" -m $m/small-f16.gguf -ngl 99 --device CUDA0 --phase decode
grep '^split' "$out/split-inspect.log" | head -5 | tee -a "$summary"
# kernel speed: the mat-vec (n=1) and prompt (n=512) products per weight type, attention
step perf 120 "$B/loom-bench-ops" perf -b CUDA0 -o MUL_MAT,MUL_MAT_ID,FLASH_ATTN_EXT --perf-seconds 0.2
grep 'n=1,\|n_q=1,' "$out/perf.log" | head -40
note "failures: $fails"
exit $((fails > 0))
