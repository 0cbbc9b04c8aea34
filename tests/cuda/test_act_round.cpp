// The CUDA mat-vec kernels' rounding of activations (lib/backends/cuda/kernels/act_round.h),
// compiled here as host code, against the CPU's own column quantizers at the active SIMD level
// (what the CPU's dot products read) and its bf16 conversion: the same values bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "cpu_vec_dot.h"
#include "cuda_ops.h"
#include "kernels/act_round.h"
#include "loom/core/fp16.h"
#include "loom/graph/context.h"
#include "loom/graph/ops.h"

namespace loom::cuda {
namespace {

std::vector<float> column(std::mt19937& rng, int64_t K, float scale) {
  std::student_t_distribution<float> heavy(3.0f);
  std::vector<float> x((size_t)K);
  for (float& v : x) v = scale * heavy(rng);
  for (int64_t i = 0; i < K; i += 97) x[(size_t)i] = 0.0f;           // zeros
  for (int64_t i = 64; i < 96 && i < K; ++i) x[(size_t)i] = 0.0f;    // one all-zero 32-block
  if (K > 200) x[200] = scale * 127.0f;                             // one block's extreme
  return x;
}

// What the kernels compute for a column: every value d * q with its block's largest magnitude.
std::vector<float> rounded(const std::vector<float>& x, int mode) {
  const size_t n = (size_t)k::act_block(mode);
  std::vector<float> out(x.size());
  for (size_t b = 0; b < x.size(); b += n) {
    float amax = 0.0f;
    for (size_t i = b; i < b + n; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    for (size_t i = b; i < b + n; ++i) out[i] = mode == k::kActBf16 ? k::bf16_value(x[i]) : k::q8_value(x[i], amax, (int)n);
  }
  return out;
}

// Every value of the kernels' rounding equals the CPU column's d * q (Block: BlockQ8A / BlockQ8KA).
template <class Block>
void expect_cpu_columns(cpu::ActType act, int mode, unsigned seed) {
  std::mt19937 rng(seed);
  const int64_t K = 1024, n = k::act_block(mode);
  for (float scale : {1.0f, 1e-3f, 40.0f}) {
    const std::vector<float> x = column(rng, K, scale);
    std::vector<Block> q((size_t)(K / n));
    cpu::quantize_act(act)(x.data(), q.data(), K);
    const std::vector<float> got = rounded(x, mode);
    for (int64_t i = 0; i < K; ++i) {
      const Block& b = q[(size_t)(i / n)];
      ASSERT_EQ(got[(size_t)i], b.d * (float)b.qs[i % n]) << "element " << i << " of " << x[(size_t)i];
    }
  }
}

TEST(ActRound, Int8BlocksOf32AreTheCpusColumns) {
  expect_cpu_columns<cpu::BlockQ8A>(cpu::ActType::q8, k::kActQ8_32, 3);
}

TEST(ActRound, Int8BlocksOf256AreTheCpusColumns) {
  expect_cpu_columns<cpu::BlockQ8KA>(cpu::ActType::q8k, k::kActQ8_256, 4);
}

TEST(ActRound, Bf16IsTheCoreConversion) {
  std::mt19937 rng(5);
  std::vector<float> x = column(rng, 4096, 1.0f);
  x.push_back(std::nanf(""));
  x.push_back(INFINITY);
  x.push_back(-0.0f);
  x.push_back(3.3895314e38f);  // rounds up to infinity
  for (float v : x) {
    const float want = bf16_to_f32(f32_to_bf16(v));
    const float got = k::bf16_value(v);
    if (std::isnan(want)) {
      EXPECT_TRUE(std::isnan(got));
      continue;
    }
    ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want)) << v;
  }
}

TEST(ActRound, ModesMatchTheCpusRoundingEnum) {
  EXPECT_EQ(k::act_block(k::kActQ8_32), 32);
  EXPECT_EQ(k::act_block(k::kActQ8_256), 256);
  EXPECT_EQ(k::act_block(k::kActNone), 1);
}

// A quantized mat-vec's activations are rounded once per product into the device scratch
// (matmul.cu: without it every warp rounds them again, half of Q4_0's time): op_scratch sizes it,
// whole 32-value units per column, and leaves none to weights whose activations stay as they are.
TEST(ActRound, QuantizedProductsGetScratchForTheirRoundedColumns) {
  Context c;
  const int64_t K = 4096;
  Tensor* b = c.new_tensor(DType::F32, {K, 3});
  auto product = [&](DType t, Tensor* cols) { return op_scratch(ops::mul_mat(c, c.new_tensor(t, {K, 64}), cols)); };
  for (DType t : {DType::Q4_0, DType::Q8_0, DType::Q4_K, DType::Q6_K, DType::MXFP4})
    EXPECT_EQ(product(t, b), (size_t)(K * 3) * sizeof(float)) << dtype_name(t);
  EXPECT_EQ(product(DType::F16, b), 0u);
  EXPECT_EQ(product(DType::F32, b), 0u);
  // more columns than the mat-vec takes: cuBLAS, the weights dequantized into the scratch
  EXPECT_GE(product(DType::Q4_0, c.new_tensor(DType::F32, {K, 33})), (size_t)(K * 64) * 2);
  // experts: every (slot, token) column of b
  Tensor* xs = c.new_tensor(DType::F32, {K, 2, 5});
  Tensor* ids = c.new_tensor(DType::I32, {2, 5});
  EXPECT_EQ(op_scratch(ops::mul_mat_id(c, c.new_tensor(DType::Q4_0, {K, 64, 8}), xs, ids)),
            (size_t)(K * 10) * sizeof(float));
}

}  // namespace
}  // namespace loom::cuda
