// Repacked-row kernels (cpu_repack.h's field layouts: 8 rows per group) of Q5_K, Q3_K, Q2_K,
// IQ4_XS, Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4. Included by simd_avx2_q_more.cpp and
// simd_avx512_q_more.cpp under their target pragmas after defining LOOM_R8_VNNI (1: vpdpbusd /
// vpdpwssd; 0: vpmaddubsw / vpmaddwd); LOOM_DEFINE_ROWS_DOT_R8_MORE(level) defines the level's
// entry points. The readable reference is rows_dot_r8_ref (each group unpacked, then the scalar
// GGUF-row dots of simd_ref_q.h).
//   A 32-byte load of a field holds the same word of all 8 rows, one per 32-bit lane: scales
//   decode lane-wise for 8 rows at once, and a quad (8 rows x 4 levels) times 4 broadcast
//   activation bytes adds into each row's lane, so the 8 results come out without horizontal
//   sums. Sub-block sums are exact integers; one convert and FMA by d * scale per sub-block.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "cpu_repack.h"
#include "cpu_vec_dot.h"
#include "loom/core/quants.h"
#include "simd_q_more.h"  // MoreCols, mload
#include "simd_r8.h"

namespace loom::cpu {
namespace {

// 8 rows' fp16 field -> floats
inline __m256 r8_halves(const uint8_t* p) {
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// byte b of each row's word, as int32
inline __m256i r8_byte(__m256i w, int b) {
  return _mm256_and_si256(_mm256_srli_epi32(w, 8 * b), _mm256_set1_epi32(255));
}
// bit s of every byte moved to bit `to` of the same byte, other bits cleared (the 32-bit shifts
// carry bits across bytes, the mask keeps each byte's own)
inline __m256i r8_bit(__m256i v, int s, int to) {
  const __m256i moved = s <= to ? _mm256_slli_epi32(v, to - s) : _mm256_srli_epi32(v, s - to);
  return _mm256_and_si256(moved, _mm256_set1_epi8((char)(1 << to)));
}
// int32 lanes (int16 range) -> the int16 pair (a, b) per lane
inline __m256i r8_pair(__m256i a, __m256i b) {
  return _mm256_or_si256(_mm256_and_si256(a, _mm256_set1_epi32(0xffff)), _mm256_slli_epi32(b, 16));
}
// acc + the int16 pairs of a times those of b, per 32-bit lane
inline __m256i r8_pair_sums(__m256i acc, __m256i a, __m256i b) {
#if LOOM_R8_VNNI
  return _mm256_dpwssd_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}

// sum_{t < NQ} u[t] . x[4t, 4t + 4) per row lane, u unsigned bytes <= kMax. Without VNNI the
// vpmaddubsw pair sums add up in 16 bits over as many quads as cannot overflow.
template <int NQ, int kMax>
inline __m256i r8_quad_sums(const __m256i* u, const int8_t* x) {
#if LOOM_R8_VNNI
  __m256i s0 = _mm256_setzero_si256(), s1 = s0;
  for (int t = 0; t + 1 < NQ; t += 2) {
    s0 = _mm256_dpbusd_epi32(s0, u[t], bcast32(x + 4 * t));
    s1 = _mm256_dpbusd_epi32(s1, u[t + 1], bcast32(x + 4 * t + 4));
  }
  if constexpr (NQ % 2 != 0) s0 = _mm256_dpbusd_epi32(s0, u[NQ - 1], bcast32(x + 4 * (NQ - 1)));
  return _mm256_add_epi32(s0, s1);
#else
  constexpr int kChunk = 32767 / (2 * 128 * kMax);
  static_assert(kChunk >= 1);
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i s = _mm256_setzero_si256();
  for (int t0 = 0; t0 < NQ; t0 += kChunk) {
    __m256i p = _mm256_maddubs_epi16(u[t0], bcast32(x + 4 * t0));
    for (int t = t0 + 1; t < t0 + kChunk && t < NQ; ++t)
      p = _mm256_add_epi16(p, _mm256_maddubs_epi16(u[t], bcast32(x + 4 * t)));
    s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
  }
  return s;
#endif
}

// The IQ4 grid (kIq4nlValues, -127..113) as bytes: with VNNI shifted by kGridBias to unsigned
// (the caller subtracts kGridBias * sum x); without, signed (|v| . sign(x, v) per quad, as a
// shifted byte times x could overflow vpmaddubsw's 16-bit pairs).
inline constexpr int kGridBias = LOOM_R8_VNNI ? 128 : 0;
inline __m256i r8_iq4_table() {
  alignas(16) int8_t t[16];
  for (int k = 0; k < 16; ++k) t[k] = (int8_t)(kIq4nlValues[k] + kGridBias);
  const __m128i g = _mm_load_si128(reinterpret_cast<const __m128i*>(t));
  return _mm256_set_m128i(g, g);
}
template <int NQ>
inline __m256i r8_grid_sums(const __m256i* v, const int8_t* x) {
#if LOOM_R8_VNNI
  return r8_quad_sums<NQ, 255>(v, x);
#else
  const __m256i ones = _mm256_set1_epi16(1);
  __m256i s = _mm256_setzero_si256();
  for (int t = 0; t < NQ; ++t) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_abs_epi8(v[t]), _mm256_sign_epi8(bcast32(x + 4 * t), v[t]));
    s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
  }
  return s;
#endif
}

// The end of a 256-value group block: per column acc += x.d * (bacc - off * sum_t pairs[t] .
// (x's 16-value sums 2t, 2t + 1)), the integer offset or mins term of the block.
template <int NC>
inline void r8_finish_k(const __m256i (&pairs)[8], __m256 off, MoreCols<BlockQ8KA> x, int64_t i, const __m256* bacc,
                        __m256* acc) {
#pragma GCC unroll 8
  for (int c = 0; c < NC; ++c) {
    const BlockQ8KA& xb = x[c][i];
    __m256i osum = _mm256_setzero_si256();
    for (int t = 0; t < 8; ++t) osum = r8_pair_sums(osum, pairs[t], bcast32(xb.bsums + 2 * t));
    acc[c] = _mm256_fmadd_ps(_mm256_fnmadd_ps(_mm256_cvtepi32_ps(osum), off, bacc[c]), _mm256_set1_ps(xb.d), acc[c]);
  }
}

// ---- Q5_K: Q4_K's 6-bit (sc, m) and nibbles, the fifth bit from qh ------------------------------
// Quad q of qs (sub-blocks 2(q / 8) and 2(q / 8) + 1) shares bytes with qh quad q % 8.

template <int NC>
void q5_k_r8_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, MoreCols<BlockQ8KA> x, float* const* out) {
  constexpr size_t kScales = r8_field(kQ5KFields, 2), kQh = r8_field(kQ5KFields, 3), kQs = r8_field(kQ5KFields, 4);
  const __m256i lo6 = _mm256_set1_epi8(0x3f), lo4 = _mm256_set1_epi8(15), lo2 = _mm256_set1_epi8(3);
  r8_groups<BlockQ5_K, NC>(nblk, a, lda, nr, out, [&](const uint8_t* p, int64_t i, __m256* acc) {
    const __m256 d = r8_halves(p), dmin = r8_halves(p + 16);
    // q4_k_scale_min lane-wise: scales words 0-2 -> sc 0-3, 4-7 and m 0-3, 4-7 as bytes
    const __m256i a0 = mload(p + kScales), a1 = mload(p + kScales + 32), a2 = mload(p + kScales + 64);
    const __m256i sc[2] = {_mm256_and_si256(a0, lo6), _mm256_or_si256(_mm256_and_si256(a2, lo4),
                                                                      _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(a0, 6), lo2), 4))};
    const __m256i mn[2] = {_mm256_and_si256(a1, lo6),
                           _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(a2, 4), lo4),
                                           _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(a1, 6), lo2), 4))};
    __m256 scf[8];   // d * sc
    __m256i mp[8];   // (m, m)
    for (int j = 0; j < 8; ++j) {
      scf[j] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(r8_byte(sc[j / 4], j % 4)));
      const __m256i m = r8_byte(mn[j / 4], j % 4);
      mp[j] = _mm256_or_si256(m, _mm256_slli_epi32(m, 16));
    }
    __m256 bacc[NC];
    for (int c = 0; c < NC; ++c) bacc[c] = _mm256_setzero_ps();
    for (int jj = 0; jj < 4; ++jj) {  // sub-blocks 2jj (low nibbles) and 2jj + 1 (high)
      __m256i lo[8], hi[8];
      for (int q = 0; q < 8; ++q) {
        const __m256i v = mload(p + kQs + 32 * (8 * jj + q)), h = mload(p + kQh + 32 * q);
        lo[q] = _mm256_or_si256(_mm256_and_si256(v, lo4), r8_bit(h, 2 * jj, 4));
        hi[q] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(v, 4), lo4), r8_bit(h, 2 * jj + 1, 4));
      }
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const int8_t* xq = x[c][i].qs + 64 * jj;
        bacc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(r8_quad_sums<8, 31>(lo, xq)), scf[2 * jj], bacc[c]);
        bacc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(r8_quad_sums<8, 31>(hi, xq + 32)), scf[2 * jj + 1], bacc[c]);
      }
    }
    r8_finish_k<NC>(mp, dmin, x, i, bacc, acc);
  });
}

