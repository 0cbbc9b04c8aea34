// AVX2 integer dots of the quantized weight types against int8 columns (BlockQ8A / BlockQ8KA),
// and the column quantizers. vpmaddubsw multiplies unsigned weight bytes by signed activation
// bytes into 16-bit pair sums (no overflow: |pair| <= 2 * 128 * 127), vpmaddwd widens them (or
// applies a K-quant sub-block scale) into 32-bit lanes. The readable references are
// quantize_q8/q8k and dot_q8_0/q4_0/q4_k/q6_k in cpu_vec_dot.cpp.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu_vec_dot.h"
#include "loom/core/quants.h"
#include "simd_isa.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "simd_r8.h"

namespace loom::cpu {
namespace {

inline float half_to_f32(fp16_t h) { return _cvtsh_ss(h); }

inline float hsum(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}
inline int32_t hsum_i32(__m256i v) {
  const __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  const __m128i t = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  return _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1)));
}
// 8 lanes of sum of 4 products u[4i + k] * s[4i + k] (u unsigned, s signed bytes)
inline __m256i dot_u8s8(__m256i u, __m256i s) {
  return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}
inline __m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

template <class X>
using Cols = const X* const*;

// ---- Q8_0: |w| . sign(x, w) -------------------------------------------------------------------

template <int NC>
void q8_0_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, Cols<BlockQ8A> x, float* const* out) {
  for (int64_t r = 0; r < nr; ++r) {
    prefetch_stream(a + r * lda, lda);  // the row kStreamAheadBytes ahead (cpu_vec_dot.h)
    const auto* w = reinterpret_cast<const BlockQ8_0*>(a + r * lda);
    __m256 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nblk; ++i) {
      const __m256i wq = load256(w[i].qs);
      const __m256i aw = _mm256_abs_epi8(wq);
      const float dw = half_to_f32(w[i].d);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const __m256i p = dot_u8s8(aw, _mm256_sign_epi8(load256(x[c][i].qs), wq));
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * x[c][i].d), acc[c]);
      }
    }
    for (int c = 0; c < NC; ++c) out[c][r] = hsum(acc[c]);
  }
}

// ---- Q4_0: q . x - 8 sum(x) -------------------------------------------------------------------

template <int NC>
void q4_0_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, Cols<BlockQ8A> x, float* const* out) {
  const __m256i low4 = _mm256_set1_epi8(15);
  for (int64_t r = 0; r < nr; ++r) {
    prefetch_stream(a + r * lda, lda);  // the row kStreamAheadBytes ahead (cpu_vec_dot.h)
    const auto* w = reinterpret_cast<const BlockQ4_0*>(a + r * lda);
    __m256 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nblk; ++i) {
      const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i].qs));
      const __m256i wq = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), low4);
      const float dw = half_to_f32(w[i].d);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const BlockQ8A& xb = x[c][i];
        const __m256i p =
            _mm256_add_epi32(dot_u8s8(wq, load256(xb.qs)), _mm256_zextsi128_si256(_mm_cvtsi32_si128(-8 * xb.sum)));
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * xb.d), acc[c]);
      }
    }
    for (int c = 0; c < NC; ++c) out[c][r] = hsum(acc[c]);
  }
}

// ---- Q8_0 / Q4_0 repacked in groups of 8 rows (cpu_repack.h) --------------------------------
// Per block and column, each quad (8 rows x 4 values) is one vpmaddubsw into the 8 row lanes:
// Q4_0's nibbles directly (pair sums of 15 x 127 add up in 16 bits over a block), Q8_0's bytes
// back to signed for |w| . sign(x, w) (q + 128 times x could overflow a 16-bit pair).

template <int NC>
void q8_0_r8_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, Cols<BlockQ8A> x, float* const* out) {
  const __m256i flip = _mm256_set1_epi8((char)0x80), ones = _mm256_set1_epi16(1);
  r8_rows_loop<BlockQ8_0, NC>(nblk, a, lda, nr, x, out, [&](const uint8_t* qs, int64_t i, __m256i* s) {
    for (int c = 0; c < NC; ++c) s[c] = _mm256_setzero_si256();
    for (int q = 0; q < 8; ++q) {
      const __m256i w = _mm256_xor_si256(load256(qs + 32 * q), flip);
      const __m256i aw = _mm256_abs_epi8(w);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        int32_t xq;
        std::memcpy(&xq, x[c][i].qs + 4 * q, 4);
        const __m256i pr = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(_mm256_set1_epi32(xq), w));
        s[c] = _mm256_add_epi32(s[c], _mm256_madd_epi16(pr, ones));
      }
    }
  });
}

