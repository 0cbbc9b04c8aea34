// Machine limits: FMA and VNNI throughput loops (12 independent accumulators, more than latency
// x ports, so the loop is bound by issue rate; the block-scaled VNNI loop reads its operands
// through opaque pointers, as a product reads its panels) compiled per ISA with target
// attributes and picked with __builtin_cpu_supports, and a multi-threaded read of a large
// buffer. Best of 3 runs.
#include "loom/testing/limits.h"

#include <sys/mman.h>

// GCC 12's AVX-512 intrinsics headers trip -Wmaybe-uninitialized on their own _mm512_undefined_*
// helpers once inlined; the warning is about the header, not this file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/core/thread_pool.h"

namespace loom::testing {

namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kChunk = 1 << 16;  // loop iterations between clock checks

std::atomic<uint64_t> g_sink{0};  // keeps results alive

// ---- FP32 FMA ------------------------------------------------------------------------------------
// Each call runs `iters` iterations of 12 FMAs on independent registers; returns FLOPs.

__attribute__((target("avx512f"))) double fma_avx512(int64_t iters) {
  __m512 a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm512_set1_ps(1.0f + 0.01f * (float)j);
  const __m512 m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < 12; ++j) a[j] = _mm512_fmadd_ps(a[j], m, c);
  __m512 s = a[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, a[j]);
  float out[16];
  _mm512_storeu_ps(out, s);
  g_sink += (uint64_t)out[0];
  return (double)iters * 12 * 16 * 2;
}

__attribute__((target("avx2,fma"))) double fma_avx2(int64_t iters) {
  __m256 a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm256_set1_ps(1.0f + 0.01f * (float)j);
  const __m256 m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < 12; ++j) a[j] = _mm256_fmadd_ps(a[j], m, c);
  __m256 s = a[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, a[j]);
  float out[8];
  _mm256_storeu_ps(out, s);
  g_sink += (uint64_t)out[0];
  return (double)iters * 12 * 8 * 2;
}

double fma_scalar(int64_t iters) {
  float a[12];
  for (int j = 0; j < 12; ++j) a[j] = 1.0f + 0.01f * (float)j;
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < 12; ++j) a[j] = a[j] * 0.9999999f + 1e-7f;
  g_sink += (uint64_t)a[0];
  return (double)iters * 12 * 2;
}

// ---- int8 dot products (u8 x s8, 4 products summed into each i32 lane) ----------------------------

__attribute__((target("avx512f,avx512bw,avx512vnni"))) double vnni_avx512(int64_t iters) {
  __m512i a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm512_set1_epi32(j);
  const __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < 12; ++j) a[j] = _mm512_dpbusd_epi32(a[j], x, y);
  __m512i s = a[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_epi32(s, a[j]);
  int32_t out[16];
  _mm512_storeu_si512(out, s);
  g_sink += (uint64_t)(uint32_t)out[0];
  return (double)iters * 12 * 64 * 2;
}

__attribute__((target("avx2,avxvnni"))) double vnni_avx2(int64_t iters) {
  __m256i a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm256_set1_epi32(j);
  const __m256i x = _mm256_set1_epi8(3), y = _mm256_set1_epi8(-2);
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < 12; ++j) a[j] = _mm256_dpbusd_avx_epi32(a[j], x, y);
  __m256i s = a[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_epi32(s, a[j]);
  g_sink += (uint64_t)_mm256_extract_epi32(s, 0);
  return (double)iters * 12 * 32 * 2;
}

// ---- int8 dot products with per-32 block scales --------------------------------------------------
// What a Q8_0 / Q4_0 product must do: every 32 values' integer sum gets the weight block's scale
// times the activation block's (a multiply and an FMA per lane and 32 products). Both run on the
// pipes the dot product uses, so this is the most such a product can reach (the tile shape of
// the CPU backend: 12 accumulators of 8 dot products per block, operands read from L1).

// Operands of the block loops, in L1 as the tile's are: 2 x 8 quads of 16 weight rows, 6
// activation blocks of 32 bytes.
alignas(64) uint8_t g_block_w[2 * 8 * 64];
alignas(64) int8_t g_block_x[6 * 32];
alignas(64) float g_block_d[2 * 16 + 6] = {};  // the weight rows' scales, then the activations'