// ---- Q3_K and Q2_K: 2-bit levels (bits 2k of qs[32h + l]), 16-value groups --------------------
// Element 128h + 32k + l: quad q = 8h + l / 4, group g = 8h + 2k + l / 16. A group's sum (4
// quads) fits 16 bits, so the two groups of each (h, k) go into one int16 pair per row and one
// vpdpwssd by their scale pair applies both scales exactly: the block stays integer to its end.
// The offsets (Q3_K: -4 sc_g per x, Q2_K: -m_g dmin per x) are the scale or min pairs times x's
// 16-value sums.

// isum[c] = sum_g sc_g * (group g's sum) over a Q2_K / Q3_K group block: qs the 2-bit quads, hmask
// (Q3_K) the third bits' quads or nullptr (Q2_K), scp[t] the (sc 2t, sc 2t + 1) int16 pairs.
template <int NC, int kMax>
inline void r8_groups16(const uint8_t* qs, const uint8_t* hmask, const __m256i (&scp)[8], MoreCols<BlockQ8KA> x,
                        int64_t i, __m256i* isum) {
  const __m256i lo2 = _mm256_set1_epi8(3);
  for (int c = 0; c < NC; ++c) isum[c] = _mm256_setzero_si256();
  // Unrolled whole, so every shift count is an immediate and qv / hm stay in registers (left as
  // loops, GCC kept them on the stack and shifted by counts in registers: Q3_K at 60% the speed).
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    __m256i qv[8], hm[8];
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t) {
      qv[t] = mload(qs + 32 * (8 * h + t));
      if (hmask) hm[t] = mload(hmask + 32 * t);
    }
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      __m256i s[2][NC];
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {  // group 8h + 2k + half: quads 4 half .. 4 half + 3
        // With VNNI, Q2_K's fields are masked where they lie (4^k q, the exact sums shifted back
        // after): one operation per quad instead of two, its kernel 7% faster. Without VNNI the
        // 16-bit pair sums cannot take 4^k q; Q3_K's third bit gains nothing from it.
        const bool in_place = LOOM_R8_VNNI && !hmask;
        __m256i u[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) {
          if (in_place) {
            u[t] = _mm256_and_si256(qv[4 * half + t], _mm256_set1_epi8((char)(3 << (2 * k))));
            continue;
          }
          u[t] = _mm256_and_si256(_mm256_srli_epi16(qv[4 * half + t], 2 * k), lo2);
          if (hmask) u[t] = _mm256_or_si256(u[t], r8_bit(hm[4 * half + t], 4 * h + k, 2));
        }
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) {
          s[half][c] = r8_quad_sums<4, kMax>(u, x[c][i].qs + 128 * h + 32 * k + 16 * half);
          if (in_place) s[half][c] = _mm256_srai_epi32(s[half][c], 2 * k);
        }
      }
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c)
        isum[c] = r8_pair_sums(isum[c], _mm256_blend_epi16(s[0][c], _mm256_slli_epi32(s[1][c], 16), 0xaa),
                               scp[4 * h + k]);
    }
  }
}