template <int NC>
void q4_0_r8_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, Cols<BlockQ8A> x, float* const* out) {
  const __m256i low4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
  r8_rows_loop<BlockQ4_0, NC>(nblk, a, lda, nr, x, out, [&](const uint8_t* qs, int64_t i, __m256i* s) {
    __m256i s16[NC];
    for (int c = 0; c < NC; ++c) s16[c] = _mm256_setzero_si256();
    for (int q = 0; q < 4; ++q) {  // low nibbles: elements 4q.., high: 16 + 4q..
      const __m256i v = load256(qs + 32 * q);
      const __m256i lo = _mm256_and_si256(v, low4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        int32_t xl, xh;
        std::memcpy(&xl, x[c][i].qs + 4 * q, 4);
        std::memcpy(&xh, x[c][i].qs + 16 + 4 * q, 4);
        s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(lo, _mm256_set1_epi32(xl)));
        s16[c] = _mm256_add_epi16(s16[c], _mm256_maddubs_epi16(hi, _mm256_set1_epi32(xh)));
      }
    }
    for (int c = 0; c < NC; ++c)
      s[c] = _mm256_add_epi32(_mm256_madd_epi16(s16[c], ones), _mm256_set1_epi32(-8 * x[c][i].sum));
  });
}

// ---- Q4_K -------------------------------------------------------------------------------------

// Q4_K scales[12] -> sc[0..7] in bytes 0-7, m[0..7] in bytes 8-15 (see q4_k_scale_min).
inline void q4_k_unpack_scales(const uint8_t* scales, uint32_t u[4]) {
  constexpr uint32_t k6 = 0x3f3f3f3f, k4 = 0x0f0f0f0f, k2 = 0x03030303;
  uint32_t s[3];
  std::memcpy(s, scales, 12);
  u[0] = s[0] & k6;
  u[1] = (s[2] & k4) | (((s[0] >> 6) & k2) << 4);
  u[2] = s[1] & k6;
  u[3] = ((s[2] >> 4) & k4) | (((s[1] >> 6) & k2) << 4);
}

template <int NC>
void q4_k_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, Cols<BlockQ8KA> x, float* const* out) {
  const __m256i low4 = _mm256_set1_epi8(15);
  for (int64_t r = 0; r < nr; ++r) {
    prefetch_stream(a + r * lda, lda);  // the row kStreamAheadBytes ahead (cpu_vec_dot.h)
    const auto* w = reinterpret_cast<const BlockQ4_K*>(a + r * lda);
    __m256 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nblk; ++i) {
      uint32_t u[4];
      q4_k_unpack_scales(w[i].scales, u);
      const auto* sc = reinterpret_cast<const uint8_t*>(u);
      const __m256i m32 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + 8)));
      const __m256i mdup = _mm256_or_si256(m32, _mm256_slli_epi32(m32, 16));  // int16 pairs (m_j, m_j)
      __m256i isum[NC];
      for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
      for (int j = 0; j < 4; ++j) {  // sub-blocks 2j (low nibbles) and 2j + 1 (high nibbles)
        const __m256i q = load256(w[i].qs + 32 * j);
        const __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
        const __m256i s_lo = _mm256_set1_epi16(sc[2 * j]), s_hi = _mm256_set1_epi16(sc[2 * j + 1]);
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) {
          const int8_t* xq = x[c][i].qs + 64 * j;
          const __m256i p_lo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load256(xq)), s_lo);
          const __m256i p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load256(xq + 32)), s_hi);
          isum[c] = _mm256_add_epi32(isum[c], _mm256_add_epi32(p_lo, p_hi));
        }
      }
      const float d = half_to_f32(w[i].d), dmin = half_to_f32(w[i].dmin);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const BlockQ8KA& xb = x[c][i];
        const __m256i mx = _mm256_madd_epi16(load256(xb.bsums), mdup);
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[c]), _mm256_set1_ps(d * xb.d), acc[c]);
        acc[c] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(mx), _mm256_set1_ps(dmin * xb.d), acc[c]);
      }
    }
    for (int c = 0; c < NC; ++c) out[c][r] = hsum(acc[c]);
  }
}

