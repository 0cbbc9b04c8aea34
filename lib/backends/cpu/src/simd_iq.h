// AVX-512 dots of the i-quants against q8k columns (included under simd_avx512.cpp's target
// pragma). IQ2 / IQ3, per 64 values (two 32-value chunks): the grid points' unsigned magnitudes
// as one 512-bit vector, the weights' signs moved onto the activations (a masked negation), one
// vpdpbusd, and each lane of 4 products times its scale; the XXS types' and IQ2_XS's sign indices
// are expanded with vector ops, not table loads, and IQ1's and IQ2_S's grid indices built with
// pdep (hence bmi2 in the AVX-512 level's target). IQ1, per 32 values: its points in {-1, 0, 1}
// go in as g + 1 with the activations' sums taking the offset and the +-1/8 shift back out.
// Integer sums per block are simd_ref_iq.h's exactly, so the results are the scalar level's bit
// for bit.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu_vec_dot.h"
#include "loom/core/quants_iq.h"

namespace loom::cpu {
namespace {

inline uint32_t load_u32(const void* p) {
  uint32_t u;
  std::memcpy(&u, p, 4);
  return u;
}

// Byte n: whether nibble n has an odd bit count (the 8th sign bit of the 7-bit sign indices).
inline __m128i odd_nibbles() { return _mm_setr_epi8(0, 1, 1, 0, 1, 0, 0, 1, 1, 0, 0, 1, 0, 1, 1, 0); }
// Four grid indices as the 16-bit fields of one word: byte k of q as bits 0-7 of field k, the
// high bits already in place above them.
inline uint64_t index_words(const uint8_t* q, uint64_t high) {
  return _pdep_u64(load_u32(q), 0x00ff00ff00ff00ffull) | high;
}

// The sign bits of two words of 4 x 7-bit sign indices (IQ2_XXS, IQ3_XXS): signs7x4(a0) |
// signs7x4(a1) << 32, without the 8 table loads. Each index gets the parity of its 7 bits as
// bit 7, from two nibble lookups.
inline uint64_t signs7x8(uint32_t a0, uint32_t a1) {
  const __m256i a =
      _mm256_permutevar8x32_epi32(_mm256_castsi128_si256(_mm_cvtsi64_si128((long long)(a0 | (uint64_t)a1 << 32))),
                                  _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
  const __m256i f =
      _mm256_and_si256(_mm256_srlv_epi32(a, _mm256_setr_epi32(0, 7, 14, 21, 0, 7, 14, 21)), _mm256_set1_epi32(127));
  const __m256i odd = _mm256_broadcastsi128_si256(odd_nibbles());
  // f < 128: the byte shuffle reads its low nibble, and the upper bytes (0) give 0
  const __m256i p = _mm256_xor_si256(_mm256_shuffle_epi8(odd, f), _mm256_shuffle_epi8(odd, _mm256_srli_epi32(f, 4)));
  return (uint64_t)_mm_cvtsi128_si64(_mm256_cvtepi32_epi8(_mm256_or_si256(f, _mm256_slli_epi32(p, 7))));
}

// Two 32-value chunks of a block (ib, ib + 1) at once: their grid points' magnitudes as one
// 512-bit vector, the 64 values' sign bits, and the scale of each lane of 4 values.
struct IqPair {
  __m512i mag;
  uint64_t neg;
  __m512i sc;  // per lane of 4 values
};
// Lanes 0-7 s0, 8-15 s1.
inline __m512i two_scales(int s0, int s1) { return _mm512_mask_set1_epi32(_mm512_set1_epi32(s0), 0xff00, s1); }
// 2 n + 1 for the four nibbles of h (low first), 4 lanes each.
inline __m512i four_scales(uint32_t h) {
  const __m512i n =
      _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32((int)h),
                                         _mm512_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4, 8, 8, 8, 8, 12, 12, 12, 12)),
                       _mm512_set1_epi32(15));
  return _mm512_add_epi32(_mm512_add_epi32(n, n), _mm512_set1_epi32(1));
}
inline IqPair iq_pair(const BlockIQ2_XXS& b, int ib) {
  const auto* q = reinterpret_cast<const uint8_t*>(b.qs) + 8 * ib;  // chunk ib: 4 index bytes, its sign word
  const uint32_t a0 = load_u32(q + 4), a1 = load_u32(q + 12);
  auto g = [&](int k) { return (long long)kIq2xxsGrid[q[k]]; };
  return {_mm512_set_epi64(g(11), g(10), g(9), g(8), g(3), g(2), g(1), g(0)), signs7x8(a0, a1),
          two_scales((int)(2 * (a0 >> 28) + 1), (int)(2 * (a1 >> 28) + 1))};
}
inline IqPair iq_pair(const BlockIQ3_XXS& b, int ib) {
  const uint8_t* q = b.qs + 8 * ib;
  const uint32_t a0 = load_u32(b.qs + 64 + 4 * ib), a1 = load_u32(b.qs + 68 + 4 * ib);
  // 16 scalar loads: on Zen 5 1.3x the speed of a 16-lane gather
  auto g4 = [&](int k) {
    return _mm_setr_epi32((int)kIq3xxsGrid[q[k]], (int)kIq3xxsGrid[q[k + 1]], (int)kIq3xxsGrid[q[k + 2]],
                          (int)kIq3xxsGrid[q[k + 3]]);
  };
  const __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(g4(0)), g4(4), 1);
  const __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(g4(8)), g4(12), 1);
  return {_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), signs7x8(a0, a1),
          two_scales((int)(2 * (a0 >> 28) + 1), (int)(2 * (a1 >> 28) + 1))};
}
inline IqPair iq_pair(const BlockIQ2_XS& b, int ib) {
  // per 8 values a 9-bit grid index and a 7-bit sign index above it
  const uint16_t* q = b.qs + 4 * ib;
  const __m128i f = _mm_srli_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(q)), 9);
  const __m128i odd = odd_nibbles();
  const __m128i p = _mm_xor_si128(_mm_shuffle_epi8(odd, f), _mm_shuffle_epi8(odd, _mm_srli_epi16(f, 4)));
  const __m128i sg = _mm_packus_epi16(_mm_or_si128(f, _mm_slli_epi16(p, 7)), _mm_setzero_si128());
  auto g = [&](int k) { return (long long)kIq2xsGrid[q[k] & 511]; };
  return {_mm512_set_epi64(g(7), g(6), g(5), g(4), g(3), g(2), g(1), g(0)), (uint64_t)_mm_cvtsi128_si64(sg),
          four_scales(b.scales[ib] | (uint32_t)b.scales[ib + 1] << 8)};
}
inline IqPair iq_pair(const BlockIQ2_S& b, int ib) {
  // indices k < 4 and k >= 4 as 16-bit fields of two words: the qs bytes, 2-bit fields of qh above
  auto ix4 = [&](int c) { return index_words(b.qs + 4 * c, _pdep_u64(b.qh[c], 0x0300030003000300ull)); };
  const uint64_t ix0 = ix4(ib), ix1 = ix4(ib + 1);
  auto g = [&](int k) { return (long long)kIq2sGrid[((k < 4 ? ix0 : ix1) >> (16 * (k & 3))) & 0xffff]; };
  uint64_t neg;
  std::memcpy(&neg, b.qs + 32 + 4 * ib, 8);
  return {_mm512_set_epi64(g(7), g(6), g(5), g(4), g(3), g(2), g(1), g(0)), neg,
          four_scales(b.scales[ib] | (uint32_t)b.scales[ib + 1] << 8)};
}
inline IqPair iq_pair(const BlockIQ3_S& b, int ib) {
  // index k: byte k of qs, bit 8 from bit k of the two chunks' qh bytes (here a gather is as fast
  // as 16 loads and their index arithmetic)
  const __m512i lo = _mm512_cvtepu8_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs + 8 * ib)));
  const __m512i hi =
      _mm512_and_si512(_mm512_srlv_epi32(_mm512_set1_epi32(b.qh[ib] | b.qh[ib + 1] << 8),
                                         _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)),
                       _mm512_set1_epi32(1));
  uint64_t neg;
  std::memcpy(&neg, b.signs + 4 * ib, 8);
  const int s = b.scales[ib / 2];  // ib even: the pair's two nibbles
  return {_mm512_i32gather_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 8)), kIq3sGrid.data(), 4), neg,
          two_scales(2 * (s & 15) + 1, 2 * (s >> 4) + 1)};
}
template <class Block>
float dot_iq_avx512(const Block* w, const BlockQ8KA* x, int64_t nblk) {
  float s = 0.0f;
  const __m512i zero = _mm512_setzero_si512();
  for (int64_t i = 0; i < nblk; ++i) {
    __m512i acc = zero;
    for (int ib = 0; ib < 8; ib += 2) {
      const IqPair c = iq_pair(w[i], ib);
      __m512i q = _mm512_loadu_si512(x[i].qs + 32 * ib);
      q = _mm512_mask_sub_epi8(q, (__mmask64)c.neg, zero, q);
      acc = _mm512_add_epi32(acc, _mm512_mullo_epi32(_mm512_dpbusd_epi32(zero, c.mag, q), c.sc));
    }
    s += iq_unit(w[i]) * x[i].d * (float)_mm512_reduce_add_epi32(acc);
  }
  return s;
}

inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

// IQ1: v = 8 g + t with g in {-1, 0, 1} and t = +-1 per group of 8, so per 4 values
// sum v q = 8 sum (g + 1) q + (t - 8) sum q.
struct Iq1Chunk {
  __m256i g;      // the 4 points' bytes, g in {-1, 0, 1}
  __m256i shift;  // t per lane of 4 values
  int sc0, sc1;
};
inline __m256i shift_lanes(bool n0, bool n1, bool n2, bool n3) {
  const int t0 = n0 ? -1 : 1, t1 = n1 ? -1 : 1, t2 = n2 ? -1 : 1, t3 = n3 ? -1 : 1;
  return _mm256_set_epi32(t3, t3, t2, t2, t1, t1, t0, t0);
}
inline Iq1Chunk iq1_chunk(const BlockIQ1_S& b, int ib) {
  const int h = b.qh[ib];
  // the 4 11-bit indices as 16-bit fields of one word: the qs bytes, the 3-bit fields of h above
  const uint64_t ix = index_words(b.qs + 4 * ib, _pdep_u64((uint64_t)h, 0x0700070007000700ull));
  auto g = [&](int l) { return (long long)kIq1sGrid[(ix >> (16 * l)) & 0xffff]; };
  const bool neg = (h & 0x8000) != 0;
  const int sc = 2 * ((h >> 12) & 7) + 1;
  return {_mm256_set_epi64x(g(3), g(2), g(1), g(0)), shift_lanes(neg, neg, neg, neg), sc, sc};
}
inline Iq1Chunk iq1_chunk(const BlockIQ1_M& b, int ib) {
  uint16_t sc[4];
  std::memcpy(sc, b.scales, 8);
  const int s = sc[ib / 2] >> (6 * (ib % 2));
  const int h0 = b.qh[2 * ib], h1 = b.qh[2 * ib + 1];
  // as IQ1_S's: the 4 indices as 16-bit fields, bits 8-10 from the low 3 bits of each nibble
  const uint64_t ix =
      index_words(b.qs + 4 * ib, _pdep_u64((uint64_t)(h0 | h1 << 8), 0x0f000f000f000f00ull) & 0x0700070007000700ull);
  auto g = [&](int l) { return (long long)kIq1sGrid[(ix >> (16 * l)) & 0xffff]; };
  // t = 1 - 2 * (bit 3 of group l's nibble): bits 3, 7, 11, 15 of the two bytes, two lanes each
  const __m256i bits = _mm256_and_si256(
      _mm256_srlv_epi32(_mm256_set1_epi32(h0 | (h1 << 8)), _mm256_setr_epi32(3, 3, 7, 7, 11, 11, 15, 15)),
      _mm256_set1_epi32(1));
  return {_mm256_set_epi64x(g(3), g(2), g(1), g(0)), _mm256_sub_epi32(_mm256_set1_epi32(1), _mm256_slli_epi32(bits, 1)),
          2 * (s & 7) + 1, 2 * ((s >> 3) & 7) + 1};
}

