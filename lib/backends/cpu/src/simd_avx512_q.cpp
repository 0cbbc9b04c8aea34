// AVX-512 VNNI integer dots of the quantized weight types against int8 columns (BlockQ8A /
// BlockQ8KA), and the column quantizers. vpdpbusd multiplies unsigned weight bytes by signed
// activation bytes, 4 products per 32-bit lane; K-quant sub-block scales are applied exactly
// in the integer domain with vpdpwssd (each lane's partial sum fits 16 bits). Zen 4 runs
// 512-bit operations at the rate of two 256-bit ones, so the block-at-a-time kernels stay
// 256-bit; where 512-bit operations run at full width the repacked Q4_0, Q4_K and Q8_0 ones may take
// two row groups per 512-bit vector, over weights repacked in pairs (wide_512: "Two groups at
// once"; simd_r8_more.h's types do the same through simd_r8x2.h). The readable references are quantize_q8/q8k and
// dot_q8_0/q4_0/q4_k/q6_k in cpu_vec_dot.cpp.

// GCC 12's AVX-512 intrinsics headers trip -Wuninitialized on their own _mm512_undefined_*
// helpers once inlined; the warning is about the header, not this file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
// simd_width.h: Vx<__m256i> drops the type's may_alias attribute
#pragma GCC diagnostic ignored "-Wignored-attributes"
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu_vec_dot.h"
#include "loom/core/quants.h"
#include "simd_isa.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#include "simd_r8.h"
#include "simd_r8x2.h"
#define LOOM_R8_VNNI 1
#define LOOM_R8_512 1
#include "simd_width.h"
#undef LOOM_R8_512
#undef LOOM_R8_VNNI

namespace loom::cpu {
namespace {

inline float half_to_f32(fp16_t h) { return _cvtsh_ss(h); }

inline float hsum256(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

// A column of int8 blocks as the kernels see it.
template <class X>
using Cols = const X* const*;

// ---- Q8_0 / Q4_0: unsigned weight bytes, the offset seeded into lane 0 ----------------------
// A block becomes 32 unsigned bytes u (Q8_0: q + 128, Q4_0: the nibbles q), so that
// w . x = u . x - (sum(x) << shift) with shift 7 (Q8_0) or 3 (Q4_0); vpdpbusd adds u . x to a
// vector holding the offset. Two blocks per step into two accumulators hide the FMA latency.
// Measured on Zen 4: this beats the 512-bit two-block form (its shuffles cost more than they
// save) and the sign trick; reading two rows at once to share x loads wins in cache but
// streams from memory at a third of the speed, so rows go one at a time.

inline __m256i unsigned_block(const BlockQ8_0& w) {
  return _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w.qs)), _mm256_set1_epi8((char)0x80));
}
inline __m256i unsigned_block(const BlockQ4_0& w) {
  const __m256i b = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(w.qs)));
  // bytes 0-15: low nibbles (elements 0-15); bytes 16-31: high nibbles (elements 16-31)
  return _mm256_and_si256(_mm256_mask_srli_epi16(b, 0xff00, b, 4), _mm256_set1_epi8(15));
}
template <class W>
constexpr int kOffsetShift = sizeof(W) == sizeof(BlockQ4_0) ? 3 : 7;

// acc += (u . x - (x.sum << shift)) * dw * x.d, per lane
inline __m256 block_dot(__m256i u, const BlockQ8A& x, int shift, float dw, __m256 acc) {
  const __m256i off = _mm256_zextsi128_si256(_mm_cvtsi32_si128(-x.sum * (1 << shift)));
  const __m256i p = _mm256_dpbusd_epi32(off, u, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x.qs)));
  return _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_set1_ps(dw * x.d), acc);
}