// Q3_K: q = q2 | hmask bit << 2 (0..7), x = d (sc - 32) (q - 4), sc 6 bits (q3_k_scale).
template <int NC>
void q3_k_r8_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, MoreCols<BlockQ8KA> x, float* const* out) {
  constexpr size_t kScales = r8_field(kQ3KFields, 1), kHmask = r8_field(kQ3KFields, 2), kQs = r8_field(kQ3KFields, 3);
  const __m256i lo4 = _mm256_set1_epi8(15), lo2 = _mm256_set1_epi8(3), bias = _mm256_set1_epi32(32);
  r8_groups<BlockQ3_K, NC>(nblk, a, lda, nr, out, [&](const uint8_t* p, int64_t i, __m256* acc) {
    const __m256 d = r8_halves(p);
    // scales words 0-2 -> the 16 scales as bytes of v[g / 4] (q3_k_scale lane-wise)
    const __m256i a0 = mload(p + kScales), a1 = mload(p + kScales + 32), a2 = mload(p + kScales + 64);
    auto hi2 = [&](int s) { return _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(a2, s), lo2), 4); };
    const __m256i v[4] = {_mm256_or_si256(_mm256_and_si256(a0, lo4), hi2(0)),
                          _mm256_or_si256(_mm256_and_si256(a1, lo4), hi2(2)),
                          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(a0, 4), lo4), hi2(4)),
                          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(a1, 4), lo4), hi2(6))};
    __m256i pairs[8];  // (sc 2t - 32, sc 2t + 1 - 32)
    for (int t = 0; t < 8; ++t)
      pairs[t] = r8_pair(_mm256_sub_epi32(r8_byte(v[t / 2], 2 * (t % 2)), bias),
                         _mm256_sub_epi32(r8_byte(v[t / 2], 2 * (t % 2) + 1), bias));
    __m256i isum[NC];
    r8_groups16<NC, 7>(p + kQs, p + kHmask, pairs, x, i, isum);
    __m256 bacc[NC];
    for (int c = 0; c < NC; ++c) bacc[c] = _mm256_mul_ps(_mm256_cvtepi32_ps(isum[c]), d);
    r8_finish_k<NC>(pairs, _mm256_mul_ps(d, _mm256_set1_ps(4.0f)), x, i, bacc, acc);
  });
}

