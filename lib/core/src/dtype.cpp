// The dtype table: names, block sizes, bytes per block and reference row conversions.
#include "loom/core/dtype.h"

#include <cctype>
#include <cstring>

#include "loom/core/error.h"
#include "loom/core/quants.h"
#include "loom/core/quants_iq.h"
#include "quants_fit.h"

namespace loom {
namespace {

void f32_to_f32_row(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, (size_t)n * 4); }
void f32_from_f32_row(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, (size_t)n * 4); }

constexpr DTypeInfo kTable[] = {
    {DType::F32, "f32", 1, 4, false, true, f32_to_f32_row, f32_from_f32_row},
    {DType::F16, "f16", 1, 2, false, true, f16_to_f32_row, f32_to_f16_row},
    {DType::Q4_0, "q4_0", kQK4_0, sizeof(BlockQ4_0), true, false, dequantize_q4_0_row, quantize_q4_0_row},
    {DType::Q4_1, "q4_1", kQK4_1, sizeof(BlockQ4_1), true, false, dequantize_q4_1_row, quantize_q4_1_row},
    {DType::Q5_0, "q5_0", kQK5_0, sizeof(BlockQ5_0), true, false, dequantize_q5_0_row, quantize_q5_0_row},
    {DType::Q5_1, "q5_1", kQK5_1, sizeof(BlockQ5_1), true, false, dequantize_q5_1_row, quantize_q5_1_row},
    {DType::Q8_0, "q8_0", kQK8_0, sizeof(BlockQ8_0), true, false, dequantize_q8_0_row, quantize_q8_0_row},
    {DType::Q2_K, "q2_K", kQK_K, sizeof(BlockQ2_K), true, false, dequantize_q2_k_row, quantize_q2_k_row},
    {DType::Q3_K, "q3_K", kQK_K, sizeof(BlockQ3_K), true, false, dequantize_q3_k_row, quantize_q3_k_row},
    {DType::Q4_K, "q4_K", kQK_K, sizeof(BlockQ4_K), true, false, dequantize_q4_k_row, quantize_q4_k_row},
    {DType::Q5_K, "q5_K", kQK_K, sizeof(BlockQ5_K), true, false, dequantize_q5_k_row, quantize_q5_k_row},
    {DType::Q6_K, "q6_K", kQK_K, sizeof(BlockQ6_K), true, false, dequantize_q6_k_row, quantize_q6_k_row},
    {DType::IQ2_XXS, "iq2_xxs", kQK_K, sizeof(BlockIQ2_XXS), true, false, dequantize_iq2_xxs_row, quantize_iq2_xxs_row},
    {DType::IQ2_XS, "iq2_xs", kQK_K, sizeof(BlockIQ2_XS), true, false, dequantize_iq2_xs_row, quantize_iq2_xs_row},
    {DType::IQ3_XXS, "iq3_xxs", kQK_K, sizeof(BlockIQ3_XXS), true, false, dequantize_iq3_xxs_row, quantize_iq3_xxs_row},
    {DType::IQ1_S, "iq1_s", kQK_K, sizeof(BlockIQ1_S), true, false, dequantize_iq1_s_row, quantize_iq1_s_row},
    {DType::IQ4_NL, "iq4_nl", kQK4_NL, sizeof(BlockIQ4_NL), true, false, dequantize_iq4_nl_row, quantize_iq4_nl_row},
    {DType::IQ3_S, "iq3_s", kQK_K, sizeof(BlockIQ3_S), true, false, dequantize_iq3_s_row, quantize_iq3_s_row},
    {DType::IQ2_S, "iq2_s", kQK_K, sizeof(BlockIQ2_S), true, false, dequantize_iq2_s_row, quantize_iq2_s_row},
    {DType::IQ4_XS, "iq4_xs", kQK_K, sizeof(BlockIQ4_XS), true, false, dequantize_iq4_xs_row, quantize_iq4_xs_row},
    {DType::I32, "i32", 1, 4, false, false, nullptr, nullptr},
    {DType::IQ1_M, "iq1_m", kQK_K, sizeof(BlockIQ1_M), true, false, dequantize_iq1_m_row, quantize_iq1_m_row},
    {DType::BF16, "bf16", 1, 2, false, true, bf16_to_f32_row, f32_to_bf16_row},
    {DType::MXFP4, "mxfp4", kQK_MXFP4, sizeof(BlockMXFP4), true, false, dequantize_mxfp4_row, quantize_mxfp4_row},
};

}  // namespace

