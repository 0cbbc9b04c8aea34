// Repacked-row kernels (cpu_repack.h's field layouts: 8 rows per group) of Q5_K, Q3_K, Q2_K,
// IQ4_XS, Q4_1, Q5_0, Q5_1, IQ4_NL and MXFP4. Included by simd_avx2_q_more.cpp and
// simd_avx512_q_more.cpp under their target pragmas after defining LOOM_R8_VNNI (1: vpdpbusd /
// vpdpwssd; 0: vpmaddubsw / vpmaddwd) and LOOM_R8_512 (1: the two-group form below exists);
// LOOM_DEFINE_ROWS_DOT_R8_MORE(level) defines the level's entry points. The readable reference is
// rows_dot_r8_ref (each group unpacked, then the scalar GGUF-row dots of simd_ref_q.h).
//   A 32-byte load of a field holds the same word of all 8 rows, one per 32-bit lane: scales
//   decode lane-wise for 8 rows at once, and a quad (8 rows x 4 levels) times 4 broadcast
//   activation bytes adds into each row's lane, so the 8 results come out without horizontal
//   sums. Sub-block sums are exact integers; one convert and FMA by d * scale per sub-block.
//   Each kernel is written once over a group view G: G8 reads one group into 256-bit vectors;
//   G16 (LOOM_R8_512, over weights repacked in pairs) reads two groups into the halves of
//   512-bit vectors (simd_r8x2.h), so every mask, shift, broadcast and vpdpbusd serves 16 rows.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "cpu_repack.h"
#include "cpu_vec_dot.h"
#include "loom/core/quants.h"
#include "simd_q_more.h"  // MoreCols, mload
#include "simd_r8.h"

// simd_width.h: Vx<__m256i> drops the type's may_alias attribute
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wignored-attributes"
#include "simd_width.h"  // Vx and the operations of both widths

// The per-block helpers of the 32-value kernels must inline into the block loop: left to GCC,
// Q5_0's, Q5_1's, IQ4_NL's and MXFP4's levels() were calls that passed their 8 vectors
// through the stack, a quarter to two fifths of those kernels' time (perf of a decode, Zen 5).
#define LOOM_R8_INLINE [[gnu::always_inline]] inline

namespace loom::cpu {
namespace {

// ---- Group views: where a kernel's vectors come from ----------------------------------------------
// load(off): the 32-byte field word at off of every row; halves(off): the rows' fp16 field as
// floats; bytes(off) / words(off): the rows' uint8 / uint16 field as int32 lanes.

struct G8 {  // one group of 8 rows
  using V = __m256i;
  using F = __m256;
  const uint8_t* p;
  V load(size_t off) const { return mload(p + off); }
  F halves(size_t off) const { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + off))); }
  V bytes(size_t off) const { return _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + off))); }
  V words(size_t off) const { return _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + off))); }
};
#if LOOM_R8_512
struct G16 {  // groups a (rows r .. r + 7, low halves) and b (r + 8 .. r + 15, high halves)
  using V = __m512i;
  using F = __m512;
  const uint8_t *a, *b;
  V load(size_t off) const { return r8x2_load(a + off, b + off); }
  F halves(size_t off) const { return r8x2_halves(a + off, b + off); }
  V bytes(size_t off) const {
    return _mm512_cvtepu8_epi32(_mm_unpacklo_epi64(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(a + off)),
                                                   _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + off))));
  }
  V words(size_t off) const {
    return _mm512_cvtepu16_epi32(_mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b + off)),
                                                  _mm_loadu_si128(reinterpret_cast<const __m128i*>(a + off))));
  }
};
#endif

// Runs block(g, i, acc) (acc[c] += group block i of view g times column c) over the row groups:
// with kPairs over a weight repacked in pairs (cpu_repack.h; LOOM_R8_512 only), two at a time (a
// last odd group one at a time), else one at a time. (Q5_K's and IQ4_XS's two-group forms ran
// 1.15-1.55x faster from L2 but no faster, or slower, from memory on a Xeon and on Zen 5 while
// the two groups were two streams; in pairs, Q5_K's reads more on Zen 5: docs/DECODE-SPEED.md.)
template <class W, int NC, bool kPairs, class Block>
inline void r8_more_groups(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, float* const* out, Block block) {
  auto one = [&](const uint8_t* ga, int64_t n, float* const* o) {
    r8_groups<W, NC>(nblk, ga, lda, n, o, [&](const uint8_t* p, int64_t i, __m256* acc) { block(G8{p}, i, acc); });
  };
#if LOOM_R8_512
  if constexpr (kPairs) {
    r8x2_groups<W, NC>(
        nblk, a, lda, nr, out,
        [&](const uint8_t* pa, const uint8_t* pb, int64_t i, __m512* acc) { block(G16{pa, pb}, i, acc); }, one);
    return;
  }
#else
  static_assert(!kPairs);
#endif
  one(a, nr, out);
}

