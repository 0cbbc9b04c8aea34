// Scale searches shared by the reference quantizers of the K-quants (quants_k*.cpp): the same
// grids, weights and rounding as ggml's make_qkx2_quants / make_qx_quants, so rows quantize to
// llama.cpp's bytes. Private to lib/core.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

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
AffineFit fit_affine(int n, int nmax, const float* x, const float* w, uint8_t* q, float rmin, float rdelta,
                     int nstep, bool use_mad);

// Fits x[i] ~ scale * l[i], l[i] in [-nmax, nmax - 1] (x^2-weighted); stores q[i] = l[i] + nmax.
float fit_symmetric(int n, int nmax, const float* x, uint8_t* q);

}  // namespace loom::detail