// Q2_K: x = d (sc_g & 15) q - dmin (sc_g >> 4), q 0..3.
template <int NC>
void q2_k_r8_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, MoreCols<BlockQ8KA> x, float* const* out) {
  constexpr size_t kScales = r8_field(kQ2KFields, 2), kQs = r8_field(kQ2KFields, 3);
  const __m256i lo4 = _mm256_set1_epi32(15), hi4 = _mm256_set1_epi32(0xf0000);
  r8_groups<BlockQ2_K, NC>(nblk, a, lda, nr, out, [&](const uint8_t* p, int64_t i, __m256* acc) {
    const __m256 d = r8_halves(p), dmin = r8_halves(p + 16);
    __m256i sp[8], mp[8];  // (sc 2t & 15, sc 2t + 1 & 15), (their high nibbles)
    for (int w = 0; w < 4; ++w) {  // scales bytes 4w .. 4w + 3
      const __m256i sw = mload(p + kScales + 32 * w);
      for (int e = 0; e < 2; ++e) {  // bytes 2e, 2e + 1
        const __m256i s = _mm256_srli_epi32(sw, 16 * e), m = _mm256_srli_epi32(s, 4);
        sp[2 * w + e] = _mm256_or_si256(_mm256_and_si256(s, lo4), _mm256_and_si256(_mm256_slli_epi32(s, 8), hi4));
        mp[2 * w + e] = _mm256_or_si256(_mm256_and_si256(m, lo4), _mm256_and_si256(_mm256_slli_epi32(m, 8), hi4));
      }
    }
    __m256i isum[NC];
    r8_groups16<NC, 3>(p + kQs, nullptr, sp, x, i, isum);
    __m256 bacc[NC];
    for (int c = 0; c < NC; ++c) bacc[c] = _mm256_mul_ps(_mm256_cvtepi32_ps(isum[c]), d);
    r8_finish_k<NC>(mp, dmin, x, i, bacc, acc);
  });
}