// byte b of each row's word, as int32
template <class V>
inline V r8_byte(V w, int b) {
  return srli32(w, 8 * b) & Vx<V>::set32(255);
}
// bit s of every byte moved to bit `to` of the same byte, other bits cleared (the 32-bit shifts
// carry bits across bytes, the mask keeps each byte's own)
template <class V>
LOOM_R8_INLINE V r8_bit(V v, int s, int to) {
  const V moved = s <= to ? slli32(v, to - s) : srli32(v, s - to);
  return moved & Vx<V>::set8(1 << to);
}
// The vpshufb control taking bytes b0, b1 of each 32-bit lane to its int16 pair: as the pair's
// low bytes (zero-extended), or with `high` as its high bytes (srai16 by 8 then sign-extends).
template <class V>
inline V r8_pick_bytes(int b0, int b1, bool high) {
  alignas(16) int8_t t[16];
  for (int k = 0; k < 16; ++k) {
    const bool data = (k % 2 == 1) == high;
    t[k] = data ? (int8_t)(4 * (k / 4) + (k % 4 < 2 ? b0 : b1)) : (int8_t)-128;
  }
  return Vx<V>::table(t);
}
template <class V>
inline V r8_pick_bytes(int b, bool high) {
  return r8_pick_bytes<V>(b, b + 1, high);
}
// The vpshufb control taking byte b of each 32-bit lane to its low byte, the others zeroed: r8_byte
// in one shuffle instead of a shift and a mask, for kernels whose shuffle port has room (IQ4_XS;
// Q5_K's kernel ran ~5% slower from L2 with r8_byte made this way).
template <class V>
inline V r8_pick_byte(int b) {
  alignas(16) int8_t t[16];
  for (int k = 0; k < 16; ++k) t[k] = k % 4 == 0 ? (int8_t)(k + b) : (int8_t)-128;
  return Vx<V>::table(t);
}

