// The dtype table: GGUF ids, block sizes and bytes per block, name lookup, row sizes, and that
// each type's conversion functions are wired to the right format.
#include <gtest/gtest.h>

#include <cstring>
#include <initializer_list>
#include <iterator>
#include <string>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/core/quants.h"

namespace loom {
namespace {

TEST(DType, SizesMatchGguf) {
  struct Expect {
    DType type;
    int id;
    const char* name;
    size_t bytes;
    int64_t block;
  };
  // ggml_type ids and ggml's type_traits (blck_size, type_size).
  const Expect expect[] = {
      {DType::F32, 0, "f32", 4, 1},
      {DType::F16, 1, "f16", 2, 1},
      {DType::Q4_0, 2, "q4_0", 18, 32},
      {DType::Q4_1, 3, "q4_1", 20, 32},
      {DType::Q5_0, 6, "q5_0", 22, 32},
      {DType::Q5_1, 7, "q5_1", 24, 32},
      {DType::Q8_0, 8, "q8_0", 34, 32},
      {DType::Q2_K, 10, "q2_K", 84, 256},
      {DType::Q3_K, 11, "q3_K", 110, 256},
      {DType::Q4_K, 12, "q4_K", 144, 256},
      {DType::Q5_K, 13, "q5_K", 176, 256},
      {DType::Q6_K, 14, "q6_K", 210, 256},
      {DType::IQ4_NL, 20, "iq4_nl", 18, 32},
      {DType::IQ4_XS, 23, "iq4_xs", 136, 256},
      {DType::IQ2_XXS, 16, "iq2_xxs", 66, 256},
      {DType::IQ2_XS, 17, "iq2_xs", 74, 256},
      {DType::IQ3_XXS, 18, "iq3_xxs", 98, 256},
      {DType::IQ1_S, 19, "iq1_s", 50, 256},
      {DType::IQ3_S, 21, "iq3_s", 110, 256},
      {DType::IQ2_S, 22, "iq2_s", 82, 256},
      {DType::IQ1_M, 29, "iq1_m", 56, 256},
      {DType::I32, 26, "i32", 4, 1},
      {DType::BF16, 30, "bf16", 2, 1},
      {DType::MXFP4, 39, "mxfp4", 17, 32},
  };
  for (const Expect& e : expect) {
    const DTypeInfo& info = dtype_info(e.type);
    SCOPED_TRACE(e.name);
    EXPECT_EQ((int)info.type, e.id);
    EXPECT_STREQ(info.name, e.name);
    EXPECT_EQ(info.type_size, e.bytes);
    EXPECT_EQ(info.block_size, e.block);
    EXPECT_EQ(dtype_name(e.type), std::string(e.name));
  }
  EXPECT_EQ(std::size(kAllDTypes), std::size(expect));
}

TEST(DType, Flags) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    EXPECT_TRUE(dtype_info(t).is_float) << dtype_name(t);
    EXPECT_FALSE(dtype_info(t).is_quantized) << dtype_name(t);
  }
  for (DType t :
       {DType::Q4_0,   DType::Q4_1,  DType::Q5_0,    DType::Q5_1,   DType::Q8_0,   DType::Q2_K,  DType::Q3_K,
        DType::Q4_K,   DType::Q5_K,  DType::Q6_K,    DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4, DType::IQ2_XXS,
        DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS, DType::IQ3_S,  DType::IQ1_S,  DType::IQ1_M}) {
    EXPECT_TRUE(dtype_info(t).is_quantized) << dtype_name(t);
    EXPECT_FALSE(dtype_info(t).is_float) << dtype_name(t);
  }
  EXPECT_FALSE(dtype_info(DType::I32).is_float);
  EXPECT_FALSE(dtype_info(DType::I32).is_quantized);
  EXPECT_EQ(dtype_info(DType::I32).to_float, nullptr);
  EXPECT_EQ(dtype_info(DType::I32).from_float, nullptr);
}

TEST(DType, FromIdRejectsUnknown) {
  for (DType t : kAllDTypes) {
    ASSERT_TRUE(dtype_from_id((int64_t)t).has_value());
    EXPECT_EQ(*dtype_from_id((int64_t)t), t);
  }
  // Real ggml types loom does not support (q8_1 9, q8_k 15, i8 24, f64 28, tq1_0 34), removed ids
  // (4, 5, 31), and garbage.
  for (int64_t id : std::initializer_list<int64_t>{4, 5, 9, 15, 24, 28, 31, 34, 38, 40, -1, 1000, (int64_t)1 << 40})
    EXPECT_FALSE(dtype_from_id(id).has_value()) << id;
}

