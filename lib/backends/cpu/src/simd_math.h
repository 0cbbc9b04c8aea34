// Vectorized math of the CPU kernels: expf as a Cephes-style polynomial (within 2 ulp of
// std::exp, inf / 0 / NaN like it) and the loops built on it (softmax numerators, silu, swiglu),
// one table per instruction-set level. exp_ref is the readable scalar reference of the vector
// versions; the scalar level's loops call it.
#pragma once

#include <cstdint>

#include "cpu_features.h"

namespace loom::cpu {

struct VecMath {
  // y[i] = exp(x[i] - shift) for i < n; returns the sum of the y (x may alias y).
  float (*exp_shift_sum)(const float* x, float shift, float* y, int64_t n);
  // y[i] = x[i] / (1 + exp(-x[i])) (y may alias x).
  void (*silu)(const float* x, float* y, int64_t n);
  // y[i] = silu(a[i]) * b[i] (y may alias a or b).
  void (*swiglu)(const float* a, const float* b, float* y, int64_t n);
  // max of x[0, n) (-inf for n == 0; NaNs may or may not win).
  float (*max)(const float* x, int64_t n);
  // One online-softmax step over a tile of kt keys held key-major, s[j * ld + r] for rows r < n
  // (flash attention's scores, so that the rows are the vector lanes): s += slope[r] * mask[j *
  // ld + r] where mask is given; then per row m' = max(m[r], max_j s), s = exp(s - m'),
  // alpha[r] = exp(m[r] - m'), l[r] = l[r] alpha[r] + sum_j s, m[r] = m'. A row with m' = -inf
  // (no visible key yet) gets s = 0 and alpha = 0. slope is read only with a mask.
  void (*softmax_step)(float* s, const float* mask, const float* slope, int64_t ld, int64_t kt, int64_t n, float* m,
                       float* l, float* alpha);
};

float exp_ref(float x);
const VecMath& vec_math();  // the active level's
const VecMath& vec_math(Isa isa);

}  // namespace loom::cpu
