// AVX-512 level (F/BW/VL/VNNI on top of AVX2/FMA/F16C) of the per-type row kernels: f32, f16
// and bf16 rows against up to 8 f32 columns with 16-lane FMAs (masked tails instead of scalar
// loops), fast row conversion and axpy. Quantized types take their integer dots from
// simd_avx512_q.cpp and their f32 conversions from the reference templates (simd_ref.h),
// compiled here for this level. Only reached when detected_isa() says the CPU has AVX-512.

// GCC 12's AVX-512 intrinsics headers trip -Wuninitialized on their own _mm512_undefined_*
// helpers once inlined; the warning is about the header, not this file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu_features.h"
#include "cpu_vec_dot.h"
#include "loom/core/quants.h"
#include "loom/core/quants_iq.h"
#include "simd_isa.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,bmi2,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#include "simd_iq.h"
#include "simd_ref.h"
#include "simd_ref_iq.h"
#include "simd_ref_q.h"

namespace loom::cpu {
namespace {

// 16 elements of a row of plain float type T from element k, as f32; the masked form reads
// only the lanes of m (zeros elsewhere), so tails never touch memory past the row.
template <DType T>
inline __m512 load16(const void* row, int64_t k) {
  if constexpr (T == DType::F32) {
    return _mm512_loadu_ps(static_cast<const float*>(row) + k);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(static_cast<const uint16_t*>(row) + k));
    if constexpr (T == DType::F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}
template <DType T>
inline __m512 load16(const void* row, int64_t k, __mmask16 m) {
  if constexpr (T == DType::F32) {
    return _mm512_maskz_loadu_ps(m, static_cast<const float*>(row) + k);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(m, static_cast<const uint16_t*>(row) + k);
    if constexpr (T == DType::F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}
inline __mmask16 tail_mask(int64_t n) { return (__mmask16)((1u << n) - 1); }

// The lane sums of a, b, c, d: pairs interleaved, then quads, then the four 128-bit lanes.
inline __m128 hsum4(__m512 a, __m512 b, __m512 c, __m512 d) {
  const __m512 ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));  // a b a b per lane
  const __m512 cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
  const __m512 abcd = _mm512_add_ps(_mm512_shuffle_ps(ab, cd, 0x44), _mm512_shuffle_ps(ab, cd, 0xee));  // a b c d
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(abcd), _mm512_extractf32x8_ps(abcd, 1));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

// out[c] = a . b[c] for c < NC; a a row of K elements of type T, b[c] K floats.
// NC * U accumulators of 16 lanes: U vectors of a per step keep 4+ FMAs in flight for 1-2 columns.
// Stream: a is one of many weight rows read in memory order (prefetch_stream).
template <DType T, int NC, bool Stream = false>
inline void dot_row(int64_t K, const void* a, const float* const* b, float* out) {
  constexpr int U = NC == 1 ? 4 : NC == 2 ? 2 : 1;
  constexpr size_t kElem = T == DType::F32 ? sizeof(float) : sizeof(uint16_t);
  __m512 acc[NC][U];
#pragma GCC unroll 8  // a loop GCC would turn into a memset of the array (then reloaded)
  for (int c = 0; c < NC; ++c)
    for (int u = 0; u < U; ++u) acc[c][u] = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 * U <= K; k += 16 * U) {
    if constexpr (Stream) prefetch_stream(static_cast<const char*>(a) + k * kElem, 16 * U * kElem);
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      const __m512 x = load16<T>(a, k + 16 * u);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) acc[c][u] = _mm512_fmadd_ps(x, _mm512_loadu_ps(b[c] + k + 16 * u), acc[c][u]);
    }
  }
  for (; k + 16 <= K; k += 16) {
    const __m512 x = load16<T>(a, k);
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) acc[c][0] = _mm512_fmadd_ps(x, _mm512_loadu_ps(b[c] + k), acc[c][0]);
  }
  if (k < K) {
    const __mmask16 m = tail_mask(K - k);
    const __m512 x = load16<T>(a, k, m);
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) acc[c][0] = _mm512_fmadd_ps(x, _mm512_maskz_loadu_ps(m, b[c] + k), acc[c][0]);
  }
  // Unrolled, so every index into acc is a constant: a run-time c would keep the accumulators
  // in memory, a store and a load per FMA in the loops above. Four columns at a time share one
  // reduction (short rows, e.g. decode attention's 64-dim keys, are otherwise mostly reductions).
  int c0 = 0;
  if constexpr (U == 1)
