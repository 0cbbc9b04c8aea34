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

#include "cpu_features.h"
#include "cpu_repack.h"
#include "cpu_vec_dot.h"
#include "loom/core/quants.h"
#include "simd_gemm.h"

namespace loom::cpu {
namespace {

// The weight type of a GGUF block (for wide_512 and stream_prefetch).
template <class W>
constexpr DType kBlockType = DType::F32;
template <> constexpr DType kBlockType<BlockQ8_0> = DType::Q8_0;
template <> constexpr DType kBlockType<BlockQ4_0> = DType::Q4_0;
template <> constexpr DType kBlockType<BlockQ4_1> = DType::Q4_1;
template <> constexpr DType kBlockType<BlockQ5_0> = DType::Q5_0;
template <> constexpr DType kBlockType<BlockQ5_1> = DType::Q5_1;
template <> constexpr DType kBlockType<BlockQ2_K> = DType::Q2_K;
template <> constexpr DType kBlockType<BlockQ3_K> = DType::Q3_K;
template <> constexpr DType kBlockType<BlockQ4_K> = DType::Q4_K;
template <> constexpr DType kBlockType<BlockQ5_K> = DType::Q5_K;
template <> constexpr DType kBlockType<BlockQ6_K> = DType::Q6_K;
template <> constexpr DType kBlockType<BlockIQ4_NL> = DType::IQ4_NL;
template <> constexpr DType kBlockType<BlockIQ4_XS> = DType::IQ4_XS;
template <> constexpr DType kBlockType<BlockMXFP4> = DType::MXFP4;

// W: the GGUF block (a group block is 8 of them); nr a multiple of 8. Per group, block(p, i, acc)
// adds block i (at p) of the 8 rows times column c to acc[c]; the 8 results are then stored.
// With kPrefetch each step also asks for its bytes stream_ahead_bytes ahead (stream_prefetch; a
// StreamAsker where stream_ask_lines).
template <class W, int NC, bool kPrefetch, class Block, bool kLines = false>
inline void r8_groups_walk(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, float* const* out, Block& block) {
  constexpr size_t kGroupBlockBytes = kRepackRows * sizeof(W);
  const size_t ahead = kPrefetch ? stream_ahead_bytes(kBlockType<W>) : 0;
  StreamAsker asker{ahead};
  for (int64_t r = 0; r < nr; r += kRepackRows) {
    const uint8_t* g = a + r * lda;
    __m256 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t i = 0; i < nblk; ++i) {
      if constexpr (kLines)
        asker.ask(g + i * kGroupBlockBytes, kGroupBlockBytes);
      else if constexpr (kPrefetch)
        prefetch_stream(g + i * kGroupBlockBytes, kGroupBlockBytes, ahead);
      block(g + i * kGroupBlockBytes, i, acc);
    }
    for (int c = 0; c < NC; ++c) _mm256_storeu_ps(out[c] + r, acc[c]);
  }
}
template <class W, int NC, class Block>
inline void r8_groups(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, float* const* out, Block block) {
  static_assert(kBlockType<W> != DType::F32);
  if (stream_prefetch(kBlockType<W>) && stream_ask_lines(kBlockType<W>))
    r8_groups_walk<W, NC, true, Block, true>(nblk, a, lda, nr, out, block);
  else if (stream_prefetch(kBlockType<W>))
    r8_groups_walk<W, NC, true>(nblk, a, lda, nr, out, block);
  else
    r8_groups_walk<W, NC, false>(nblk, a, lda, nr, out, block);
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
  s.d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  s.dmin = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + 16)));
  // The fields' bytes j * 8 + row moved to row lanes (byte j of row's 32 bits): vpermd gathers
  // rows 0-3 into the low 128 bits and 4-7 into the high ones, vpshufb transposes each 4 x 4.
  const __m256i perm = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
  const __m256i tr = _mm256_setr_epi8(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15, 0, 4, 8, 12, 1, 5, 9, 13,
                                      2, 6, 10, 14, 3, 7, 11, 15);
  auto rows = [&](size_t off) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + off));
    return _mm256_shuffle_epi8(_mm256_permutevar8x32_epi32(v, perm), tr);
  };
  const __m256i lo0 = rows(kQ4kRepackScaleLo), lo1 = rows(kQ4kRepackScaleLo + 32), hi = rows(kQ4kRepackScaleHi);
  // byte j of a lane: sc_j / m_j (j < 4) and sc_4+j / m_4+j: the low nibbles from lo, the high
  // bits from hi's pairs (sc, m of j at bits 0-3, of 4 + j at bits 4-7)
  const __m256i low4 = _mm256_set1_epi8(15), hi2 = _mm256_set1_epi8(0x30);
  const __m256i sc[2] = {
      _mm256_or_si256(_mm256_and_si256(lo0, low4), _mm256_and_si256(_mm256_slli_epi16(hi, 4), hi2)),
      _mm256_or_si256(_mm256_and_si256(lo1, low4), _mm256_and_si256(hi, hi2))};
  const __m256i mn[2] = {
      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo0, 4), low4), _mm256_and_si256(_mm256_slli_epi16(hi, 2), hi2)),
      _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(lo1, 4), low4), _mm256_and_si256(_mm256_srli_epi16(hi, 2), hi2))};
  for (int j = 0; j < 8; ++j) {  // byte j % 4 of each lane into both 16-bit halves
    const int8_t b = (int8_t)(j % 4), z = -128;
    const __m256i pick = _mm256_setr_epi8(b, z, b, z, b + 4, z, b + 4, z, b + 8, z, b + 8, z, b + 12, z, b + 12, z, b, z,
                                          b, z, b + 4, z, b + 4, z, b + 8, z, b + 8, z, b + 12, z, b + 12, z);
    s.sc[j] = _mm256_shuffle_epi8(sc[j / 4], pick);
    s.m[j] = _mm256_shuffle_epi8(mn[j / 4], pick);
  }
}

