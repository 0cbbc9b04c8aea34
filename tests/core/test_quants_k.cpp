// Q4_K and Q6_K against hand-derived blocks: the 6-bit scale packing, the nibble / 2-bit
// interleaving (written here per element, independently of the library's loops), exact
// quantization of inputs that sit on a known grid, and decoding of hand-built blocks.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "loom/core/quants.h"

namespace loom {
namespace {

// ---- Q4_K ------------------------------------------------------------------------------------

// Where element e (0..255) of a Q4_K block keeps its 4 bits: 64-element chunk c = e / 64 uses
// qs[32c .. 32c + 31]; the first 32 of the chunk the low nibbles, the next 32 the high ones.
int q4_k_level(const BlockQ4_K& b, int e) {
  const int c = e / 64, r = e % 64;
  const uint8_t byte = b.qs[32 * c + r % 32];
  return r < 32 ? (byte & 15) : (byte >> 4);
}

// Scale bytes and the (sc, m) pairs they hold, decoded by hand:
//   j < 4:  sc = byte[j] & 63, m = byte[j + 4] & 63
//   j >= 4: sc = (byte[j + 4] & 15) | (byte[j - 4] >> 6) << 4,
//           m = (byte[j + 4] >> 4) | (byte[j] >> 6) << 4
const uint8_t kScaleBytes[12] = {0x41, 0x82, 0xc3, 0x04, 0x45, 0x86,
                                 0xc7, 0x08, 0x21, 0x43, 0x65, 0x87};
const uint8_t kSc[8] = {1, 2, 3, 4, 17, 35, 53, 7};
const uint8_t kM[8] = {5, 6, 7, 8, 18, 36, 54, 8};

TEST(QuantQ4_K, ScaleMinUnpack) {
  for (int j = 0; j < 8; ++j) {
    const ScaleMin sm = q4_k_scale_min(kScaleBytes, j);
    EXPECT_EQ(sm.sc, kSc[j]) << j;
    EXPECT_EQ(sm.m, kM[j]) << j;
  }
}

TEST(QuantQ4_K, ScaleMinPack) {
  uint8_t bytes[12] = {};
  for (int j = 0; j < 8; ++j) q4_k_set_scale_min(bytes, j, kSc[j], kM[j]);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(bytes[i], kScaleBytes[i]) << "byte " << i;
  // in reverse order, over garbage: each pair's bits are replaced, the others kept
  std::memset(bytes, 0xff, sizeof(bytes));
  for (int j = 7; j >= 0; --j) q4_k_set_scale_min(bytes, j, kSc[j], kM[j]);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(bytes[i], kScaleBytes[i]) << "byte " << i;
  // all 64 x 64 values survive a pack / unpack next to a neighbour with all bits set
  for (int j = 0; j < 8; ++j)
    for (int sc = 0; sc < 64; ++sc)
      for (int m = 0; m < 64; m += 7) {
        uint8_t b[12];
        for (int k = 0; k < 8; ++k) q4_k_set_scale_min(b, k, 63, 63);
        q4_k_set_scale_min(b, j, (uint8_t)sc, (uint8_t)m);
        for (int k = 0; k < 8; ++k) {
          const ScaleMin got = q4_k_scale_min(b, k);
          ASSERT_EQ(got.sc, k == j ? sc : 63);
          ASSERT_EQ(got.m, k == j ? m : 63);
        }
      }
}

TEST(QuantQ4_K, DequantizeHandBuilt) {
  BlockQ4_K blk;
  blk.d = 0x3c00;     // 1.0
  blk.dmin = 0x3800;  // 0.5
  std::memcpy(blk.scales, kScaleBytes, 12);
  for (int i = 0; i < 128; ++i) blk.qs[i] = (uint8_t)(i * 5 + 3);
  std::vector<float> y(256);
  dequantize_q4_k_row(&blk, y.data(), 256);
  // Spot values by hand: x = 1.0 * sc * q - 0.5 * m
  EXPECT_EQ(y[0], 0.5f);      // qs[0] = 3, low nibble 3, (sc, m) = (1, 5): 3 - 2.5
  EXPECT_EQ(y[32], -3.0f);    // qs[0] high nibble 0, (2, 6): 0 - 3
  EXPECT_EQ(y[200], 556.0f);  // chunk 3, qs[104] = 523 & 255 = 0x0b, low: 11 * 53 - 27
  EXPECT_EQ(y[255], 45.0f);   // qs[127] = 638 & 255 = 0x7e, high 7, (7, 8): 49 - 4
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32;
    EXPECT_EQ(y[e], 1.0f * kSc[j] * q4_k_level(blk, e) - 0.5f * kM[j]) << "element " << e;
  }
}

// Inputs on an exact affine grid per sub-block: x = k_j / 64 * q - n_j / 128 with q = 0..15
// (both ends present). The search then finds scale k_j / 64 and min n_j / 128 exactly (up to
// float noise far below a level), so with max k = 63 and max n = 63:
// d = 63/64 / 63 = 2^-6 (0x2400), dmin = 63/128 / 63 = 2^-7 (0x2000), sc_j = k_j, m_j = n_j.
const int kK[8] = {63, 10, 33, 47, 20, 51, 38, 17};
const int kN[8] = {5, 63, 0, 12, 40, 27, 63, 49};
int grid_level(int e) { return (7 * (e % 32) + e / 32) % 16; }

TEST(QuantQ4_K, GridInputBytesByHand) {
  std::vector<float> x(256);
  for (int e = 0; e < 256; ++e) x[e] = kK[e / 32] / 64.0f * grid_level(e) - kN[e / 32] / 128.0f;
  BlockQ4_K blk;
  quantize_q4_k_row(x.data(), &blk, 256);
  EXPECT_EQ(blk.d, 0x2400);
  EXPECT_EQ(blk.dmin, 0x2000);
  // (k, n) packed by hand; high bits of pairs 4..7 = 20>>4=1, 51>>4=3, 38>>4=2, 17>>4=1 (sc)
  // and 40>>4=2, 27>>4=1, 63>>4=3, 49>>4=3 (m).
  // Bytes 0-3: k_j | hi(k_j+4) << 6 = 0x7f 0xca 0xa1 0x6f; bytes 4-7: n_j | hi(n_j+4) << 6 =
  // 0x85 0x7f 0xc0 0xcc; bytes 8-11: low nibbles of (k, n) = (20, 40) (51, 27) (38, 63) (17, 49).
  const uint8_t scales[12] = {0x7f, 0xca, 0xa1, 0x6f, 0x85, 0x7f,
                              0xc0, 0xcc, 0x84, 0xb3, 0xf6, 0x11};
  for (int i = 0; i < 12; ++i) EXPECT_EQ(blk.scales[i], scales[i]) << "scale byte " << i;
  EXPECT_EQ(blk.qs[0], 0x10);    // element 0: level 0, element 32: level 1
  EXPECT_EQ(blk.qs[1], 0x87);    // element 1: 7, element 33: 8
  EXPECT_EQ(blk.qs[127], 0x0f);  // element 223: 15, element 255: 0
  for (int e = 0; e < 256; ++e) ASSERT_EQ(q4_k_level(blk, e), grid_level(e)) << "element " << e;

  std::vector<float> y(256);
  dequantize_q4_k_row(&blk, y.data(), 256);
  EXPECT_EQ(y, x);  // on the grid: decodes exactly
}

TEST(QuantQ4_K, ZeroAndConstantBlocks) {
  std::vector<float> x(768, 0.0f);
  for (int i = 256; i < 512; ++i) x[i] = -1.0f;  // all below zero: carried by the min alone
  for (int i = 512; i < 768; ++i) x[i] = 0.75f;
  BlockQ4_K blk[3];
  quantize_q4_k_row(x.data(), blk, 768);
  EXPECT_EQ(blk[0].d, 0);
  EXPECT_EQ(blk[0].dmin, 0);
  EXPECT_EQ(blk[1].d, 0);
  std::vector<float> y(768);
  dequantize_q4_k_row(blk, y.data(), 768);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(y[i], 0.0f);
  for (int i = 256; i < 512; ++i) ASSERT_NEAR(y[i], -1.0f, 1e-3f);
  for (int i = 512; i < 768; ++i) ASSERT_NEAR(y[i], 0.75f, 1e-3f);
}

// ---- Q6_K ------------------------------------------------------------------------------------

// Element e (0..255) of a Q6_K block: half h = e / 128, r = e % 128, quarter k = r / 32, lane l.
// Low 4 bits: ql[64h + l + 32 (k odd)], low nibble for k < 2, high for k >= 2.
// High 2 bits: qh[32h + l] >> 2k. Scale: scales[e / 16].
int q6_k_level(const BlockQ6_K& b, int e) {
  const int h = e / 128, r = e % 128, k = r / 32, l = r % 32;
  const int low = (b.ql[64 * h + l + 32 * (k & 1)] >> (4 * (k >> 1))) & 15;
  const int high = (b.qh[32 * h + l] >> (2 * k)) & 3;
  return low | high << 4;
}

TEST(QuantQ6_K, DequantizeHandBuilt) {
  BlockQ6_K blk;
  blk.d = 0x3800;  // 0.5
  for (int s = 0; s < 16; ++s) blk.scales[s] = (int8_t)(s - 8);
  for (int i = 0; i < 128; ++i) blk.ql[i] = (uint8_t)(i * 37 + 11);
  for (int i = 0; i < 64; ++i) blk.qh[i] = (uint8_t)(i * 73 + 5);
  std::vector<float> y(256);
  dequantize_q6_k_row(&blk, y.data(), 256);
  // Spot values by hand: x = 0.5 * scale * (q - 32)
  // e 0: ql[0] = 11 low 11, qh[0] = 5 bits 0-1 = 1: q = 27; 0.5 * -8 * -5
  EXPECT_EQ(y[0], 20.0f);
  // e 70 (k 2, l 6): ql[6] = 0xe9 high 14, qh[6] = 187 bits 4-5 = 3: q = 62; 0.5 * -4 * 30
  EXPECT_EQ(y[70], -60.0f);
  // e 100 (k 3, l 4): ql[36] = 0x3f high 3, qh[4] = 41 bits 6-7 = 0: q = 3; 0.5 * -2 * -29
  EXPECT_EQ(y[100], 29.0f);
  // e 150 (h 1, k 0, l 22): ql[86] = 0x79 low 9, qh[54] = 107 bits 0-1 = 3: q = 57; 0.5 * 1 * 25
  EXPECT_EQ(y[150], 12.5f);
  // e 255 (h 1, k 3, l 31): ql[127] = 0x66 high 6, qh[63] = 252 bits 6-7 = 3: q = 54; 0.5 * 7 * 22
  EXPECT_EQ(y[255], 77.0f);
  for (int e = 0; e < 256; ++e)
    EXPECT_EQ(y[e], 0.5f * (float)(e / 16 - 8) * (float)(q6_k_level(blk, e) - 32))
        << "element " << e;
}

// Inputs on an exact symmetric grid per 16-element sub-block: x = c_b * t with c_b = k_b * 2^-10,
// integer t in [-31, 31] plus one t = -32 (the extreme). The fit recovers scale c_b; the block
// maps the largest scale (k = 128, 2^-3) to int8 -128, so d = 2^-3 / -128 = -2^-10 (0x9400) and
// scales[b] = -k_b; stored levels are t + 32.
const int kQ6K[16] = {128, 3, 77, 100, 64, 1, 127, 90, 45, 12, 128, 33, 99, 5, 71, 110};
int grid_t(int e) {
  const int b = e / 16, i = e % 16;
  return i == b ? -32 : (i * 13 + b * 5) % 63 - 31;
}

TEST(QuantQ6_K, GridInputBytesByHand) {
  std::vector<float> x(256);
  for (int e = 0; e < 256; ++e) x[e] = kQ6K[e / 16] * 0x1p-10f * grid_t(e);
  BlockQ6_K blk;
  quantize_q6_k_row(x.data(), &blk, 256);
  EXPECT_EQ(blk.d, 0x9400);
  for (int s = 0; s < 16; ++s) EXPECT_EQ(blk.scales[s], -kQ6K[s]) << "scale " << s;
  // ql[0]: element 0 (t -32, q 0) low, element 64 (t = 20 - 31 = -11, q 21 = 0x15) high: 0x50.
  EXPECT_EQ(blk.ql[0], 0x50);
  // qh[0]: q of elements 0, 32, 64, 96 = 0, 11, 21, 31 -> high bits 0, 0, 1, 1 at bits 0, 2, 4, 6.
  EXPECT_EQ(blk.qh[0], 0x50);
  for (int e = 0; e < 256; ++e) ASSERT_EQ(q6_k_level(blk, e), grid_t(e) + 32) << "element " << e;

  std::vector<float> y(256);
  dequantize_q6_k_row(&blk, y.data(), 256);
  EXPECT_EQ(y, x);
}

TEST(QuantQ6_K, ZeroBlockAndMixedSigns) {
  std::vector<float> x(512, 0.0f);
  // second block: sub-block 0's extreme is positive, sub-block 1's negative
  for (int i = 0; i < 16; ++i) x[256 + i] = (i == 3) ? 2.0f : 0.1f * (i - 8);
  for (int i = 0; i < 16; ++i) x[272 + i] = (i == 5) ? -1.0f : 0.05f * (i - 8);
  BlockQ6_K blk[2];
  quantize_q6_k_row(x.data(), blk, 512);
  const BlockQ6_K zero{};
  EXPECT_EQ(std::memcmp(&blk[0], &zero, sizeof(zero)), 0);
  std::vector<float> y(512, 1.0f);
  dequantize_q6_k_row(blk, y.data(), 512);
  for (int i = 0; i < 256; ++i) ASSERT_EQ(y[i], 0.0f);
  // Sub-block 0 fits scale ~ -2/32 (its extreme +2 maps to -32), sub-block 1 ~ +1/32. The first
  // is the largest, so it maps to -128, d = -1/16 / -128 > 0, and sub-block 1 gets ~ +64.
  EXPECT_EQ(blk[1].d & 0x8000, 0);
  EXPECT_EQ(blk[1].scales[0], -128);
  EXPECT_NEAR(blk[1].scales[1], 64, 2);
  for (int s = 2; s < 16; ++s) EXPECT_EQ(blk[1].scales[s], 0);
  // within half a level step (1/32 for sub-block 0) plus the scale fit's slack
  for (int i = 256; i < 512; ++i) EXPECT_NEAR(y[i], x[i], 0.035f) << i;
  EXPECT_NEAR(y[259], 2.0f, 0.035f);
  EXPECT_NEAR(y[277], -1.0f, 0.02f);
}

}  // namespace
}  // namespace loom
