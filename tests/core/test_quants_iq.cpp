// The i-quants (quants_iq.h): the codebooks against fingerprints of llama.cpp's tables, blocks
// llama.cpp wrote decoded to its floats bit for bit (iq_fixtures.h), and the quantizer's error on
// normal data, its all-equal and zero blocks, and its scales' validity.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "iq_fixtures.h"
#include "loom/core/quants.h"
#include "loom/core/quants_iq.h"
#include "normal_values.h"

namespace loom {
namespace {

using test::from_hex;
using test::kIqFixtures;

// FNV-1a 64 over the bytes of n little-endian entries of `bytes` bytes each.
template <class Grid>
uint64_t fnv_of(const Grid& grid, int bytes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (auto v : grid)
    for (int b = 0; b < bytes; ++b) {
      h ^= (uint64_t)((v >> (8 * b)) & 255);
      h *= 0x100000001b3ull;
    }
  return h;
}

TEST(QuantIq, GridsAreLlamaCppsTables) {
  // The same hash over ggml-common.h's iq2xxs_grid ... iq1s_grid.
  EXPECT_EQ(fnv_of(kIq2xxsGrid, 8), 0xbb4ee025b5ac6e8eull);
  EXPECT_EQ(fnv_of(kIq2xsGrid, 8), 0xc9b1ee61e79909bdull);
  EXPECT_EQ(fnv_of(kIq2sGrid, 8), 0x123edd38a3b62b90ull);
  EXPECT_EQ(fnv_of(kIq3xxsGrid, 4), 0xdfa5dc83d6a155d5ull);
  EXPECT_EQ(fnv_of(kIq3sGrid, 4), 0xfa37020c25b44829ull);
  EXPECT_EQ(fnv_of(kIq1sGrid, 8), 0x6703ed863501ae2eull);
}

TEST(QuantIq, LlamaCppBlocksDecodeToItsFloats) {
  const std::vector<float> x = test::iq_fixture_x();
  for (const test::IqFixture& f : kIqFixtures) {
    SCOPED_TRACE(dtype_name(f.type));
    const std::vector<uint8_t> blocks = from_hex(f.hex);
    ASSERT_EQ(blocks.size(), row_size(f.type, 1024));
    EXPECT_EQ(first_bad_block(f.type, blocks.data(), blocks.size()), -1);
    std::vector<float> y(1024);
    dtype_info(f.type).to_float(blocks.data(), y.data(), 1024);
    uint64_t h = 0xcbf29ce484222325ull;
    double dot = 0.0;
    for (int k = 0; k < 1024; ++k) {
      uint8_t b[4];
      std::memcpy(b, &y[(size_t)k], 4);
      for (uint8_t c : b) h = (h ^ c) * 0x100000001b3ull;
      dot += (double)y[(size_t)k] * x[(size_t)k];
    }
    EXPECT_EQ(h, f.floats_fnv);
    EXPECT_NEAR(dot, f.dot_f64, 1e-12);
  }
}

using test::normal_values;

float rel_rmse(DType t, const std::vector<float>& x) {
  const int64_t n = (int64_t)x.size();
  std::vector<uint8_t> q(row_size(t, n));
  dtype_info(t).from_float(x.data(), q.data(), n);
  EXPECT_EQ(first_bad_block(t, q.data(), q.size()), -1) << dtype_name(t);
  std::vector<float> y((size_t)n);
  dtype_info(t).to_float(q.data(), y.data(), n);
  double e = 0.0, s = 0.0;
  for (size_t i = 0; i < x.size(); ++i) e += (double)(y[i] - x[i]) * (y[i] - x[i]), s += (double)x[i] * x[i];
  return (float)std::sqrt(e / s);
}

// Relative RMSE on normal data, no importance matrix: bounds ~3% over the measured values
// (docs/QUANTS.md), so a worse search fails.
TEST(QuantIq, ErrorOnNormalData) {
  const std::vector<float> x = normal_values(1 << 14, 42);
  const struct {
    DType t;
    float bound;
  } cases[] = {{DType::IQ3_S, 0.137f},   {DType::IQ3_XXS, 0.190f}, {DType::IQ2_S, 0.257f}, {DType::IQ2_XS, 0.310f},
               {DType::IQ2_XXS, 0.363f}, {DType::IQ1_M, 0.476f},   {DType::IQ1_S, 0.533f}};
  for (const auto& c : cases) {
    const float r = rel_rmse(c.t, x);
    std::printf("  %-8s rel rmse %.5f\n", dtype_name(c.t), r);
    EXPECT_LT(r, c.bound) << dtype_name(c.t);
  }
}

// The quantized rows keep the originals' size: the decoded values' projection on the originals,
// sum(x y) / sum(x x), within 1% of 1 (a plain least-squares search leaves it at ~0.9 at 2 bits,
// which a model feels as every product scaled down). With an importance matrix:
// test_quants_importance.cpp.
TEST(QuantIq, QuantizedRowsKeepTheirSize) {
  const std::vector<float> x = normal_values(1 << 14, 43);
  for (DType t :
       {DType::IQ3_S, DType::IQ3_XXS, DType::IQ2_S, DType::IQ2_XS, DType::IQ2_XXS, DType::IQ1_M, DType::IQ1_S}) {
    const int64_t n = (int64_t)x.size();
    std::vector<uint8_t> q(row_size(t, n));
    dtype_info(t).from_float(x.data(), q.data(), n);
    std::vector<float> y((size_t)n);
    dtype_info(t).to_float(q.data(), y.data(), n);
    double xy = 0.0, xx = 0.0;
    for (size_t i = 0; i < x.size(); ++i) xy += (double)x[i] * y[i], xx += (double)x[i] * x[i];
    EXPECT_NEAR(xy / xx, 1.0, 0.01) << dtype_name(t);
  }
}

// What llama.cpp wrote, decoded and quantized again, comes back near itself: each group's points
// are reachable by the search.
TEST(QuantIq, LlamaCppValuesQuantizeBackNearThemselves) {
  for (const test::IqFixture& f : kIqFixtures) {
    const std::vector<uint8_t> blocks = from_hex(f.hex);
    std::vector<float> y(1024);
    dtype_info(f.type).to_float(blocks.data(), y.data(), 1024);
    EXPECT_LT(rel_rmse(f.type, y), 0.06f) << dtype_name(f.type);
  }
}

TEST(QuantIq, ConstantAndZeroBlocks) {
  for (DType t : kAllDTypes) {
    if (!is_iq_grid_type(t)) continue;
    SCOPED_TRACE(dtype_name(t));
    std::vector<uint8_t> q(row_size(t, 512));
    std::vector<float> y(512), x(512, 0.0f);
    std::fill(x.begin() + 256, x.end(), -2.5f);  // a zero block, then a constant one
    dtype_info(t).from_float(x.data(), q.data(), 512);
    dtype_info(t).to_float(q.data(), y.data(), 512);
    for (int e = 0; e < 256; ++e) ASSERT_EQ(y[(size_t)e], 0.0f) << e;
    for (int e = 256; e < 512; ++e) ASSERT_NEAR(y[(size_t)e], -2.5f, 0.01f) << e;
  }
}

}  // namespace
}  // namespace loom
