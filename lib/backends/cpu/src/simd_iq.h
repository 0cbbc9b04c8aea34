// AVX-512 dots of the i-quants against q8k columns (included under simd_avx512.cpp's target
// pragma). Per 32 values: the 4 (IQ3: 8) grid points' unsigned magnitudes as one 256-bit vector,
// the weights' signs moved onto the activations (a masked negation), one vpdpbusd, and each lane
// of 4 products times its 16 values' scale; IQ1's points in {-1, 0, 1} go in as g + 1 with the
// activations' sums taking the offset and the +-1/8 shift back out. Integer sums per block are
// simd_ref_iq.h's exactly, so the results are the scalar level's bit for bit.
#pragma once

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu_vec_dot.h"
#include "loom/core/quants_iq.h"

namespace loom::cpu {
namespace {

using iq_detail::kSigns7;
// 4 x 7 stored sign bits -> 32 (IQ2_XXS, IQ3_XXS).
inline uint32_t signs7x4(uint32_t aux) {
  return kSigns7[aux & 127] | (uint32_t)kSigns7[(aux >> 7) & 127] << 8 | (uint32_t)kSigns7[(aux >> 14) & 127] << 16 |
         (uint32_t)kSigns7[(aux >> 21) & 127] << 24;
}
inline uint32_t load_u32(const void* p) {
  uint32_t u;
  std::memcpy(&u, p, 4);
  return u;
}

// 32 values of a block: magnitudes, negative-value mask, the two 16-value scales.
struct IqChunk {
  __m256i mag;
  uint32_t neg;
  int sc0, sc1;
};

inline IqChunk iq_chunk(const BlockIQ2_XXS& b, int ib) {
  const uint32_t idx = load_u32(b.qs + 4 * ib), aux = load_u32(b.qs + 4 * ib + 2);
  const int sc = (int)(2 * (aux >> 28) + 1);
  return {_mm256_set_epi64x((long long)kIq2xxsGrid[idx >> 24], (long long)kIq2xxsGrid[(idx >> 16) & 255],
                            (long long)kIq2xxsGrid[(idx >> 8) & 255], (long long)kIq2xxsGrid[idx & 255]),
          signs7x4(aux), sc, sc};
}
inline IqChunk iq_chunk(const BlockIQ2_XS& b, int ib) {
  const uint16_t* q = b.qs + 4 * ib;
  const uint32_t neg = kSigns7[q[0] >> 9] | (uint32_t)kSigns7[q[1] >> 9] << 8 | (uint32_t)kSigns7[q[2] >> 9] << 16 |
                       (uint32_t)kSigns7[q[3] >> 9] << 24;
  return {_mm256_set_epi64x((long long)kIq2xsGrid[q[3] & 511], (long long)kIq2xsGrid[q[2] & 511],
                            (long long)kIq2xsGrid[q[1] & 511], (long long)kIq2xsGrid[q[0] & 511]),
          neg, 2 * (b.scales[ib] & 15) + 1, 2 * (b.scales[ib] >> 4) + 1};
}
inline IqChunk iq_chunk(const BlockIQ2_S& b, int ib) {
  const uint8_t* q = b.qs + 4 * ib;
  const int h = b.qh[ib];
  auto g = [&](int l) { return (long long)kIq2sGrid[q[l] | (((h >> (2 * l)) & 3) << 8)]; };
  return {_mm256_set_epi64x(g(3), g(2), g(1), g(0)), load_u32(b.qs + 32 + 4 * ib), 2 * (b.scales[ib] & 15) + 1,
          2 * (b.scales[ib] >> 4) + 1};
}
inline IqChunk iq_chunk(const BlockIQ3_XXS& b, int ib) {
  const uint8_t* q = b.qs + 8 * ib;
  const uint32_t aux = load_u32(b.qs + 64 + 4 * ib);
  const int sc = (int)(2 * (aux >> 28) + 1);
  return {_mm256_set_epi32((int)kIq3xxsGrid[q[7]], (int)kIq3xxsGrid[q[6]], (int)kIq3xxsGrid[q[5]],
                           (int)kIq3xxsGrid[q[4]], (int)kIq3xxsGrid[q[3]], (int)kIq3xxsGrid[q[2]],
                           (int)kIq3xxsGrid[q[1]], (int)kIq3xxsGrid[q[0]]),
          signs7x4(aux), sc, sc};
}
inline IqChunk iq_chunk(const BlockIQ3_S& b, int ib) {
  // index k: byte k of qs, bit 8 from bit k of qh (a gather: 1.2x the 8 loads', set_epi32 on Zen 5)
  const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(b.qs + 8 * ib)));
  const __m256i hi = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(b.qh[ib]), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7)),
                                      _mm256_set1_epi32(1));
  const __m256i idx = _mm256_or_si256(lo, _mm256_slli_epi32(hi, 8));
  const int sc = 2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 15) + 1;
  return {_mm256_i32gather_epi32(reinterpret_cast<const int*>(kIq3sGrid.data()), idx, 4), load_u32(b.signs + 4 * ib),
          sc, sc};
}

inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

template <class Block>
float dot_iq_avx512(const Block* w, const BlockQ8KA* x, int64_t nblk) {
  float s = 0.0f;
  const __m256i zero = _mm256_setzero_si256();
  for (int64_t i = 0; i < nblk; ++i) {
    __m256i acc = zero;
    for (int ib = 0; ib < 8; ++ib) {
      const IqChunk c = iq_chunk(w[i], ib);
      __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs + 32 * ib));
      q = _mm256_mask_sub_epi8(q, (__mmask32)c.neg, zero, q);
      const __m256i d = _mm256_dpbusd_epi32(zero, c.mag, q);
      const __m256i sc = _mm256_set_epi32(c.sc1, c.sc1, c.sc1, c.sc1, c.sc0, c.sc0, c.sc0, c.sc0);
      acc = _mm256_add_epi32(acc, _mm256_mullo_epi32(d, sc));
    }
    s += iq_unit(w[i]) * x[i].d * (float)hsum_epi32(acc);
  }
  return s;
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
  const uint8_t* q = b.qs + 4 * ib;
  auto g = [&](int l) { return (long long)kIq1sGrid[q[l] | (((h >> (3 * l)) & 7) << 8)]; };
  const bool neg = (h & 0x8000) != 0;
  const int sc = 2 * ((h >> 12) & 7) + 1;
  return {_mm256_set_epi64x(g(3), g(2), g(1), g(0)), shift_lanes(neg, neg, neg, neg), sc, sc};
}
inline Iq1Chunk iq1_chunk(const BlockIQ1_M& b, int ib) {
  uint16_t sc[4];
  std::memcpy(sc, b.scales, 8);
  const int s = sc[ib / 2] >> (6 * (ib % 2));
  const uint8_t* q = b.qs + 4 * ib;
  const int h0 = b.qh[2 * ib], h1 = b.qh[2 * ib + 1];
  const int hl[4] = {h0 & 15, h0 >> 4, h1 & 15, h1 >> 4};
  auto g = [&](int l) { return (long long)kIq1sGrid[q[l] | ((hl[l] & 7) << 8)]; };
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
