// Two groups at once (cpu_features.h: wide_512): where 512-bit operations run at the rate of
// 256-bit ones, a repacked kernel takes rows r .. r + 7 in the low half of each vector and
// r + 8 .. r + 15 in the high half, so each activation broadcast, mask and vpdpbusd serves 16
// rows. Such weights are repacked in pairs (cpu_repack.h), the two groups' blocks interleaved so
// that the 16 rows stream as one run. The loads, the fp16 fields and the loop over the pairs;
// included by the avx512 level's files under their target pragma, after simd_r8.h.
#pragma once

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "cpu_repack.h"
#include "cpu_vec_dot.h"

namespace loom::cpu {
namespace {

inline __m512i r8x2_load(const uint8_t* a, const uint8_t* b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(a))),
                            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b)), 1);
}
inline __m512 r8x2_halves(const uint8_t* a, const uint8_t* b) {
  return _mm512_cvtph_ps(_mm256_inserti128_si256(
      _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
      _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1));
}

// W: the GGUF block; a the first row of a pair (cpu_repack.h). Per pair, block(pa, pb, i, acc)
// adds block i of both groups (at pa, pb) times column c to acc[c]; the 16 results are then
// stored. With kPrefetch each step also asks for its bytes ahead, as r8_groups_walk does.
template <class W, int NC, bool kPrefetch, class Block, bool kLines = false>
inline int64_t r8x2_pairs_walk(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, float* const* out,
                               Block& block) {
  constexpr size_t kGroupBlockBytes = kRepackRows * sizeof(W);
  const size_t ahead = kPrefetch ? stream_ahead_bytes(kBlockType<W>) : 0;
  StreamAsker asker{ahead};
  int64_t r = 0;
  for (; r + 2 * kRepackRows <= nr; r += 2 * kRepackRows) {
    const uint8_t* pair = a + r * lda;
    __m512 acc[NC];
    for (int c = 0; c < NC; ++c) acc[c] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nblk; ++i) {
      const uint8_t* p = pair + 2 * i * kGroupBlockBytes;
      if constexpr (kLines)
        asker.ask(p, 2 * kGroupBlockBytes);
      else if constexpr (kPrefetch)
        prefetch_stream(p, 2 * kGroupBlockBytes, ahead);
      block(p, p + kGroupBlockBytes, i, acc);
    }
    for (int c = 0; c < NC; ++c) _mm512_storeu_ps(out[c] + r, acc[c]);
  }
  return r;
}
// The pairs, then a last group alone (nr % 16 == 8, in the 8-row layout) through rest(a, nr,
// out), the 8-row kernel.
template <class W, int NC, class Block, class Rest>
inline void r8x2_groups(int64_t nblk, const uint8_t* a, size_t lda, int64_t nr, float* const* out, Block block,
                        Rest rest) {
  const bool prefetch = stream_prefetch(kBlockType<W>);
  const int64_t r = prefetch && stream_ask_lines(kBlockType<W>)
                        ? r8x2_pairs_walk<W, NC, true, Block, true>(nblk, a, lda, nr, out, block)
                    : prefetch ? r8x2_pairs_walk<W, NC, true>(nblk, a, lda, nr, out, block)
                               : r8x2_pairs_walk<W, NC, false>(nblk, a, lda, nr, out, block);
  if (r < nr) {
    float* o[kMaxDotCols];
    for (int c = 0; c < NC; ++c) o[c] = out[c] + r;
    rest(a + r * lda, nr - r, o);
  }
}

}  // namespace
}  // namespace loom::cpu
