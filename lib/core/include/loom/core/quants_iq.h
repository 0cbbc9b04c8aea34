// The i-quants IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S (block layouts bit-exact
// with GGUF): 256-value blocks where each group of 8 values (4 for IQ3) is one point of a fixed
// codebook (the "grid"), with signs and small per-32 or per-16 scales. Every type decodes to
//   x[e] = unit * sc[e / 16] * v[e]
// with small integers v (the grid point's coordinate with its sign) and sc (2s + 1 for a stored
// scale s): iq_unpack gives (unit, sc, v) of a block, which both the reference dequantizers and
// the CPU's integer dot products use, so the two read a block the same way.
#pragma once

#include <array>
#include <bit>
#include <cstdint>
#include <cstring>

#include "loom/core/dtype.h"
#include "loom/core/fp16.h"

namespace loom {

// Codebooks, one entry per point, coordinate j in byte j (little-endian): IQ2's magnitudes
// {8, 25, 43}, IQ3_XXS's {4, 12, ..., 52, 62}, IQ3_S's {1, 3, ..., 15}, IQ1's {-1, 0, 1} (int8).
extern const std::array<uint64_t, 256> kIq2xxsGrid;
extern const std::array<uint64_t, 512> kIq2xsGrid;
extern const std::array<uint64_t, 1024> kIq2sGrid;
extern const std::array<uint32_t, 256> kIq3xxsGrid;
extern const std::array<uint32_t, 512> kIq3sGrid;
extern const std::array<uint64_t, 2048> kIq1sGrid;

struct BlockIQ2_XXS {  // per 32: 4 x (8-bit grid index), 4 x (7-bit sign index), 4-bit scale
  fp16_t d;
  uint16_t qs[32];
};
static_assert(sizeof(BlockIQ2_XXS) == 66);
struct BlockIQ2_XS {  // per 8 values: 9-bit grid index | 7-bit sign index << 9; a 4-bit scale per 16
  fp16_t d;
  uint16_t qs[32];
  uint8_t scales[8];
};
static_assert(sizeof(BlockIQ2_XS) == 74);
struct BlockIQ2_S {  // per 8: grid index (8 low bits in qs, 2 high in qh), 8 explicit signs
  fp16_t d;
  uint8_t qs[64];  // [0, 32): grid index bits 0-7; [32, 64): sign bytes
  uint8_t qh[8];
  uint8_t scales[8];
};
static_assert(sizeof(BlockIQ2_S) == 82);
struct BlockIQ3_XXS {  // per 4 values an 8-bit grid index; per 32 a word of 4 sign indices + scale
  fp16_t d;
  uint8_t qs[96];  // [0, 64): grid indices; [64, 96): 8 little-endian u32
};
static_assert(sizeof(BlockIQ3_XXS) == 98);
struct BlockIQ3_S {  // per 4 values a 9-bit grid index; 8 explicit signs per 8; a 4-bit scale per 32
  fp16_t d;
  uint8_t qs[64];
  uint8_t qh[8];
  uint8_t signs[32];
  uint8_t scales[4];
};
static_assert(sizeof(BlockIQ3_S) == 110);
struct BlockIQ1_S {  // per 8 an 11-bit grid index; per 32 a 3-bit scale and the sign of a shift
  fp16_t d;
  uint8_t qs[32];
  uint16_t qh[8];
};
static_assert(sizeof(BlockIQ1_S) == 50);
struct BlockIQ1_M {  // per 8 an 11-bit index and a shift sign; a 3-bit scale per 16; d spread in scales
  uint8_t qs[32];
  uint8_t qh[16];
  uint8_t scales[8];
};
static_assert(sizeof(BlockIQ1_M) == 56);

// A block as integers: x[e] = unit * sc[e / 16] * v[e].
struct IqInts {
  float unit;
  uint8_t sc[16];
  alignas(64) int8_t v[256];
};

namespace iq_detail {
// 8 sign bits -> a mask with 0xff in byte j where bit j is set.
inline constexpr auto kSignMasks = [] {
  std::array<uint64_t, 256> t{};
  for (int s = 0; s < 256; ++s)
    for (int j = 0; j < 8; ++j)
      if ((s >> j) & 1) t[(size_t)s] |= 0xffull << (8 * j);
  return t;
}();
inline uint64_t sign_mask(uint8_t s) { return kSignMasks[s]; }
// The IQ2_XXS / IQ2_XS / IQ3_XXS sign index: 7 stored bits, the eighth makes the count even.
inline constexpr auto kSigns7 = [] {
  std::array<uint8_t, 128> t{};
  for (uint32_t i = 0; i < 128; ++i) t[i] = (uint8_t)(i | ((std::popcount(i) & 1) << 7));
  return t;
}();
inline uint8_t signs_of7(uint32_t i7) { return kSigns7[i7 & 127]; }
// Magnitudes (bytes < 128) with the signs of mask m: byte b -> -b where m has 0xff. No byte is 0,
// so the per-byte negation (b ^ 0xff) + 1 never carries into the next byte.
inline void put_signed8(int8_t* v, uint64_t g, uint64_t m) {
  const uint64_t r = (g ^ m) + (m & 0x0101010101010101ull);
  std::memcpy(v, &r, 8);
}
inline void put_signed4x2(int8_t* v, uint32_t g0, uint32_t g1, uint8_t s) {
  put_signed8(v, (uint64_t)g0 | ((uint64_t)g1 << 32), sign_mask(s));
}
// IQ1: coordinates g in {-1, 0, 1} shifted by +-1/8: v = 8 g + (neg ? -1 : 1).
inline void put_iq1(int8_t* v, uint64_t g, bool neg) {
  int8_t c[8];
  std::memcpy(c, &g, 8);
  for (int j = 0; j < 8; ++j) v[j] = (int8_t)(8 * c[j] + (neg ? -1 : 1));
}
inline uint32_t load32(const void* p) {
  uint32_t u;
  std::memcpy(&u, p, 4);
  return u;
}
// A 4-bit scale s per 16 values, two to a byte (IQ2_XS, IQ2_S): 2 s + 1 for values 32 ib ...
inline void scales16(IqInts& o, int ib, uint8_t byte) {
  o.sc[2 * ib] = (uint8_t)(2 * (byte & 15) + 1);
  o.sc[2 * ib + 1] = (uint8_t)(2 * (byte >> 4) + 1);
}
}  // namespace iq_detail

// IQ1_M's f16 scale: the top nibbles of its four scale words, lowest word first.
inline fp16_t iq1_m_d(const BlockIQ1_M& b) {
  uint16_t sc[4];
  std::memcpy(sc, b.scales, 8);
  return (fp16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}
// A block's unit (x = unit * sc * v): d times the type's fixed factor.
inline float iq_unit(const BlockIQ2_XXS& b) { return fp16_to_f32(b.d) * 0.125f; }
inline float iq_unit(const BlockIQ2_XS& b) { return fp16_to_f32(b.d) * 0.125f; }
inline float iq_unit(const BlockIQ2_S& b) { return fp16_to_f32(b.d) * 0.125f; }
inline float iq_unit(const BlockIQ3_XXS& b) { return fp16_to_f32(b.d) * 0.25f; }
inline float iq_unit(const BlockIQ3_S& b) { return fp16_to_f32(b.d); }
inline float iq_unit(const BlockIQ1_S& b) { return fp16_to_f32(b.d) * 0.125f; }
inline float iq_unit(const BlockIQ1_M& b) { return fp16_to_f32(iq1_m_d(b)) * 0.125f; }

inline void iq_unpack(const BlockIQ2_XXS& b, IqInts& o) {
  using namespace iq_detail;
  o.unit = iq_unit(b);
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t idx = load32(b.qs + 4 * ib), aux = load32(b.qs + 4 * ib + 2);
    o.sc[2 * ib] = o.sc[2 * ib + 1] = (uint8_t)(2 * (aux >> 28) + 1);
    for (int l = 0; l < 4; ++l)
      put_signed8(o.v + 32 * ib + 8 * l, kIq2xxsGrid[(idx >> (8 * l)) & 255],
                  sign_mask(signs_of7((aux >> (7 * l)) & 127)));
  }
}
inline void iq_unpack(const BlockIQ2_XS& b, IqInts& o) {
  using namespace iq_detail;
  o.unit = iq_unit(b);
  for (int ib = 0; ib < 8; ++ib) {
    scales16(o, ib, b.scales[ib]);
    for (int l = 0; l < 4; ++l) {
      const uint16_t q = b.qs[4 * ib + l];
      put_signed8(o.v + 32 * ib + 8 * l, kIq2xsGrid[q & 511], sign_mask(signs_of7(q >> 9)));
    }
  }
}
inline void iq_unpack(const BlockIQ2_S& b, IqInts& o) {
  using namespace iq_detail;
  o.unit = iq_unit(b);
  for (int ib = 0; ib < 8; ++ib) {
    scales16(o, ib, b.scales[ib]);
    for (int l = 0; l < 4; ++l) {
      const int idx = b.qs[4 * ib + l] | (((b.qh[ib] >> (2 * l)) & 3) << 8);
      put_signed8(o.v + 32 * ib + 8 * l, kIq2sGrid[idx], sign_mask(b.qs[32 + 4 * ib + l]));
    }
  }
}
inline void iq_unpack(const BlockIQ3_XXS& b, IqInts& o) {
  using namespace iq_detail;
  o.unit = iq_unit(b);
  for (int ib = 0; ib < 8; ++ib) {
    const uint32_t aux = load32(b.qs + 64 + 4 * ib);
    o.sc[2 * ib] = o.sc[2 * ib + 1] = (uint8_t)(2 * (aux >> 28) + 1);
    const uint8_t* q = b.qs + 8 * ib;
    for (int l = 0; l < 4; ++l)
      put_signed4x2(o.v + 32 * ib + 8 * l, kIq3xxsGrid[q[2 * l]], kIq3xxsGrid[q[2 * l + 1]],
                    signs_of7((aux >> (7 * l)) & 127));
  }
}
inline void iq_unpack(const BlockIQ3_S& b, IqInts& o) {
  using namespace iq_detail;
  o.unit = iq_unit(b);
  for (int ib = 0; ib < 8; ++ib) {
    o.sc[2 * ib] = o.sc[2 * ib + 1] = (uint8_t)(2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 15) + 1);
    const uint8_t* q = b.qs + 8 * ib;
    const int h = b.qh[ib];
    for (int l = 0; l < 4; ++l)
      put_signed4x2(o.v + 32 * ib + 8 * l, kIq3sGrid[q[2 * l] | (((h >> (2 * l)) & 1) << 8)],
                    kIq3sGrid[q[2 * l + 1] | (((h >> (2 * l + 1)) & 1) << 8)], b.signs[4 * ib + l]);
  }
}
inline void iq_unpack(const BlockIQ1_S& b, IqInts& o) {
  using namespace iq_detail;
  o.unit = iq_unit(b);
  for (int ib = 0; ib < 8; ++ib) {
    const int h = b.qh[ib];
    o.sc[2 * ib] = o.sc[2 * ib + 1] = (uint8_t)(2 * ((h >> 12) & 7) + 1);
    for (int l = 0; l < 4; ++l)
      put_iq1(o.v + 32 * ib + 8 * l, kIq1sGrid[b.qs[4 * ib + l] | (((h >> (3 * l)) & 7) << 8)], (h & 0x8000) != 0);
  }
}
inline void iq_unpack(const BlockIQ1_M& b, IqInts& o) {
  using namespace iq_detail;
  o.unit = iq_unit(b);
  uint16_t sc[4];
  std::memcpy(sc, b.scales, 8);
  for (int ib = 0; ib < 8; ++ib) {
    const int s = sc[ib / 2] >> (6 * (ib % 2));
    o.sc[2 * ib] = (uint8_t)(2 * (s & 7) + 1);
    o.sc[2 * ib + 1] = (uint8_t)(2 * ((s >> 3) & 7) + 1);
    for (int l = 0; l < 4; ++l) {
      const int h = b.qh[2 * ib + l / 2] >> (4 * (l % 2));  // index bits 8-10, then the shift's sign
      put_iq1(o.v + 32 * ib + 8 * l, kIq1sGrid[b.qs[4 * ib + l] | ((h & 7) << 8)], (h & 8) != 0);
    }
  }
}

