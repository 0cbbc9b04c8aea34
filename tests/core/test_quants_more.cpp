// The quant types beyond Q4_0/Q8_0/Q4_K/Q6_K (Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL,
// IQ4_XS, MXFP4): hand-built blocks decoded against a per-element formula written here from the
// GGUF layouts (independently of the library's loops), quantization error on normal data against
// bounds near the measured values (docs/QUANTS.md), inputs on a type's grid quantized exactly,
// and the check that finds NaN / infinite scales.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "loom/core/quants.h"
#include "loom/core/quants_iq.h"
#include "normal_values.h"

namespace loom {
namespace {

std::vector<float> decode(DType t, const void* blocks, int64_t n) {
  std::vector<float> y((size_t)n);
  dtype_info(t).to_float(blocks, y.data(), n);
  return y;
}

// A deterministic byte pattern for the quant bytes of a hand-built block.
void fill_pattern(uint8_t* p, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; ++i) p[i] = (uint8_t)rng();
}

// ---- layouts: element e of a hand-built block, by the format's definition ---------------------

int nib32(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; }
int bit32(const uint8_t* qh, int e) { return (qh[e / 8] >> (e % 8)) & 1; }

TEST(QuantMore, Q4_1AndQ5_1Layouts) {
  BlockQ4_1 a{};
  a.d = f32_to_fp16(0.5f);
  a.m = f32_to_fp16(-3.0f);
  fill_pattern(a.qs, sizeof(a.qs), 1);
  const std::vector<float> ya = decode(DType::Q4_1, &a, 32);
  for (int e = 0; e < 32; ++e) EXPECT_EQ(ya[e], 0.5f * nib32(a.qs, e) - 3.0f) << e;

  BlockQ5_1 b{};
  b.d = f32_to_fp16(0.25f);
  b.m = f32_to_fp16(1.0f);
  fill_pattern(b.qs, sizeof(b.qs), 2);
  fill_pattern(b.qh, sizeof(b.qh), 3);
  const std::vector<float> yb = decode(DType::Q5_1, &b, 32);
  for (int e = 0; e < 32; ++e) EXPECT_EQ(yb[e], 0.25f * (nib32(b.qs, e) + 16 * bit32(b.qh, e)) + 1.0f) << e;
}

TEST(QuantMore, Q5_0Layout) {
  BlockQ5_0 b{};
  b.d = f32_to_fp16(2.0f);
  fill_pattern(b.qs, sizeof(b.qs), 4);
  fill_pattern(b.qh, sizeof(b.qh), 5);
  const std::vector<float> y = decode(DType::Q5_0, &b, 32);
  for (int e = 0; e < 32; ++e) EXPECT_EQ(y[e], 2.0f * (nib32(b.qs, e) + 16 * bit32(b.qh, e) - 16)) << e;
}

TEST(QuantMore, Iq4NlAndMxfp4Layouts) {
  const int8_t nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  BlockIQ4_NL b{};
  b.d = f32_to_fp16(0.125f);
  fill_pattern(b.qs, sizeof(b.qs), 6);
  const std::vector<float> y = decode(DType::IQ4_NL, &b, 32);
  for (int e = 0; e < 32; ++e) EXPECT_EQ(y[e], 0.125f * nl[nib32(b.qs, e)]) << e;

  // E2M1: sign bit 3, then 0, 0.5, 1, 1.5, 2, 3, 4, 6; the block scale is 2^(e - 127).
  const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
  BlockMXFP4 m{};
  m.e = 130;  // 2^3
  fill_pattern(m.qs, sizeof(m.qs), 7);
  const std::vector<float> ym = decode(DType::MXFP4, &m, 32);
  for (int e = 0; e < 32; ++e) {
    const int q = nib32(m.qs, e);
    EXPECT_EQ(ym[e], (q & 8 ? -1.0f : 1.0f) * e2m1[q & 7] * 8.0f) << e;
  }
  EXPECT_EQ(e8m0_half_to_f32(127), 0.5f);
  EXPECT_EQ(e8m0_half_to_f32(0), std::ldexp(1.0f, -128));
  EXPECT_EQ(e8m0_half_to_f32(1), std::ldexp(1.0f, -127));
}

// Q2_K / Q3_K element e: 2 low bits at bits 2 ((e % 128) / 32) of qs[32 (e / 128) + e % 32].
int two_bits(const uint8_t* qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

TEST(QuantMore, Q2_KLayout) {
  BlockQ2_K b{};
  b.d = f32_to_fp16(0.5f);
  b.dmin = f32_to_fp16(0.25f);
  fill_pattern(b.scales, sizeof(b.scales), 8);
  fill_pattern(b.qs, sizeof(b.qs), 9);
  const std::vector<float> y = decode(DType::Q2_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    const int sc = b.scales[e / 16] & 15, m = b.scales[e / 16] >> 4;
    EXPECT_EQ(y[e], 0.5f * sc * two_bits(b.qs, e) - 0.25f * m) << e;
  }
}

TEST(QuantMore, Q3_KLayout) {
  BlockQ3_K b{};
  b.d = f32_to_fp16(0.5f);
  // sub-block scales s_j = j + 20 (6 bits): low nibbles in scales[j % 8] (nibble j / 8), high
  // 2 bits at bit 2 (j / 4) of scales[8 + j % 4]
  for (int j = 0; j < 16; ++j) {
    const int s = j + 20;
    b.scales[j % 8] |= (uint8_t)((s & 15) << (4 * (j / 8)));
    b.scales[8 + j % 4] |= (uint8_t)((s >> 4) << (2 * (j / 4)));
  }
  for (int j = 0; j < 16; ++j) EXPECT_EQ(q3_k_scale(b.scales, j), j + 20);
  fill_pattern(b.qs, sizeof(b.qs), 10);
  fill_pattern(b.hmask, sizeof(b.hmask), 11);
  const std::vector<float> y = decode(DType::Q3_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    const int q = two_bits(b.qs, e) | (((b.hmask[e % 32] >> (e / 32)) & 1) << 2);
    EXPECT_EQ(y[e], 0.5f * (e / 16 + 20 - 32) * (q - 4)) << e;
  }
}

TEST(QuantMore, Q5_KLayout) {
  BlockQ5_K b{};
  b.d = f32_to_fp16(0.5f);
  b.dmin = f32_to_fp16(0.125f);
  for (int j = 0; j < 8; ++j) q4_k_set_scale_min(b.scales, j, (uint8_t)(3 + 7 * j), (uint8_t)(60 - 5 * j));
  fill_pattern(b.qs, sizeof(b.qs), 12);
  fill_pattern(b.qh, sizeof(b.qh), 13);
  const std::vector<float> y = decode(DType::Q5_K, &b, 256);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32, c = e / 64;
    const uint8_t byte = b.qs[32 * c + e % 32];
    const int q = ((e % 64) < 32 ? byte & 15 : byte >> 4) + 16 * ((b.qh[e % 32] >> j) & 1);
    EXPECT_EQ(y[e], 0.5f * (3 + 7 * j) * q - 0.125f * (60 - 5 * j)) << e;
  }
}

TEST(QuantMore, Iq4XsLayout) {
  const int8_t nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  BlockIQ4_XS b{};
  b.d = f32_to_fp16(0.25f);
  for (int j = 0; j < 8; ++j) {  // ls_j = 9 j: low nibble in scales_l[j / 2], high 2 bits in scales_h
    const int ls = 9 * j;
    b.scales_l[j / 2] |= (uint8_t)((ls & 15) << (4 * (j % 2)));
    b.scales_h |= (uint16_t)((ls >> 4) << (2 * j));
  }
  fill_pattern(b.qs, sizeof(b.qs), 14);
  const std::vector<float> y = decode(DType::IQ4_XS, &b, 256);
  for (int e = 0; e < 256; ++e) {
    const int j = e / 32;
    EXPECT_EQ(y[e], 0.25f * (9 * j - 32) * nl[nib32(b.qs + 16 * j, e % 32)]) << e;
  }
}

// ---- quantization error ----------------------------------------------------------------------

using test::normal_values;

double rel_rmse(DType t, const std::vector<float>& x) {
  const int64_t n = (int64_t)x.size();
  std::vector<uint8_t> q(row_size(t, n));
  dtype_info(t).from_float(x.data(), q.data(), n);
  const std::vector<float> y = decode(t, q.data(), n);
  double se = 0, ss = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    se += (double)(y[i] - x[i]) * (y[i] - x[i]);
    ss += (double)x[i] * x[i];
  }
  return std::sqrt(se / ss);
}