const DTypeInfo& dtype_info(DType type) {
  for (const DTypeInfo& info : kTable)
    if (info.type == type) return info;
  LOOM_ASSERT(false, "dtype id {} not in table", (int)type);
  return kTable[0];
}

namespace {

// A type's weighted search, then its blocks scaled back to the originals' size (quants_fit.h).
template <class Block, FromFloatImportanceFn Search, ToFloatFn Decode, int64_t BlockN>
void weighted_quantizer(const float* src, void* dst, int64_t n, const float* importance) {
  Search(src, dst, n, importance);
  if (importance) detail::keep_blocks_size(static_cast<Block*>(dst), n, BlockN, src, importance, Decode);
}

}  // namespace

FromFloatImportanceFn importance_quantizer(DType type) {
  switch (type) {
    case DType::Q4_0:
      return weighted_quantizer<BlockQ4_0, quantize_q4_0_row_imp, dequantize_q4_0_row, kQK4_0>;
    case DType::Q4_1:
      return weighted_quantizer<BlockQ4_1, quantize_q4_1_row_imp, dequantize_q4_1_row, kQK4_1>;
    case DType::Q5_0:
      return weighted_quantizer<BlockQ5_0, quantize_q5_0_row_imp, dequantize_q5_0_row, kQK5_0>;
    case DType::Q5_1:
      return weighted_quantizer<BlockQ5_1, quantize_q5_1_row_imp, dequantize_q5_1_row, kQK5_1>;
    case DType::Q2_K:
      return weighted_quantizer<BlockQ2_K, quantize_q2_k_row_imp, dequantize_q2_k_row, kQK_K>;
    case DType::Q3_K:
      return weighted_quantizer<BlockQ3_K, quantize_q3_k_row_imp, dequantize_q3_k_row, kQK_K>;
    case DType::Q4_K:
      return weighted_quantizer<BlockQ4_K, quantize_q4_k_row_imp, dequantize_q4_k_row, kQK_K>;
    case DType::Q5_K:
      return weighted_quantizer<BlockQ5_K, quantize_q5_k_row_imp, dequantize_q5_k_row, kQK_K>;
    case DType::Q6_K:
      return weighted_quantizer<BlockQ6_K, quantize_q6_k_row_imp, dequantize_q6_k_row, kQK_K>;
    case DType::IQ4_NL:
      return weighted_quantizer<BlockIQ4_NL, quantize_iq4_nl_row_imp, dequantize_iq4_nl_row, kQK4_NL>;
    case DType::IQ4_XS:
      return weighted_quantizer<BlockIQ4_XS, quantize_iq4_xs_row_imp, dequantize_iq4_xs_row, kQK_K>;
    // the i-quants scale their unit back inside their search (quants_iq.cpp), with or without a matrix
    case DType::IQ2_XXS:
      return quantize_iq2_xxs_row_imp;
    case DType::IQ2_XS:
      return quantize_iq2_xs_row_imp;
    case DType::IQ2_S:
      return quantize_iq2_s_row_imp;
    case DType::IQ3_XXS:
      return quantize_iq3_xxs_row_imp;
    case DType::IQ3_S:
      return quantize_iq3_s_row_imp;
    case DType::IQ1_S:
      return quantize_iq1_s_row_imp;
    case DType::IQ1_M:
      return quantize_iq1_m_row_imp;
    default:
      return nullptr;
  }
}

std::optional<DType> dtype_from_id(int64_t id) {
  for (const DTypeInfo& info : kTable)
    if ((int64_t)info.type == id) return info.type;
  return std::nullopt;
}

std::optional<DType> dtype_from_name(std::string_view name) {
  for (const DTypeInfo& info : kTable) {
    std::string_view n = info.name;
    if (n.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < n.size(); ++i)
      if (std::tolower((unsigned char)n[i]) != std::tolower((unsigned char)name[i])) eq = false;
    if (eq) return info.type;
  }
  return std::nullopt;
}

}  // namespace loom