#pragma GCC unroll 2
    for (; c0 + 4 <= NC; c0 += 4)
      _mm_storeu_ps(out + c0, hsum4(acc[c0][0], acc[c0 + 1][0], acc[c0 + 2][0], acc[c0 + 3][0]));
#pragma GCC unroll 8
  for (int c = c0; c < NC; ++c) {
    __m512 s = acc[c][0];
#pragma GCC unroll 4
    for (int u = 1; u < U; ++u) s = _mm512_add_ps(s, acc[c][u]);
    out[c] = _mm512_reduce_add_ps(s);
  }
}

template <DType T>
void dot_cols_fast(int64_t K, const void* a, const float* const* b, int nc, float* out) {
  with_count<kMaxDotCols>(nc, [&]<int NC>() { dot_row<T, NC>(K, a, b, out); });
}

// rows r < nr (stride lda bytes) x NC f32 columns -> out[c][r]; a weight stream, asked for ahead
// where the host's choice for the type says so (stream_prefetch)
template <DType T, int NC>
void rows_n(int64_t K, const uint8_t* a, size_t lda, int64_t nr, const float* const* b, float* const* out) {
  auto rows = [&]<bool kStream>() {
    float o[NC];
    for (int64_t r = 0; r < nr; ++r) {
      dot_row<T, NC, kStream>(K, a + r * lda, b, o);
      for (int c = 0; c < NC; ++c) out[c][r] = o[c];
    }
  };
  if (stream_prefetch(T))
    rows.template operator()<true>();
  else
    rows.template operator()<false>();
}

// One column (decode) streams through the AVX2 level's 256-bit kernel: on Zen 4, which runs
// 512-bit operations as two 256-bit halves, it reads weight rows faster than 512-bit code
// (tg128 of the 300M llama, 2 threads, same minutes: F16 57-58 vs 51-52 t/s, BF16 76 vs 61-63,
// F32 45-46 vs 34-35); from two columns on the 512-bit kernels do more per load.
template <DType T>
void rows_dot_fast(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc, float* const* out) {
  static const RowsDotFn ymm = weight_kernels_avx2(T)->rows_dot;
  if (nc == 1) return ymm(K, a, lda, nr, b, nc, out);
  const auto* pa = static_cast<const uint8_t*>(a);
  const auto* const* bf = reinterpret_cast<const float* const*>(b);
  with_count<kMaxDotCols>(nc, [&]<int NC>() { rows_n<T, NC>(K, pa, lda, nr, bf, out); });
}

// dst[0, n) = row src as f32
template <DType T>
void to_f32_fast(const void* src, float* dst, int64_t n) {
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) _mm512_storeu_ps(dst + k, load16<T>(src, k));
  if (k < n) _mm512_mask_storeu_ps(dst + k, tail_mask(n - k), load16<T>(src, k, tail_mask(n - k)));
}

// y[0, n) += alpha * x[0, n)
template <DType T>
void axpy_fast(int64_t n, float alpha, const void* x, float* y) {
  const __m512 va = _mm512_set1_ps(alpha);
  int64_t k = 0;
  for (; k + 16 <= n; k += 16) _mm512_storeu_ps(y + k, _mm512_fmadd_ps(va, load16<T>(x, k), _mm512_loadu_ps(y + k)));
  if (k < n) {
    const __mmask16 m = tail_mask(n - k);
    _mm512_mask_storeu_ps(y + k, m, _mm512_fmadd_ps(va, load16<T>(x, k, m), _mm512_maskz_loadu_ps(m, y + k)));
  }
}