// sum_{t < NQ} u[t] . x[4t, 4t + 4) per row lane, u unsigned bytes <= kMax. Without VNNI (256-bit
// only) the vpmaddubsw pair sums add up in 16 bits over as many quads as cannot overflow.
template <int NQ, int kMax, class V>
LOOM_R8_INLINE V r8_quad_sums(const V* u, const int8_t* x) {
#if LOOM_R8_VNNI
  if constexpr (NQ <= 4) {  // one chain: the 16-value groups' kernels run many side by side
    V s = Vx<V>::zero();
    for (int t = 0; t < NQ; ++t) s = dot_u8_bcast(s, u[t], x + 4 * t);
    return s;
  }
  V s0 = Vx<V>::zero(), s1 = s0;
  for (int t = 0; t + 1 < NQ; t += 2) {
    s0 = dot_u8_bcast(s0, u[t], x + 4 * t);
    s1 = dot_u8_bcast(s1, u[t + 1], x + 4 * t + 4);
  }
  if constexpr (NQ % 2 != 0) s0 = dot_u8_bcast(s0, u[NQ - 1], x + 4 * (NQ - 1));
  return add32(s0, s1);
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
template <class V>
LOOM_R8_INLINE V r8_iq4_table() {
  alignas(16) int8_t t[16];
  for (int k = 0; k < 16; ++k) t[k] = (int8_t)(kIq4nlValues[k] + kGridBias);
  return Vx<V>::table(t);
}
template <int NQ, class V>
LOOM_R8_INLINE V r8_grid_sums(const V* v, const int8_t* x) {
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
template <int NC, class V, class F>
inline void r8_finish_k(const V (&pairs)[8], F off, MoreCols<BlockQ8KA> x, int64_t i, const F* bacc, F* acc) {
#pragma GCC unroll 8
  for (int c = 0; c < NC; ++c) {
    const BlockQ8KA& xb = x[c][i];
    V osum = Vx<V>::zero();
    for (int t = 0; t < 8; ++t) osum = dot_i16_bcast(osum, pairs[t], xb.bsums + 2 * t);
    acc[c] = fmadd(fnmadd(to_f(osum), off, bacc[c]), Vx<V>::setf(xb.d), acc[c]);
  }
}

// ---- Q5_K: Q4_K's 6-bit (sc, m) and nibbles, the fifth bit from qh ------------------------------
// Quad q of qs (sub-blocks 2(q / 8) and 2(q / 8) + 1) shares bytes with qh quad q % 8.

template <int NC, bool kPairs = false>
void q5_k_r8_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, MoreCols<BlockQ8KA> x, float* const* out) {
  constexpr size_t kScales = r8_field(kQ5KFields, 2), kQh = r8_field(kQ5KFields, 3), kQs = r8_field(kQ5KFields, 4);
  r8_more_groups<BlockQ5_K, NC, kPairs>(nblk, a, lda, nr, out, [&]<class G>(const G& g, int64_t i, typename G::F* acc) {
    using V = typename G::V;
    using F = typename G::F;
    const V lo6 = Vx<V>::set8(0x3f), lo4 = Vx<V>::set8(15), lo2 = Vx<V>::set8(3);
    const F d = g.halves(0), dmin = g.halves(16);
    // q4_k_scale_min lane-wise: scales words 0-2 -> sc 0-3, 4-7 and m 0-3, 4-7 as bytes
    const V a0 = g.load(kScales), a1 = g.load(kScales + 32), a2 = g.load(kScales + 64);
    const V sc[2] = {a0 & lo6, (a2 & lo4) | slli32(srli32(a0, 6) & lo2, 4)};
    const V mn[2] = {a1 & lo6, (srli32(a2, 4) & lo4) | slli32(srli32(a1, 6) & lo2, 4)};
    F bacc[NC];
    for (int c = 0; c < NC; ++c) bacc[c] = Vx<V>::zerof();
#pragma GCC unroll 4
    for (int jj = 0; jj < 4; ++jj) {  // sub-blocks 2jj (low nibbles) and 2jj + 1 (high)
      // each sub-block's d * sc made where it is used: 8 of them held across the loop, with the
      // levels, spilled at 512 bits (the two-group kernel ran slower from memory)
      const F sc0 = mulf(d, to_f(r8_byte(sc[jj / 2], 2 * (jj % 2)))), sc1 = mulf(d, to_f(r8_byte(sc[jj / 2], 2 * (jj % 2) + 1)));
      V lo[8], hi[8];
      for (int q = 0; q < 8; ++q) {
        const V v = g.load(kQs + 32 * (8 * jj + q)), h = g.load(kQh + 32 * q);
        lo[q] = (v & lo4) | r8_bit(h, 2 * jj, 4);
        hi[q] = (srli16(v, 4) & lo4) | r8_bit(h, 2 * jj + 1, 4);
      }
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const int8_t* xq = x[c][i].qs + 64 * jj;
        bacc[c] = fmadd(to_f(r8_quad_sums<8, 31>(lo, xq)), sc0, bacc[c]);
        bacc[c] = fmadd(to_f(r8_quad_sums<8, 31>(hi, xq + 32)), sc1, bacc[c]);
      }
    }
    V mp[8];  // (m, m)
    for (int j = 0; j < 8; ++j) mp[j] = lookup(mn[j / 4], r8_pick_bytes<V>(j % 4, j % 4, false));
    r8_finish_k<NC>(mp, dmin, x, i, bacc, acc);
  });
}

// ---- Q3_K and Q2_K: 16-value groups --------------------------------------------------------------
// A group's sum (4 quads) fits 16 bits, so groups 2t and 2t + 1 go into one int16 pair per row and
// one vpdpwssd by their scale pair applies both scales exactly: the block stays integer to its
// end. The offsets (Q3_K: -4 sc_g per x, Q2_K: -m_g dmin per x) are the scale or min pairs times
// x's 16-value sums. Group g is elements 16g .. 16g + 15, its quad t the 4 from 16g + 4t.

// isum[c] += pair t's two group sums s[0][c], s[1][c] (int32, |s| < 2^15) times their scales
template <int NC, class V>
inline void r8_pair_sums(const V (&s)[2][NC], V scp, V* isum) {
#pragma GCC unroll 8
  for (int c = 0; c < NC; ++c) isum[c] = dot_i16(isum[c], odd16(s[0][c], slli32(s[1][c], 16)), scp);
}