__attribute__((target("avx512f,avx512bw,avx512vnni"))) double vnni_block32_avx512(int64_t iters) {
  __m512 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_setzero_ps();
  const uint8_t* w = g_block_w;
  const int8_t* x = g_block_x;
  const float* d = g_block_d;
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile("" : "+r"(w), "+r"(x), "+r"(d));  // opaque operands: nothing can be folded or hoisted
    const __m512 dw[2] = {_mm512_load_ps(d), _mm512_load_ps(d + 16)};
    __m512i s[12];
    for (int j = 0; j < 12; ++j) s[j] = _mm512_setzero_si512();
    for (int q = 0; q < 8; ++q) {
      const __m512i w0 = _mm512_load_si512(w + 64 * q), w1 = _mm512_load_si512(w + 512 + 64 * q);
      for (int j = 0; j < 6; ++j) {
        int32_t x4;
        std::memcpy(&x4, x + 32 * j + 4 * q, 4);
        const __m512i xv = _mm512_set1_epi32(x4);
        s[2 * j] = _mm512_dpbusd_epi32(s[2 * j], w0, xv);
        s[2 * j + 1] = _mm512_dpbusd_epi32(s[2 * j + 1], w1, xv);
      }
    }
    for (int j = 0; j < 12; ++j)
      acc[j] =
          _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[j]), _mm512_mul_ps(dw[j % 2], _mm512_set1_ps(d[32 + j / 2])), acc[j]);
  }
  __m512 t = acc[0];
  for (int j = 1; j < 12; ++j) t = _mm512_add_ps(t, acc[j]);
  float out[16];
  _mm512_storeu_ps(out, t);
  g_sink += (uint64_t)out[0];
  return (double)iters * 8 * 12 * 64 * 2;
}

// The same loop on 256-bit registers (AVX-VNNI): 8 rows per register.
__attribute__((target("avx2,fma,avxvnni"))) double vnni_block32_avx2(int64_t iters) {
  __m256 acc[12];
  for (int j = 0; j < 12; ++j) acc[j] = _mm256_setzero_ps();
  const uint8_t* w = g_block_w;
  const int8_t* x = g_block_x;
  const float* d = g_block_d;
  for (int64_t i = 0; i < iters; ++i) {
    asm volatile("" : "+r"(w), "+r"(x), "+r"(d));
    const __m256 dw[2] = {_mm256_load_ps(d), _mm256_load_ps(d + 16)};
    __m256i s[12];
    for (int j = 0; j < 12; ++j) s[j] = _mm256_setzero_si256();
    for (int q = 0; q < 8; ++q) {
      const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 32 * q));
      const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(w + 512 + 32 * q));
      for (int j = 0; j < 6; ++j) {
        int32_t x4;
        std::memcpy(&x4, x + 32 * j + 4 * q, 4);
        const __m256i xv = _mm256_set1_epi32(x4);
        s[2 * j] = _mm256_dpbusd_avx_epi32(s[2 * j], w0, xv);
        s[2 * j + 1] = _mm256_dpbusd_avx_epi32(s[2 * j + 1], w1, xv);
      }
    }
    for (int j = 0; j < 12; ++j)
      acc[j] =
          _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[j]), _mm256_mul_ps(dw[j % 2], _mm256_set1_ps(d[32 + j / 2])), acc[j]);
  }
  __m256 t = acc[0];
  for (int j = 1; j < 12; ++j) t = _mm256_add_ps(t, acc[j]);
  float out[8];
  _mm256_storeu_ps(out, t);
  g_sink += (uint64_t)out[0];
  return (double)iters * 8 * 12 * 32 * 2;
}

// ---- bf16 dot products (two bf16 products summed into each f32 lane) ------------------------------

__attribute__((target("avx512f,avx512bf16"))) double bf16_avx512(int64_t iters) {
  __m512 a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm512_set1_ps((float)j);
  const __m512bh x = (__m512bh)_mm512_set1_epi32(0x3f803f80), y = (__m512bh)_mm512_set1_epi32(0x3c003c00);  // 1, 2^-7
  for (int64_t i = 0; i < iters; ++i)
    for (int j = 0; j < 12; ++j) a[j] = _mm512_dpbf16_ps(a[j], x, y);
  __m512 s = a[0];
  for (int j = 1; j < 12; ++j) s = _mm512_add_ps(s, a[j]);
  float out[16];
  _mm512_storeu_ps(out, s);
  g_sink += (uint64_t)out[0];
  return (double)iters * 12 * 32 * 2;
}

// ---- memory reads ------------------------------------------------------------------------------
// Sums 64-bit words of [p, p + n) with several accumulators; returns the bytes read.

