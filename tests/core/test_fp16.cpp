// f32 <-> f16 / bf16 conversions: every 16-bit pattern decodes to the value IEEE 754 defines and
// round-trips; f32 -> 16 bits rounds to nearest even (checked by hand on ties and against the
// neighbouring representable values on random inputs); inf, nan, subnormals, overflow.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "loom/core/fp16.h"
#include "loom/core/quants.h"

namespace loom {
namespace {

bool is_f16_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x03ff) != 0; }
bool is_bf16_nan(uint16_t h) { return (h & 0x7f80) == 0x7f80 && (h & 0x007f) != 0; }

// IEEE binary16 value of h, decoded from the definition in double precision.
double f16_value(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
  double v;
  if (exp == 0)
    v = std::ldexp((double)man, -24);
  else if (exp == 31)
    v = man ? std::numeric_limits<double>::quiet_NaN() : INFINITY;
  else
    v = std::ldexp(1.0 + man / 1024.0, exp - 15);
  return sign ? -v : v;
}

float f32_bits(uint32_t b) { return std::bit_cast<float>(b); }

TEST(Fp16, AllPatternsDecodeAndRoundTrip) {
  int checked = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_f32((fp16_t)h);
    if (is_f16_nan((uint16_t)h)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << h;
      EXPECT_TRUE(is_f16_nan(f32_to_fp16(f))) << std::hex << h;
      continue;
    }
    ASSERT_EQ((double)f, f16_value((uint16_t)h)) << std::hex << h;
    ASSERT_EQ(std::signbit(f), (h >> 15) != 0) << std::hex << h;  // -0 stays -0
    ASSERT_EQ(f32_to_fp16(f), h) << std::hex << h;
    ++checked;
  }
  EXPECT_EQ(checked, 65536 - 2 * 1023);  // all but the nans
}

