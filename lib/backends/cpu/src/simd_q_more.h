// 256-bit integer dots of Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 (against 32-value int8 columns) and
// Q2_K, Q3_K, Q5_K, IQ4_XS (against 256-value ones). Included by simd_avx2_q_more.cpp and
// simd_avx512_q_more.cpp under their target pragmas (AVX-512 machines run the same 256-bit code,
// EVEX-encoded); LOOM_DEFINE_ROWS_DOT_MORE(level) defines the level's entry points. The readable
// references are the dot_* functions of simd_ref_q.h.
//   vpmaddubsw: unsigned weight bytes x signed activation bytes -> 16-bit pair sums (the
//   non-linear grids are signed: |v| . sign(x, v)); vpmaddwd: by ones, or by a sub-block's
//   16-bit scale, into 32-bit lanes.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu_vec_dot.h"
#include "loom/core/quants.h"

namespace loom::cpu {
namespace {

template <class X>
using MoreCols = const X* const*;

inline __m256i mload(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline float mhsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}
inline float mhalf(fp16_t h) { return _cvtsh_ss(h); }
// 16 bytes of nibbles -> 32 levels in element order (low nibbles, then high)
inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(15));
}
// bit j of the little-endian word at qh -> byte j = 16 when set
inline __m256i fifth_bits32(const uint8_t* qh) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32((int)bits),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i sel = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
  return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(spread, sel), sel), _mm256_set1_epi8(16));
}
// a 16-entry int8 grid in both 128-bit lanes, for vpshufb lookups
inline __m256i grid_table(const int8_t* grid) {
  const __m128i g = _mm_loadu_si128(reinterpret_cast<const __m128i*>(grid));
  return _mm256_set_m128i(g, g);
}

// ---- 32-value blocks ----------------------------------------------------------------------------
// Per type: the block's levels as bytes (unsigned, or signed grid values), its scale, an optional
// min (x = d q + m) and an offset subtracted from every level (x = d (q - offset)).

struct MoreQ4_1 {
  using W = BlockQ4_1;
  static constexpr bool kSigned = false, kMin = true;
  static constexpr int kOffset = 0;
  static __m256i levels(const W& w, __m256i) { return nibbles32(w.qs); }
  static float scale(const W& w) { return mhalf(w.d); }
  static float min(const W& w) { return mhalf(w.m); }
};
struct MoreQ5_0 {
  using W = BlockQ5_0;
  static constexpr bool kSigned = false, kMin = false;
  static constexpr int kOffset = 16;
  static __m256i levels(const W& w, __m256i) { return _mm256_or_si256(nibbles32(w.qs), fifth_bits32(w.qh)); }
  static float scale(const W& w) { return mhalf(w.d); }
  static float min(const W&) { return 0.0f; }
};
struct MoreQ5_1 {
  using W = BlockQ5_1;
  static constexpr bool kSigned = false, kMin = true;
  static constexpr int kOffset = 0;
  static __m256i levels(const W& w, __m256i) { return _mm256_or_si256(nibbles32(w.qs), fifth_bits32(w.qh)); }
  static float scale(const W& w) { return mhalf(w.d); }
  static float min(const W& w) { return mhalf(w.m); }
};
struct MoreIQ4_NL {
  using W = BlockIQ4_NL;
  static constexpr bool kSigned = true, kMin = false;
  static constexpr int kOffset = 0;
  static const int8_t* grid() { return kIq4nlValues; }
  static __m256i levels(const W& w, __m256i table) { return _mm256_shuffle_epi8(table, nibbles32(w.qs)); }
  static float scale(const W& w) { return mhalf(w.d); }
  static float min(const W&) { return 0.0f; }
};
struct MoreMXFP4 {
  using W = BlockMXFP4;
  static constexpr bool kSigned = true, kMin = false;
  static constexpr int kOffset = 0;
  static const int8_t* grid() { return kMxfp4Values; }
  static __m256i levels(const W& w, __m256i table) { return _mm256_shuffle_epi8(table, nibbles32(w.qs)); }
  static float scale(const W& w) { return e8m0_half_to_f32(w.e); }
  static float min(const W&) { return 0.0f; }
};

template <class T>
__m256i table_of() {
  if constexpr (T::kSigned)
    return grid_table(T::grid());
  else
    return _mm256_setzero_si256();
}