// W: BlockQ8_0 or BlockQ4_0; rows r < nr x NC columns of BlockQ8A.
template <class W, int NC>
void q8_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, Cols<BlockQ8A> x, float* const* out) {
  constexpr int shift = kOffsetShift<W>;
  for (int64_t r = 0; r < nr; ++r) {
    prefetch_stream(a + r * lda, lda);  // the row kStreamAheadBytes ahead (cpu_vec_dot.h)
    const W* w = reinterpret_cast<const W*>(a + r * lda);
    __m256 acc[NC][2];
    for (int c = 0; c < NC; ++c) acc[c][0] = acc[c][1] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 2 <= nblk; i += 2)
      for (int h = 0; h < 2; ++h) {
        const __m256i u = unsigned_block(w[i + h]);
        const float dw = half_to_f32(w[i + h].d);
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) acc[c][h] = block_dot(u, x[c][i + h], shift, dw, acc[c][h]);
      }
    if (i < nblk) {
      const __m256i u = unsigned_block(w[i]);
      const float dw = half_to_f32(w[i].d);
      for (int c = 0; c < NC; ++c) acc[c][0] = block_dot(u, x[c][i], shift, dw, acc[c][0]);
    }
    for (int c = 0; c < NC; ++c) out[c][r] = hsum256(_mm256_add_ps(acc[c][0], acc[c][1]));
  }
}

// ---- Q8_0 / Q4_0 repacked in groups of 8 rows (cpu_repack.h) --------------------------------
// One 256-bit vpdpbusd serves 8 rows x 4 elements: per block and column 8 of them, one offset
// broadcast, one convert and one scale product + FMA for all 8 rows (the GGUF-row kernel above
// spends ~9 vector operations per row and block), and the 8 results are stored without a
// horizontal sum. Two partial sums per block keep the vpdpbusd chains short.

template <class W>
inline __m256i r8_quad(const uint8_t* p, int q) {
  if constexpr (sizeof(W) == sizeof(BlockQ8_0)) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * q));
  } else {  // quads 0-3: low nibbles; 4-7: high nibbles of the same bytes
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 * (q & 3)));
    return _mm256_and_si256(q < 4 ? v : _mm256_srli_epi16(v, 4), _mm256_set1_epi8(15));
  }
}

template <class W, int NC>
void r8_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, Cols<BlockQ8A> x, float* const* out) {
  constexpr int shift = kOffsetShift<W>;
  r8_rows_loop<W, NC>(nblk, a, lda, nr, x, out, [&](const uint8_t* qs, int64_t i, __m256i* s) {
    __m256i u[8];
    for (int q = 0; q < 8; ++q) u[q] = r8_quad<W>(qs, q);
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      const BlockQ8A& xb = x[c][i];
      __m256i s0 = _mm256_set1_epi32(-xb.sum * (1 << shift)), s1 = _mm256_setzero_si256();
      for (int q = 0; q < 8; q += 2) {
        s0 = dot_u8_bcast(s0, u[q], xb.qs + 4 * q);
        s1 = dot_u8_bcast(s1, u[q + 1], xb.qs + 4 * q + 4);
      }
      s[c] = _mm256_add_epi32(s0, s1);
    }
  });
}

// ---- Two groups at once (cpu_features.h: wide_512) --------------------------------------------
// Where 512-bit operations run at the rate of 256-bit ones, the Q4_0 and Q4_K kernels take rows
// r .. r + 7 in the low half of each vector and r + 8 .. r + 15 in the high half: each activation
// broadcast, nibble mask and vpdpbusd then serves 16 rows. On a 2-core Xeon, from L2: Q4_K 1.3x,
// Q4_0 ~1.15x faster; decode of 900 MiB models streaming from memory: Q4_K faster in 18 of 22
// same-minute pairs (~7%), Q4_0 in 12 of 13 (1-2%). Q6_K's ran 1.25x faster from L2
// but slower from memory (10 of 12 pairs) and stays 8-row; Q8_0's is slower from L2 (no masks to
// share, an insert per load) and taken only for long rows on Zen 5 (cpu_features.h: wide_512).
// The loads and the loop over pairs of groups: simd_r8x2.h.

