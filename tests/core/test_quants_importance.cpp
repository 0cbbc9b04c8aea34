// Importance-weighted quantization (llama-quantize --imatrix): for every type that takes an
// importance matrix, the error weighted by it must drop well below what the reference quantizer
// leaves, without costing much where the importance is flat; all-zero importance falls back to
// the reference bytes, and the types that ignore it say so.
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

constexpr DType kWeighted[] = {DType::Q4_0,   DType::Q4_1,    DType::Q5_0,   DType::Q5_1,  DType::Q2_K,
                               DType::Q3_K,   DType::Q4_K,    DType::Q5_K,   DType::Q6_K,  DType::IQ4_NL,
                               DType::IQ4_XS, DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS,
                               DType::IQ3_S,  DType::IQ1_S,   DType::IQ1_M};

constexpr int64_t kCols = 1024, kRows = 16;

// Importance spread as activations' mean squares are in a real model: log-normal, some columns
// ~100x others.
std::vector<float> spread_importance(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, 1.5f);
  std::vector<float> imp(kCols);
  for (float& v : imp) v = std::exp(dist(rng));
  return imp;
}

// Sum over the rows of imp[i] * (x - decoded)^2, quantizing with `imp_used` (nullptr: reference).
double weighted_error(DType t, const std::vector<float>& x, const float* imp_used, const std::vector<float>& imp) {
  const DTypeInfo& info = dtype_info(t);
  std::vector<uint8_t> q(row_size(t, kCols));
  std::vector<float> y(kCols);
  double e = 0.0;
  for (int64_t r = 0; r < kRows; ++r) {
    const float* row = x.data() + r * kCols;
    if (imp_used)
      importance_quantizer(t)(row, q.data(), kCols, imp_used);
    else
      info.from_float(row, q.data(), kCols);
    info.to_float(q.data(), y.data(), kCols);
    for (int64_t i = 0; i < kCols; ++i) {
      EXPECT_TRUE(std::isfinite(y[(size_t)i])) << info.name;
      const double d = (double)y[(size_t)i] - row[i];
      e += imp[(size_t)i] * d * d;
    }
  }
  return e;
}

TEST(QuantImportance, SpreadImportanceLowersTheWeightedError) {
  const std::vector<float> x = test::normal_values(kRows * kCols, 11);
  const std::vector<float> imp = spread_importance(12);
  for (DType t : kWeighted) {
    ASSERT_NE(importance_quantizer(t), nullptr) << dtype_name(t);
    const double ref = weighted_error(t, x, nullptr, imp);
    const double with = weighted_error(t, x, imp.data(), imp);
    std::printf("%-8s weighted error / reference: %.3f\n", dtype_name(t), with / ref);
    EXPECT_LT(with, 0.85 * ref) << dtype_name(t);
  }
}

// Every weighted quantizer scales its blocks back to the originals' size as the activations see
// it: sum(imp x y) / sum(imp x x) within 1% of 1 (least squares alone leaves Q2_K at ~0.96 and
// the 2-bit i-quants at ~0.9, which a model feels as every product scaled down).
TEST(QuantImportance, WeightedRowsKeepTheirSize) {
  const std::vector<float> x = test::normal_values(kRows * kCols, 16);
  const std::vector<float> imp = spread_importance(17);
  for (DType t : kWeighted) {
    std::vector<uint8_t> q(row_size(t, kCols));
    std::vector<float> y(kCols);
    double xy = 0.0, xx = 0.0;
    for (int64_t r = 0; r < kRows; ++r) {
      const float* row = x.data() + r * kCols;
      importance_quantizer(t)(row, q.data(), kCols, imp.data());
      dtype_info(t).to_float(q.data(), y.data(), kCols);
      for (int64_t i = 0; i < kCols; ++i)
        xy += (double)imp[(size_t)i] * row[i] * y[(size_t)i], xx += (double)imp[(size_t)i] * row[i] * row[i];
    }
    EXPECT_NEAR(xy / xx, 1.0, 0.01) << dtype_name(t);
  }
}

TEST(QuantImportance, FlatImportanceCostsLittle) {
  const std::vector<float> x = test::normal_values(kRows * kCols, 13);
  const std::vector<float> ones(kCols, 1.0f);
  for (DType t : kWeighted) {
    const double ref = weighted_error(t, x, nullptr, ones);
    const double with = weighted_error(t, x, ones.data(), ones);
    std::printf("%-8s flat: squared error / reference: %.3f\n", dtype_name(t), with / ref);
    EXPECT_LT(with, 1.05 * ref) << dtype_name(t);
  }
}

TEST(QuantImportance, ZeroImportanceGivesTheReferenceBytes) {
  const std::vector<float> x = test::normal_values(kCols, 14);
  const std::vector<float> zeros(kCols, 0.0f);
  for (DType t : kWeighted) {
    std::vector<uint8_t> a(row_size(t, kCols)), b(row_size(t, kCols)), c(row_size(t, kCols));
    dtype_info(t).from_float(x.data(), a.data(), kCols);
    importance_quantizer(t)(x.data(), b.data(), kCols, zeros.data());
    importance_quantizer(t)(x.data(), c.data(), kCols, nullptr);
    EXPECT_EQ(0, std::memcmp(a.data(), b.data(), a.size())) << dtype_name(t);
    EXPECT_EQ(0, std::memcmp(a.data(), c.data(), a.size())) << dtype_name(t);
  }
}

TEST(QuantImportance, AllZeroRowsStayZero) {
  const std::vector<float> x(kCols, 0.0f);
  const std::vector<float> imp = spread_importance(15);
  for (DType t : kWeighted) {
    std::vector<uint8_t> q(row_size(t, kCols));
    std::vector<float> y(kCols, 1.0f);
    importance_quantizer(t)(x.data(), q.data(), kCols, imp.data());
    dtype_info(t).to_float(q.data(), y.data(), kCols);
    for (float v : y) ASSERT_EQ(v, 0.0f) << dtype_name(t);
  }
}

TEST(QuantImportance, TypesWithoutAUseForItSaySo) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32, DType::Q8_0, DType::MXFP4})
    EXPECT_EQ(importance_quantizer(t), nullptr) << dtype_name(t);
}

}  // namespace
}  // namespace loom
