// Tiled flash attention for the SIMD levels (FLASH_ATTN_EXT): blocks of query rows against
// tiles of keys through the GEMM register tiles, with a vectorized online softmax. The
// per-query loop in cpu_attention.cpp stays the readable reference (and the scalar level's kernel).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels.h"

namespace loom::cpu {

// Whether the tiled kernel computes this FLASH_ATTN_EXT node at the active level.
bool flash_tiled_supported(const Tensor* node);
// Scratch of the tiled kernel for nth threads.
size_t flash_tiled_work_size(const Tensor* node, int nth);
void flash_attn_tiled(const KernelArgs& args, Tensor* dst);
// ALiBi slope of head h of n_head (1 when max_bias == 0), shared with the reference kernel
// (cpu_attention.cpp).
float alibi_slope(float max_bias, int64_t n_head, int64_t h);

}  // namespace loom::cpu