TEST(Fp16, RoundsToNearestEvenByHand) {
  // 1 + 2^-11 lies halfway between 1 (0x3c00, even) and 1 + 2^-10 (0x3c01): goes to even.
  EXPECT_EQ(f32_to_fp16(1.0f + 0x1p-11f), 0x3c00);
  // 1 + 3 * 2^-11 lies halfway between 0x3c01 and 0x3c02 (even).
  EXPECT_EQ(f32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);
  // just above / below a tie
  EXPECT_EQ(f32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  EXPECT_EQ(f32_to_fp16(1.0f + 3 * 0x1p-11f - 0x1p-20f), 0x3c01);
  EXPECT_EQ(f32_to_fp16(-(1.0f + 3 * 0x1p-11f)), 0xbc02);
  // a mantissa carry that bumps the exponent: 2 - 2^-12 rounds up to 2.0 (0x4000)
  EXPECT_EQ(f32_to_fp16(2.0f - 0x1p-12f), 0x4000);
  EXPECT_EQ(f32_to_fp16(0.1f), 0x2e66);  // 0.0999755859375, the nearest half to 0.1
  EXPECT_EQ(f32_to_fp16(3.140625f), 0x4248);
}

TEST(Fp16, OverflowInfNan) {
  EXPECT_EQ(f32_to_fp16(65504.0f), 0x7bff);  // largest half
  EXPECT_EQ(f32_to_fp16(65519.0f), 0x7bff);  // below the midpoint to 65536
  EXPECT_EQ(f32_to_fp16(65520.0f), 0x7c00);  // the midpoint: ties to even = 2^16 = inf
  EXPECT_EQ(f32_to_fp16(-65520.0f), 0xfc00);
  EXPECT_EQ(f32_to_fp16(1e9f), 0x7c00);
  EXPECT_EQ(f32_to_fp16(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(f32_to_fp16(INFINITY), 0x7c00);
  EXPECT_EQ(f32_to_fp16(-INFINITY), 0xfc00);
  EXPECT_TRUE(is_f16_nan(f32_to_fp16(std::numeric_limits<float>::quiet_NaN())));
  // signaling nan with only the lowest payload bit: must stay a nan, not become inf
  EXPECT_TRUE(is_f16_nan(f32_to_fp16(f32_bits(0x7f800001u))));
  EXPECT_TRUE(is_f16_nan(f32_to_fp16(f32_bits(0xff800001u))));
  EXPECT_EQ(f32_to_fp16(f32_bits(0xffc00000u)) & 0x8000, 0x8000);  // sign kept
  EXPECT_TRUE(std::isinf(fp16_to_f32(0x7c00)));
  EXPECT_TRUE(std::isnan(fp16_to_f32(0x7e00)));
}

TEST(Fp16, Subnormals) {
  EXPECT_EQ(f32_to_fp16(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(f32_to_fp16(0x1p-25f), 0x0000);  // half of it: tie to even (0)
  EXPECT_EQ(f32_to_fp16(0x1p-25f + 0x1p-40f), 0x0001);
  EXPECT_EQ(f32_to_fp16(3 * 0x1p-25f), 0x0002);        // 1.5 units: tie to even (2)
  EXPECT_EQ(f32_to_fp16(5 * 0x1p-25f), 0x0002);        // 2.5 units: tie to even (2)
  EXPECT_EQ(f32_to_fp16(1023 * 0x1p-24f), 0x03ff);     // largest subnormal
  EXPECT_EQ(f32_to_fp16(1023.5f * 0x1p-24f), 0x0400);  // tie between 0x3ff and 0x400: even
  EXPECT_EQ(f32_to_fp16(0x1p-14f), 0x0400);            // smallest normal
  EXPECT_EQ(f32_to_fp16(-0x1p-24f), 0x8001);
  EXPECT_EQ(f32_to_fp16(1e-10f), 0x0000);
  EXPECT_EQ(f32_to_fp16(-1e-10f), 0x8000);
  EXPECT_EQ(f32_to_fp16(-0.0f), 0x8000);
  EXPECT_EQ(f32_to_fp16(f32_bits(1)), 0x0000);  // f32 subnormal
  EXPECT_EQ(fp16_to_f32(0x0001), 0x1p-24f);
  EXPECT_EQ(fp16_to_f32(0x83ff), -1023 * 0x1p-24f);
}

// For random finite floats in the half range the result is the nearest half, ties to even:
// no neighbouring half is closer.
TEST(Fp16, RandomFloatsRoundToNearest) {
  std::mt19937 rng(1234);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffffffffu);
  int tested = 0;
  while (tested < 200000) {
    uint32_t b = bits(rng);
    // bias toward the half range: exponent in [-30, 15]
    b = (b & 0x807fffffu) | ((uint32_t)(97 + (b >> 23) % 46) << 23);
    const float f = f32_bits(b);
    if (std::fabs(f) >= 65504.0f) continue;
    ++tested;
    const uint16_t h = f32_to_fp16(f);
    const double err = std::fabs(f16_value(h) - (double)f);
    const uint16_t mag = h & 0x7fff;
    for (int delta : {-1, 1}) {
      const int nm = (int)mag + delta;
      if (nm < 0 || nm > 0x7bff) continue;
      const double nerr = std::fabs(f16_value((uint16_t)((h & 0x8000) | nm)) - (double)f);
      ASSERT_LE(err, nerr) << f;
      if (err == nerr) {
        ASSERT_EQ(h & 1, 0) << "tie not to even: " << f;
      }
    }
  }
}

TEST(Bf16, AllPatternsRoundTrip) {
  for (uint32_t h = 0; h < 65536; ++h) {
    const float f = bf16_to_f32((bf16_t)h);
    ASSERT_EQ(std::bit_cast<uint32_t>(f), h << 16);  // bf16 is the top half of an f32
    if (is_bf16_nan((uint16_t)h)) {
      EXPECT_TRUE(is_bf16_nan(f32_to_bf16(f))) << std::hex << h;
      continue;
    }
    ASSERT_EQ(f32_to_bf16(f), h) << std::hex << h;
  }
}

TEST(Bf16, RoundsToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);      // tie -> even
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);  // tie -> even (up)
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
  EXPECT_EQ(f32_to_bf16(f32_bits(0x3f80ffffu)), 0x3f81);
  EXPECT_EQ(f32_to_bf16(f32_bits(0x3f807fffu)), 0x3f80);
  EXPECT_EQ(f32_to_bf16(-2.0f - 0x1p-9f), 0xc000);  // 0xc0002000: below the tie, truncates
  EXPECT_EQ(f32_to_bf16(2.0f - 0x1p-9f), 0x4000);   // 0x3fffc000: above the tie, carries
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()), 0x7f80);  // past the largest bf16: inf
  EXPECT_EQ(f32_to_bf16(INFINITY), 0x7f80);
  EXPECT_EQ(f32_to_bf16(-INFINITY), 0xff80);
  EXPECT_EQ(f32_to_bf16(f32_bits(1)), 0x0000);            // tiny subnormal rounds to 0
  EXPECT_EQ(f32_to_bf16(f32_bits(0x00018000u)), 0x0002);  // subnormal tie -> even
  // A nan whose payload is only in the low 16 bits must stay a nan, not become inf.
  EXPECT_TRUE(is_bf16_nan(f32_to_bf16(f32_bits(0x7f800001u))));
  EXPECT_TRUE(is_bf16_nan(f32_to_bf16(f32_bits(0xffffffffu))));
  EXPECT_TRUE(is_bf16_nan(f32_to_bf16(std::numeric_limits<float>::quiet_NaN())));
}

TEST(Fp16, Rows) {
  const std::vector<float> x = {0.0f, 1.0f, -2.5f, 65504.0f, 0x1p-24f, 1.0f + 0x1p-11f};
  const std::vector<uint16_t> f16 = {0x0000, 0x3c00, 0xc100, 0x7bff, 0x0001, 0x3c00};
  std::vector<uint16_t> h(x.size());
  f32_to_f16_row(x.data(), h.data(), (int64_t)x.size());
  EXPECT_EQ(h, f16);
  std::vector<float> back(x.size());
  f16_to_f32_row(h.data(), back.data(), (int64_t)x.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(back[i], f16_value(f16[i]));

  // 65504 = 0x477fe000 rounds up to 65536 in bf16's 8-bit mantissa.
  const std::vector<uint16_t> bf = {0x0000, 0x3f80, 0xc020, 0x4780, 0x3380, 0x3f80};
  f32_to_bf16_row(x.data(), h.data(), (int64_t)x.size());
  EXPECT_EQ(h, bf);
  bf16_to_f32_row(h.data(), back.data(), (int64_t)x.size());
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_EQ(std::bit_cast<uint32_t>(back[i]), (uint32_t)bf[i] << 16);
}

}  // namespace
}  // namespace loom