// Relative RMSE on normal_values(1 << 16, 42), measured: the bound sits ~3% above it, so a
// quantizer that lost its scale search (or a layout slip) fails. docs/QUANTS.md has the numbers
// and llama.cpp's for the same formulas.
struct ErrBound {
  DType type;
  double bound;
};
const ErrBound kErr[] = {
    {DType::Q4_1, 0.0805},   {DType::Q5_0, 0.0440},   {DType::Q5_1, 0.0391}, {DType::Q2_K, 0.307},
    {DType::Q3_K, 0.1555},   {DType::Q5_K, 0.0373},   {DType::IQ4_NL, 0.0787}, {DType::IQ4_XS, 0.0793},
    {DType::MXFP4, 0.1183},
};

TEST(QuantMore, ErrorOnNormalData) {
  const std::vector<float> x = normal_values(1 << 16, 42);
  for (const ErrBound& b : kErr) {
    const double e = rel_rmse(b.type, x);
    std::printf("  %-7s rel rmse %.5f\n", dtype_name(b.type), e);
    EXPECT_LT(e, b.bound) << dtype_name(b.type);
  }
}

// Real weights are small (sigma ~0.02): f16 scales stay normal, the error stays relative.
TEST(QuantMore, ErrorIsScaleFree) {
  const std::vector<float> x = normal_values(1 << 14, 7, 0.02f);
  for (const ErrBound& b : kErr) EXPECT_LT(rel_rmse(b.type, x), b.bound * 1.1) << dtype_name(b.type);
}

// ---- exact grids -------------------------------------------------------------------------------