// One FMA per block and column accumulates a column's sum, so a few columns would wait on the FMA's
// latency: up to 4 columns, even and odd blocks go to separate accumulators.
template <class T, int NC>
void more32_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, MoreCols<BlockQ8A> x, float* const* out) {
  constexpr int U = NC <= 4 ? 2 : 1;
  const __m256i ones = _mm256_set1_epi16(1), table = table_of<T>();
  for (int64_t r = 0; r < nr; ++r) {
    prefetch_stream(a + r * lda, lda);  // the row kStreamAheadBytes ahead (cpu_vec_dot.h)
    const auto* w = reinterpret_cast<const typename T::W*>(a + r * lda);
    __m256 acc[U][NC];
    float extra[U][NC] = {};
    for (int u = 0; u < U; ++u)
      for (int c = 0; c < NC; ++c) acc[u][c] = _mm256_setzero_ps();
    auto block = [&](int u, int64_t i) {
      const __m256i q = T::levels(w[i], table);
      const __m256i aq = T::kSigned ? _mm256_abs_epi8(q) : q;
      const float dw = T::scale(w[i]);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const BlockQ8A& xb = x[c][i];
        const __m256i xq = mload(xb.qs);
        __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(aq, T::kSigned ? _mm256_sign_epi8(xq, q) : xq), ones);
        if constexpr (T::kOffset != 0)
          p = _mm256_add_epi32(p, _mm256_zextsi128_si256(_mm_cvtsi32_si128(-T::kOffset * xb.sum)));
        acc[u][c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * xb.d), acc[u][c]);
        if constexpr (T::kMin) extra[u][c] += T::min(w[i]) * xb.d * (float)xb.sum;
      }
    };
    int64_t i = 0;
    for (; i + U <= nblk; i += U)
      for (int u = 0; u < U; ++u) block(u, i + u);
    for (; i < nblk; ++i) block(0, i);
    for (int c = 0; c < NC; ++c) {
      __m256 s = acc[0][c];
      float e = extra[0][c];
      for (int u = 1; u < U; ++u) {
        s = _mm256_add_ps(s, acc[u][c]);
        e += extra[u][c];
      }
      out[c][r] = mhsum(s) + e;
    }
  }
}

// ---- 256-value blocks -----------------------------------------------------------------------------

// Q2_K: per 16-value group g, levels 2 bits (bits 2k of qs[32h + l]), scale sc & 15, min sc >> 4.
template <int NC>
void q2_k_more_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, MoreCols<BlockQ8KA> x, float* const* out) {
  const __m256i low2 = _mm256_set1_epi8(3);
  for (int64_t r = 0; r < nr; ++r) {
    prefetch_stream(a + r * lda, lda);  // the row kStreamAheadBytes ahead (cpu_vec_dot.h)
    const auto* w = reinterpret_cast<const BlockQ2_K*>(a + r * lda);
    __m256 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nblk; ++i) {
      const __m128i sc = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i].scales));
      const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sc, 4), _mm_set1_epi8(15)));
      __m256i isum[NC];
      for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        const __m256i qq = mload(w[i].qs + 32 * h);
        for (int k = 0; k < 4; ++k) {
          const __m256i q = _mm256_and_si256(_mm256_srli_epi16(qq, 2 * k), low2);
          const int g = 8 * h + 2 * k;
          const __m256i s =
              _mm256_set_m128i(_mm_set1_epi16(w[i].scales[g + 1] & 15), _mm_set1_epi16(w[i].scales[g] & 15));
#pragma GCC unroll 8
          for (int c = 0; c < NC; ++c)
            isum[c] = _mm256_add_epi32(
                isum[c], _mm256_madd_epi16(_mm256_maddubs_epi16(q, mload(x[c][i].qs + 128 * h + 32 * k)), s));
        }
      }
      const float d = mhalf(w[i].d), dmin = mhalf(w[i].dmin);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const BlockQ8KA& xb = x[c][i];
        const __m256i msum = _mm256_madd_epi16(mload(xb.bsums), mins);
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_set1_ps(d * xb.d), acc[c]);
        acc[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_set1_ps(dmin * xb.d), acc[c]);
      }
    }
    for (int c = 0; c < NC; ++c) out[c][r] = mhsum(acc[c]);
  }
}

// Q3_K's 16 sub-block scales (q3_k_scale - 32) as int16 lanes, four at a time from 32-bit words:
// scales j and 4 + j take the low nibbles of bytes 0..3 / 4..7, 8 + j and 12 + j their high
// nibbles; the top 2 bits of 4m + j sit at bits 2m of byte 8 + j.
inline __m256i q3_k_scales16(const uint8_t* scales) {
  uint32_t a0, a1, a2;
  std::memcpy(&a0, scales, 4);
  std::memcpy(&a1, scales + 4, 4);
  std::memcpy(&a2, scales + 8, 4);
  const uint32_t lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
  const __m128i v = _mm_setr_epi32((int)((a0 & lo4) | ((a2 & lo2) << 4)), (int)((a1 & lo4) | (((a2 >> 2) & lo2) << 4)),
                                   (int)(((a0 >> 4) & lo4) | (((a2 >> 4) & lo2) << 4)),
                                   (int)(((a1 >> 4) & lo4) | (((a2 >> 6) & lo2) << 4)));
  return _mm256_sub_epi16(_mm256_cvtepu8_epi16(v), _mm256_set1_epi16(32));
}
// vpshufb controls: scale 2k of a 128-bit lane's 8 in every 16-bit lane of the low half, 2k + 1 in
// the high half (the sub-block pair of one 32-value quarter).
alignas(32) inline constexpr uint8_t kScalePairs[4][32] = {
    {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3},
    {4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7},
    {8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11},
    {12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13,
     14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15}};