// The 8 quads of both groups' block at pa, pb as unsigned bytes: Q4_0's nibbles split at once,
// Q8_0's bytes with one insert per load.
template <class W>
inline void r8x2_quads(const uint8_t* pa, const uint8_t* pb, __m512i (&u)[8]) {
  constexpr size_t kQs = kRepackRows * sizeof(fp16_t);
  if constexpr (sizeof(W) == sizeof(BlockQ8_0)) {
    for (int q = 0; q < 8; ++q) u[q] = r8x2_load(pa + kQs + 32 * q, pb + kQs + 32 * q);
  } else {
    const __m512i low4 = _mm512_set1_epi8(15);
    for (int q = 0; q < 4; ++q) {
      const __m512i v = r8x2_load(pa + kQs + 32 * q, pb + kQs + 32 * q);
      u[q] = _mm512_and_si512(v, low4);
      u[4 + q] = _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
    }
  }
}

// Q4_0 / Q8_0 (r8_rows) two groups at once. Q8_0's is slower than its 8-row kernel from L2 and
// for short rows, but a long row's 8-row group streams slower on Zen 5 than two groups at once
// (cpu_features.h: kWideLongRow).
template <class W, int NC>
void r8x2_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, Cols<BlockQ8A> x, float* const* out) {
  constexpr int shift = kOffsetShift<W>;
  r8x2_groups<W, NC>(
      nblk, a, lda, nr, out,
      [&](const uint8_t* pa, const uint8_t* pb, int64_t i, __m512* acc) {
        __m512i u[8];
        r8x2_quads<W>(pa, pb, u);
        const __m512 dw = r8x2_halves(pa, pb);
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) {
          const BlockQ8A& xb = x[c][i];
          __m512i s0 = _mm512_set1_epi32(-xb.sum * (1 << shift)), s1 = _mm512_setzero_si512();
          for (int q = 0; q < 8; q += 2) {
            s0 = dot_u8_bcast(s0, u[q], xb.qs + 4 * q);
            s1 = dot_u8_bcast(s1, u[q + 1], xb.qs + 4 * q + 4);
          }
          acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)),
                                   _mm512_mul_ps(dw, _mm512_set1_ps(xb.d)), acc[c]);
        }
      },
      [&](const uint8_t* ra, int64_t n, float* const* o) { r8_rows<W, NC>(nblk, ra, lda, n, x, o); });
}

// ---- Q4_K: 64 elements per vector (sub-blocks 2j and 2j + 1: low and high nibbles of 32 bytes) --

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
  __m512i pair_idx[4];  // lanes 0-7 -> scale 2j, lanes 8-15 -> scale 2j + 1
  for (int j = 0; j < 4; ++j)
    pair_idx[j] = _mm512_inserti64x4(_mm512_set1_epi32(2 * j), _mm256_set1_epi32(2 * j + 1), 1);
  for (int64_t r = 0; r < nr; ++r) {
    prefetch_stream(a + r * lda, lda);  // the row kStreamAheadBytes ahead (cpu_vec_dot.h)
    const auto* w = reinterpret_cast<const BlockQ4_K*>(a + r * lda);
    __m512 acc[NC];
    __m256 macc[NC];
    for (int c = 0; c < NC; ++c) {
      acc[c] = _mm512_setzero_ps();
      macc[c] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < nblk; ++i) {
      uint32_t u[4];
      q4_k_unpack_scales(w[i].scales, u);
      const __m128i sm = _mm_loadu_si128(reinterpret_cast<const __m128i*>(u));
      const __m512i sc32 = _mm512_zextsi256_si512(_mm256_cvtepu8_epi32(sm));  // sc[0..7]
      const __m256i m32 = _mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8));        // m[0..7]
      const __m256i mdup = _mm256_or_si256(m32, _mm256_slli_epi32(m32, 16));  // int16 pairs (m_j, m_j)
      __m512i S[4], Q[4];
      for (int j = 0; j < 4; ++j) {
        S[j] = _mm512_permutexvar_epi32(pair_idx[j], sc32);
        const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qs + 32 * j));
        Q[j] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_and_si256(q, low4)),
                                  _mm256_and_si256(_mm256_srli_epi16(q, 4), low4), 1);
      }
      const float d = half_to_f32(w[i].d), dmin = half_to_f32(w[i].dmin);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const BlockQ8KA& xb = x[c][i];
        __m512i isum = _mm512_setzero_si512();
        for (int j = 0; j < 4; ++j) {
          const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), Q[j], _mm512_loadu_si512(xb.qs + 64 * j));
          isum = _mm512_dpwssd_epi32(isum, p, S[j]);
        }
        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(d * xb.d), acc[c]);
        const __m256i mx = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.bsums)), mdup);
        macc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(mx), _mm256_set1_ps(dmin * xb.d), macc[c]);
      }
    }
    for (int c = 0; c < NC; ++c) out[c][r] = _mm512_reduce_add_ps(acc[c]) - hsum256(macc[c]);
  }
}