// ---- IQ4_XS: per 32-value sub-block j the IQ4_NL grid times (ls_j - 32) ---------------------------
// Quads 4j .. 4j + 3: low nibbles elements 32j + 4t, high ones 32j + 16 + 4t.

template <int NC>
void iq4_xs_r8_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, MoreCols<BlockQ8KA> x, float* const* out) {
  constexpr size_t kSh = r8_field(kIq4XsFields, 1), kSl = r8_field(kIq4XsFields, 2), kQs = r8_field(kIq4XsFields, 3);
  const __m256i lo4 = _mm256_set1_epi8(15), table = r8_iq4_table();
  r8_groups<BlockIQ4_XS, NC>(nblk, a, lda, nr, out, [&](const uint8_t* p, int64_t i, __m256* acc) {
    const __m256 d = r8_halves(p);
    const __m256i sh = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + kSh)));
    const __m256i sl = mload(p + kSl);
    __m256 scf[8];   // d * (ls - 32)
    __m256i sp[8];   // (ls - 32, ls - 32)
    for (int j = 0; j < 8; ++j) {
      const __m256i ls = _mm256_or_si256(
          _mm256_and_si256(_mm256_srli_epi32(sl, 4 * j), _mm256_set1_epi32(15)),
          _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(sh, 2 * j), _mm256_set1_epi32(3)), 4));
      const __m256i sc = _mm256_sub_epi32(ls, _mm256_set1_epi32(32));
      scf[j] = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc));
      sp[j] = r8_pair(sc, sc);
    }
    __m256 bacc[NC];
    for (int c = 0; c < NC; ++c) bacc[c] = _mm256_setzero_ps();
    for (int j = 0; j < 8; ++j) {
      __m256i v[8];
      for (int t = 0; t < 4; ++t) {
        const __m256i w = mload(p + kQs + 32 * (4 * j + t));
        v[t] = _mm256_shuffle_epi8(table, _mm256_and_si256(w, lo4));
        v[4 + t] = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(w, 4), lo4));
      }
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c)
        bacc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(r8_grid_sums<8>(v, x[c][i].qs + 32 * j)), scf[j], bacc[c]);
    }
    // - bias * sum_j sc_j * (x's sum over sub-block j); without VNNI bias is 0 and sp unused
    r8_finish_k<NC>(sp, _mm256_mul_ps(d, _mm256_set1_ps((float)kGridBias)), x, i, bacc, acc);
  });
}

// ---- 32-value blocks: Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 --------------------------------------------
// A type's levels(p, u) gives the block's 8 quads (4 of low nibbles: elements 4t, then 4 of high
// ones: 16 + 4t) as bytes the dot takes (kGrid: r8_grid_sums, else unsigned <= kMax), x = d (u -
// offset) [+ m], and scale(p) / min(p) the 8 rows' d and m.

