// Scale searches shared by the reference quantizers (quants*.cpp): the same grids, weights and
// rounding as ggml's make_qkx2_quants / make_qx_quants, so rows quantize to llama.cpp's bytes;
// given importance weights, the same searches minimise the weighted error. Private to lib/core.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "loom/core/fp16.h"

namespace loom::detail {

// Round half to even (ggml's nearest_int), then clamp; lrint keeps NaN/huge inputs defined.
inline int nearest_clamped(float v, int lo, int hi) {
  return (int)std::clamp(std::lrint(v), (long)lo, (long)hi);
}

struct AffineFit {
  float scale;
  float neg_min;  // x ~ scale * q - neg_min, neg_min >= 0
};

// Fits x[i] ~ scale * q[i] - neg_min, q[i] in [0, nmax], minimising the w-weighted squared
// (use_mad: absolute) error over nstep + 1 grids of (nmax + rmin + rdelta * step) steps.
// free_offset: neg_min may be negative too (Q4_1 / Q5_1 store any minimum; the K-quants only
// subtract).
AffineFit fit_affine(int n, int nmax, const float* x, const float* w, uint8_t* q, float rmin, float rdelta, int nstep,
                     bool use_mad, bool free_offset = false);

// Fits x[i] ~ scale * l[i], l[i] in [-nmax, nmax - 1], weighting by w (nullptr: x^2); stores
// q[i] = l[i] + nmax.
float fit_symmetric(int n, int nmax, const float* x, uint8_t* q, const float* w = nullptr);

// The weights of a block's squared errors under an importance matrix (imp: the mean square of the
// activations each column meets): imp[i] * sqrt(sigma2 + x[i]^2) with sigma2 = 2 * mean(x^2), so
// a column counts as its activations say, and the block's larger values a little more (the rule
// of llama.cpp's imatrix quantizers). False when they sum to 0 (no importance, or an all-zero
// block): the caller then takes the unweighted search.
inline bool importance_weights(int n, const float* x, const float* imp, float* w) {
  if (!imp) return false;
  float sum_x2 = 0.0f;
  for (int i = 0; i < n; ++i) sum_x2 += x[i] * x[i];
  const float sigma2 = 2.0f * sum_x2 / (float)n;
  float sum_w = 0.0f;
  for (int i = 0; i < n; ++i) sum_w += w[i] = imp[i] * std::sqrt(sigma2 + x[i] * x[i]);
  return sum_w > 0.0f && std::isfinite(sum_w);
}

// With importance weights w: packs the block again with its super-block scale a few percent
// either way (pack(f, block), f = 1 being `blk` as packed) and keeps the one that decodes with
// the least weighted error. The reference quantizers do not call it, so their bytes stay
// llama.cpp's.
template <class Block, class Pack>
void refine_block_scale(Block& blk, const float* x, const float* w, Pack&& pack,
                        void (*decode)(const void*, float*, int64_t)) {
  constexpr int n = 256;
  auto error = [&](const Block& b) {
    float y[n], e = 0.0f;
    decode(&b, y, n);
    for (int i = 0; i < n; ++i) e += w[i] * (y[i] - x[i]) * (y[i] - x[i]);
    return e;
  };
  float best = error(blk);
  for (float f : {0.94f, 0.96f, 0.98f, 1.02f, 1.04f, 1.06f}) {
    Block b;
    pack(f, b);
    const float e = error(b);
    if (e < best) best = e, blk = b;
  }
}

// With an importance matrix, after the search: scales each block of a row (its d, and its dmin or
// m where it has one) so that the decoded values' projection on the originals, weighted by the
// activations' mean squares, sum(imp x y) / sum(imp x x), is 1. Least-squares searches shrink a
// block (more the fewer the bits), and a model feels that as every product scaled down: on a
// trained 2-layer llama, Q2_K's KL divergence went 0.085 -> 0.072 with this.
template <class Block>
void keep_blocks_size(Block* blocks, int64_t n, int64_t block_n, const float* x, const float* imp,
                      void (*decode)(const void*, float*, int64_t)) {
  float y[256];
  for (int64_t b = 0; b < n / block_n; ++b) {
    decode(&blocks[b], y, block_n);
    double xy = 0.0, xx = 0.0;
    for (int64_t i = 0; i < block_n; ++i) {
      const double a = imp[b * block_n + i], v = x[b * block_n + i];
      xy += a * v * y[i], xx += a * v * v;
    }
    if (!(xy > 0.0) || !(xx > 0.0)) continue;
    const float f = (float)(xx / xy);
    Block& blk = blocks[b];
    blk.d = f32_to_fp16(fp16_to_f32(blk.d) * f);
    if constexpr (requires { blk.dmin; }) blk.dmin = f32_to_fp16(fp16_to_f32(blk.dmin) * f);
    if constexpr (requires { blk.m; }) blk.m = f32_to_fp16(fp16_to_f32(blk.m) * f);
  }
}

}  // namespace loom::detail