// y_r += sum_j p[r][j] x_j (see RowsAxpyFn): U x 16 lanes of every y_r stay in registers while
// the m rows x stream past (U = 2 for up to 4 rows: a whole 64-byte line of f16/bf16 x per visit
// and 8 independent FMA chains), so each x row is converted once for all nr rows.
template <DType T, int NR>
void rows_axpy_n(int64_t n, int64_t m, const uint8_t* x, size_t ldx, const float* p, size_t ldp, float* y, size_t ldy) {
  constexpr int U = NR <= 4 ? 2 : 1;
  int64_t k = 0;
  for (; k + 16 * U <= n; k += 16 * U) {
    __m512 acc[NR][U];
    for (int r = 0; r < NR; ++r)
      for (int u = 0; u < U; ++u) acc[r][u] = _mm512_loadu_ps(y + r * ldy + k + 16 * u);
    for (int64_t j = 0; j < m; ++j) {
      __m512 v[U];
      for (int u = 0; u < U; ++u) v[u] = load16<T>(x + j * ldx, k + 16 * u);
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) {
        const __m512 pr = _mm512_set1_ps(p[r * ldp + j]);
        for (int u = 0; u < U; ++u) acc[r][u] = _mm512_fmadd_ps(pr, v[u], acc[r][u]);
      }
    }
    for (int r = 0; r < NR; ++r)
      for (int u = 0; u < U; ++u) _mm512_storeu_ps(y + r * ldy + k + 16 * u, acc[r][u]);
  }
  for (; k < n; k += 16) {
    const __mmask16 msk = n - k >= 16 ? (__mmask16)0xffff : tail_mask(n - k);
    __m512 acc[NR];
    for (int r = 0; r < NR; ++r) acc[r] = _mm512_maskz_loadu_ps(msk, y + r * ldy + k);
    for (int64_t j = 0; j < m; ++j) {
      const __m512 v = load16<T>(x + j * ldx, k, msk);
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(p[r * ldp + j]), v, acc[r]);
    }
    for (int r = 0; r < NR; ++r) _mm512_mask_storeu_ps(y + r * ldy + k, msk, acc[r]);
  }
}
template <DType T>
void rows_axpy_fast(int64_t n, int64_t m, const void* x, size_t ldx, const float* p, size_t ldp, int nr, float* y,
                    size_t ldy) {
  with_count<kMaxDotCols>(nr, [&]<int NR>() {
    rows_axpy_n<T, NR>(n, m, static_cast<const uint8_t*>(x), ldx, p, ldp, y, ldy);
  });
}

// f32 -> F16 through vcvtps2ph (round to nearest even, subnormals and overflow to inf as the
// core conversion); NaN lanes become the core's one quiet NaN with the sign.
void f32_to_f16_fast(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(src + i);
    __m256i h = _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    if (nan) {
      const __m256i sign = _mm256_and_si256(h, _mm256_set1_epi16((short)0x8000));
      h = _mm256_mask_mov_epi16(h, nan, _mm256_or_si256(sign, _mm256_set1_epi16(0x7e00)));
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), h);
  }
  for (; i < n; ++i) d[i] = f32_to_fp16(src[i]);
}

// f32 -> BF16: x + 0x7fff + (bit 16 of x), the top half (round to nearest even); NaN keeps its
// top half with the quiet bit, as the core conversion.
void f32_to_bf16_fast(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7fff);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512i x = _mm512_loadu_si512(src + i);
    const __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), one);
    __m512i r = _mm512_srli_epi32(_mm512_add_epi32(x, _mm512_add_epi32(half, odd)), 16);
    const __mmask16 nan =
        _mm512_cmpgt_epi32_mask(_mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    r = _mm512_mask_mov_epi32(r, nan, _mm512_or_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(0x40)));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(d + i), _mm512_cvtepi32_epi16(r));
  }
  for (; i < n; ++i) d[i] = f32_to_bf16(src[i]);
}

