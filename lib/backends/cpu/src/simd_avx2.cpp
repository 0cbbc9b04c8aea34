// AVX2 level (AVX2 + FMA + F16C) of the per-type row kernels: f32, f16 and bf16 rows against up
// to 8 f32 columns with 8-lane FMAs (scalar tails), fast row conversion and axpy. Quantized types
// take their integer dots from simd_avx2_q.cpp and their f32 conversions from the reference
// templates (simd_ref.h), compiled here for this level. Only reached when the CPU has AVX2.
#include <immintrin.h>

#include <bit>
#include <cstdint>
#include <cstring>

#include "cpu_features.h"
#include "cpu_vec_dot.h"
#include "loom/core/quants.h"
#include "loom/core/quants_iq.h"
#include "simd_isa.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "simd_ref.h"
#include "simd_ref_iq.h"
#include "simd_ref_q.h"

namespace loom::cpu {
namespace {

// 8 elements of a row of plain float type T from element k, as f32.
template <DType T>
inline __m256 load8(const void* row, int64_t k) {
  if constexpr (T == DType::F32) {
    return _mm256_loadu_ps(static_cast<const float*>(row) + k);
  } else {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(static_cast<const uint16_t*>(row) + k));
    if constexpr (T == DType::F16) return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
}
// One element (tails).
template <DType T>
inline float load1(const void* row, int64_t k) {
  if constexpr (T == DType::F32) return static_cast<const float*>(row)[k];
  if constexpr (T == DType::F16) return fp16_to_f32_fast(static_cast<const uint16_t*>(row)[k]);
  return std::bit_cast<float>((uint32_t) static_cast<const uint16_t*>(row)[k] << 16);
}

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// The lane sums of a, b, c, d: pairs interleaved, then quads, then the two 128-bit lanes.
inline __m128 hsum4(__m256 a, __m256 b, __m256 c, __m256 d) {
  const __m256 ab = _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));  // a b a b per lane
  const __m256 cd = _mm256_add_ps(_mm256_unpacklo_ps(c, d), _mm256_unpackhi_ps(c, d));
  const __m256 abcd = _mm256_add_ps(_mm256_shuffle_ps(ab, cd, 0x44), _mm256_shuffle_ps(ab, cd, 0xee));  // a b c d
  return _mm_add_ps(_mm256_castps256_ps128(abcd), _mm256_extractf128_ps(abcd, 1));
}

// out[c] = a . b[c] for c < NC; a a row of K elements of type T, b[c] K floats.
// NC * U accumulators of 8 lanes: U vectors of a per step keep 4+ FMAs in flight for 1-2 columns.
// Stream: a is one of many weight rows read in memory order (prefetch_stream).
template <DType T, int NC, bool Stream = false>
inline void dot_row(int64_t K, const void* a, const float* const* b, float* out) {
  constexpr int U = NC == 1 ? 4 : NC == 2 ? 2 : 1;
  constexpr size_t kElem = T == DType::F32 ? sizeof(float) : sizeof(uint16_t);
  __m256 acc[NC][U];
  for (int c = 0; c < NC; ++c)
    for (int u = 0; u < U; ++u) acc[c][u] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 * U <= K; k += 8 * U) {
    if constexpr (Stream) prefetch_stream(static_cast<const char*>(a) + k * kElem, 8 * U * kElem);
#pragma GCC unroll 4
    for (int u = 0; u < U; ++u) {
      const __m256 x = load8<T>(a, k + 8 * u);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) acc[c][u] = _mm256_fmadd_ps(x, _mm256_loadu_ps(b[c] + k + 8 * u), acc[c][u]);
    }
  }
  for (; k + 8 <= K; k += 8) {
    const __m256 x = load8<T>(a, k);
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) acc[c][0] = _mm256_fmadd_ps(x, _mm256_loadu_ps(b[c] + k), acc[c][0]);
  }
  // Unrolled, so every index into acc is a constant (a run-time c keeps them in memory). Four
  // columns at a time share one reduction when the row has no scalar tail.
  int c0 = 0;
  if constexpr (U == 1)
    if (k == K)
#pragma GCC unroll 2
      for (; c0 + 4 <= NC; c0 += 4)
        _mm_storeu_ps(out + c0, hsum4(acc[c0][0], acc[c0 + 1][0], acc[c0 + 2][0], acc[c0 + 3][0]));
#pragma GCC unroll 8
  for (int c = c0; c < NC; ++c) {
    __m256 s = acc[c][0];
#pragma GCC unroll 4
    for (int u = 1; u < U; ++u) s = _mm256_add_ps(s, acc[c][u]);
    float t = 0.0f;
    for (int64_t j = k; j < K; ++j) t += load1<T>(a, j) * b[c][j];
    out[c] = hsum(s) + t;
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

template <DType T>
void rows_dot_fast(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc, float* const* out) {
  const auto* pa = static_cast<const uint8_t*>(a);
  const auto* const* bf = reinterpret_cast<const float* const*>(b);
  with_count<kMaxDotCols>(nc, [&]<int NC>() { rows_n<T, NC>(K, pa, lda, nr, bf, out); });
}

// dst[0, n) = row src as f32
template <DType T>
void to_f32_fast(const void* src, float* dst, int64_t n) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) _mm256_storeu_ps(dst + k, load8<T>(src, k));
  for (; k < n; ++k) dst[k] = load1<T>(src, k);
}

// y[0, n) += alpha * x[0, n)
template <DType T>
void axpy_fast(int64_t n, float alpha, const void* x, float* y) {
  const __m256 va = _mm256_set1_ps(alpha);
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) _mm256_storeu_ps(y + k, _mm256_fmadd_ps(va, load8<T>(x, k), _mm256_loadu_ps(y + k)));
  for (; k < n; ++k) y[k] += alpha * load1<T>(x, k);
}