// Q2_K: element 128h + 32k + l is bits 2k of qs[32h + l] (quad 8h + l / 4), so group g = 8h + 2k
// + half. isum[c] = sum_g sc_g * (group g's sum), scp[t] the (sc 2t, sc 2t + 1) int16 pairs.
template <int NC, class G, class V = typename G::V>
inline void q2k_r8_groups(const G& g, size_t qs, const V (&scp)[8], MoreCols<BlockQ8KA> x, int64_t i, V* isum) {
  const V lo2 = Vx<V>::set8(3);
  for (int c = 0; c < NC; ++c) isum[c] = Vx<V>::zero();
  // Unrolled whole, so every shift count is an immediate and qv stays in registers (left as
  // loops, GCC kept them on the stack and shifted by counts in registers).
#pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    V qv[8];
#pragma GCC unroll 8
    for (int t = 0; t < 8; ++t) qv[t] = g.load(qs + 32 * (8 * h + t));
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
      V s[2][NC];
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {  // group 8h + 2k + half: quads 4 half .. 4 half + 3
        // With VNNI the fields are masked where they lie (4^k q, the exact sums shifted back
        // after): one operation per quad instead of two, the kernel 7% faster. Without VNNI the
        // 16-bit pair sums cannot take 4^k q.
        V u[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t)
          u[t] = LOOM_R8_VNNI ? qv[4 * half + t] & Vx<V>::set8(3 << (2 * k)) : srli16(qv[4 * half + t], 2 * k) & lo2;
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) {
          s[half][c] = r8_quad_sums<4, 3>(u, x[c][i].qs + 128 * h + 32 * k + 16 * half);
          if (LOOM_R8_VNNI) s[half][c] = srai32(s[half][c], 2 * k);
        }
      }
      r8_pair_sums<NC>(s, scp[4 * h + k], isum);
    }
  }
}

// Q3_K's levels (cpu_repack.h: kQ3kLevels) of quad (gr, t) as the dot takes them: with VNNI where
// they lie (v << q3k_quad's shift, the sums shifted back after), without it as v.
template <class G, class V = typename G::V>
inline V q3k_r8_quad(const G& g, int gr, int t) {
  const Q3kQuad at = q3k_quad(gr, t);
  const V w = g.load(kQ3kLevels + 32 * at.word);
  if (gr < 12) return LOOM_R8_VNNI ? w & Vx<V>::set8(7 << at.shift) : srli16(w, at.shift) & Vx<V>::set8(7);
  const Q3kQuad hi = q3k_high_bits(at.word);
  const V wh = g.load(kQ3kLevels + 32 * hi.word);
  if (LOOM_R8_VNNI) return (w & Vx<V>::set8(0x18)) | (slli32(wh, 5 - hi.shift) & Vx<V>::set8(0x20));
  return (srli16(w, 3) & Vx<V>::set8(3)) | (srli16(wh, hi.shift - 2) & Vx<V>::set8(4));
}

// Q3_K: q = q2 | hmask bit << 2 (0..7), x = d (sc - 32) (q - 4), sc 6 bits (q3_k_scale).
template <int NC, bool kPairs = false>
void q3_k_r8_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, MoreCols<BlockQ8KA> x, float* const* out) {
  constexpr size_t kScales = r8_field(kQ3KFields, 1);
  r8_more_groups<BlockQ3_K, NC, kPairs>(nblk, a, lda, nr, out, [&]<class G>(const G& g, int64_t i, typename G::F* acc) {
    using V = typename G::V;
    using F = typename G::F;
    const V lo4 = Vx<V>::set8(15), lo2 = Vx<V>::set8(3), bias = Vx<V>::set8(32);
    const F d = g.halves(0);
    // scales words 0-2 -> the 16 scales - 32 as int8 bytes of v[g / 4] (q3_k_scale lane-wise)
    const V a0 = g.load(kScales), a1 = g.load(kScales + 32), a2 = g.load(kScales + 64);
    auto hi2 = [&](int s) { return slli32(srli32(a2, s) & lo2, 4); };
    const V v[4] = {(a0 & lo4) | hi2(0), (a1 & lo4) | hi2(2), (srli32(a0, 4) & lo4) | hi2(4),
                    (srli32(a1, 4) & lo4) | hi2(6)};
    V pairs[8];  // (sc 2t - 32, sc 2t + 1 - 32): bytes 2e, 2e + 1 into the high bytes, sign-shifted down
    const V pick[2] = {r8_pick_bytes<V>(0, true), r8_pick_bytes<V>(2, true)};
    for (int t = 0; t < 8; ++t) pairs[t] = srai16(lookup(sub8(v[t / 2], bias), pick[t % 2]), 8);
    V isum[NC];
    for (int c = 0; c < NC; ++c) isum[c] = Vx<V>::zero();
    // Unrolled whole: every word, mask and shift count a constant.
#pragma GCC unroll 8
    for (int t2 = 0; t2 < 8; ++t2) {
      V s[2][NC];
#pragma GCC unroll 2
      for (int half = 0; half < 2; ++half) {
        const int gr = 2 * t2 + half;
        V u[4];
#pragma GCC unroll 4
        for (int t = 0; t < 4; ++t) u[t] = q3k_r8_quad(g, gr, t);
#pragma GCC unroll 8
        for (int c = 0; c < NC; ++c) {
          s[half][c] = r8_quad_sums<4, 7>(u, x[c][i].qs + 16 * gr);
          if (LOOM_R8_VNNI && q3k_quad(gr, 0).shift != 0) s[half][c] = srai32(s[half][c], q3k_quad(gr, 0).shift);
        }
      }
      r8_pair_sums<NC>(s, pairs[t2], isum);
    }
    F bacc[NC];
    for (int c = 0; c < NC; ++c) bacc[c] = mulf(to_f(isum[c]), d);
    r8_finish_k<NC>(pairs, mulf(d, Vx<V>::setf(4.0f)), x, i, bacc, acc);
  });
}