// Q3_K: levels 2 bits as Q2_K plus the hmask bit (e / 32 of hmask[e % 32]) as bit 2, x = d s (q - 4).
template <int NC>
void q3_k_more_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, MoreCols<BlockQ8KA> x, float* const* out) {
  const __m256i low2 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
  for (int64_t r = 0; r < nr; ++r) {
    prefetch_stream(a + r * lda, lda);  // the row kStreamAheadBytes ahead (cpu_vec_dot.h)
    const auto* w = reinterpret_cast<const BlockQ3_K*>(a + r * lda);
    __m256 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nblk; ++i) {
      const __m256i sv = q3_k_scales16(w[i].scales);
      // both 128-bit lanes holding the 8 scales of half h
      const __m256i sh[2] = {_mm256_permute2x128_si256(sv, sv, 0x00), _mm256_permute2x128_si256(sv, sv, 0x11)};
      const __m256i hm = mload(w[i].hmask);
      __m256i isum[NC];
      for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        const __m256i qq = mload(w[i].qs + 32 * h);
        for (int k = 0; k < 4; ++k) {
          const __m256i hb = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hm, 4 * h + k), one), 2);
          const __m256i q = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qq, 2 * k), low2), hb);
          const __m256i s = _mm256_shuffle_epi8(sh[h], mload(kScalePairs[k]));  // groups 8h + 2k, + 1
#pragma GCC unroll 8
          for (int c = 0; c < NC; ++c)
            isum[c] = _mm256_add_epi32(
                isum[c], _mm256_madd_epi16(_mm256_maddubs_epi16(q, mload(x[c][i].qs + 128 * h + 32 * k)), s));
        }
      }
      const float d = mhalf(w[i].d);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const BlockQ8KA& xb = x[c][i];
        const __m256i off = _mm256_madd_epi16(mload(xb.bsums), sv);  // 4 sum_g s_g bsums_g
        const __m256i t = _mm256_sub_epi32(isum[c], _mm256_slli_epi32(off, 2));
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(t), _mm256_set1_ps(d * xb.d), acc[c]);
      }
    }
    for (int c = 0; c < NC; ++c) out[c][r] = mhsum(acc[c]);
  }
}

// Q5_K: Q4_K's sub-block scales and mins, 5-bit levels (bit 4 of element e: bit e / 32 of qh[e % 32]).
template <int NC>
void q5_k_more_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, MoreCols<BlockQ8KA> x, float* const* out) {
  const __m256i low4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
  for (int64_t r = 0; r < nr; ++r) {
    prefetch_stream(a + r * lda, lda);  // the row kStreamAheadBytes ahead (cpu_vec_dot.h)
    const auto* w = reinterpret_cast<const BlockQ5_K*>(a + r * lda);
    __m256 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nblk; ++i) {
      // the 8 (sc, m) pairs as bytes of two 64-bit words, in registers (q4_k_scale_min's layout:
      // bytes 0-3 sc 0-3, 4-7 m 0-3, 8-11 the low nibbles of sc / m 4-7, their top bits in bits 6-7
      // of bytes 0-3 / 4-7)
      uint32_t a0, a1, a2;
      std::memcpy(&a0, w[i].scales, 4);
      std::memcpy(&a1, w[i].scales + 4, 4);
      std::memcpy(&a2, w[i].scales + 8, 4);
      const uint32_t lo6 = 0x3f3f3f3fu, lo4 = 0x0f0f0f0fu, lo2 = 0x03030303u;
      const uint64_t sc = (a0 & lo6) | (uint64_t)((a2 & lo4) | (((a0 >> 6) & lo2) << 4)) << 32;
      const uint64_t mn = (a1 & lo6) | (uint64_t)(((a2 >> 4) & lo4) | (((a1 >> 6) & lo2) << 4)) << 32;
      const __m256i m32 = _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)mn));
      const __m256i mdup = _mm256_or_si256(m32, _mm256_slli_epi32(m32, 16));  // (m_j, m_j) pairs
      const __m256i qh = mload(w[i].qh);
      __m256i isum[NC];
      for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
      for (int j = 0; j < 4; ++j) {  // sub-blocks 2j (low nibbles) and 2j + 1 (high)
        const __m256i q = mload(w[i].qs + 32 * j);
        const __m256i h_lo = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), one), 4);
        const __m256i h_hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * j + 1), one), 4);
        const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, low4), h_lo);
        const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4), h_hi);
        const __m256i s_lo = _mm256_set1_epi16((int16_t)((sc >> (16 * j)) & 255));
        const __m256i s_hi = _mm256_set1_epi16((int16_t)((sc >> (16 * j + 8)) & 255));
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) {
          const int8_t* xq = x[c][i].qs + 64 * j;
          const __m256i p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, mload(xq)), s_lo);
          const __m256i p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, mload(xq + 32)), s_hi);
          isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(p_lo, p_hi));
        }
      }
      const float d = mhalf(w[i].d), dmin = mhalf(w[i].dmin);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const BlockQ8KA& xb = x[c][i];
        const __m256i mx = _mm256_madd_epi16(mload(xb.bsums), mdup);
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_set1_ps(d * xb.d), acc[c]);
        acc[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mx), _mm256_set1_ps(dmin * xb.d), acc[c]);
      }
    }
    for (int c = 0; c < NC; ++c) out[c][r] = mhsum(acc[c]);
  }
}