template <class Block>
float dot_iq1_avx512(const Block* w, const BlockQ8KA* x, int64_t nblk) {
  float s = 0.0f;
  const __m256i zero = _mm256_setzero_si256(), ones = _mm256_set1_epi8(1), eight = _mm256_set1_epi32(8);
  for (int64_t i = 0; i < nblk; ++i) {
    __m256i acc = zero;
    for (int ib = 0; ib < 8; ++ib) {
      const Iq1Chunk c = iq1_chunk(w[i], ib);
      const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs + 32 * ib));
      const __m256i gq = _mm256_dpbusd_epi32(zero, _mm256_add_epi8(c.g, ones), q);  // sum (g + 1) q
      const __m256i sq = _mm256_dpbusd_epi32(zero, ones, q);                         // sum q
      const __m256i v = _mm256_add_epi32(_mm256_slli_epi32(gq, 3), _mm256_mullo_epi32(_mm256_sub_epi32(c.shift, eight), sq));
      const __m256i sc = _mm256_set_epi32(c.sc1, c.sc1, c.sc1, c.sc1, c.sc0, c.sc0, c.sc0, c.sc0);
      acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(v, sc));
    }
    s += iq_unit(w[i]) * x[i].d * (float)hsum_epi32(acc);
  }
  return s;
}

}  // namespace
}  // namespace loom::cpu
