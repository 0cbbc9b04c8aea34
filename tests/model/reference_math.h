// Double-precision helpers of the model forward references (test_forward*.cpp): weight rows
// dequantized through the dtype table, matrix-vector products, RMS norm, and the error measure.
#pragma once

#include <algorithm>
#include <cmath>
#include <numeric>
#include <span>
#include <vector>

#include "loom/graph/tensor.h"

namespace loom {

using Vec = std::vector<double>;

// Row r of a 2-D (or one expert of a 3-D) weight, dequantized.
inline Vec weight_row(const Tensor* w, int64_t r, int64_t expert = 0) {
  std::vector<float> tmp((size_t)w->ne[0]);
  const char* p = static_cast<const char*>(w->data) + r * w->nb[1] + expert * w->nb[2];
  dtype_info(w->type).to_float(p, tmp.data(), w->ne[0]);
  return Vec(tmp.begin(), tmp.end());
}

inline Vec matvec(const Tensor* w, const Vec& x, int64_t expert = 0) {
  Vec y((size_t)w->ne[1]);
  for (int64_t r = 0; r < w->ne[1]; ++r) {
    Vec row = weight_row(w, r, expert);
    y[(size_t)r] = std::inner_product(row.begin(), row.end(), x.begin(), 0.0);
  }
  return y;
}

inline Vec rms_norm(const Vec& x, const Tensor* w, double eps, size_t off = 0, size_t n = 0) {
  if (n == 0) n = x.size();
  Vec wv = weight_row(w, 0);
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += x[off + i] * x[off + i];
  const double s = 1.0 / std::sqrt(ss / (double)n + eps);
  Vec y(n);
  for (size_t i = 0; i < n; ++i) y[i] = x[off + i] * s * wv[i];
  return y;
}

// max |got - want| / max |want| over a row
inline double rel_err(std::span<const float> got, const Vec& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num = std::max(num, std::abs((double)got[i] - want[i]));
    den = std::max(den, std::abs(want[i]));
  }
  return num / den;
}

}  // namespace loom
