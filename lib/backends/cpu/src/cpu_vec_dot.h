// Per-weight-type row kernels of the CPU backend: fused "decode a row of type T and dot it with
// up to kMaxDotCols f32 vectors", fast row conversion to f32, and an f32 accumulate-from-row
// (axpy). The matmul and attention families dispatch on the weight type through
// weight_kernels(); SIMD variants replace entries of that table later, the callers stay as they are.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "loom/core/dtype.h"

namespace loom::cpu {

// Columns of b one fused dot call handles (one decode of the row serves all of them).
inline constexpr int kMaxDotCols = 8;

// out[c] = sum_k a[k] * b[c][k] for c < nc (1 <= nc <= kMaxDotCols); a is one row of K elements
// of the kernel's type, contiguous (K a multiple of the block size for quantized types).
using RowDotFn = void (*)(int64_t K, const void* a, const float* const* b, int nc, float* out);
// dst[0, n) = row src as f32 (contiguous; n a multiple of the block size).
using RowToF32Fn = void (*)(const void* src, float* dst, int64_t n);
// y[0, n) += alpha * x[0, n) with x a contiguous row of the kernel's type (plain floats only).
using RowAxpyFn = void (*)(int64_t n, float alpha, const void* x, float* y);

struct WeightKernels {
  DType type;
  int64_t block;      // elements per block (1 for plain floats)
  size_t block_bytes;
  RowDotFn dot;
  RowToF32Fn to_f32;
  RowAxpyFn axpy;     // nullptr for quantized types
};

// Kernels of a weight type, or nullptr when the type has none (I32).
const WeightKernels* weight_kernels(DType type);

// Branch-free IEEE half -> f32, exact for every input (subnormals, inf, nan); vectorizes in
// loops where the reference fp16_to_f32 (branches, ldexp) does not. Normal numbers: move the
// exponent and mantissa into f32 position with the exponent biased by 224 (so half inf/nan
// lands on 255) and rescale by 2^-112. Subnormals: place the mantissa under the exponent of
// 0.5 and subtract 0.5, which leaves mantissa * 2^-24.
inline float fp16_to_f32_fast(uint16_t h) {
  const uint32_t w = (uint32_t)h << 16;
  const uint32_t sign = w & 0x80000000u;
  const uint32_t two_w = w + w;  // exponent and mantissa, sign shifted out
  const float normal = std::bit_cast<float>((two_w >> 4) + (224u << 23)) * 0x1.0p-112f;
  const float subnormal = std::bit_cast<float>((two_w >> 17) | (126u << 23)) - 0.5f;
  const uint32_t is_sub = 0u - (uint32_t)(two_w < (1u << 27));  // all ones for zero/subnormal
  const uint32_t bits = (std::bit_cast<uint32_t>(subnormal) & is_sub) | (std::bit_cast<uint32_t>(normal) & ~is_sub);
  return std::bit_cast<float>(sign | bits);
}

// y[0, n) *= s.
void scale_f32(int64_t n, float s, float* y);

}  // namespace loom::cpu
