// The scale searches of the K-quants' reference quantizers (declared in quants_fit.h).
#include "quants_fit.h"

#include "loom/core/quants.h"

namespace loom::detail {

// Fits x[i] ~ scale * q[i] + offset, q[i] integer in [0, nmax], offset <= 0, minimising the
// w-weighted squared error. Starts from the plain min..max grid, then tries nstep + 1 grids of
// (nmax + rmin + rdelta * step) steps, takes the least-squares (scale, offset) for each level
// assignment and keeps it when the error drops. Like ggml's make_qkx2_quants, each grid spans
// from the best offset so far to the max, which keeps the bytes equal to llama.cpp's.
AffineFit fit_affine(int n, int nmax, const float* x, const float* w, uint8_t* q, float rmin, float rdelta, int nstep,
                     bool use_mad, bool free_offset) {
  float lo = x[0], hi = x[0];
  float sum_w = w[0], sum_wx = w[0] * x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += w[i];
    sum_wx += w[i] * x[i];
  }
  if (!free_offset) lo = std::min(lo, 0.0f);  // the offset can only subtract
  if (hi == lo) {
    std::fill(q, q + n, 0);
    return {0.0f, -lo};
  }

  float inv = (float)nmax / (hi - lo);
  float scale = 1.0f / inv, offset = lo;
  float best_err = 0.0f;
  for (int i = 0; i < n; ++i) {
    q[i] = (uint8_t)nearest_clamped(inv * (x[i] - lo), 0, nmax);
    const float diff = scale * q[i] + lo - x[i];
    best_err += w[i] * (use_mad ? std::fabs(diff) : diff * diff);
  }

  uint8_t trial[kQK_K];  // n <= kQK_K
  for (int step = 0; step <= nstep; ++step) {
    inv = (rmin + rdelta * step + nmax) / (hi - offset);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = nearest_clamped(inv * (x[i] - offset), 0, nmax);
      trial[i] = (uint8_t)l;
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    // Weighted least squares for (s, o) in x ~ s * l + o: the 2x2 normal equations.
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0.0f)) continue;
    float s = (sum_w * sum_xl - sum_wx * sum_l) / det;
    float o = (sum_l2 * sum_wx - sum_l * sum_xl) / det;
    if (o > 0.0f && !free_offset) {  // offset must stay <= 0: refit the scale alone
      o = 0.0f;
      s = sum_xl / sum_l2;
    }
    float err = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float diff = s * trial[i] + o - x[i];
      err += w[i] * (use_mad ? std::fabs(diff) : diff * diff);
    }
    if (err < best_err) {
      std::copy(trial, trial + n, q);
      best_err = err;
      scale = s;
      offset = o;
    }
  }
  return {scale, -offset};
}

// Fits x[i] ~ scale * l[i], l[i] integer in [-nmax, nmax - 1], weighting by x^2 so the large
// values fit best (or by the given weights); stores q[i] = l[i] + nmax. Starts from the grid that maps the value of
// largest magnitude to -nmax (the extra negative level), then tries 18 grids of nmax +- 0.1..0.9 steps, keeping the
// least-squares scale of the best one (ggml's make_qx_quants, rmse_type 1). The scale's sign is opposite to that
// value's.
float fit_symmetric(int n, int nmax, const float* x, uint8_t* q, const float* weights) {
  float amax = 0.0f, extreme = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      extreme = x[i];
    }
  }
  if (amax < 1e-15f) {  // all zero
    std::fill(q, q + n, 0);
    return 0.0f;
  }
  // sum of w*x*l and w*l*l with w = x^2, for the levels of grid `inv`
  auto sums = [&](float inv, float& sum_lx, float& sum_l2) {
    sum_lx = sum_l2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = nearest_clamped(inv * x[i], -nmax, nmax - 1);
      const float w = weights ? weights[i] : x[i] * x[i];
      sum_lx += w * x[i] * l;
      sum_l2 += w * l * l;
    }
  };
  auto store = [&](float inv) {
    for (int i = 0; i < n; ++i)
      q[i] = (uint8_t)(nearest_clamped(inv * x[i], -nmax, nmax - 1) + nmax);
  };

  float inv = (float)-nmax / extreme;
  float sum_lx, sum_l2;
  sums(inv, sum_lx, sum_l2);
  store(inv);
  float scale = sum_l2 != 0.0f ? sum_lx / sum_l2 : 0.0f;
  float best = scale * sum_lx;  // = sum_lx^2 / sum_l2: larger means smaller error
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    inv = -(nmax + 0.1f * step) / extreme;
    sums(inv, sum_lx, sum_l2);
    if (sum_l2 > 0.0f && sum_lx * sum_lx > best * sum_l2) {
      store(inv);
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

}  // namespace loom::detail
