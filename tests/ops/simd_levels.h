// The SIMD levels the CPU kernel tests force in turn, and the inputs they share.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../../lib/backends/cpu/src/cpu_features.h"
#include "loom/core/dtype.h"

namespace loom::test {

using cpu::Isa;

inline const Isa kLevels[] = {Isa::scalar, Isa::avx2, Isa::avx512};
inline const DType kWeightTypes[] = {DType::F32,    DType::F16,     DType::BF16,   DType::Q8_0,  DType::Q4_0,
                                     DType::Q4_K,   DType::Q6_K,    DType::Q4_1,   DType::Q5_0,  DType::Q5_1,
                                     DType::IQ4_NL, DType::MXFP4,   DType::Q2_K,   DType::Q3_K,  DType::Q5_K,
                                     DType::IQ4_XS, DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS,
                                     DType::IQ3_S,  DType::IQ1_S,   DType::IQ1_M};

inline std::string level_name(const testing::TestParamInfo<Isa>& i) { return cpu::isa_name(i.param); }

// Forces a level for the test's lifetime (skips when the CPU lacks it).
class LevelTest : public testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    if ((int)GetParam() > (int)cpu::detected_isa()) GTEST_SKIP() << "CPU lacks " << cpu::isa_name(GetParam());
    saved_ = cpu::active_isa();
    ASSERT_EQ(cpu::force_isa(GetParam()), GetParam());
  }
  void TearDown() override { cpu::force_isa(saved_); }
  Isa saved_ = Isa::scalar;
};

inline std::vector<float> normal(std::mt19937& rng, size_t n, float sigma = 1.0f) {
  std::normal_distribution<float> d(0.0f, sigma);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Rows of weights of a type made from f32 values (K a multiple of the block).
inline std::vector<uint8_t> make_rows(DType t, const std::vector<float>& v, int64_t K, int64_t rows) {
  const DTypeInfo& info = dtype_info(t);
  const size_t rb = (size_t)(K / info.block_size) * info.type_size;
  std::vector<uint8_t> out(rb * (size_t)rows);
  for (int64_t r = 0; r < rows; ++r) info.from_float(v.data() + r * K, out.data() + rb * (size_t)r, K);
  return out;
}

}  // namespace loom::test
