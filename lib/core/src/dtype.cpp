// The dtype table: names, block sizes, bytes per block and reference row conversions.
#include "loom/core/dtype.h"

#include <cstring>

#include "loom/core/error.h"
#include "loom/core/quants.h"

namespace loom {
namespace {

void f32_to_f32_row(const void* src, float* dst, int64_t n) { std::memcpy(dst, src, (size_t)n * 4); }
void f32_from_f32_row(const float* src, void* dst, int64_t n) { std::memcpy(dst, src, (size_t)n * 4); }

constexpr DTypeInfo kTable[] = {
    {DType::F32, "f32", 1, 4, false, true, f32_to_f32_row, f32_from_f32_row},
    {DType::F16, "f16", 1, 2, false, true, f16_to_f32_row, f32_to_f16_row},
    {DType::Q4_0, "q4_0", kQK4_0, sizeof(BlockQ4_0), true, false, dequantize_q4_0_row, quantize_q4_0_row},
    {DType::Q8_0, "q8_0", kQK8_0, sizeof(BlockQ8_0), true, false, dequantize_q8_0_row, quantize_q8_0_row},
    {DType::Q4_K, "q4_k", kQK_K, sizeof(BlockQ4_K), true, false, dequantize_q4_k_row, quantize_q4_k_row},
    {DType::Q6_K, "q6_k", kQK_K, sizeof(BlockQ6_K), true, false, dequantize_q6_k_row, quantize_q6_k_row},
    {DType::I32, "i32", 1, 4, false, false, nullptr, nullptr},
    {DType::BF16, "bf16", 1, 2, false, true, bf16_to_f32_row, f32_to_bf16_row},
};

}  // namespace

const DTypeInfo& dtype_info(DType type) {
  for (const DTypeInfo& info : kTable)
    if (info.type == type) return info;
  LOOM_ASSERT(false, "dtype id {} not in table", (int)type);
  return kTable[0];
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
      if (n[i] != (char)std::tolower((unsigned char)name[i])) eq = false;
    if (eq) return info.type;
  }
  return std::nullopt;
}

}  // namespace loom