inline void r8_nibbles(const uint8_t* qs, __m256i (&u)[8]) {
  const __m256i lo4 = _mm256_set1_epi8(15);
  for (int t = 0; t < 4; ++t) {
    const __m256i v = mload(qs + 32 * t);
    u[t] = _mm256_and_si256(v, lo4);
    u[4 + t] = _mm256_and_si256(_mm256_srli_epi16(v, 4), lo4);
  }
}
// Q5_0 / Q5_1: the fifth bits from the bit-transposed qh word (byte t bit b: element 4b + t)
inline void r8_fifth_bits(const uint8_t* qh, __m256i (&u)[8]) {
  const __m256i h = mload(qh);
  for (int b = 0; b < 8; ++b) u[b] = _mm256_or_si256(u[b], r8_bit(h, b, 4));
}

struct R8Q4_1 {
  using W = BlockQ4_1;
  static constexpr bool kGrid = false, kMin = true;
  static constexpr int kMax = 15, kOffset = 0;
  static void levels(const uint8_t* p, __m256i (&u)[8]) { r8_nibbles(p + r8_field(kQ4_1Fields, 2), u); }
  static __m256 scale(const uint8_t* p) { return r8_halves(p); }
  static __m256 min(const uint8_t* p) { return r8_halves(p + r8_field(kQ4_1Fields, 1)); }
};
struct R8Q5_0 {
  using W = BlockQ5_0;
  static constexpr bool kGrid = false, kMin = false;
  static constexpr int kMax = 31, kOffset = 16;
  static void levels(const uint8_t* p, __m256i (&u)[8]) {
    r8_nibbles(p + r8_field(kQ5_0Fields, 2), u);
    r8_fifth_bits(p + r8_field(kQ5_0Fields, 1), u);
  }
  static __m256 scale(const uint8_t* p) { return r8_halves(p); }
  static __m256 min(const uint8_t*) { return _mm256_setzero_ps(); }
};
struct R8Q5_1 {
  using W = BlockQ5_1;
  static constexpr bool kGrid = false, kMin = true;
  static constexpr int kMax = 31, kOffset = 0;
  static void levels(const uint8_t* p, __m256i (&u)[8]) {
    r8_nibbles(p + r8_field(kQ5_1Fields, 3), u);
    r8_fifth_bits(p + r8_field(kQ5_1Fields, 2), u);
  }
  static __m256 scale(const uint8_t* p) { return r8_halves(p); }
  static __m256 min(const uint8_t* p) { return r8_halves(p + r8_field(kQ5_1Fields, 1)); }
};
struct R8IQ4_NL {
  using W = BlockIQ4_NL;
  static constexpr bool kGrid = true, kMin = false;
  static constexpr int kMax = 255, kOffset = kGridBias;
  static void levels(const uint8_t* p, __m256i (&u)[8]) {
    const __m256i table = r8_iq4_table();
    r8_nibbles(p + r8_field(kIq4NlFields, 1), u);
    for (__m256i& v : u) v = _mm256_shuffle_epi8(table, v);
  }
  static __m256 scale(const uint8_t* p) { return r8_halves(p); }
  static __m256 min(const uint8_t*) { return _mm256_setzero_ps(); }
};
// MXFP4: the grid (-12..12) shifted by 12 to unsigned on every level; the E8M0 scales as
// e8m0_half_to_f32 computes them, lane-wise.
struct R8MXFP4 {
  using W = BlockMXFP4;
  static constexpr bool kGrid = false, kMin = false;
  static constexpr int kMax = 24, kOffset = 12;
  static void levels(const uint8_t* p, __m256i (&u)[8]) {
    alignas(16) int8_t t[16];
    for (int k = 0; k < 16; ++k) t[k] = (int8_t)(kMxfp4Values[k] + kOffset);
    const __m128i g = _mm_load_si128(reinterpret_cast<const __m128i*>(t));
    const __m256i table = _mm256_set_m128i(g, g);
    r8_nibbles(p + r8_field(kMxfp4Fields, 1), u);
    for (__m256i& v : u) v = _mm256_shuffle_epi8(table, v);
  }
  static __m256 scale(const uint8_t* p) {
    const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p)));
    const __m256i normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i tiny = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(tiny, normal, _mm256_cmpgt_epi32(e, _mm256_set1_epi32(1))));
  }
  static __m256 min(const uint8_t*) { return _mm256_setzero_ps(); }
};