// Q2_K: x = d (sc_g & 15) q - dmin (sc_g >> 4), q 0..3.
template <int NC, bool kPairs = false>
void q2_k_r8_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, MoreCols<BlockQ8KA> x, float* const* out) {
  constexpr size_t kScales = r8_field(kQ2KFields, 2), kQs = r8_field(kQ2KFields, 3);
  r8_more_groups<BlockQ2_K, NC, kPairs>(nblk, a, lda, nr, out, [&]<class G>(const G& g, int64_t i, typename G::F* acc) {
    using V = typename G::V;
    using F = typename G::F;
    const V lo4 = Vx<V>::set8(15);
    const F d = g.halves(0), dmin = g.halves(16);
    const V pick[2] = {r8_pick_bytes<V>(0, false), r8_pick_bytes<V>(2, false)};
    V sp[8], mp[8];                // (sc 2t & 15, sc 2t + 1 & 15), (their high nibbles)
    for (int w = 0; w < 4; ++w) {  // scales bytes 4w .. 4w + 3
      const V sw = g.load(kScales + 32 * w), s = sw & lo4, m = srli16(sw, 4) & lo4;
      for (int e = 0; e < 2; ++e) {  // bytes 2e, 2e + 1
        sp[2 * w + e] = lookup(s, pick[e]);
        mp[2 * w + e] = lookup(m, pick[e]);
      }
    }
    V isum[NC];
    q2k_r8_groups<NC>(g, kQs, sp, x, i, isum);
    F bacc[NC];
    for (int c = 0; c < NC; ++c) bacc[c] = mulf(to_f(isum[c]), d);
    r8_finish_k<NC>(mp, dmin, x, i, bacc, acc);
  });
}

// ---- IQ4_XS: per 32-value sub-block j the IQ4_NL grid times (ls_j - 32) ---------------------------
// Quads 4j .. 4j + 3: low nibbles elements 32j + 4t, high ones 32j + 16 + 4t.

template <int NC, bool kPairs = false>
void iq4_xs_r8_rows(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, MoreCols<BlockQ8KA> x, float* const* out) {
  constexpr size_t kSh = r8_field(kIq4XsFields, 1), kSl = r8_field(kIq4XsFields, 2), kQs = r8_field(kIq4XsFields, 3);
  r8_more_groups<BlockIQ4_XS, NC, kPairs>(nblk, a, lda, nr, out, [&]<class G>(const G& g, int64_t i, typename G::F* acc) {
    using V = typename G::V;
    using F = typename G::F;
    const V lo4 = Vx<V>::set8(15), table = r8_iq4_table<V>(), hi2 = Vx<V>::set8(0x30);
    const F d = g.halves(0), d32 = mulf(d, Vx<V>::setf(32.0f));
    // The 6-bit scales ls_j as bytes, decoded once: ls_2k in byte k of ls[0], ls_2k+1 of ls[1].
    // sh's nibble k is spread to byte k; its bits 0-1 and 2-3 are the high bits of ls_2k, ls_2k+1.
    const V sl = g.load(kSl);
    V sh = g.words(kSh);
    sh = (sh | slli32(sh, 8)) & Vx<V>::set32(0x00ff00ff);
    sh = (sh | slli32(sh, 4)) & lo4;
    const V ls[2] = {(sl & lo4) | (slli32(sh, 4) & hi2), (srli32(sl, 4) & lo4) | (slli32(sh, 2) & hi2)};
    auto scale = [&](int j) {  // d (ls_j - 32) as d ls_j - 32 d: exact, at most 17 significant bits
      return fmsub(d, to_f(lookup(ls[j % 2], r8_pick_byte<V>(j / 2))), d32);
    };
    F bacc[NC];
    for (int c = 0; c < NC; ++c) bacc[c] = Vx<V>::zerof();
    // unrolled, each d * scale made where it is used (as in Q5_K's)
#pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const F scf = scale(j);
      V v[8];
      for (int t = 0; t < 4; ++t) {
        const V w = g.load(kQs + 32 * (4 * j + t));
        v[t] = lookup(table, w & lo4);
        v[4 + t] = lookup(table, srli16(w, 4) & lo4);
      }
#pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const BlockQ8KA& xb = x[c][i];
        V s = r8_grid_sums<8>(v, xb.qs + 32 * j);
        // the grid's bias times x's sum over the sub-block (none without VNNI)
        if constexpr (kGridBias != 0) s = sub32(s, Vx<V>::set32(kGridBias * (xb.bsums[2 * j] + xb.bsums[2 * j + 1])));
        bacc[c] = fmadd(to_f(s), scf, bacc[c]);
      }
    }
    for (int c = 0; c < NC; ++c) acc[c] = fmadd(bacc[c], Vx<V>::setf(x[c][i].d), acc[c]);
  });
}

