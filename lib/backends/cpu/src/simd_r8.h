// The outer loop of the repacked-row kernels (cpu_repack.h) for the levels that run them with
// 8-lane vectors (AVX2, AVX-512 at 256 bits): 8 rows' results per column in one vector, stored
// without a horizontal sum.
// Included by simd_<level>_q.cpp under its target pragma, like simd_ref.h: each level compiles
// its own copy.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "cpu_repack.h"
#include "cpu_vec_dot.h"

namespace loom::cpu {
namespace {

// W: the GGUF block (a group block is 8 of them); nr a multiple of 8. Per group, block(p, i, acc)
// adds block i (at p) of the 8 rows times column c to acc[c]; the 8 results are then stored.
template <class W, int NC, class Block>
inline void r8_groups(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, float* const* out, Block block) {
  constexpr size_t kGroupBlockBytes = kRepackRows * sizeof(W);
  for (int64_t r = 0; r < nr; r += kRepackRows) {
    const uint8_t* g = a + r * lda;
    __m256 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nblk; ++i) block(g + i * kGroupBlockBytes, i, acc);
    for (int c = 0; c < NC; ++c) _mm256_storeu_ps(out[c] + r, acc[c]);
  }
}

// Q8_0 / Q4_0 (W: BlockQ8_0 or BlockQ4_0): block(qs, i, s) puts the integer dots in s[c].
template <class W, int NC, class Block>
inline void r8_rows_loop(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, const BlockQ8A* const* x,
                         float* const* out, Block block) {
  r8_groups<W, NC>(nblk, a, lda, nr, out, [&](const uint8_t* p, int64_t i, __m256* acc) {
    __m256i s[NC];
    block(p + kRepackRows * sizeof(fp16_t), i, s);
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    for (int c = 0; c < NC; ++c)
      acc[c] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[c]), _mm256_mul_ps(dw, _mm256_set1_ps(x[c][i].d)), acc[c]);
  });
}

}  // namespace
}  // namespace loom::cpu
