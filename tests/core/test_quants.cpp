// Q8_0 and Q4_0 against hand-derived bytes and hand-built blocks, and the round-trip error of
// every quantized type on random normal data (bounds set from measurement with some headroom,
// tight enough that a wrong rounding, scale or nibble order fails them).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <random>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/core/quants.h"

namespace loom {
namespace {

std::vector<float> ramp32() {  // x[i] = i - 16: -16 .. 15
  std::vector<float> x(32);
  for (int i = 0; i < 32; ++i) x[i] = (float)(i - 16);
  return x;
}

// ---- Q8_0 ------------------------------------------------------------------------------------

TEST(QuantQ8_0, RampBytesByHand) {
  const std::vector<float> x = ramp32();
  BlockQ8_0 blk;
  quantize_q8_0_row(x.data(), &blk, 32);
  // d = 16/127 = 0.12598... = 2^-3 * 1.00787: mantissa 0.00787 * 1024 = 8.06 -> 8, exponent 12.
  EXPECT_EQ(blk.d, 0x3008);
  // q = roundf(v * 127/16) = roundf(8v - v/16); v = +-8 is an exact tie (+-63.5) that roundf
  // takes away from zero.
  const int8_t expect[32] = {-127, -119, -111, -103, -95, -87, -79, -71, -64, -56, -48,
                             -40,  -32,  -24,  -16,  -8,  0,   8,   16,  24,  32,  40,
                             48,   56,   64,   71,   79,  87,  95,  103, 111, 119};
  for (int i = 0; i < 32; ++i) EXPECT_EQ(blk.qs[i], expect[i]) << "element " << i;
}

TEST(QuantQ8_0, UnitScaleRoundsHalfAwayFromZero) {
  // amax = 127 gives d = 1 exactly, so q = round(x) with no scaling noise.
  std::vector<float> x(32, 0.0f);
  const float in[] = {-127.0f, 2.5f, -2.5f, 0.5f, -0.5f, 1.49f, -1.51f, 126.5f, 3.0f, 100.25f};
  const int8_t out[] = {-127, 3, -3, 1, -1, 1, -2, 127, 3, 100};
  std::memcpy(x.data(), in, sizeof(in));
  BlockQ8_0 blk;
  quantize_q8_0_row(x.data(), &blk, 32);
  EXPECT_EQ(blk.d, 0x3c00);  // 1.0
  for (size_t i = 0; i < std::size(out); ++i) EXPECT_EQ(blk.qs[i], out[i]) << in[i];
  for (size_t i = std::size(out); i < 32; ++i) EXPECT_EQ(blk.qs[i], 0);
}

TEST(QuantQ8_0, ZeroBlock) {
  std::vector<float> x(64, 0.0f);
  x[40] = -3.0f;  // second block non-zero: blocks are independent
  BlockQ8_0 blk[2];
  quantize_q8_0_row(x.data(), blk, 64);
  EXPECT_EQ(blk[0].d, 0);
  for (int8_t q : blk[0].qs) EXPECT_EQ(q, 0);
  EXPECT_EQ(blk[1].qs[8], -127);
  std::vector<float> y(64, 1.0f);
  dequantize_q8_0_row(blk, y.data(), 64);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[i], 0.0f);
  EXPECT_NEAR(y[40], -3.0f, 3.0f / 2048);
}

TEST(QuantQ8_0, DequantizeHandBuilt) {
  BlockQ8_0 blk[2];
  blk[0].d = 0x3800;  // 0.5
  blk[1].d = 0xc000;  // -2
  for (int j = 0; j < 32; ++j) {
    blk[0].qs[j] = (int8_t)(7 * j - 100);
    blk[1].qs[j] = (int8_t)(j == 0 ? -128 : 127 - j);
  }
  std::vector<float> y(64);
  dequantize_q8_0_row(blk, y.data(), 64);
  EXPECT_EQ(y[0], -50.0f);    // (0 - 100) * 0.5
  EXPECT_EQ(y[31], 58.5f);    // (217 - 100) * 0.5
  EXPECT_EQ(y[32], 256.0f);   // -128 * -2
  EXPECT_EQ(y[33], -252.0f);  // 126 * -2
  for (int j = 0; j < 32; ++j) {
    EXPECT_EQ(y[j], (7 * j - 100) * 0.5f);
    EXPECT_EQ(y[32 + j], (j == 0 ? -128 : 127 - j) * -2.0f);
  }
}

// ---- Q4_0 ------------------------------------------------------------------------------------

// For the ramp, x/d + 8.5 = (v + 17) / 2 in both signs of d (see below), so element j (v = j - 16)
// gets floor((j + 1) / 2) and element j + 16 (v = j) gets min(15, floor((j + 17) / 2)).
const uint8_t kQ4RampQs[16] = {0x80, 0x91, 0x91, 0xa2, 0xa2, 0xb3, 0xb3, 0xc4,
                               0xc4, 0xd5, 0xd5, 0xe6, 0xe6, 0xf7, 0xf7, 0xf8};

TEST(QuantQ4_0, RampBytesByHand) {
  const std::vector<float> x = ramp32();
  BlockQ4_0 blk;
  quantize_q4_0_row(x.data(), &blk, 32);
  // The value of largest magnitude is -16, so d = -16 / -8 = 2 (0x4000) and -16 maps to q = 0.
  EXPECT_EQ(blk.d, 0x4000);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(blk.qs[j], kQ4RampQs[j]) << "byte " << j;
}

TEST(QuantQ4_0, NegatedRampFlipsTheScale) {
  // x = 16 - i: the extreme is +16, d = 16 / -8 = -2 (0xc000); x/d = -x/2 gives the same levels.
  std::vector<float> x = ramp32();
  for (float& v : x) v = -v;
  BlockQ4_0 blk;
  quantize_q4_0_row(x.data(), &blk, 32);
  EXPECT_EQ(blk.d, 0xc000);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(blk.qs[j], kQ4RampQs[j]) << "byte " << j;
}

TEST(QuantQ4_0, OppositeExtremeClampsTo15) {
  // -1 comes first so it is the extreme (d = 0.125); +1 gives 16.5 -> 16 -> clamped to 15.
  std::vector<float> x(32, 0.0f);
  x[0] = -1.0f;
  x[1] = 1.0f;
  BlockQ4_0 blk;
  quantize_q4_0_row(x.data(), &blk, 32);
  EXPECT_EQ(blk.d, 0x3000);    // 0.125
  EXPECT_EQ(blk.qs[0], 0x80);  // element 0 -> 0, element 16 (0.0) -> 8
  EXPECT_EQ(blk.qs[1], 0x8f);
  for (int j = 2; j < 16; ++j) EXPECT_EQ(blk.qs[j], 0x88);
  std::vector<float> y(32);
  dequantize_q4_0_row(&blk, y.data(), 32);
  EXPECT_EQ(y[0], -1.0f);
  EXPECT_EQ(y[1], 0.875f);  // (15 - 8) * 0.125
  EXPECT_EQ(y[2], 0.0f);
}

TEST(QuantQ4_0, DequantizeHandBuilt) {
  BlockQ4_0 blk[2];
  blk[0].d = 0x3c00;  // 1
  blk[1].d = 0xb400;  // -0.25
  for (int j = 0; j < 16; ++j) {
    blk[0].qs[j] = (uint8_t)(j | ((15 - j) << 4));
    blk[1].qs[j] = (uint8_t)(((3 * j) & 15) | ((j / 2) << 4));
  }
  std::vector<float> y(64);
  dequantize_q4_0_row(blk, y.data(), 64);
  EXPECT_EQ(y[0], -8.0f);  // low nibble 0
  EXPECT_EQ(y[16], 7.0f);  // high nibble of byte 0 is 15
  EXPECT_EQ(y[15], 7.0f);
  EXPECT_EQ(y[31], -8.0f);
  for (int j = 0; j < 16; ++j) {
    EXPECT_EQ(y[j], (float)(j - 8));
    EXPECT_EQ(y[16 + j], (float)(7 - j));
    EXPECT_EQ(y[32 + j], (((3 * j) & 15) - 8) * -0.25f);
    EXPECT_EQ(y[48 + j], (j / 2 - 8) * -0.25f);
  }
}

// ---- round trips -----------------------------------------------------------------------------

struct RoundTrip {
  double rel_rmse;     // rmse(y - x) / rms(x)
  double max_rel_err;  // max |y - x| / max |x| over the row
};

RoundTrip round_trip(DType type, const std::vector<float>& x) {
  const DTypeInfo& info = dtype_info(type);
  const int64_t n = (int64_t)x.size();
  std::vector<uint8_t> q(row_size(type, n));
  std::vector<float> y((size_t)n);
  info.from_float(x.data(), q.data(), n);
  info.to_float(q.data(), y.data(), n);
  double se = 0, sx = 0, max_err = 0, amax = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double e = (double)y[i] - x[i];
    se += e * e;
    sx += (double)x[i] * x[i];
    max_err = std::max(max_err, std::fabs(e));
    amax = std::max(amax, (double)std::fabs(x[i]));
  }
  return {std::sqrt(se / sx), max_err / amax};
}