TEST(DType, FromName) {
  EXPECT_EQ(dtype_from_name("f32"), DType::F32);
  EXPECT_EQ(dtype_from_name("q4_k"), DType::Q4_K);
  EXPECT_EQ(dtype_from_name("q4_K"), DType::Q4_K);  // as ggml_type_name prints it
  EXPECT_EQ(dtype_from_name("IQ4_XS"), DType::IQ4_XS);
  EXPECT_EQ(dtype_from_name("MXFP4"), DType::MXFP4);
  EXPECT_EQ(dtype_from_name("Q4_K"), DType::Q4_K);  // llama.cpp spells them upper case
  EXPECT_EQ(dtype_from_name("Q6_K"), DType::Q6_K);
  EXPECT_EQ(dtype_from_name("BF16"), DType::BF16);
  EXPECT_EQ(dtype_from_name("q8_0"), DType::Q8_0);
  for (DType t : kAllDTypes) EXPECT_EQ(dtype_from_name(dtype_name(t)), t);
  for (const char* bad : {"", "q4", "q4_k_m", "Q4_K_M", "f32 ", "float", "q8_k", "q4_0x", "iq4"})
    EXPECT_FALSE(dtype_from_name(bad).has_value()) << '"' << bad << '"';
}

TEST(DType, RowSize) {
  EXPECT_EQ(row_size(DType::F32, 4096), 16384u);
  EXPECT_EQ(row_size(DType::F16, 4096), 8192u);
  EXPECT_EQ(row_size(DType::BF16, 3), 6u);
  EXPECT_EQ(row_size(DType::I32, 7), 28u);
  EXPECT_EQ(row_size(DType::Q8_0, 4096), 128u * 34);
  EXPECT_EQ(row_size(DType::Q4_0, 4096), 128u * 18);
  EXPECT_EQ(row_size(DType::Q4_K, 4096), 16u * 144);
  EXPECT_EQ(row_size(DType::Q6_K, 4096), 16u * 210);
  EXPECT_EQ(row_size(DType::Q4_K, 256), 144u);
  EXPECT_EQ(row_size(DType::Q4_K, 0), 0u);
  // A large tensor row does not overflow 32 bits: 2^32 elements of q6_k.
  EXPECT_EQ(row_size(DType::Q6_K, (int64_t)1 << 32), ((size_t)1 << 24) * 210);
}

// Each table entry's functions decode that format: a block encoding the value 1.0 everywhere
// (built by hand) must decode to 1.0 through to_float.
TEST(DType, TableFunctionsDecodeTheirFormat) {
  auto decode = [](DType t, const void* block) {
    const DTypeInfo& info = dtype_info(t);
    std::vector<float> out((size_t)info.block_size);
    info.to_float(block, out.data(), info.block_size);
    return out;
  };
  auto all_one = [](const std::vector<float>& v) {
    for (float f : v)
      if (f != 1.0f) return false;
    return true;
  };
  const float one = 1.0f;
  EXPECT_TRUE(all_one(decode(DType::F32, &one)));
  const uint16_t f16_one = 0x3c00, bf16_one = 0x3f80;
  EXPECT_TRUE(all_one(decode(DType::F16, &f16_one)));
  EXPECT_TRUE(all_one(decode(DType::BF16, &bf16_one)));

  BlockQ8_0 q8{};
  q8.d = 0x3c00;
  std::memset(q8.qs, 1, sizeof(q8.qs));
  EXPECT_TRUE(all_one(decode(DType::Q8_0, &q8)));

  BlockQ4_0 q4{};
  q4.d = 0x3c00;
  std::memset(q4.qs, 0x99, sizeof(q4.qs));  // 9 - 8 = 1 in both nibbles
  EXPECT_TRUE(all_one(decode(DType::Q4_0, &q4)));

  BlockQ4_K q4k{};
  q4k.d = 0x3c00;
  q4k.dmin = 0x3c00;
  // every (sc, m) = (1, 0): bytes 0-3 sc = 1, bytes 4-7 m = 0, bytes 8-11 low nibble sc = 1
  const uint8_t scales[12] = {1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1};
  std::memcpy(q4k.scales, scales, 12);
  std::memset(q4k.qs, 0x11, sizeof(q4k.qs));
  EXPECT_TRUE(all_one(decode(DType::Q4_K, &q4k)));

  BlockQ6_K q6k{};
  q6k.d = 0x3c00;
  for (auto& s : q6k.scales) s = 1;
  std::memset(q6k.ql, 0x11, sizeof(q6k.ql));  // low 4 bits 1
  std::memset(q6k.qh, 0xaa, sizeof(q6k.qh));  // high 2 bits 2 -> q = 33, q - 32 = 1
  EXPECT_TRUE(all_one(decode(DType::Q6_K, &q6k)));

  // from_float of 1.0 everywhere decodes back to 1.0 for every type that has one.
  for (DType t : kAllDTypes) {
    const DTypeInfo& info = dtype_info(t);
    if (!info.from_float) continue;
    std::vector<float> ones((size_t)info.block_size, 1.0f);
    std::vector<uint8_t> bytes(info.type_size);
    info.from_float(ones.data(), bytes.data(), info.block_size);
    const std::vector<float> back = decode(t, bytes.data());
    for (float f : back) EXPECT_NEAR(f, 1.0f, 2e-3f) << dtype_name(t);
  }
}

}  // namespace
}  // namespace loom