template <class T, int NC>
void r8_rows32(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, MoreCols<BlockQ8A> x, float* const* out) {
  r8_groups<typename T::W, NC>(nblk, a, lda, nr, out, [&](const uint8_t* p, int64_t i, __m256* acc) {
    __m256i u[8];
    T::levels(p, u);
    const __m256 dw = T::scale(p);
    __m256 mw = _mm256_setzero_ps();
    if constexpr (T::kMin) mw = T::min(p);
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      const BlockQ8A& xb = x[c][i];
      __m256i s;
      if constexpr (T::kGrid)
        s = r8_grid_sums<8>(u, xb.qs);
      else
        s = r8_quad_sums<8, T::kMax>(u, xb.qs);
      if constexpr (T::kOffset != 0) s = _mm256_sub_epi32(s, _mm256_set1_epi32(T::kOffset * xb.sum));
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(xb.d)), acc[c]);
      if constexpr (T::kMin) acc[c] = _mm256_fmadd_ps(mw, _mm256_set1_ps(xb.d * (float)xb.sum), acc[c]);
    }
  });
}
}  // namespace
}  // namespace loom::cpu

// The level's entry points (declared in simd_isa.h).
#define LOOM_R8_MORE_ROWS_DOT(name, level, X, block, call)                                                          \
  void rows_dot_##name##_r8_##level(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc, \
                                    float* const* out) {                                                            \
    const auto* pa = static_cast<const uint8_t*>(a);                                                                \
    const auto x = reinterpret_cast<MoreCols<X>>(b);                                                                  \
    with_count<kMaxDotCols>(nc, [&]<int NC>() { call(K / (block), pa, lda, nr, x, out); });                         \
  }
#define LOOM_DEFINE_ROWS_DOT_R8_MORE(level)                                     \
  LOOM_R8_MORE_ROWS_DOT(q4_1, level, BlockQ8A, 32, (r8_rows32<R8Q4_1, NC>))     \
  LOOM_R8_MORE_ROWS_DOT(q5_0, level, BlockQ8A, 32, (r8_rows32<R8Q5_0, NC>))     \
  LOOM_R8_MORE_ROWS_DOT(q5_1, level, BlockQ8A, 32, (r8_rows32<R8Q5_1, NC>))     \
  LOOM_R8_MORE_ROWS_DOT(iq4_nl, level, BlockQ8A, 32, (r8_rows32<R8IQ4_NL, NC>)) \
  LOOM_R8_MORE_ROWS_DOT(mxfp4, level, BlockQ8A, 32, (r8_rows32<R8MXFP4, NC>))   \
  LOOM_R8_MORE_ROWS_DOT(q2_k, level, BlockQ8KA, 256, q2_k_r8_rows<NC>)          \
  LOOM_R8_MORE_ROWS_DOT(q3_k, level, BlockQ8KA, 256, q3_k_r8_rows<NC>)          \
  LOOM_R8_MORE_ROWS_DOT(q5_k, level, BlockQ8KA, 256, q5_k_r8_rows<NC>)          \
  LOOM_R8_MORE_ROWS_DOT(iq4_xs, level, BlockQ8KA, 256, iq4_xs_r8_rows<NC>)