TEST(QuantMore, GridValuesComeBackExactly) {
  // Q4_1 / Q5_1: min 0, max 15 (31) -> d = 1, levels = the values.
  std::vector<float> x(32);
  for (int j = 0; j < 32; ++j) x[j] = (float)(j % 16);
  BlockQ4_1 b41;
  quantize_q4_1_row(x.data(), &b41, 32);
  EXPECT_EQ(decode(DType::Q4_1, &b41, 32), x);
  for (int j = 0; j < 32; ++j) x[j] = (float)(31 - j);
  BlockQ5_1 b51;
  quantize_q5_1_row(x.data(), &b51, 32);
  EXPECT_EQ(decode(DType::Q5_1, &b51, 32), x);
  // Q5_0: -16 .. 15 with the extreme -16 -> d = 1.
  for (int j = 0; j < 32; ++j) x[j] = (float)(j - 16);
  BlockQ5_0 b50;
  quantize_q5_0_row(x.data(), &b50, 32);
  EXPECT_EQ(decode(DType::Q5_0, &b50, 32), x);
  // MXFP4: E2M1 values times 2^-2 (largest 6 * 0.25 = 1.5 -> exponent floor(log2 1.5) = 0).
  const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
  for (int j = 0; j < 32; ++j) x[j] = 0.25f * e2m1[j % 16];
  BlockMXFP4 bm;
  quantize_mxfp4_row(x.data(), &bm, 32);
  EXPECT_EQ(bm.e, 125);
  const std::vector<float> ym = decode(DType::MXFP4, &bm, 32);
  for (int j = 0; j < 32; ++j) EXPECT_EQ(ym[j], x[j]) << j;
}

TEST(QuantMore, ZeroBlocksStayZero) {
  const std::vector<float> zeros(256, 0.0f);
  for (DType t : {DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q2_K, DType::Q3_K, DType::Q5_K, DType::IQ4_NL,
                  DType::IQ4_XS, DType::MXFP4}) {
    std::vector<uint8_t> q(row_size(t, 256));
    dtype_info(t).from_float(zeros.data(), q.data(), 256);
    for (float v : decode(t, q.data(), 256)) EXPECT_EQ(v, 0.0f) << dtype_name(t);
    EXPECT_EQ(first_bad_block(t, q.data(), q.size()), -1) << dtype_name(t);
  }
}

// ---- bad blocks ----------------------------------------------------------------------------------

TEST(QuantMore, BadScalesAreFound) {
  const std::vector<float> x = normal_values(1024, 5);
  for (DType t : kAllDTypes) {
    const DTypeInfo& info = dtype_info(t);
    if (!info.from_float) continue;
    std::vector<uint8_t> q(row_size(t, 1024));
    info.from_float(x.data(), q.data(), 1024);
    EXPECT_EQ(first_bad_block(t, q.data(), q.size()), -1) << info.name;
    // NaN in the third block's (or element's) scale field
    uint8_t* blk = q.data() + 2 * info.type_size;
    switch (t) {
      case DType::F32: std::memcpy(blk, "\x00\x00\xc0\x7f", 4); break;
      case DType::F16: blk[0] = 0x00, blk[1] = 0x7e; break;
      case DType::BF16: blk[0] = 0xc0, blk[1] = 0x7f; break;
      case DType::MXFP4: blk[0] = 0xff; break;
      case DType::Q2_K: std::memcpy(blk + offsetof(BlockQ2_K, dmin), "\x00\x7c", 2); break;  // +inf
      case DType::Q3_K: std::memcpy(blk + offsetof(BlockQ3_K, d), "\x01\xfe", 2); break;
      case DType::Q6_K: std::memcpy(blk + offsetof(BlockQ6_K, d), "\x00\x7e", 2); break;
      case DType::Q4_1: std::memcpy(blk + offsetof(BlockQ4_1, m), "\x00\x7e", 2); break;
      case DType::Q5_1: std::memcpy(blk + offsetof(BlockQ5_1, m), "\x00\x7e", 2); break;
      case DType::Q4_K: std::memcpy(blk + offsetof(BlockQ4_K, dmin), "\x00\x7e", 2); break;
      case DType::Q5_K: std::memcpy(blk + offsetof(BlockQ5_K, dmin), "\x00\x7e", 2); break;
      case DType::IQ1_M:  // d = 0x7e00 in the top nibbles of the scale words: 0, 0, 0xe, 0x7
        for (int k = 0; k < 4; ++k) {
          uint8_t& hi = blk[offsetof(BlockIQ1_M, scales) + 2 * k + 1];
          hi = (uint8_t)((hi & 15) | ((0x7e00 >> (4 * k)) & 15) << 4);
        }
        break;
      default:
        std::memcpy(blk, "\x00\x7e", 2);
        break;  // d first: Q4_0, Q5_0, Q8_0, IQ4_NL, IQ4_XS, IQ2/IQ3, IQ1_S
    }
    EXPECT_EQ(first_bad_block(t, q.data(), q.size()), 2) << info.name;
  }
}

}  // namespace
}  // namespace loom