// ---- 32-value blocks: Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4 --------------------------------------------
// A type's levels(g, u) gives the block's 8 quads (4 of low nibbles: elements 4t, then 4 of high
// ones: 16 + 4t) as bytes the dot takes (kGrid: r8_grid_sums, else unsigned <= kMax), x = d (u -
// offset) [+ m], and scale(g) / min(g) the rows' d and m.

template <class G, class V>
LOOM_R8_INLINE void r8_nibbles(const G& g, size_t qs, V (&u)[8]) {
  const V lo4 = Vx<V>::set8(15);
  for (int t = 0; t < 4; ++t) {
    const V v = g.load(qs + 32 * t);
    u[t] = v & lo4;
    u[4 + t] = srli16(v, 4) & lo4;
  }
}
// a grid type's levels: each nibble's entry of `table`
template <class G, class V>
LOOM_R8_INLINE void r8_grid_nibbles(const G& g, size_t qs, V table, V (&u)[8]) {
  r8_nibbles(g, qs, u);
  for (V& v : u) v = lookup(table, v);
}
// Q5_0 / Q5_1: the fifth bits from the bit-transposed qh word (byte t bit b: element 4b + t)
template <class G, class V>
LOOM_R8_INLINE void r8_fifth_bits(const G& g, size_t qh, V (&u)[8]) {
  const V h = g.load(qh);
  for (int b = 0; b < 8; ++b) u[b] = u[b] | r8_bit(h, b, 4);
}

struct R8Q4_1 {
  using W = BlockQ4_1;
  static constexpr bool kGrid = false, kMin = true;
  static constexpr int kMax = 15, kOffset = 0;
  template <class G, class V>
  LOOM_R8_INLINE static void levels(const G& g, V (&u)[8]) {
    r8_nibbles(g, r8_field(kQ4_1Fields, 2), u);
  }
  template <class G>
  LOOM_R8_INLINE static auto scale(const G& g) {
    return g.halves(0);
  }
  template <class G>
  LOOM_R8_INLINE static auto min(const G& g) {
    return g.halves(r8_field(kQ4_1Fields, 1));
  }
};
struct R8Q5_0 {
  using W = BlockQ5_0;
  static constexpr bool kGrid = false, kMin = false;
  static constexpr int kMax = 31, kOffset = 16;
  template <class G, class V>
  LOOM_R8_INLINE static void levels(const G& g, V (&u)[8]) {
    r8_nibbles(g, r8_field(kQ5_0Fields, 2), u);
    r8_fifth_bits(g, r8_field(kQ5_0Fields, 1), u);
  }
  template <class G>
  LOOM_R8_INLINE static auto scale(const G& g) {
    return g.halves(0);
  }
};
struct R8Q5_1 {
  using W = BlockQ5_1;
  static constexpr bool kGrid = false, kMin = true;
  static constexpr int kMax = 31, kOffset = 0;
  template <class G, class V>
  LOOM_R8_INLINE static void levels(const G& g, V (&u)[8]) {
    r8_nibbles(g, r8_field(kQ5_1Fields, 3), u);
    r8_fifth_bits(g, r8_field(kQ5_1Fields, 2), u);
  }
  template <class G>
  LOOM_R8_INLINE static auto scale(const G& g) {
    return g.halves(0);
  }
  template <class G>
  LOOM_R8_INLINE static auto min(const G& g) {
    return g.halves(r8_field(kQ5_1Fields, 1));
  }
};
struct R8IQ4_NL {
  using W = BlockIQ4_NL;
  static constexpr bool kGrid = true, kMin = false;
  static constexpr int kMax = 255, kOffset = kGridBias;
  template <class G, class V>
  LOOM_R8_INLINE static void levels(const G& g, V (&u)[8]) {
    r8_grid_nibbles(g, r8_field(kIq4NlFields, 1), r8_iq4_table<V>(), u);
  }
  template <class G>
  LOOM_R8_INLINE static auto scale(const G& g) {
    return g.halves(0);
  }
};
// MXFP4: the grid (-12..12) shifted by 12 to unsigned on every level; the E8M0 scales as twice
// what e8m0_half_to_f32 computes (kScaleUnit halves them with the column's d), lane-wise.
struct R8MXFP4 {
  using W = BlockMXFP4;
  static constexpr bool kGrid = false, kMin = false;
  static constexpr int kMax = 24, kOffset = 12;
  static constexpr float kScaleUnit = 0.5f;
  template <class G, class V>
  LOOM_R8_INLINE static void levels(const G& g, V (&u)[8]) {
    alignas(16) int8_t t[16];
    for (int k = 0; k < 16; ++k) t[k] = (int8_t)(kMxfp4Values[k] + kOffset);
    r8_grid_nibbles(g, r8_field(kMxfp4Fields, 1), Vx<V>::table(t), u);
  }
  template <class G>
  LOOM_R8_INLINE static auto scale(const G& g) {
    using V = typename G::V;
    // 2^(e - 127) is the float of bits e << 23 for e >= 1; for e = 0, 2^-127 is the denormal
    // 0x00400000, which no e << 23 undercuts: one max, and the products stay exact
    return (typename G::F)max32(slli32(g.bytes(0), 23), Vx<V>::set32(0x00400000));
  }
};