std::vector<float> normal_row(int64_t n, uint32_t seed, float sigma = 1.0f, float mean = 0.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(mean, sigma);
  std::vector<float> x((size_t)n);
  for (float& v : x) v = dist(rng);
  return x;
}

struct Bound {
  DType type;
  double rel_rmse;
  double max_rel_err;
};

// Measured on normal_row(1 << 16, 42): rel rmse q8_0 0.00538, q4_0 0.0859, q4_k 0.0715,
// q6_k 0.0177; max error / row max 0.0039, 0.087, 0.057, 0.0154. Each is close to what a uniform
// grid gives (step / sqrt(12) for step = block range / levels); the max-error bounds for q8_0
// (0.563 / 127: half a step plus f16 rounding of d) and q4_0 (one step, 1/8, where the value
// opposite the extreme clamps to +7) are the theoretical ones. The K-quant bounds sit between
// the measured error and the error without the scale searches (q4_k 0.0755, q6_k 0.0184), so a
// search that stops improving the fit fails them.
const Bound kBounds[] = {
    {DType::Q8_0, 0.006, 0.0045},
    {DType::Q4_0, 0.095, 0.13},
    {DType::Q4_K, 0.0735, 0.07},
    {DType::Q6_K, 0.0181, 0.02},
};

TEST(QuantRoundTrip, NormalData) {
  const std::vector<float> x = normal_row(1 << 16, 42);
  for (const Bound& b : kBounds) {
    const RoundTrip r = round_trip(b.type, x);
    std::printf("  %-5s rel rmse %.5f  max err / max %.5f\n", dtype_name(b.type), r.rel_rmse,
                r.max_rel_err);
    EXPECT_LT(r.rel_rmse, b.rel_rmse) << dtype_name(b.type);
    EXPECT_LT(r.max_rel_err, b.max_rel_err) << dtype_name(b.type);
  }
}

