// Row kernels of the i-quants (IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S): each block
// is unpacked to its integers (iq_unpack, loom/core/quants_iq.h) and dotted with 256-value q8k
// columns (llama.cpp's Q8_K for these types), per 16 values times the block's scale integers.
// Plain loops, included under each level's target pragma like simd_ref_q.h, so each level's
// compiler vectorizes them; quants_iq.h itself must be included before the pragma (its inline
// functions are shared by every level and must not take one level's instructions).
#pragma once

#include <cstdint>

#include "cpu_vec_dot.h"
#include "loom/core/quants_iq.h"
#include "simd_ref_q.h"

namespace loom::cpu {
namespace {

template <class Block>
float dot_iq(const Block* w, const BlockQ8KA* x, int64_t nblk) {
  float s = 0.0f;
  IqInts q;
  for (int64_t i = 0; i < nblk; ++i) {
    iq_unpack(w[i], q);
    int32_t sum = 0;
    for (int g = 0; g < 16; ++g) {
      int32_t dot = 0;
      for (int j = 16 * g; j < 16 * g + 16; ++j) dot += (int32_t)q.v[j] * x[i].qs[j];
      sum += q.sc[g] * dot;
    }
    s += q.unit * x[i].d * (float)sum;
  }
  return s;
}

// Table rows: f32 paths through the reference dequantizer, integer dots as above, no repacking.
#define LOOM_IQ_KERNEL(T, Block, deq, dot)                                                                     \
  {                                                                                                            \
    DType::T, 256, sizeof(Block), dot_cols<DecRef<Block, 256, deq>>, to_f32<DecRef<Block, 256, deq>>, nullptr, \
        ActType::q8k, rows_dot_q<Block, BlockQ8KA, dot<Block>>, nullptr, nullptr                               \
  }
// A level's rows: `dot` for the IQ2 / IQ3 types, `dot1` for IQ1_S and IQ1_M (the portable levels:
// dot_iq for both; AVX-512: simd_iq.h's).
#define LOOM_IQ_KERNELS(dot, dot1)                                               \
  LOOM_IQ_KERNEL(IQ2_XXS, BlockIQ2_XXS, dequantize_iq2_xxs_row, dot),            \
      LOOM_IQ_KERNEL(IQ2_XS, BlockIQ2_XS, dequantize_iq2_xs_row, dot),           \
      LOOM_IQ_KERNEL(IQ2_S, BlockIQ2_S, dequantize_iq2_s_row, dot),              \
      LOOM_IQ_KERNEL(IQ3_XXS, BlockIQ3_XXS, dequantize_iq3_xxs_row, dot),        \
      LOOM_IQ_KERNEL(IQ3_S, BlockIQ3_S, dequantize_iq3_s_row, dot),              \
      LOOM_IQ_KERNEL(IQ1_S, BlockIQ1_S, dequantize_iq1_s_row, dot1),             \
      LOOM_IQ_KERNEL(IQ1_M, BlockIQ1_M, dequantize_iq1_m_row, dot1)

}  // namespace
}  // namespace loom::cpu