// what a type's scale(g) is in units of its d (1 unless the type says otherwise)
template <class T>
constexpr float scale_unit() {
  if constexpr (requires { T::kScaleUnit; }) return T::kScaleUnit;
  return 1.0f;
}

template <class T, int NC, bool kPairs = false>
void r8_rows32(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, MoreCols<BlockQ8A> x, float* const* out) {
  r8_more_groups<typename T::W, NC, kPairs>(nblk, a, lda, nr, out, [&]<class G>(const G& g, int64_t i, typename G::F* acc) {
    using V = typename G::V;
    using F = typename G::F;
    V u[8];
    T::levels(g, u);
    const F dw = T::scale(g);
    F mw = Vx<V>::zerof();
    if constexpr (T::kMin) mw = T::min(g);
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      const BlockQ8A& xb = x[c][i];
      V s;
      if constexpr (T::kGrid)
        s = r8_grid_sums<8>(u, xb.qs);
      else
        s = r8_quad_sums<8, T::kMax>(u, xb.qs);
      if constexpr (T::kOffset != 0) s = sub32(s, Vx<V>::set32(T::kOffset * xb.sum));
      acc[c] = fmadd(to_f(s), mulf(dw, Vx<V>::setf(scale_unit<T>() * xb.d)), acc[c]);
      if constexpr (T::kMin) acc[c] = fmadd(mw, Vx<V>::setf(xb.d * (float)xb.sum), acc[c]);
    }
  });
}
// columns per call of the kernels that spill at 256 bits (LOOM_R8_MORE_ROWS_DOT_AT_MOST below)
constexpr int kR8WideCols = LOOM_R8_512 ? kMaxDotCols : 4;
}  // namespace
}  // namespace loom::cpu

#pragma GCC diagnostic pop

// The level's entry points (declared in simd_isa.h), and those of the pairs (LOOM_R8_512: the
// level's rows_dot_pairs_more). `most` columns per kernel call: with 16 registers (AVX2) Q2_K's
// and IQ4_XS's kernels spill from 5 columns on and GCC takes minutes over their 7- and 8-column
// forms, so there they take at most 4 at a time.
#define LOOM_R8_MORE_ROWS_DOT_AT_MOST(fn, X, block, call, most)                                                \
  void fn(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc, float* const* out) { \
    const auto* pa = static_cast<const uint8_t*>(a);                                                           \
    const auto x = reinterpret_cast<MoreCols<X>>(b);                                                           \
    in_passes<(most)>(nc, [&]<int NC>(int c0) { call(K / (block), pa, lda, nr, x + c0, out + c0); });          \
  }