// ---- Q4_K repacked in groups of 8 rows (cpu_repack.h) -----------------------------------------
// Per sub-block and column the 8 quads' vpmaddubsw pair sums add up in 16 bits (8 x 2 x 15 x 127
// < 2^15), and one vpmaddwd by (sc, sc) applies the 8 rows' scales exactly; the mins term the
// same way by (m, m) against x's two 16-value sums. One convert per block and column.

template <int NC>
void q4_k_r8_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, Cols<BlockQ8KA> x, float* const* out) {
  r8_groups<BlockQ4_K, NC>(nblk, a, lda, nr, out, [&](const uint8_t* p, int64_t i, __m256* acc) {
    Q4kR8Scales sm;
    q4k_r8_scales(p, sm);
    __m256i isum[NC];
    for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
    const uint8_t* qs = p + kQ4kRepackQuads;
    for (int cc = 0; cc < 4; ++cc) {  // sub-blocks 2cc (low nibbles) and 2cc + 1 (high)
      __m256i lo[8], hi[8];
      q4k_r8_nibbles(qs, cc, lo, hi);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const int8_t* xq = x[c][i].qs + 64 * cc;
        __m256i sl = _mm256_maddubs_epi16(lo[0], bcast32(xq)), sh = _mm256_maddubs_epi16(hi[0], bcast32(xq + 32));
        for (int q = 1; q < 8; ++q) {
          sl = _mm256_add_epi16(sl, _mm256_maddubs_epi16(lo[q], bcast32(xq + 4 * q)));
          sh = _mm256_add_epi16(sh, _mm256_maddubs_epi16(hi[q], bcast32(xq + 32 + 4 * q)));
        }
        isum[c] = _mm256_add_epi32(
            isum[c], _mm256_add_epi32(_mm256_madd_epi16(sl, sm.sc[2 * cc]), _mm256_madd_epi16(sh, sm.sc[2 * cc + 1])));
      }
    }
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      const BlockQ8KA& xb = x[c][i];
      __m256i msum = _mm256_madd_epi16(sm.m[0], bcast32(xb.bsums));
      for (int j = 1; j < 8; ++j) msum = _mm256_add_epi32(msum, _mm256_madd_epi16(sm.m[j], bcast32(xb.bsums + 2 * j)));
      const __m256 blk =
          _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), sm.dmin, _mm256_mul_ps(_mm256_cvtepi32_ps(isum[c]), sm.d));
      acc[c] = _mm256_fmadd_ps(blk, _mm256_set1_ps(xb.d), acc[c]);
    }
  });
}

// ---- Q6_K repacked in groups of 8 rows (cpu_repack.h) -----------------------------------------
// Per 16-value sub-block, two quads' vpmaddubsw pair sums add up in 16 bits (2 x 2 x 63 x 127 <
// 2^15) and vpmaddwd by (sc, sc) applies the rows' scales exactly, twice; the whole block's sum,
// minus 32 sum sc * (x's 16-value sums), stays in 32 bits: one convert per block and column.

template <int NC>
void q6_k_r8_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, Cols<BlockQ8KA> x, float* const* out) {
  r8_groups<BlockQ6_K, NC>(nblk, a, lda, nr, out, [&](const uint8_t* p, int64_t i, __m256* acc) {
    __m256i pairs[8], dup[16];  // (sc 2t, sc 2t + 1); (sc, sc) per sub-block
    for (int t = 0; t < 8; ++t) {
      pairs[t] = q6k_r8_scale_pairs(p, t);
      dup[2 * t] = _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(pairs[t], 0xa0), 0xa0);
      dup[2 * t + 1] = _mm256_shufflehi_epi16(_mm256_shufflelo_epi16(pairs[t], 0xf5), 0xf5);
    }
    __m256i isum[NC];
    for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h)
#pragma GCC unroll 4
      for (int q2 = 0; q2 < 4; ++q2) {  // quads 2 q2, 2 q2 + 1: sub-blocks 8h + 2k + q2 / 2
        __m256i u0[4], u1[4];
        q6k_r8_step(p, h, 2 * q2, u0);
        q6k_r8_step(p, h, 2 * q2 + 1, u1);
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) {
          const int8_t* xq = x[c][i].qs + 128 * h + 8 * q2;
          for (int k = 0; k < 4; ++k) {
            const __m256i s16 = _mm256_add_epi16(_mm256_maddubs_epi16(u0[k], bcast32(xq + 32 * k)),
                                                 _mm256_maddubs_epi16(u1[k], bcast32(xq + 32 * k + 4)));
            isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(s16, dup[8 * h + 2 * k + q2 / 2]));
          }
        }
      }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      const BlockQ8KA& xb = x[c][i];
      __m256i osum = _mm256_madd_epi16(pairs[0], bcast32(xb.bsums));
      for (int t = 1; t < 8; ++t) osum = _mm256_add_epi32(osum, _mm256_madd_epi16(pairs[t], bcast32(xb.bsums + 2 * t)));
      const __m256i total = _mm256_sub_epi32(isum[c], _mm256_slli_epi32(osum, 5));
      acc[c] = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_cvtepi32_ps(total), d), _mm256_set1_ps(xb.d), acc[c]);
    }
  });
}

