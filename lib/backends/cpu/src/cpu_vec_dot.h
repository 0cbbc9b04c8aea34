// Per-weight-type row kernels of the CPU backend: fused "decode a row of type T and dot it with
// up to kMaxDotCols columns of b", fast row conversion to f32, and an f32 accumulate-from-row
// (axpy). Quantized weights dot against b columns quantized once per node to int8 blocks
// (ActType q8 / q8k) with integer products, as ggml does. Each instruction-set level (Isa) has
// its own table; weight_kernels() returns the active level's, so callers never name an ISA.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "cpu_features.h"
#include "loom/core/dtype.h"
#include "loom/core/fp16.h"

namespace loom::cpu {

// Columns of b one fused dot call handles (one decode of the row serves all of them).
inline constexpr int kMaxDotCols = 8;

// Runs f.template operator()<N>() with N = n clamped to [1, Max]: kernels unrolled on a small
// count (columns of b, tile widths) are instantiated once per value and picked at run time.
template <int Max, int N = 1, class F>
inline void with_count(int n, F&& f) {
  if constexpr (N >= Max) {
    f.template operator()<Max>();
  } else {
    if (n <= N) return f.template operator()<N>();
    with_count<Max, N + 1>(n, f);
  }
}

// Runs f.template operator()<N>(c0) over [0, n) in passes of at most Most (N the pass's count,
// c0 its first): for kernels whose wider forms would spill or take long to compile.
template <int Most, class F>
inline void in_passes(int n, F&& f) {
  for (int c0 = 0; c0 < n; c0 += Most) with_count<Most>(n - c0, [&]<int N>() { f.template operator()<N>(c0); });
}

// How the columns of b are prepared for a weight type's rows_dot.
enum class ActType : uint8_t {
  f32,  // plain f32 columns (F32, F16, BF16 weights)
  q8,   // BlockQ8A per 32 values (Q8_0, Q4_0 weights)
  q8k,  // BlockQ8KA per 256 values (Q4_K, Q6_K weights)
};

// 32 values of a b column: x[j] ~ d * qs[j], d = amax / 127 rounded to fp16 precision (as GGUF's
// Q8_0 keeps it); sum = sum of qs (offset terms).
struct BlockQ8A {
  float d;
  int32_t sum;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8A) == 40);

// A BlockQ8A's d: amax / 127 rounded to the nearest fp16, kept as f32.
inline float q8_scale(float d) { return fp16_to_f32(f32_to_fp16(d)); }

// 256 values of a b column: x[j] ~ d * qs[j]; bsums[i] = sum of qs[16i, 16i + 16).
struct BlockQ8KA {
  float d;
  int16_t bsums[16];
  int8_t qs[256];
};
static_assert(sizeof(BlockQ8KA) == 292);

// Bytes of one prepared column of K values (K a multiple of the block for q8 / q8k).
inline size_t act_row_bytes(ActType act, int64_t K) {
  switch (act) {
    case ActType::q8:
      return (size_t)(K / 32) * sizeof(BlockQ8A);
    case ActType::q8k:
      return (size_t)(K / 256) * sizeof(BlockQ8KA);
    default:
      return (size_t)K * sizeof(float);
  }
}

// out[c] = sum_k a[k] * b[c][k] for c < nc (1 <= nc <= kMaxDotCols); a is one row of K elements
// of the kernel's type, contiguous (K a multiple of the block size for quantized types).
using RowDotFn = void (*)(int64_t K, const void* a, const float* const* b, int nc, float* out);
// out[c][r] = sum_k a_r[k] * b_c[k] for rows r < nr (row r at a + r * lda bytes) and columns
// c < nc <= kMaxDotCols, b_c prepared as the table's act (f32 floats or q8/q8k blocks).
using RowsDotFn = void (*)(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                           float* const* out);
// dst[0, n) = row src as f32 (contiguous; n a multiple of the block size).
using RowToF32Fn = void (*)(const void* src, float* dst, int64_t n);
// y[0, n) += alpha * x[0, n) with x a contiguous row of the kernel's type (plain floats only).
using RowAxpyFn = void (*)(int64_t n, float alpha, const void* x, float* y);
// y_r[0, n) += sum_{j < m} p[r * ldp + j] * x_j[0, n) for r < nr <= kMaxDotCols, x_j the row at
// x + j * ldx bytes, y_r at y + r * ldy floats (plain floats only): attention's O += P V with
// each V row read once for every query row.
using RowsAxpyFn = void (*)(int64_t n, int64_t m, const void* x, size_t ldx, const float* p, size_t ldp, int nr,
                            float* y, size_t ldy);