#define LOOM_R8_MORE_ROWS_DOT(fn, X, block, call) LOOM_R8_MORE_ROWS_DOT_AT_MOST(fn, X, block, call, kMaxDotCols)
#define LOOM_DEFINE_ROWS_DOT_R8_MORE(level)                                                              \
  LOOM_R8_MORE_ROWS_DOT(rows_dot_q4_1_r8_##level, BlockQ8A, 32, (r8_rows32<R8Q4_1, NC>))                 \
  LOOM_R8_MORE_ROWS_DOT(rows_dot_q5_0_r8_##level, BlockQ8A, 32, (r8_rows32<R8Q5_0, NC>))                 \
  LOOM_R8_MORE_ROWS_DOT(rows_dot_q5_1_r8_##level, BlockQ8A, 32, (r8_rows32<R8Q5_1, NC>))                 \
  LOOM_R8_MORE_ROWS_DOT(rows_dot_iq4_nl_r8_##level, BlockQ8A, 32, (r8_rows32<R8IQ4_NL, NC>))             \
  LOOM_R8_MORE_ROWS_DOT(rows_dot_mxfp4_r8_##level, BlockQ8A, 32, (r8_rows32<R8MXFP4, NC>))               \
  LOOM_R8_MORE_ROWS_DOT_AT_MOST(rows_dot_q2_k_r8_##level, BlockQ8KA, 256, q2_k_r8_rows<NC>, kR8WideCols) \
  LOOM_R8_MORE_ROWS_DOT(rows_dot_q3_k_r8_##level, BlockQ8KA, 256, q3_k_r8_rows<NC>)                      \
  LOOM_R8_MORE_ROWS_DOT(rows_dot_q5_k_r8_##level, BlockQ8KA, 256, q5_k_r8_rows<NC>)                      \
  LOOM_R8_MORE_ROWS_DOT_AT_MOST(rows_dot_iq4_xs_r8_##level, BlockQ8KA, 256, iq4_xs_r8_rows<NC>, kR8WideCols)
#define LOOM_DEFINE_ROWS_DOT_PAIRS_MORE(level)                                                        \
  namespace {                                                                                         \
  LOOM_R8_MORE_ROWS_DOT(rows_dot_q4_1_pairs_##level, BlockQ8A, 32, (r8_rows32<R8Q4_1, NC, true>))     \
  LOOM_R8_MORE_ROWS_DOT(rows_dot_q5_0_pairs_##level, BlockQ8A, 32, (r8_rows32<R8Q5_0, NC, true>))     \
  LOOM_R8_MORE_ROWS_DOT(rows_dot_q5_1_pairs_##level, BlockQ8A, 32, (r8_rows32<R8Q5_1, NC, true>))     \
  LOOM_R8_MORE_ROWS_DOT(rows_dot_iq4_nl_pairs_##level, BlockQ8A, 32, (r8_rows32<R8IQ4_NL, NC, true>)) \
  LOOM_R8_MORE_ROWS_DOT(rows_dot_mxfp4_pairs_##level, BlockQ8A, 32, (r8_rows32<R8MXFP4, NC, true>))   \
  LOOM_R8_MORE_ROWS_DOT(rows_dot_q2_k_pairs_##level, BlockQ8KA, 256, (q2_k_r8_rows<NC, true>))        \
  LOOM_R8_MORE_ROWS_DOT(rows_dot_q3_k_pairs_##level, BlockQ8KA, 256, (q3_k_r8_rows<NC, true>))        \
  LOOM_R8_MORE_ROWS_DOT(rows_dot_q5_k_pairs_##level, BlockQ8KA, 256, (q5_k_r8_rows<NC, true>))        \
  LOOM_R8_MORE_ROWS_DOT(rows_dot_iq4_xs_pairs_##level, BlockQ8KA, 256, (iq4_xs_r8_rows<NC, true>))    \
  }                                                                                                   \
  RowsDotFn rows_dot_pairs_more_##level(DType type) {                                                 \
    switch (type) {                                                                                   \
      case DType::Q4_1: return rows_dot_q4_1_pairs_##level;                                           \
      case DType::Q5_0: return rows_dot_q5_0_pairs_##level;                                           \
      case DType::Q5_1: return rows_dot_q5_1_pairs_##level;                                           \
      case DType::IQ4_NL: return rows_dot_iq4_nl_pairs_##level;                                       \
      case DType::MXFP4: return rows_dot_mxfp4_pairs_##level;                                         \
      case DType::Q2_K: return rows_dot_q2_k_pairs_##level;                                           \
      case DType::Q3_K: return rows_dot_q3_k_pairs_##level;                                           \
      case DType::Q5_K: return rows_dot_q5_k_pairs_##level;                                           \
      case DType::IQ4_XS: return rows_dot_iq4_xs_pairs_##level;                                       \
      default: return nullptr;                                                                        \
    }                                                                                                 \
  }