// ---- Q6_K -------------------------------------------------------------------------------------

template <int NC>
void q6_k_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, Cols<BlockQ8KA> x, float* const* out) {
  const __m256i low4 = _mm256_set1_epi8(15), low2 = _mm256_set1_epi8(3);
  for (int64_t r = 0; r < nr; ++r) {
    prefetch_stream(a + r * lda, lda);  // the row kStreamAheadBytes ahead (cpu_vec_dot.h)
    const auto* w = reinterpret_cast<const BlockQ6_K*>(a + r * lda);
    __m256 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nblk; ++i) {
      const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i].scales)));
      __m256i isum[NC];
      for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
      for (int h = 0; h < 2; ++h) {
        const __m256i ql0 = load256(w[i].ql + 64 * h), ql1 = load256(w[i].ql + 64 * h + 32);
        const __m256i qh = load256(w[i].qh + 32 * h);
        for (int k = 0; k < 4; ++k) {  // quarter k: elements 128h + 32k .. + 31, groups g and g + 1
          const __m256i lq = k & 1 ? ql1 : ql0;
          const __m256i lo = k < 2 ? _mm256_and_si256(lq, low4) : _mm256_and_si256(_mm256_srli_epi16(lq, 4), low4);
          const __m256i hb = _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), low2), 4);
          const __m256i q = _mm256_or_si256(lo, hb);
          const int g = 8 * h + 2 * k;
          const __m256i s = _mm256_set_m128i(_mm_set1_epi16(w[i].scales[g + 1]), _mm_set1_epi16(w[i].scales[g]));
#pragma GCC unroll 8
          for (int c = 0; c < NC; ++c) {
            const __m256i p = _mm256_maddubs_epi16(q, load256(x[c][i].qs + 128 * h + 32 * k));
            isum[c] = _mm256_add_epi32(isum[c], _mm256_madd_epi16(p, s));
          }
        }
      }
      const float d = half_to_f32(w[i].d);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const BlockQ8KA& xb = x[c][i];
        const __m256i off = _mm256_madd_epi16(load256(xb.bsums), sc16);  // - 32 sum_g sc_g bsums_g
        const __m256i s = _mm256_sub_epi32(isum[c], _mm256_slli_epi32(off, 5));
        acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(d * xb.d), acc[c]);
      }
    }
    for (int c = 0; c < NC; ++c) out[c][r] = hsum(acc[c]);
  }
}

// `most` columns per kernel call: Q6_K's repacked kernel spills from 5 columns on and GCC took
// over a minute over its 7- and 8-column forms, so it takes 4 at a time (as fast: n = 512 ran at
// 163 GFLOPS against 166 with 8, one thread of a Zen 5 at the AVX2 level)
#define LOOM_DISPATCH_AT_MOST(kernel, X, block, most) \
  const int64_t nblk = K / (block);                   \
  const auto* pa = static_cast<const uint8_t*>(a);    \
  const auto x = reinterpret_cast<Cols<X>>(b);        \
  in_passes<(most)>(nc, [&]<int NC>(int c0) { kernel<NC>(nblk, pa, lda, nr, x + c0, out + c0); });
#define LOOM_DISPATCH_NC(kernel, X, block) LOOM_DISPATCH_AT_MOST(kernel, X, block, kMaxDotCols)

