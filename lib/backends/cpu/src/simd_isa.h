// Entry points shared between the per-level kernel files of the CPU backend (simd_<level>*.cpp):
// the integer dots of the quantized weight types against int8 columns, and the column
// quantizers, one set per instruction-set level. Only the level tables in simd_<level>.cpp
// reference them; everything else goes through weight_kernels() / quantize_act().
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu_vec_dot.h"

namespace loom::cpu {

#define LOOM_ROWS_DOT_Q(level)                                                                                  \
  void rows_dot_q8_0_##level(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,    \
                             float* const* out);                                                                \
  void rows_dot_q4_0_##level(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,    \
                             float* const* out);                                                                \
  void rows_dot_q4_k_##level(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,    \
                             float* const* out);                                                                \
  void rows_dot_q6_k_##level(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,    \
                             float* const* out);                                                                \
  /* repacked rows (cpu_repack.h) */                                                                            \
  void rows_dot_q8_0_r8_##level(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc, \
                                float* const* out);                                                             \
  void rows_dot_q4_0_r8_##level(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc, \
                                float* const* out);                                                             \
  void rows_dot_q4_k_r8_##level(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc, \
                                float* const* out);                                                             \
  void rows_dot_q6_k_r8_##level(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc, \
                                float* const* out);                                                             \
  void quantize_q8_##level(const float* x, void* dst, int64_t K);                                               \
  void quantize_q8k_##level(const float* x, void* dst, int64_t K);

LOOM_ROWS_DOT_Q(avx2)
LOOM_ROWS_DOT_Q(avx512)
#undef LOOM_ROWS_DOT_Q

// The types of simd_q_more.h (one set per level).
#define LOOM_ROWS_DOT_ONE(name, level)                                                                           \
  void rows_dot_##name##_##level(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc, \
                                 float* const* out);
#define LOOM_ROWS_DOT_MORE(level)  \
  LOOM_ROWS_DOT_ONE(q4_1, level)   \
  LOOM_ROWS_DOT_ONE(q5_0, level)   \
  LOOM_ROWS_DOT_ONE(q5_1, level)   \
  LOOM_ROWS_DOT_ONE(iq4_nl, level) \
  LOOM_ROWS_DOT_ONE(mxfp4, level)  \
  LOOM_ROWS_DOT_ONE(q2_k, level)   \
  LOOM_ROWS_DOT_ONE(q3_k, level)   \
  LOOM_ROWS_DOT_ONE(q5_k, level)   \
  LOOM_ROWS_DOT_ONE(iq4_xs, level)
LOOM_ROWS_DOT_MORE(avx2)
LOOM_ROWS_DOT_MORE(avx512)
// Their repacked rows (simd_r8_more.h).
#define LOOM_ROWS_DOT_R8_MORE(level) \
  LOOM_ROWS_DOT_ONE(q4_1_r8, level)   \
  LOOM_ROWS_DOT_ONE(q5_0_r8, level)   \
  LOOM_ROWS_DOT_ONE(q5_1_r8, level)   \
  LOOM_ROWS_DOT_ONE(iq4_nl_r8, level) \
  LOOM_ROWS_DOT_ONE(mxfp4_r8, level)  \
  LOOM_ROWS_DOT_ONE(q2_k_r8, level)   \
  LOOM_ROWS_DOT_ONE(q3_k_r8, level)   \
  LOOM_ROWS_DOT_ONE(q5_k_r8, level)   \
  LOOM_ROWS_DOT_ONE(iq4_xs_r8, level)
LOOM_ROWS_DOT_R8_MORE(avx2)
LOOM_ROWS_DOT_R8_MORE(avx512)
// The AVX-512 level's kernels of weights repacked in pairs (cpu_repack.h: rows_dot_pairs), nullptr
// for a type without: Q8_0, Q4_0 and Q4_K (simd_avx512_q.cpp) and, through
// rows_dot_pairs_more_avx512, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K, Q3_K, Q5_K and IQ4_XS.
RowsDotFn rows_dot_pairs_avx512(DType type);
RowsDotFn rows_dot_pairs_more_avx512(DType type);
#undef LOOM_ROWS_DOT_R8_MORE
#undef LOOM_ROWS_DOT_MORE
#undef LOOM_ROWS_DOT_ONE

}  // namespace loom::cpu