__attribute__((target("avx512f"))) void read_avx512(const char* p, size_t n) {
  __m512i s0 = _mm512_setzero_si512(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i + 256 <= n; i += 256) {
    s0 = _mm512_add_epi64(s0, _mm512_load_si512(p + i));
    s1 = _mm512_add_epi64(s1, _mm512_load_si512(p + i + 64));
    s2 = _mm512_add_epi64(s2, _mm512_load_si512(p + i + 128));
    s3 = _mm512_add_epi64(s3, _mm512_load_si512(p + i + 192));
  }
  uint64_t out[8];
  _mm512_storeu_si512(out, _mm512_add_epi64(_mm512_add_epi64(s0, s1), _mm512_add_epi64(s2, s3)));
  g_sink += out[0];
}

__attribute__((target("avx2"))) void read_avx2(const char* p, size_t n) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0;
  for (size_t i = 0; i + 128 <= n; i += 128) {
    s0 = _mm256_add_epi64(s0, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i)));
    s1 = _mm256_add_epi64(s1, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 32)));
    s2 = _mm256_add_epi64(s2, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 64)));
    s3 = _mm256_add_epi64(s3, _mm256_load_si256(reinterpret_cast<const __m256i*>(p + i + 96)));
  }
  const __m256i s = _mm256_add_epi64(_mm256_add_epi64(s0, s1), _mm256_add_epi64(s2, s3));
  g_sink += (uint64_t)_mm256_extract_epi64(s, 0);
}

void read_scalar(const char* p, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v;
    std::memcpy(&v, p + i, 8);
    s += v;
  }
  g_sink += s;
}

}  // namespace

double run_threads(int n, const std::function<void(int)>& work, const ThreadPlacement& placement) {
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < n; ++t)
    threads.emplace_back([&, t] {
      place_current_thread(placement, t);
      ++ready;
      while (!go.load(std::memory_order_acquire)) std::this_thread::yield();
      work(t);
    });
  while (ready.load() < n) std::this_thread::yield();
  const auto t0 = Clock::now();
  go.store(true, std::memory_order_release);
  for (auto& th : threads) th.join();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

namespace {

// Ops per second of kernel(iters) on n threads for about `seconds`, best of 3.
double peak(int n, double seconds, double (*kernel)(int64_t)) {
  double best = 0;
  for (int rep = 0; rep < 3; ++rep) {
    std::vector<double> ops((size_t)n, 0.0);
    const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
    const double wall = run_threads(n, [&](int t) {
      do ops[(size_t)t] += kernel(kChunk);
      while (Clock::now() < deadline);
    });
    double total = 0;
    for (double o : ops) total += o;
    best = std::max(best, total / wall);
  }
  return best;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      return colon == std::string::npos ? line : line.substr(colon + 2);
    }
  return "unknown";
}

constexpr size_t kReadBlock = size_t(1) << 20;  // the bandwidth test reads in blocks of this

// Thread t's blocks [b0, b1) of `blocks`, split over n threads.
void read_slice(size_t blocks, int t, int n, size_t& b0, size_t& b1) {
  b0 = blocks * (size_t)t / (size_t)n;
  b1 = blocks * (size_t)(t + 1) / (size_t)n;
}

}  // namespace

ReadProbe::ReadProbe(int n_threads, size_t bytes, ThreadPlacement placement)
    : n_(std::max(1, n_threads)), placement_(std::move(placement)) {
  bytes_ = std::max(bytes / kReadBlock, (size_t)n_) * kReadBlock;
  // On 2 MiB pages where the kernel gives them, as the CPU device's weight buffers are: the
  // limit is what the best-placed stream reads, not what 4 KiB pages let through (~10% less).
  constexpr size_t kHugePage = size_t(2) << 20;
  const size_t alloc_bytes = (bytes_ + kHugePage - 1) / kHugePage * kHugePage;
  buf_ = static_cast<char*>(std::aligned_alloc(kHugePage, alloc_bytes));
  LOOM_CHECK(buf_, out_of_memory, "[limits] cannot allocate {} bytes for the bandwidth test", bytes_);
  ::madvise(buf_, alloc_bytes, MADV_HUGEPAGE);
  auto first_touch = [&](int t) {  // by the thread that reads it
    size_t b0, b1;
    read_slice(bytes_ / kReadBlock, t, n_, b0, b1);
    std::memset(buf_ + b0 * kReadBlock, t + 1, (b1 - b0) * kReadBlock);
  };
  run_threads(n_, first_touch, placement_);
}

ReadProbe::~ReadProbe() { std::free(buf_); }