// IQ4_XS: per 32-value sub-block the IQ4_NL grid values times (ls - 32).
template <int NC>
void iq4_xs_more_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, MoreCols<BlockQ8KA> x,
                      float* const* out) {
  const __m256i table = grid_table(kIq4nlValues);
  for (int64_t r = 0; r < nr; ++r) {
    prefetch_stream(a + r * lda, lda);  // the row kStreamAheadBytes ahead (cpu_vec_dot.h)
    const auto* w = reinterpret_cast<const BlockIQ4_XS*>(a + r * lda);
    __m256 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nblk; ++i) {
      __m256i isum[NC];
      for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
      for (int j = 0; j < 8; ++j) {
        const __m256i v = _mm256_shuffle_epi8(table, nibbles32(w[i].qs + 16 * j));
        const __m256i av = _mm256_abs_epi8(v);
        const __m256i s = _mm256_set1_epi16((int16_t)(iq4_xs_scale(w[i], j) - 32));
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) {
          const __m256i xq = mload(x[c][i].qs + 32 * j);
          isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(_mm256_maddubs_epi16(av, _mm256_sign_epi8(xq, v)), s));
        }
      }
      const float d = mhalf(w[i].d);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c)
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_set1_ps(d * x[c][i].d), acc[c]);
    }
    for (int c = 0; c < NC; ++c) out[c][r] = mhsum(acc[c]);
  }
}

template <class X, class F>
void more_dispatch(int64_t K, int64_t block, const void* a, const void* const* b, int nc, F&& f) {
  const int64_t nblk = K / block;
  const auto* pa = static_cast<const uint8_t*>(a);
  const auto x = reinterpret_cast<MoreCols<X>>(b);
  with_count<kMaxDotCols>(nc, [&]<int NC>() { f.template operator()<NC>(nblk, pa, x); });
}

}  // namespace
}  // namespace loom::cpu

// The level's entry points (declared in simd_isa.h).
#define LOOM_MORE_ROWS_DOT(name, level, X, block, call)                                                          \
  void rows_dot_##name##_##level(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc, \
                                 float* const* out) {                                                            \
    more_dispatch<X>(K, block, a, b, nc, [&]<int NC>(int64_t nblk, const uint8_t* pa, MoreCols<X> x) {           \
      call(nblk, pa, lda, nr, x, out);                                                                           \
    });                                                                                                          \
  }
#define LOOM_DEFINE_ROWS_DOT_MORE(level)                                         \
  LOOM_MORE_ROWS_DOT(q4_1, level, BlockQ8A, 32, (more32_rows<MoreQ4_1, NC>))     \
  LOOM_MORE_ROWS_DOT(q5_0, level, BlockQ8A, 32, (more32_rows<MoreQ5_0, NC>))     \
  LOOM_MORE_ROWS_DOT(q5_1, level, BlockQ8A, 32, (more32_rows<MoreQ5_1, NC>))     \
  LOOM_MORE_ROWS_DOT(iq4_nl, level, BlockQ8A, 32, (more32_rows<MoreIQ4_NL, NC>)) \
  LOOM_MORE_ROWS_DOT(mxfp4, level, BlockQ8A, 32, (more32_rows<MoreMXFP4, NC>))   \
  LOOM_MORE_ROWS_DOT(q2_k, level, BlockQ8KA, 256, q2_k_more_rows<NC>)            \
  LOOM_MORE_ROWS_DOT(q3_k, level, BlockQ8KA, 256, q3_k_more_rows<NC>)            \
  LOOM_MORE_ROWS_DOT(q5_k, level, BlockQ8KA, 256, q5_k_more_rows<NC>)            \
  LOOM_MORE_ROWS_DOT(iq4_xs, level, BlockQ8KA, 256, iq4_xs_more_rows<NC>)