// The 8-row (256-bit) and two-group (512-bit) Q4_K kernels share their dot steps (simd_width.h's
// operations): VI holds the rows' int32 lanes, VF their floats.

// bacc[c] += (column c's dots with sub-block 2cc's quads lo and 2cc + 1's quads hi) * their d * sc
template <int NC, class VI, class VF>
inline void q4k_r8_dots(const VI (&lo)[8], const VI (&hi)[8], Cols<BlockQ8KA> x, int64_t i, int cc, const VF* scf,
                        VF* bacc) {
#pragma GCC unroll 8
  for (int c = 0; c < NC; ++c) {
    const int8_t* xq = x[c][i].qs + 64 * cc;
    VI sl0{}, sl1{}, sh0{}, sh1{};  // zero
    for (int q = 0; q < 8; q += 2) {
      sl0 = dot_u8_bcast(sl0, lo[q], xq + 4 * q);
      sl1 = dot_u8_bcast(sl1, lo[q + 1], xq + 4 * q + 4);
      sh0 = dot_u8_bcast(sh0, hi[q], xq + 32 + 4 * q);
      sh1 = dot_u8_bcast(sh1, hi[q + 1], xq + 36 + 4 * q);
    }
    bacc[c] = fmadd(to_f(add32(sl0, sl1)), scf[2 * cc], bacc[c]);
    bacc[c] = fmadd(to_f(add32(sh0, sh1)), scf[2 * cc + 1], bacc[c]);
  }
}
// The end of a group block: acc[c] += x.d * (bacc[c] - dmin * sum_j m_j * (x's sum over sub-block
// j)), mp[j] the rows' (m_j, m_j) pairs.
template <int NC, class VI, class VF>
inline void q4k_r8_finish(const VI (&mp)[8], VF dmin, Cols<BlockQ8KA> x, int64_t i, const VF* bacc, VF* acc) {
#pragma GCC unroll 8
  for (int c = 0; c < NC; ++c) {
    const BlockQ8KA& xb = x[c][i];
    VI msum{};  // zero
    for (int j = 0; j < 8; ++j) msum = dot_i16_bcast(msum, mp[j], xb.bsums + 2 * j);
    const VF blk = fnmadd(to_f(msum), dmin, bacc[c]);
    acc[c] = fmadd(blk, Vx<VI>::setf(xb.d), acc[c]);
  }
}

// ---- Q4_K repacked in groups of 8 rows (cpu_repack.h) -----------------------------------------
// Per group block the 8 rows' (sc, m) come out of their 96 bytes for all rows at once; per
// 32-value sub-block 8 vpdpbusd of 8 rows x 4 nibbles, then one convert and FMA by d * sc (the
// GGUF-row kernel above spends ~60 operations per row and block, this one ~30). The mins term
// sum_j m_j * (x's sum over sub-block j) is integer: vpdpwssd of (m_j, m_j) by x's two 16-value
// sums.