// Q8_0 / Q4_0 rows to f32, a block's 32 values as two 16-lane vectors (a quantized KV cache's
// tiles in decode attention; the generic block decoder compiled here ran 4-wide with the scale
// converted in integer steps and took ~60% of a q4_0 cache's decode step). Bit for bit the
// reference: each value q * d, d exact.
void to_f32_q8_0_fast(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK8_0; ++i, dst += kQK8_0) {
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(b[i].d));
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b[i].qs));
    const __m512i lo = _mm512_cvtepi8_epi32(_mm256_castsi256_si128(q));
    const __m512i hi = _mm512_cvtepi8_epi32(_mm256_extracti128_si256(q, 1));
    _mm512_storeu_ps(dst, _mm512_mul_ps(_mm512_cvtepi32_ps(lo), d));
    _mm512_storeu_ps(dst + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(hi), d));
  }
}
void to_f32_q4_0_fast(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(src);
  const __m128i low4 = _mm_set1_epi8(15);
  const __m512i eight = _mm512_set1_epi32(8);
  for (int64_t i = 0; i < n / kQK4_0; ++i, dst += kQK4_0) {
    const __m512 d = _mm512_set1_ps(_cvtsh_ss(b[i].d));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
    const __m512i lo = _mm512_cvtepu8_epi32(_mm_and_si128(q, low4));
    const __m512i hi = _mm512_cvtepu8_epi32(_mm_and_si128(_mm_srli_epi16(q, 4), low4));
    _mm512_storeu_ps(dst, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(lo, eight)), d));
    _mm512_storeu_ps(dst + 16, _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_sub_epi32(hi, eight)), d));
  }
}

#include "simd_heads.h"  // this level's copy of the decode walk, over dot_row and rows_axpy_n above

const WeightKernels kKernels[] = {
    {DType::F32, 1, sizeof(float), dot_cols_fast<DType::F32>, to_f32_fast<DType::F32>, axpy_fast<DType::F32>,
     ActType::f32, rows_dot_fast<DType::F32>, rows_axpy_fast<DType::F32>, nullptr, nullptr, heads_dot_fast<DType::F32>,
     heads_axpy_fast<DType::F32>},
    {DType::F16, 1, sizeof(fp16_t), dot_cols_fast<DType::F16>, to_f32_fast<DType::F16>, axpy_fast<DType::F16>,
     ActType::f32, rows_dot_fast<DType::F16>, rows_axpy_fast<DType::F16>, nullptr, f32_to_f16_fast,
     heads_dot_fast<DType::F16>, heads_axpy_fast<DType::F16>},
    {DType::BF16, 1, sizeof(bf16_t), dot_cols_fast<DType::BF16>, to_f32_fast<DType::BF16>, axpy_fast<DType::BF16>,
     ActType::f32, rows_dot_fast<DType::BF16>, rows_axpy_fast<DType::BF16>, nullptr, f32_to_bf16_fast,
     heads_dot_fast<DType::BF16>, heads_axpy_fast<DType::BF16>},
    {DType::Q8_0, kQK8_0, sizeof(BlockQ8_0), dot_cols<DecQ8_0>, to_f32_q8_0_fast, nullptr, ActType::q8,
     rows_dot_q8_0_avx512, nullptr, rows_dot_q8_0_r8_avx512},
    {DType::Q4_0, kQK4_0, sizeof(BlockQ4_0), dot_cols<DecQ4_0>, to_f32_q4_0_fast, nullptr, ActType::q8,
     rows_dot_q4_0_avx512, nullptr, rows_dot_q4_0_r8_avx512},
    {DType::Q4_K, kQK_K, sizeof(BlockQ4_K), dot_cols<DecQ4_K>, to_f32<DecQ4_K>, nullptr, ActType::q8k,
     rows_dot_q4_k_avx512, nullptr, rows_dot_q4_k_r8_avx512},
    {DType::Q6_K, kQK_K, sizeof(BlockQ6_K), dot_cols<DecQ6_K>, to_f32<DecQ6_K>, nullptr, ActType::q8k,
     rows_dot_q6_k_avx512, nullptr, rows_dot_q6_k_r8_avx512},
    LOOM_EXTRA_QUANT_KERNELS(LOOM_ROWS_AVX512, LOOM_R8_AVX512),
    LOOM_IQ_KERNELS(dot_iq_avx512, dot_iq1_avx512),
};

}  // namespace
}  // namespace loom::cpu

#pragma GCC pop_options

namespace loom::cpu {

const WeightKernels* weight_kernels_avx512(DType type) { return find_kernels(kKernels, type); }

QuantizeActFn quantize_act_avx512(ActType act) { return pick_quantizer(act, quantize_q8_avx512, quantize_q8k_avx512); }

}  // namespace loom::cpu

#pragma GCC diagnostic pop
