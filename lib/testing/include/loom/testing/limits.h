// This machine's limits, measured with all threads: FP32 FMA peak (AVX-512F or AVX2+FMA loop,
// chosen at run time), int8 dot-product peak (AVX-512 VNNI or AVX-VNNI, when present) and the
// int8 rate left when every 32 values carry two scales (Q8_0 / Q4_0 products), BF16 dot-product
// peak (AVX-512 BF16, when present) and read bandwidth over a buffer far larger than the caches.
// The bar for kernels (docs/PERFORMANCE.md).
#pragma once

#include <cstddef>
#include <functional>
#include <string>

#include "loom/core/thread_pool.h"

namespace loom::testing {

struct MachineLimits {
  std::string cpu;               // model name from /proc/cpuinfo
  int threads = 1;
  std::string fma_isa;           // "avx512f", "avx2+fma" or "scalar"
  double fp32_gflops = 0.0;
  std::string int8_isa;          // "avx512vnni", "avxvnni" or "" (none: int8_gops is 0)
  double int8_gops = 0.0;        // multiply-adds count 2 ops
  // The same dot products with each 32 values' sum scaled by two block scales (a multiply and
  // an FMA), as Q8_0 / Q4_0 weights times Q8_0 activations need: their products' ceiling.
  double int8_block32_gops = 0.0;
  std::string bf16_isa;          // "avx512bf16" or "" (none: bf16_gflops is 0)
  double bf16_gflops = 0.0;      // vdpbf16ps: 2 multiply-adds per lane
  size_t read_bytes = 0;         // buffer size of the bandwidth test
  double read_gbps = 0.0;        // 1e9 bytes per second
};

// n_threads <= 0: all hardware threads. Each test runs 3 times for `seconds` and keeps the best.
MachineLimits measure_limits(int n_threads = 0, double seconds = 0.3, size_t read_bytes = size_t(512) << 20);
std::string limits_text(const MachineLimits& m);
std::string limits_json(const MachineLimits& m);

// The bandwidth test's buffer, kept to be read again between other work: loom-bench --bandwidth
// reads it once after each generated token, so each token's weight reads are set against the
// memory as it was right then (a shared host's bandwidth moves between levels within seconds;
// docs/PERFORMANCE.md). Throws out_of_memory when the buffer cannot be had.
class ReadProbe {
 public:
  // Thread t reads on the CPUs `placement` gives the pool's thread t (loom-bench -C/--cpu-strict:
  // the decode's CPUs; unplaced, they would inherit the calling thread's, often one CPU).
  explicit ReadProbe(int n_threads, size_t bytes = size_t(512) << 20, ThreadPlacement placement = {});
  ~ReadProbe();
  ReadProbe(const ReadProbe&) = delete;
  ReadProbe& operator=(const ReadProbe&) = delete;
  // Passes over the whole buffer on all threads until `seconds` have gone (at least one);
  // 1e9 bytes per second.
  double gbps(double seconds = 0) const;
  size_t bytes() const { return bytes_; }  // a pass: whole MiB, at least one per thread

 private:
  int n_;
  size_t bytes_;
  char* buf_;
  ThreadPlacement placement_;
};

// Runs work(t) for t < n on n new threads started together, thread t placed as the pool's thread
// t would be; the wall seconds until all have finished.
double run_threads(int n, const std::function<void(int)>& work, const ThreadPlacement& placement = {});

}  // namespace loom::testing