template <int NC>
void q4_k_r8_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, Cols<BlockQ8KA> x, float* const* out) {
  r8_groups<BlockQ4_K, NC>(nblk, a, lda, nr, out, [&](const uint8_t* p, int64_t i, __m256* acc) {
    Q4kR8Scales sm;
    q4k_r8_scales(p, sm);
    // d * sc; the high nibbles' sums come 16 times over (taken in place), their scales / 16
    const __m256 d16 = _mm256_mul_ps(sm.d, _mm256_set1_ps(1.0f / 16));
    __m256 scf[8];
    for (int j = 0; j < 8; ++j)
      scf[j] = _mm256_mul_ps(j % 2 ? d16 : sm.d, _mm256_cvtepi32_ps(_mm256_srli_epi32(sm.sc[j], 16)));
    __m256 bacc[NC];
    for (int c = 0; c < NC; ++c) bacc[c] = _mm256_setzero_ps();
    const uint8_t* qs = p + kQ4kRepackQuads;
    for (int cc = 0; cc < 4; ++cc) {  // sub-blocks 2cc (low nibbles) and 2cc + 1 (high)
      __m256i lo[8], hi[8];
      q4k_r8_nibbles<true>(qs, cc, lo, hi);
      q4k_r8_dots<NC>(lo, hi, x, i, cc, scf, bacc);
    }
    q4k_r8_finish<NC>(sm.m, sm.dmin, x, i, bacc, acc);
  });
}

// Q4_K on two groups: the scales moved to row lanes as in q4k_r8_scales, in each 256-bit half.
template <int NC>
void q4_k_r8x2_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, Cols<BlockQ8KA> x, float* const* out) {
  const __m512i low4 = _mm512_set1_epi8(15), hi2 = _mm512_set1_epi8(0x30);
  const __m512i perm = _mm512_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
  const __m512i tr = _mm512_broadcast_i32x4(_mm_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15));
  __m512i one[4], pair[4];  // byte b of each lane as its int32 / into both its int16s
  for (int b = 0; b < 4; ++b) {
    one[b] = _mm512_broadcast_i32x4(_mm_setr_epi8(b, -1, -1, -1, b + 4, -1, -1, -1, b + 8, -1, -1, -1, b + 12, -1, -1, -1));
    pair[b] = _mm512_broadcast_i32x4(_mm_setr_epi8(b, -1, b, -1, b + 4, -1, b + 4, -1, b + 8, -1, b + 8, -1, b + 12, -1, b + 12, -1));
  }
  r8x2_groups<BlockQ4_K, NC>(
      nblk, a, lda, nr, out,
      [&](const uint8_t* pa, const uint8_t* pb, int64_t i, __m512* acc) {
        const __m512 d = r8x2_halves(pa, pb), dmin = r8x2_halves(pa + 16, pb + 16);
        auto rows = [&](size_t off) {
          return _mm512_shuffle_epi8(_mm512_permutexvar_epi32(perm, r8x2_load(pa + off, pb + off)), tr);
        };
        const __m512i lo0 = rows(kQ4kRepackScaleLo), lo1 = rows(kQ4kRepackScaleLo + 32), hi = rows(kQ4kRepackScaleHi);
        const __m512i sc[2] = {
            _mm512_or_si512(_mm512_and_si512(lo0, low4), _mm512_and_si512(_mm512_slli_epi16(hi, 4), hi2)),
            _mm512_or_si512(_mm512_and_si512(lo1, low4), _mm512_and_si512(hi, hi2))};
        const __m512i mn[2] = {_mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(lo0, 4), low4),
                                               _mm512_and_si512(_mm512_slli_epi16(hi, 2), hi2)),
                               _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(lo1, 4), low4),
                                               _mm512_and_si512(_mm512_srli_epi16(hi, 2), hi2))};
        __m512 scf[8];  // d * sc (/ 16 for the high nibbles, taken in place as in q4_k_r8_rows)
        __m512i mp[8];  // (m, m)
        const __m512 d16 = _mm512_mul_ps(d, _mm512_set1_ps(1.0f / 16));
        for (int j = 0; j < 8; ++j) {
          scf[j] = _mm512_mul_ps(j % 2 ? d16 : d, _mm512_cvtepi32_ps(_mm512_shuffle_epi8(sc[j / 4], one[j % 4])));
          mp[j] = _mm512_shuffle_epi8(mn[j / 4], pair[j % 4]);
        }
        __m512 bacc[NC];
        for (int c = 0; c < NC; ++c) bacc[c] = _mm512_setzero_ps();
        for (int cc = 0; cc < 4; ++cc) {  // sub-blocks 2cc (low nibbles) and 2cc + 1 (high)
          __m512i lq[8], hq[8];
          for (int q = 0; q < 8; ++q) {
            const size_t at = kQ4kRepackQuads + 32 * (8 * cc + q);
            const __m512i v = r8x2_load(pa + at, pb + at);
            lq[q] = _mm512_and_si512(v, low4);
            hq[q] = _mm512_andnot_si512(low4, v);
          }
          q4k_r8_dots<NC>(lq, hq, x, i, cc, scf, bacc);
        }
        q4k_r8_finish<NC>(mp, dmin, x, i, bacc, acc);
      },
      [&](const uint8_t* ra, int64_t n, float* const* o) { q4_k_r8_rows<NC>(nblk, ra, lda, n, x, o); });
}