// y_r += sum_j p[r][j] x_j (see RowsAxpyFn): 8 lanes of every y_r stay in registers while the m
// rows x stream past, so each x row is converted once per 8 lanes for all nr rows.
template <DType T, int NR>
void rows_axpy_n(int64_t n, int64_t m, const uint8_t* x, size_t ldx, const float* p, size_t ldp, float* y, size_t ldy) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    __m256 acc[NR];
    for (int r = 0; r < NR; ++r) acc[r] = _mm256_loadu_ps(y + r * ldy + k);
    for (int64_t j = 0; j < m; ++j) {
      const __m256 v = load8<T>(x + j * ldx, k);
#pragma GCC unroll 8
      for (int r = 0; r < NR; ++r) acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(p[r * ldp + j]), v, acc[r]);
    }
    for (int r = 0; r < NR; ++r) _mm256_storeu_ps(y + r * ldy + k, acc[r]);
  }
  for (; k < n; ++k)
    for (int64_t j = 0; j < m; ++j)
      for (int r = 0; r < NR; ++r) y[r * ldy + k] += p[r * ldp + j] * load1<T>(x + j * ldx, k);
}
template <DType T>
void rows_axpy_fast(int64_t n, int64_t m, const void* x, size_t ldx, const float* p, size_t ldp, int nr, float* y,
                    size_t ldy) {
  with_count<kMaxDotCols>(nr, [&]<int NR>() {
    rows_axpy_n<T, NR>(n, m, static_cast<const uint8_t*>(x), ldx, p, ldp, y, ldy);
  });
}

// f32 -> F16 through vcvtps2ph (round to nearest even); a group of 8 holding a NaN goes through
// the core conversion (its one quiet NaN).
void f32_to_f16_fast(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q))) {
      for (int l = 0; l < 8; ++l) d[i + l] = f32_to_fp16(src[i + l]);
      continue;
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
  }
  for (; i < n; ++i) d[i] = f32_to_fp16(src[i]);
}

// f32 -> BF16: x + 0x7fff + (bit 16 of x), the top half (round to nearest even); NaN keeps its
// top half with the quiet bit, as the core conversion.
void f32_to_bf16_fast(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<uint16_t*>(dst);
  const __m256i one = _mm256_set1_epi32(1), half = _mm256_set1_epi32(0x7fff);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i x = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i));
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), one);
    const __m256i r = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(half, odd)), 16);
    const __m256i nan =
        _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)), _mm256_set1_epi32(0x7f800000));
    const __m256i q = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    const __m256i v = _mm256_blendv_epi8(r, q, nan);  // 8 x 16 bits in the low halves of the lanes
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d + i), _mm256_castsi256_si128(packed));
  }
  for (; i < n; ++i) d[i] = f32_to_bf16(src[i]);
}

// Q8_0 / Q4_0 rows to f32, a block's 32 values as four 8-lane vectors (see simd_avx512.cpp).
void to_f32_q8_0_fast(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ8_0*>(src);
  for (int64_t i = 0; i < n / kQK8_0; ++i, dst += kQK8_0) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(b[i].d));
    for (int k = 0; k < kQK8_0; k += 8) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[i].qs + k));
      _mm256_storeu_ps(dst + k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
    }
  }
}
void to_f32_q4_0_fast(const void* src, float* dst, int64_t n) {
  const auto* b = static_cast<const BlockQ4_0*>(src);
  const __m128i low4 = _mm_set1_epi8(15), eight = _mm_set1_epi8(8);
  for (int64_t i = 0; i < n / kQK4_0; ++i, dst += kQK4_0) {
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(b[i].d));
    const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[i].qs));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(q, low4), eight);  // values 0..15, then 16..31
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(q, 4), low4), eight);
    _mm256_storeu_ps(dst, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), d));
    _mm256_storeu_ps(dst + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), d));
    _mm256_storeu_ps(dst + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), d));
    _mm256_storeu_ps(dst + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), d));
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
     rows_dot_q8_0_avx2, nullptr, rows_dot_q8_0_r8_avx2},
    {DType::Q4_0, kQK4_0, sizeof(BlockQ4_0), dot_cols<DecQ4_0>, to_f32_q4_0_fast, nullptr, ActType::q8,
     rows_dot_q4_0_avx2, nullptr, rows_dot_q4_0_r8_avx2},
    {DType::Q4_K, kQK_K, sizeof(BlockQ4_K), dot_cols<DecQ4_K>, to_f32<DecQ4_K>, nullptr, ActType::q8k,
     rows_dot_q4_k_avx2, nullptr, rows_dot_q4_k_r8_avx2},
    {DType::Q6_K, kQK_K, sizeof(BlockQ6_K), dot_cols<DecQ6_K>, to_f32<DecQ6_K>, nullptr, ActType::q8k,
     rows_dot_q6_k_avx2, nullptr, rows_dot_q6_k_r8_avx2},
    LOOM_EXTRA_QUANT_KERNELS(LOOM_ROWS_AVX2, LOOM_R8_AVX2),
    LOOM_IQ_KERNELS(dot_iq, dot_iq),
};

}  // namespace
}  // namespace loom::cpu

#pragma GCC pop_options

namespace loom::cpu {

const WeightKernels* weight_kernels_avx2(DType type) { return find_kernels(kKernels, type); }

QuantizeActFn quantize_act_avx2(ActType act) { return pick_quantizer(act, quantize_q8_avx2, quantize_q8k_avx2); }

}  // namespace loom::cpu