// K f32 values -> one prepared column (q8: K % 32 == 0, q8k: K % 256 == 0).
using QuantizeActFn = void (*)(const float* x, void* dst, int64_t K);
// dst[0, n) = src as a contiguous F16 or BF16 row, bit for bit what the core conversions
// (loom/core/fp16.h: round to nearest even, one quiet NaN) give.
using RowFromF32Fn = void (*)(const float* src, void* dst, int64_t n);

// Asks for the cache lines of bytes [p, p + bytes); Locality as __builtin_prefetch takes it
// (3: into L1, hint T0; 1: into L2, hint T2).
template <int Locality = 3>
inline void prefetch_bytes(const char* p, size_t bytes) {
  for (size_t b = 0; b < bytes; b += 64) __builtin_prefetch(p + b, 0, Locality);
}
// Weight rows are read once per token, in memory order. The hardware prefetcher alone keeps too
// few of their lines in flight for a core that also decodes and multiplies them: on a 2-core Xeon
// an F16 dot-product stream read ~60% of the bandwidth a plain read loop gets, 80-86% when each
// step also asks for the line this many bytes ahead. The request goes to L2 only (hint T2): a
// synthetic stream with int8-dot work per line read 5-10% more than with T0 at 4 KiB, and decode
// of 900 MiB models was faster in 46 of 62 same-minute pairs (F16 15 of 15; docs/DECODE-SPEED.md).
// On Zen 4 the lighter repacked kernels read more without it (stream_prefetch, cpu_features.h).
inline constexpr size_t kStreamAheadBytes = 8192;
// Asks for the lines `ahead` bytes past [p, p + bytes), the part of a stream being read now
// (the repacked kernels take the distance per type: stream_ahead_bytes).
// A prefetch never faults, so the last rows of a tensor may ask past its end.
inline void prefetch_stream(const void* p, size_t bytes, size_t ahead = kStreamAheadBytes) {
  prefetch_bytes<1>(static_cast<const char*>(p) + ahead, bytes);
}
// prefetch_stream over a forward stream as a loop that asks for each line once: ask(p, bytes)
// asks for the lines of [p + ahead, p + ahead + bytes) no earlier call asked for. The same lines
// at the same steps, but not as one unrolled burst of a group block's 17-42 requests
// (stream_ask_lines, cpu_features.h).
struct StreamAsker {
  size_t ahead;
  uintptr_t next = 0;  // the first line not asked for yet
  void ask(const void* p, size_t bytes) {
    const uintptr_t at = reinterpret_cast<uintptr_t>(p) + ahead, from = at & ~uintptr_t{63};
    if (next < from) next = from;
#pragma GCC unroll 1
    for (; next < at + bytes; next += 64) __builtin_prefetch(reinterpret_cast<const char*>(next), 0, 1);
  }
};
// Rows whose cache lines a kernel asks for into L2 as it goes (rows j < rows at base + j * ld,
// `bytes` from each row's start), in step with its own rows j. Into L2 (hint T2), not L1: decode
// attention asks for a whole tile of rows (64-128 KiB) ahead, more than L1 holds; the tile-ahead
// walk over a cache past L3 took half the time it took asking into L1.
struct PrefetchRows {
  const char* base = nullptr;
  size_t ld = 0;
  int64_t rows = 0;
  size_t bytes = 0;
  void ask(int64_t j0, int64_t j1) const {
    for (int64_t j = j0; j < std::min(j1, rows); ++j) prefetch_bytes<1>(base + j * ld, bytes);
  }
};
// Decode attention's key-order walk (simd_flash.cpp, simd_heads.h). Rows x_jh (key j, head
// h < nh) at x + j * ldx + h * ldh bytes; a cache row holds every head of a key.
//   heads_dot:  out[h * nc + c][j] = a_jh . b[h * nc + c] for keys j < nr, c < nc <= kMaxDotCols
using HeadsDotFn = void (*)(int64_t K, const void* a, size_t lda, size_t ldh, int64_t nr, int nh, const float* const* b,
                            int nc, float* const* out, const PrefetchRows& pf);