// Reference rows, n a multiple of 256: dequantize (x = unit * sc * v) and quantize (a search over
// each group's grid points, unweighted).
void dequantize_iq2_xxs_row(const void* src, float* dst, int64_t n);
void dequantize_iq2_xs_row(const void* src, float* dst, int64_t n);
void dequantize_iq2_s_row(const void* src, float* dst, int64_t n);
void dequantize_iq3_xxs_row(const void* src, float* dst, int64_t n);
void dequantize_iq3_s_row(const void* src, float* dst, int64_t n);
void dequantize_iq1_s_row(const void* src, float* dst, int64_t n);
void dequantize_iq1_m_row(const void* src, float* dst, int64_t n);
void quantize_iq2_xxs_row(const float* src, void* dst, int64_t n);
void quantize_iq2_xs_row(const float* src, void* dst, int64_t n);
void quantize_iq2_s_row(const float* src, void* dst, int64_t n);
void quantize_iq3_xxs_row(const float* src, void* dst, int64_t n);
void quantize_iq3_s_row(const float* src, void* dst, int64_t n);
void quantize_iq1_s_row(const float* src, void* dst, int64_t n);
void quantize_iq1_m_row(const float* src, void* dst, int64_t n);
// The same searches weighting each value's error by its column's importance (quants.h).
void quantize_iq2_xxs_row_imp(const float* src, void* dst, int64_t n, const float* importance);
void quantize_iq2_xs_row_imp(const float* src, void* dst, int64_t n, const float* importance);
void quantize_iq2_s_row_imp(const float* src, void* dst, int64_t n, const float* importance);
void quantize_iq3_xxs_row_imp(const float* src, void* dst, int64_t n, const float* importance);
void quantize_iq3_s_row_imp(const float* src, void* dst, int64_t n, const float* importance);
void quantize_iq1_s_row_imp(const float* src, void* dst, int64_t n, const float* importance);
void quantize_iq1_m_row_imp(const float* src, void* dst, int64_t n, const float* importance);

}  // namespace loom