// Quads 8cc .. 8cc + 7 of a Q4_K group block's qs (8 rows x 4 bytes each): the low nibbles
// (sub-block 2cc) and the high ones (2cc + 1), with kInPlace where they lie (16 q: for vpdpbusd,
// whose sums take them; vpmaddubsw's 16-bit pairs cannot).
template <bool kInPlace = false>
inline void q4k_r8_nibbles(const uint8_t* qs, int cc, __m256i (&lo)[8], __m256i (&hi)[8]) {
  const __m256i low4 = _mm256_set1_epi8(15);
  for (int q = 0; q < 8; ++q) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * (8 * cc + q)));
    lo[q] = _mm256_and_si256(v, low4);
    hi[q] = kInPlace ? _mm256_andnot_si256(low4, v) : _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
  }
}

// Step 8h + q of a Q6_K group block (cpu_repack.h) -> the unsigned 6-bit values (0..63) of 8 rows x
// 4 values of each 32-value block k of half h: elements 128h + 32k + 4q .. + 3.
inline void q6k_r8_step(const uint8_t* p, int h, int q, __m256i (&u)[4]) {
  const __m256i low4 = _mm256_set1_epi8(15), hi2 = _mm256_set1_epi8(0x30);
  const uint8_t* step = p + kQ6kRepackSteps + 96 * (8 * h + q);  // ql 16h + q, ql 16h + 8 + q, qh 8h + q
  const __m256i a0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(step));
  const __m256i a1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(step + 32));
  const __m256i hb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(step + 64));
  u[0] = _mm256_or_si256(_mm256_and_si256(a0, low4), _mm256_and_si256(_mm256_slli_epi16(hb, 4), hi2));
  u[1] = _mm256_or_si256(_mm256_and_si256(a1, low4), _mm256_and_si256(_mm256_slli_epi16(hb, 2), hi2));
  u[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a0, 4), low4), _mm256_and_si256(hb, hi2));
  u[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(a1, 4), low4),
                         _mm256_and_si256(_mm256_srli_epi16(hb, 2), hi2));
}
// The rows' int8 scale pairs (sc 2t, sc 2t + 1) of a Q6_K group block as int16 per 32-bit lane.
inline __m256i q6k_r8_scale_pairs(const uint8_t* p, int t) {
  return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p + q6k_repack_scale(2 * t, 0))));
}