// ---- Q6_K: q = 4 low bits (ql) | 2 high bits (qh) << 4, minus 32; 16 int8 scales of 16 -------

template <int NC>
void q6_k_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, Cols<BlockQ8KA> x, float* const* out) {
  const __m512i low4 = _mm512_set1_epi8(15), low2 = _mm512_set1_epi8(3);
  // qh bit pairs: quarters 0/1 of a half take shifts 0/2, quarters 2/3 take 4/6
  const __m512i sh01 = _mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1);
  const __m512i sh23 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
  __m512i group_idx[4];  // vector j holds groups 4j .. 4j + 3, four lanes each
  for (int j = 0; j < 4; ++j)
    group_idx[j] = _mm512_setr_epi32(4 * j, 4 * j, 4 * j, 4 * j, 4 * j + 1, 4 * j + 1, 4 * j + 1, 4 * j + 1, 4 * j + 2,
                                     4 * j + 2, 4 * j + 2, 4 * j + 2, 4 * j + 3, 4 * j + 3, 4 * j + 3, 4 * j + 3);
  for (int64_t r = 0; r < nr; ++r) {
    prefetch_stream(a + r * lda, lda);  // the row kStreamAheadBytes ahead (cpu_vec_dot.h)
    const auto* w = reinterpret_cast<const BlockQ6_K*>(a + r * lda);
    __m512 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nblk; ++i) {
      const __m128i sc8 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(w[i].scales));
      // int16 scale in the low half of each lane, zero high half (vpdpwssd pairs)
      const __m512i sc32 = _mm512_and_si512(_mm512_cvtepi8_epi32(sc8), _mm512_set1_epi32(0xffff));
      const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
      __m512i S[4], Q[4];
      for (int h = 0; h < 2; ++h) {  // half h: elements 128h .. 128h + 127
        const __m512i ql = _mm512_loadu_si512(w[i].ql + 64 * h);
        const __m512i qh =
            _mm512_broadcast_i64x4(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(w[i].qh + 32 * h)));
        const __m512i hi01 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh01), low2), 4);
        const __m512i hi23 = _mm512_slli_epi16(_mm512_and_si512(_mm512_srlv_epi16(qh, sh23), low2), 4);
        Q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, low4), hi01);
        Q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), hi23);
      }
      for (int j = 0; j < 4; ++j) S[j] = _mm512_permutexvar_epi32(group_idx[j], sc32);
      const float d = half_to_f32(w[i].d);
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const BlockQ8KA& xb = x[c][i];
        __m512i isum = _mm512_setzero_si512();
        for (int j = 0; j < 4; ++j) {
          const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), Q[j], _mm512_loadu_si512(xb.qs + 64 * j));
          isum = _mm512_dpwssd_epi32(isum, p, S[j]);
        }
        // - 32 sum_g sc_g bsums_g
        const __m256i off = _mm256_madd_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(xb.bsums)), sc16);
        isum = _mm512_sub_epi32(isum, _mm512_zextsi256_si512(_mm256_slli_epi32(off, 5)));
        acc[c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_set1_ps(d * xb.d), acc[c]);
      }
    }
    for (int c = 0; c < NC; ++c) out[c][r] = _mm512_reduce_add_ps(acc[c]);
  }
}

