// The outer loop of the repacked-row kernels (cpu_repack.h) for the levels that run them with
// 8-lane vectors (AVX2, AVX-512 at 256 bits): 8 rows' results per column in one vector, stored
// without a horizontal sum.
// Included by simd_<level>_q.cpp under its target pragma, like simd_ref.h: each level compiles
// its own copy.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

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

// Q4_K group block at p (cpu_repack.h): the 8 rows' d and dmin, and per sub-block j their
// (sc, m), each row's value in both 16-bit halves of its 32-bit lane (the pairs vpmaddwd and
// vpdpwssd take).
struct Q4kR8Scales {
  __m256 d, dmin;
  __m256i sc[8], m[8];
};
inline void q4k_r8_scales(const uint8_t* p, Q4kR8Scales& s) {
  const __m256i low4 = _mm256_set1_epi8(15), low2 = _mm256_set1_epi8(3);
  s.d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  s.dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
  // sub-blocks 0-3 then 4-7, bytes j * 8 + row: the low 4 bits from lo, the high 2 from hi
  // (its low nibbles for j < 4, high nibbles for j >= 4)
  alignas(32) uint8_t sc[64], mn[64];
  for (int h = 0; h < 2; ++h) {
    const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 32 + 32 * h));
    const __m256i hi = _mm256_srli_epi16(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 96)), 4 * h);
    const __m256i scb = _mm256_or_si256(_mm256_and_si256(lo, low4), _mm256_slli_epi16(_mm256_and_si256(hi, low2), 4));
    const __m256i mb = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo, 4), low4),
                                       _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hi, 2), low2), 4));
    _mm256_store_si256(reinterpret_cast<__m256i*>(sc + 32 * h), scb);
    _mm256_store_si256(reinterpret_cast<__m256i*>(mn + 32 * h), mb);
  }
  for (int j = 0; j < 8; ++j) {
    const __m256i s32 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc + 8 * j)));
    const __m256i m32 = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(mn + 8 * j)));
    s.sc[j] = _mm256_or_si256(s32, _mm256_slli_epi32(s32, 16));
    s.m[j] = _mm256_or_si256(m32, _mm256_slli_epi32(m32, 16));
  }
}

// Quads 8cc .. 8cc + 7 of a Q4_K group block's qs (8 rows x 4 bytes each): the low nibbles
// (sub-block 2cc) and the high ones (2cc + 1).
inline void q4k_r8_nibbles(const uint8_t* qs, int cc, __m256i (&lo)[8], __m256i (&hi)[8]) {
  const __m256i low4 = _mm256_set1_epi8(15);
  for (int q = 0; q < 8; ++q) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (8 * cc + q)));
    lo[q] = _mm256_and_si256(v, low4);
    hi[q] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
  }
}

inline __m256i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}

}  // namespace
}  // namespace loom::cpu