double ReadProbe::gbps(double seconds) const {
  void (*reader)(const char*, size_t) = __builtin_cpu_supports("avx512f") ? read_avx512
                                        : __builtin_cpu_supports("avx2")  ? read_avx2
                                                                          : read_scalar;
  std::vector<double> read((size_t)n_, 0.0);
  const auto deadline = Clock::now() + std::chrono::duration<double>(seconds);
  auto read_share = [&](int t) {
    size_t b0, b1;
    read_slice(bytes_ / kReadBlock, t, n_, b0, b1);
    do {
      for (size_t b = b0; b < b1; ++b) reader(buf_ + b * kReadBlock, kReadBlock);
      read[(size_t)t] += (double)((b1 - b0) * kReadBlock);
    } while (Clock::now() < deadline);
  };
  const double wall = run_threads(n_, read_share, placement_);
  double total = 0;
  for (double r : read) total += r;
  return total / wall / 1e9;
}

MachineLimits measure_limits(int n_threads, double seconds, size_t read_bytes) {
  MachineLimits m;
  m.cpu = cpu_model();
  m.threads = n_threads > 0 ? n_threads : ThreadPool::default_threads();
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f")) {
    m.fma_isa = "avx512f";
    m.fp32_gflops = peak(m.threads, seconds, fma_avx512) / 1e9;
  } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    m.fma_isa = "avx2+fma";
    m.fp32_gflops = peak(m.threads, seconds, fma_avx2) / 1e9;
  } else {
    m.fma_isa = "scalar";
    m.fp32_gflops = peak(m.threads, seconds, fma_scalar) / 1e9;
  }
  if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw")) {
    m.int8_isa = "avx512vnni";
    m.int8_gops = peak(m.threads, seconds, vnni_avx512) / 1e9;
    m.int8_block32_gops = peak(m.threads, seconds, vnni_block32_avx512) / 1e9;
  } else if (__builtin_cpu_supports("avxvnni")) {
    m.int8_isa = "avxvnni";
    m.int8_gops = peak(m.threads, seconds, vnni_avx2) / 1e9;
    m.int8_block32_gops = peak(m.threads, seconds, vnni_block32_avx2) / 1e9;
  }
  if (__builtin_cpu_supports("avx512bf16")) {
    m.bf16_isa = "avx512bf16";
    m.bf16_gflops = peak(m.threads, seconds, bf16_avx512) / 1e9;
  }
  m.read_bytes = read_bytes;
  const ReadProbe probe(m.threads, read_bytes);
  for (int rep = 0; rep < 3; ++rep) m.read_gbps = std::max(m.read_gbps, probe.gbps(seconds));
  return m;
}

std::string limits_text(const MachineLimits& m) {
  std::string s = fmt::format("machine limits: {}, {} threads\n", m.cpu, m.threads);
  s += fmt::format("  {:<32}{:>10.2f} GFLOPS\n", "FP32 FMA peak (" + m.fma_isa + "):", m.fp32_gflops);
  if (m.int8_isa.empty()) {
    s += "  INT8 dot peak: not available (no AVX-512 VNNI or AVX-VNNI)\n";
  } else {
    s += fmt::format("  {:<32}{:>10.2f} GOPS\n", "INT8 dot peak (" + m.int8_isa + "):", m.int8_gops);
    s += fmt::format("  {:<32}{:>10.2f} GOPS ({:.0f}% of the int8 peak)\n",
                     "  with per-32 block scales:", m.int8_block32_gops, 100.0 * m.int8_block32_gops / m.int8_gops);
  }
  if (m.bf16_isa.empty()) {
    s += "  BF16 dot peak: not available (no AVX-512 BF16)\n";
  } else {
    s += fmt::format("  {:<32}{:>10.2f} GFLOPS\n", "BF16 dot peak (" + m.bf16_isa + "):", m.bf16_gflops);
  }
  s += fmt::format("  {:<32}{:>10.2f} GB/s\n", fmt::format("read bandwidth ({} MiB):", m.read_bytes >> 20), m.read_gbps);
  return s;
}

std::string limits_json(const MachineLimits& m) {
  nlohmann::json j = {{"cpu", m.cpu},
                      {"threads", m.threads},
                      {"fp32_fma_isa", m.fma_isa},
                      {"fp32_gflops", m.fp32_gflops},
                      {"int8_isa", m.int8_isa.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.int8_isa)},
                      {"int8_gops", m.int8_gops},
                      {"int8_block32_gops", m.int8_block32_gops},
                      {"bf16_isa", m.bf16_isa.empty() ? nlohmann::json(nullptr) : nlohmann::json(m.bf16_isa)},
                      {"bf16_gflops", m.bf16_gflops},
                      {"read_bytes", m.read_bytes},
                      {"read_gbps", m.read_gbps}};
  return j.dump(2) + "\n";
}

}  // namespace loom::testing

#pragma GCC diagnostic pop
