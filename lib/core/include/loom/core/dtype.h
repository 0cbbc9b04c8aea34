// Element types and their block formats. Ids, block sizes and byte sizes are GGUF's
// (ggml_type), so tensors are byte-compatible with llama.cpp files.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace loom {

enum class DType : int32_t {
  F32 = 0,
  F16 = 1,
  Q4_0 = 2,
  Q4_1 = 3,
  Q5_0 = 6,
  Q5_1 = 7,
  Q8_0 = 8,
  Q2_K = 10,
  Q3_K = 11,
  Q4_K = 12,
  Q5_K = 13,
  Q6_K = 14,
  IQ2_XXS = 16,
  IQ2_XS = 17,
  IQ3_XXS = 18,
  IQ1_S = 19,
  IQ4_NL = 20,
  IQ3_S = 21,
  IQ2_S = 22,
  IQ4_XS = 23,
  I32 = 26,
  IQ1_M = 29,
  BF16 = 30,
  MXFP4 = 39,
};

// Row conversions between a type and f32; n is a multiple of the block size.
using ToFloatFn = void (*)(const void* src, float* dst, int64_t n);
using FromFloatFn = void (*)(const float* src, void* dst, int64_t n);

struct DTypeInfo {
  DType type;
  const char* name;       // "f32", "q4_K", "iq4_xs", ... (as llama.cpp's ggml_type_name prints them)
  int64_t block_size;     // elements per block (1 for plain types)
  size_t type_size;       // bytes per block
  bool is_quantized;
  bool is_float;          // F32/F16/BF16: trainable, usable as activations
  ToFloatFn to_float;     // reference dequantize (nullptr for I32)
  FromFloatFn from_float; // reference quantize (nullptr for I32)
};

// All supported types, in id order.
inline constexpr DType kAllDTypes[] = {DType::F32,   DType::F16,    DType::Q4_0,    DType::Q4_1,   DType::Q5_0,
                                       DType::Q5_1,  DType::Q8_0,   DType::Q2_K,    DType::Q3_K,   DType::Q4_K,
                                       DType::Q5_K,  DType::Q6_K,   DType::IQ2_XXS, DType::IQ2_XS, DType::IQ3_XXS,
                                       DType::IQ1_S, DType::IQ4_NL, DType::IQ3_S,   DType::IQ2_S,  DType::IQ4_XS,
                                       DType::I32,   DType::IQ1_M,  DType::BF16,    DType::MXFP4};
// The i-quants of quants_iq.h: codebook types, read and run (CPU) and written without an
// importance matrix.
inline constexpr bool is_iq_grid_type(DType t) {
  return t == DType::IQ2_XXS || t == DType::IQ2_XS || t == DType::IQ2_S || t == DType::IQ3_XXS || t == DType::IQ3_S ||
         t == DType::IQ1_S || t == DType::IQ1_M;
}

const DTypeInfo& dtype_info(DType type);
inline const char* dtype_name(DType type) { return dtype_info(type).name; }
// nullopt for ids loom does not know (files with such types are rejected, not crashed on).
std::optional<DType> dtype_from_id(int64_t id);
// Case-insensitive: "q4_K", "Q4_K" and "q4_k" are the same type.
std::optional<DType> dtype_from_name(std::string_view name);

// Bytes of a row of n elements; n must be a multiple of the block size.
inline size_t row_size(DType type, int64_t n) {
  const DTypeInfo& info = dtype_info(type);
  return info.type_size * static_cast<size_t>(n / info.block_size);
}

}  // namespace loom