// pack_q6k_r8_ref's block j with 8-row vectors: per quad the 32 bytes' 6-bit values at once, the
// rows' half sums by vpmaddubsw / vpmaddwd.
inline void pack_q6k_r8_block(const uint8_t* src, int j, float* dw, int32_t* off, uint8_t* u) {
  const int h = j / 4, k = j % 4;
  const __m128i shl = _mm_cvtsi32_si128(4 * (k / 2)), shh = _mm_cvtsi32_si128(2 * k);
  const __m256i low4 = _mm256_set1_epi8(15), low2 = _mm256_set1_epi8(3), bias = _mm256_set1_epi8(32);
  const __m256i ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  __m256i sums[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
  for (int q = 0; q < 8; ++q) {
    const __m256i ql =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + q6k_repack_ql(16 * h + 8 * (k % 2) + q, 0)));
    const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + q6k_repack_qh(8 * h + q, 0)));
    const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(ql, shl), low4);
    const __m256i hi = _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, shh), low2), 4);
    const __m256i w = _mm256_sub_epi8(_mm256_or_si256(lo, hi), bias);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + 64 * q), w);
    sums[q / 4] = _mm256_add_epi32(sums[q / 4], _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, w), ones16));
  }
  const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src)));
  const __m256i pair =
      _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + q6k_repack_scale(2 * j, 0))));
  const __m256i sc[2] = {_mm256_srai_epi32(_mm256_slli_epi32(pair, 16), 16), _mm256_srai_epi32(pair, 16)};
  for (int half = 0; half < 2; ++half) {
    _mm256_storeu_ps(dw + half * kPanelRows, _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc[half])));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(off + half * kPanelRows),
                        _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sums[half], 7)));
  }
}

// The level's group packers (GemmKernels::pack_*_r8). Q8_0 / Q4_0: the 8 scales, the quads
// copied or split into nibbles.
template <bool Q4>
inline void pack_q8_r8(const uint8_t* src, uint8_t* pb, int h) {
  _mm256_storeu_ps(reinterpret_cast<float*>(pb) + h * kRepackRows,
                   _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src))));
  const uint8_t* qs = src + kRepackRows * sizeof(fp16_t);
  uint8_t* u = pb + 16 * sizeof(float) + h * 32;
  const __m256i low4 = _mm256_set1_epi8(15);
  for (int q = 0; q < (Q4 ? 4 : 8); ++q) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * q));
    if (!Q4) {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + 64 * q), v);
      continue;
    }
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + 64 * q), _mm256_and_si256(v, low4));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + 64 * (q + 4)), _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
  }
}
inline void pack_q8_0_r8(const uint8_t* src, uint8_t* pb, int h) { pack_q8_r8<false>(src, pb, h); }
inline void pack_q4_0_r8(const uint8_t* src, uint8_t* pb, int h) { pack_q8_r8<true>(src, pb, h); }
// Q6_K / Q4_K.
inline void pack_q6k_r8(const uint8_t* src, uint8_t* pb, int h) {
  for (int j = 0; j < 8; ++j, pb += kQ8HalfGroupBlockBytes)
    pack_q6k_r8_block(src, j, reinterpret_cast<float*>(pb) + h * kRepackRows,
                      reinterpret_cast<int32_t*>(pb + 32 * sizeof(float)) + h * kRepackRows,
                      pb + 64 * sizeof(float) + h * 32);
}
// Q4_K: the 8 sub-blocks' scales decoded once (q4k_r8_scales), the nibbles masked per quad.
inline void pack_q4k_r8(const uint8_t* src, uint8_t* pb, int h) {
  Q4kR8Scales sm;
  q4k_r8_scales(src, sm);
  const __m256i low4 = _mm256_set1_epi8(15), low16 = _mm256_set1_epi32(0xffff);
  for (int j = 0; j < 8; ++j, pb += kQ8MinGroupBlockBytes) {
    float* dw = reinterpret_cast<float*>(pb) + h * kRepackRows;
    _mm256_storeu_ps(dw, _mm256_mul_ps(sm.d, _mm256_cvtepi32_ps(_mm256_and_si256(sm.sc[j], low16))));
    _mm256_storeu_ps(dw + kPanelRows, _mm256_mul_ps(sm.dmin, _mm256_cvtepi32_ps(_mm256_and_si256(sm.m[j], low16))));
    const uint8_t* qs = src + kQ4kRepackQuads + 32 * 8 * (j / 2);
    uint8_t* u = pb + 32 * sizeof(float) + h * 32;
    for (int q = 0; q < 8; ++q) {
      const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * q));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(u + 64 * q),
                          _mm256_and_si256(j % 2 ? _mm256_srli_epi16(v, 4) : v, low4));
    }
  }
}

inline __m256i bcast32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}

}  // namespace
}  // namespace loom::cpu
