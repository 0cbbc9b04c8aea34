// Tiled flash attention for the SIMD levels (FLASH_ATTN_EXT): blocks of query rows against
// tiles of keys through the GEMM register tiles, with a vectorized online softmax. The
// per-query loop in cpu_attention.cpp stays the readable reference (and the scalar level's kernel).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu_vec_dot.h"
#include "kernels.h"

namespace loom::cpu {

// K/V of a quantized type (-ctk/-ctv q8_0, q4_0...): its row -> f32 conversion; nullptr for the
// plain float types, which the kernels read in place.
RowToF32Fn cache_row_reader(DType type);
// Whether a K/V operand can be read: a plain float type, or a type with a conversion and whole blocks.
bool cache_readable(const Tensor* t);
// n values of the row at src -> dst (through conv); returns dst.
inline const float* convert_row(RowToF32Fn conv, const char* src, float* dst, int64_t n) {
  conv(src, dst, n);
  return dst;
}

// Whether the tiled kernel computes this FLASH_ATTN_EXT node at the active level.
bool flash_tiled_supported(const Tensor* node);
// Scratch of the tiled kernel for nth threads.
size_t flash_tiled_work_size(const Tensor* node, int nth);
void flash_attn_tiled(const KernelArgs& args, Tensor* dst);
// ALiBi slope of head h of n_head (1 when max_bias == 0), shared with the reference kernel
// (cpu_attention.cpp).
float alibi_slope(float max_bias, int64_t n_head, int64_t h);

}  // namespace loom::cpu
