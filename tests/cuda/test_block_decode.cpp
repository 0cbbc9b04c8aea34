// The CUDA kernels' block decoding (lib/backends/cuda/kernels/block_decode.h), compiled here as
// host code, against the CPU's reference dequantization for every block type: element by element
// and 32-element unit by unit, on quantized data and on random bytes (every half, E8M0 and
// nibble pattern). Needs no GPU: the same functions are what the kernels run.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "kernels/block_decode.h"
#include "loom/core/dtype.h"

namespace loom::cuda {
namespace {

// Equal, or both NaN; within a few ulps where the compilers may fuse a multiply-add differently.
bool close(float got, float want) {
  if (std::isnan(want) || std::isnan(got)) return std::isnan(want) && std::isnan(got);
  if (std::isinf(want) || std::isinf(got)) return got == want;
  return std::fabs(got - want) <= 1e-6f * std::fmax(1.0f, std::fabs(want));
}

void check_row(DType type, const std::vector<uint8_t>& row, int64_t n) {
  std::vector<float> want((size_t)n);
  dtype_info(type).to_float(row.data(), want.data(), n);
  for (int64_t e = 0; e < n; ++e)
    ASSERT_TRUE(close(k::block_value((int)type, row.data(), e), want[(size_t)e]))
        << dtype_name(type) << " element " << e << ": " << k::block_value((int)type, row.data(), e) << " vs "
        << want[(size_t)e];
  float unit[32];
  for (int64_t u = 0; u < n / 32; ++u) {
    k::decode_unit((int)type, row.data(), u, unit);
    for (int i = 0; i < 32; ++i)
      ASSERT_TRUE(close(unit[i], want[(size_t)(32 * u + i)]))
          << dtype_name(type) << " unit " << u << " element " << i << ": " << unit[i] << " vs " << want[(size_t)(32 * u + i)];
  }
}

TEST(BlockDecode, EveryBlockTypeMatchesTheCpuReference) {
  std::mt19937 rng(11);
  std::student_t_distribution<float> heavy(4.0f);
  int types = 0;
  for (DType type : kAllDTypes) {
    const DTypeInfo& info = dtype_info(type);
    if (info.block_size == 1 || is_iq_grid_type(type)) continue;  // CUDA has no i-quant decoding
    SCOPED_TRACE(info.name);
    const k::BlockShape bs = k::block_shape((int)type);
    ASSERT_EQ(bs.elems, info.block_size);
    ASSERT_EQ((size_t)bs.bytes, info.type_size);
    const int64_t n = 1024;
    std::vector<uint8_t> row((size_t)(n / info.block_size) * info.type_size);
    std::vector<float> x((size_t)n);
    for (float scale : {1.0f, 0.02f, 3e-6f}) {  // the last: scales in half's subnormal range
      for (float& v : x) v = scale * heavy(rng);
      info.from_float(x.data(), row.data(), n);
      check_row(type, row, n);
    }
    for (int round = 0; round < 20; ++round) {  // any bytes at all
      for (uint8_t& b : row) b = (uint8_t)(rng() & 0xff);
      check_row(type, row, n);
    }
    ++types;
  }
  EXPECT_EQ(types, 13);
}

TEST(BlockDecode, PlainTypesAreNotBlockTypes) {
  for (int t : {k::kF32, k::kF16, k::kBF16, k::kI32}) EXPECT_EQ(k::block_shape(t).elems, 0) << t;
}

}  // namespace
}  // namespace loom::cuda