// 8 floats -> 8 int32 of round(x * id), nearest even (as the reference's nearbyint)
inline __m256i quant8(const float* x, __m256 id) { return _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), id)); }
// 4 x 8 int32 (each within int8) -> 32 int8 in order
inline __m256i pack32(__m256i q0, __m256i q1, __m256i q2, __m256i q3) {
  const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q0, q1), _mm256_packs_epi32(q2, q3));
  return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}
inline float amax_of(const float* x, int n) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  __m256 m = _mm256_setzero_ps();
  for (int j = 0; j < n; j += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)));
  const __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  const __m128 t = _mm_max_ps(h, _mm_movehl_ps(h, h));
  return _mm_cvtss_f32(_mm_max_ss(t, _mm_movehdup_ps(t)));
}

}  // namespace

void rows_dot_q8_0_avx2(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                        float* const* out) {
  LOOM_DISPATCH_NC(q8_0_rows, BlockQ8A, 32)
}
void rows_dot_q8_0_r8_avx2(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                           float* const* out) {
  LOOM_DISPATCH_NC(q8_0_r8_rows, BlockQ8A, 32)
}
void rows_dot_q4_0_r8_avx2(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                           float* const* out) {
  LOOM_DISPATCH_NC(q4_0_r8_rows, BlockQ8A, 32)
}
void rows_dot_q4_0_avx2(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                        float* const* out) {
  LOOM_DISPATCH_NC(q4_0_rows, BlockQ8A, 32)
}
void rows_dot_q4_k_r8_avx2(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                           float* const* out) {
  LOOM_DISPATCH_NC(q4_k_r8_rows, BlockQ8KA, 256)
}
void rows_dot_q6_k_r8_avx2(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                           float* const* out) {
  LOOM_DISPATCH_AT_MOST(q6_k_r8_rows, BlockQ8KA, 256, 4)
}
void rows_dot_q4_k_avx2(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                        float* const* out) {
  LOOM_DISPATCH_NC(q4_k_rows, BlockQ8KA, 256)
}
void rows_dot_q6_k_avx2(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                        float* const* out) {
  LOOM_DISPATCH_NC(q6_k_rows, BlockQ8KA, 256)
}
#undef LOOM_DISPATCH_NC
#undef LOOM_DISPATCH_AT_MOST

// x[0, K) -> K / 32 BlockQ8A (bit-exact with quantize_q8)
void quantize_q8_avx2(const float* x, void* dst, int64_t K) {
  auto* y = static_cast<BlockQ8A*>(dst);
  for (int64_t i = 0; i < K / 32; ++i) {
    const float* xb = x + 32 * i;
    const float amax = amax_of(xb, 32);
    const float d = amax / 127.0f;
    const __m256 id = _mm256_set1_ps(amax > 0.0f ? 1.0f / d : 0.0f);
    const __m256i q0 = quant8(xb, id), q1 = quant8(xb + 8, id), q2 = quant8(xb + 16, id), q3 = quant8(xb + 24, id);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs), pack32(q0, q1, q2, q3));
    y[i].d = q8_scale(d);
    y[i].sum = hsum_i32(_mm256_add_epi32(_mm256_add_epi32(q0, q1), _mm256_add_epi32(q2, q3)));
  }
}

// x[0, K) -> K / 256 BlockQ8KA (bit-exact with quantize_q8k)
void quantize_q8k_avx2(const float* x, void* dst, int64_t K) {
  auto* y = static_cast<BlockQ8KA*>(dst);
  for (int64_t i = 0; i < K / 256; ++i) {
    const float* xb = x + 256 * i;
    const float amax = amax_of(xb, 256);
    const __m256 id = _mm256_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    for (int j = 0; j < 256; j += 32) {
      const __m256i q0 = quant8(xb + j, id), q1 = quant8(xb + j + 8, id);
      const __m256i q2 = quant8(xb + j + 16, id), q3 = quant8(xb + j + 24, id);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(y[i].qs + j), pack32(q0, q1, q2, q3));
      y[i].bsums[j / 16] = (int16_t)hsum_i32(_mm256_add_epi32(q0, q1));
      y[i].bsums[j / 16 + 1] = (int16_t)hsum_i32(_mm256_add_epi32(q2, q3));
    }
    y[i].d = amax / 127.0f;
  }
}

}  // namespace loom::cpu

#pragma GCC pop_options