// ---- Q6_K repacked in groups of 8 rows (cpu_repack.h) -----------------------------------------
// Per half h and quad lq, three 32-byte loads (ql for k = 0, 2 and for k = 1, 3; qh) give the
// unsigned q (0..63) of 8 rows x 4 values of each 32-value block k; per 16-value sub-block 4
// vpdpbusd, one convert and FMA by d * sc (the GGUF-row kernel permutes the scales and reduces
// per row, on 512-bit vectors Zen 4 runs at half rate). The -32 offset, 32 sum sc * (x's 16-value
// sums), by vpdpwssd of the rows' scale pairs.

template <int NC>
void q6_k_r8_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, Cols<BlockQ8KA> x, float* const* out) {
  r8_groups<BlockQ6_K, NC>(nblk, a, lda, nr, out, [&](const uint8_t* p, int64_t i, __m256* acc) {
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    // d * sc of sub-block 2t + half, made where it is used: the 16 held across the loops (with
    // the 8 scale pairs) left too few registers, and GCC kept the loops rolled
    auto scf = [&](int t, int half) {
      const __m256i pair = q6k_r8_scale_pairs(p, t);
      return _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_srai_epi32(half ? pair : _mm256_slli_epi32(pair, 16), 16)));
    };
    __m256 bacc[NC];
    for (int c = 0; c < NC; ++c) bacc[c] = _mm256_setzero_ps();
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h)
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {  // quads 4 half .. 4 half + 3: sub-blocks 8h + 2k + half
        __m256i s[NC][4];
        for (int c = 0; c < NC; ++c)
          for (int k = 0; k < 4; ++k) s[c][k] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int l4 = 0; l4 < 4; ++l4) {
          const int lq = 4 * half + l4;
          __m256i u[4];
          q6k_r8_step(p, h, lq, u);
#pragma GCC unroll 8
          for (int c = 0; c < NC; ++c) {
            const int8_t* xq = x[c][i].qs + 128 * h + 4 * lq;
            for (int k = 0; k < 4; ++k) s[c][k] = dot_u8_bcast(s[c][k], u[k], xq + 32 * k);
          }
        }
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
          const __m256 sc = scf(4 * h + k, half);
          for (int c = 0; c < NC; ++c) bacc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[c][k]), sc, bacc[c]);
        }
      }
    __m256i pairs[8];  // (sc 2t, sc 2t + 1) as int16 per row
    for (int t = 0; t < 8; ++t) pairs[t] = q6k_r8_scale_pairs(p, t);
    const __m256 d32 = _mm256_mul_ps(d, _mm256_set1_ps(32.0f));
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      const BlockQ8KA& xb = x[c][i];
      __m256i osum = _mm256_setzero_si256();
      for (int t = 0; t < 8; ++t) osum = dot_i16_bcast(osum, pairs[t], xb.bsums + 2 * t);
      const __m256 blk = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(osum), d32, bacc[c]);
      acc[c] = _mm256_fmadd_ps(blk, _mm256_set1_ps(xb.d), acc[c]);
    }
  });
}

// nc-column dispatch of a kernel template kernel<[W, ]NC>(nblk, a, lda, nr, x, out)
#define LOOM_DISPATCH_NC(X, block, kernel, ...)    \
  const int64_t nblk = K / (block);                \
  const auto* pa = static_cast<const uint8_t*>(a); \
  const auto x = reinterpret_cast<Cols<X>>(b);     \
  with_count<kMaxDotCols>(nc, [&]<int NC>() { kernel<__VA_ARGS__ __VA_OPT__(, ) NC>(nblk, pa, lda, nr, x, out); });

}  // namespace