// The formats are scale-free while d stays precise in f16: sigma 1e3 and 0.02 (typical LLM
// weights) give the errors of sigma 1. (At sigma 1e-3 the K-quants' d is an f16 subnormal and
// q6_k measures 0.0205, as llama.cpp's would.)
TEST(QuantRoundTrip, ScaledAndShiftedData) {
  for (float sigma : {0.02f, 1e3f}) {
    const std::vector<float> x = normal_row(1 << 16, 42, sigma);
    for (const Bound& b : kBounds) {
      const RoundTrip r = round_trip(b.type, x);
      std::printf("  %-5s sigma %g rel rmse %.5f\n", dtype_name(b.type), sigma, r.rel_rmse);
      EXPECT_LT(r.rel_rmse, b.rel_rmse) << dtype_name(b.type) << " sigma " << sigma;
    }
  }
  // Q4_K's offset only subtracts (x = d sc q - dmin m), so a negative mean is absorbed: the
  // absolute error stays that of mean 0 (0.0715) while the rms grows to sqrt(10).
  const std::vector<float> shifted = normal_row(1 << 16, 42, 1.0f, -3.0f);
  const double shifted_err = round_trip(DType::Q4_K, shifted).rel_rmse;
  std::printf("  q4_k  mean -3 rel rmse %.5f\n", shifted_err);
  EXPECT_LT(shifted_err, 0.075 / std::sqrt(10.0));
}

// Decoding what was encoded and encoding again is stable for the symmetric formats: the
// decoded values sit on the grid, so the second pass changes no level.
TEST(QuantRoundTrip, ReEncodingDecodedQ4_0IsStable) {
  const std::vector<float> x = normal_row(1 << 12, 3);
  std::vector<uint8_t> q1(row_size(DType::Q4_0, 1 << 12)), q2(q1.size());
  std::vector<float> y(x.size()), y2(x.size());
  quantize_q4_0_row(x.data(), q1.data(), 1 << 12);
  dequantize_q4_0_row(q1.data(), y.data(), 1 << 12);
  quantize_q4_0_row(y.data(), q2.data(), 1 << 12);
  dequantize_q4_0_row(q2.data(), y2.data(), 1 << 12);
  EXPECT_EQ(y, y2);
}

}  // namespace
}  // namespace loom