//   heads_axpy: y_i[0, n) += sum_{j < m} p[i * ldp + j] * x_jh[0, n) for i = h * nr + r, r < nr <= kMaxDotCols,
//               y_i at y + i * ldy floats
using HeadsAxpyFn = void (*)(int64_t n, int64_t m, const void* x, size_t ldx, size_t ldh, int nh, const float* p,
                             size_t ldp, int nr, float* y, size_t ldy, const PrefetchRows& pf);

struct WeightKernels {
  DType type;
  int64_t block;  // elements per block (1 for plain floats)
  size_t block_bytes;
  RowDotFn dot;  // f32 columns, exact decode (attention K rows)
  RowToF32Fn to_f32;
  RowAxpyFn axpy;  // nullptr for quantized types
  ActType act;     // how matmul prepares b for rows_dot
  RowsDotFn rows_dot;
  RowsAxpyFn rows_axpy;  // nullptr for quantized types
  // rows_dot over repacked 8-row groups (cpu_repack.h; nr a multiple of 8, a a group's first
  // row); nullptr where the level does not repack the type.
  RowsDotFn rows_dot_r8 = nullptr;
  // F16 / BF16: f32 -> a row of the type (the KV cache's SET_ROWS, CPY); nullptr elsewhere.
  RowFromF32Fn from_f32 = nullptr;
  // Plain floats at the SIMD levels: decode attention's key-order walk; nullptr elsewhere.
  HeadsDotFn heads_dot = nullptr;
  HeadsAxpyFn heads_axpy = nullptr;
};

// Kernels of a weight type at the active level (or at `isa`), nullptr when the type has none (I32).
const WeightKernels* weight_kernels(DType type);
const WeightKernels* weight_kernels(DType type, Isa isa);
// Column preparation for `act` at the active level (nullptr for f32: columns are used as they are).
QuantizeActFn quantize_act(ActType act);
QuantizeActFn quantize_act(ActType act, Isa isa);

// Per-level tables (simd_*.cpp); the scalar one is the readable reference of the others.
const WeightKernels* weight_kernels_scalar(DType type);
const WeightKernels* weight_kernels_avx2(DType type);
const WeightKernels* weight_kernels_avx512(DType type);
QuantizeActFn quantize_act_scalar(ActType act);
QuantizeActFn quantize_act_avx2(ActType act);
QuantizeActFn quantize_act_avx512(ActType act);

// The entry of a level's table for `type` (nullptr when the level has none).
template <size_t N>
const WeightKernels* find_kernels(const WeightKernels (&table)[N], DType type) {
  for (const WeightKernels& k : table)
    if (k.type == type) return &k;
  return nullptr;
}
// A level's column quantizers: q8 (32-value blocks) and q8k (256-value blocks); nullptr for f32.
inline QuantizeActFn pick_quantizer(ActType act, QuantizeActFn q8, QuantizeActFn q8k) {
  return act == ActType::q8 ? q8 : act == ActType::q8k ? q8k : nullptr;
}

// Branch-free IEEE half -> f32, exact for every input (subnormals, inf, nan); vectorizes in
// loops where the reference fp16_to_f32 (branches, ldexp) does not. Normal numbers: move the
// exponent and mantissa into f32 position with the exponent biased by 224 (so half inf/nan
// lands on 255) and rescale by 2^-112. Subnormals: place the mantissa under the exponent of
// 0.5 and subtract 0.5, which leaves mantissa * 2^-24.
inline float fp16_to_f32_fast(uint16_t h) {
  const uint32_t w = (uint32_t)h << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;  // exponent and mantissa, sign shifted out
  const float normal = std::bit_cast<float>((two_w >> 4) + (224u << 23)) * 0x1.0p-112f;
  const float subnormal = std::bit_cast<float>((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t is_sub = 0u - (uint32_t)(two_w < (1u << 27));  // all ones for zero/subnormal
  const uint32_t bits = (std::bit_cast<uint32_t>(subnormal) & is_sub) | (std::bit_cast<uint32_t>(normal) & ~is_sub);
  return std::bit_cast<float>(sign | bits);
}

// y[0, n) *= s.
void scale_f32(int64_t n, float s, float* y);

}  // namespace loom::cpu