void rows_dot_q8_0_avx512(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                          float* const* out) {
  LOOM_DISPATCH_NC(BlockQ8A, 32, q8_rows, BlockQ8_0)
}
void rows_dot_q4_0_avx512(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                          float* const* out) {
  LOOM_DISPATCH_NC(BlockQ8A, 32, q8_rows, BlockQ4_0)
}
void rows_dot_q8_0_r8_avx512(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                             float* const* out) {
  LOOM_DISPATCH_NC(BlockQ8A, 32, r8_rows, BlockQ8_0)
}
void rows_dot_q4_0_r8_avx512(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                             float* const* out) {
  LOOM_DISPATCH_NC(BlockQ8A, 32, r8_rows, BlockQ4_0)
}
void rows_dot_q4_k_avx512(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                          float* const* out) {
  LOOM_DISPATCH_NC(BlockQ8KA, 256, q4_k_rows)
}
void rows_dot_q4_k_r8_avx512(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                             float* const* out) {
  LOOM_DISPATCH_NC(BlockQ8KA, 256, q4_k_r8_rows)
}
void rows_dot_q6_k_r8_avx512(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                             float* const* out) {
  LOOM_DISPATCH_NC(BlockQ8KA, 256, q6_k_r8_rows)
}
void rows_dot_q6_k_avx512(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                          float* const* out) {
  LOOM_DISPATCH_NC(BlockQ8KA, 256, q6_k_rows)
}
namespace {
// Weights repacked in pairs (cpu_repack.h).
void rows_dot_q8_0_pairs(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                         float* const* out) {
  LOOM_DISPATCH_NC(BlockQ8A, 32, r8x2_rows, BlockQ8_0)
}
void rows_dot_q4_0_pairs(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                         float* const* out) {
  LOOM_DISPATCH_NC(BlockQ8A, 32, r8x2_rows, BlockQ4_0)
}
void rows_dot_q4_k_pairs(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                         float* const* out) {
  LOOM_DISPATCH_NC(BlockQ8KA, 256, q4_k_r8x2_rows)
}
}  // namespace
#undef LOOM_DISPATCH_NC

RowsDotFn rows_dot_pairs_avx512(DType type) {
  switch (type) {
    case DType::Q8_0:
      return rows_dot_q8_0_pairs;
    case DType::Q4_0:
      return rows_dot_q4_0_pairs;
    case DType::Q4_K:
      return rows_dot_q4_k_pairs;
    default:
      return rows_dot_pairs_more_avx512(type);
  }
}

// ---- column quantizers (bit-exact with quantize_q8 / quantize_q8k) ---------------------------

// x[0, K) -> K / 32 BlockQ8A
void quantize_q8_avx512(const float* x, void* dst, int64_t K) {
  auto* y = static_cast<BlockQ8A*>(dst);
  for (int64_t i = 0; i < K / 32; ++i) {
    const __m512 x0 = _mm512_loadu_ps(x + 32 * i), x1 = _mm512_loadu_ps(x + 32 * i + 16);
    const float amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(x0), _mm512_abs_ps(x1)));
    const float d = amax / 127.0f;
    const __m512 id = _mm512_set1_ps(amax > 0.0f ? 1.0f / d : 0.0f);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(x0, id)), q1 = _mm512_cvtps_epi32(_mm512_mul_ps(x1, id));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs + 16), _mm512_cvtsepi32_epi8(q1));
    y[i].d = q8_scale(d);
    y[i].sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
  }
}

// x[0, K) -> K / 256 BlockQ8KA
void quantize_q8k_avx512(const float* x, void* dst, int64_t K) {
  auto* y = static_cast<BlockQ8KA*>(dst);
  for (int64_t i = 0; i < K / 256; ++i) {
    const float* xb = x + 256 * i;
    __m512 m = _mm512_setzero_ps();
    for (int g = 0; g < 16; ++g) m = _mm512_max_ps(m, _mm512_abs_ps(_mm512_loadu_ps(xb + 16 * g)));
    const float amax = _mm512_reduce_max_ps(m);
    const __m512 id = _mm512_set1_ps(amax > 0.0f ? 127.0f / amax : 0.0f);
    for (int g = 0; g < 16; ++g) {
      const __m512i q = _mm512_cvtps_epi32(_mm512_mul_ps(_mm512_loadu_ps(xb + 16 * g), id));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y[i].qs + 16 * g), _mm512_cvtsepi32_epi8(q));
      y[i].bsums[g] = (int16_t)_mm512_reduce_add_epi32(q);
    }
    y[i].d = amax / 127.0f;
  }
}

}  // namespace loom::cpu

#pragma GCC pop_options

#pragma GCC diagnostic pop
