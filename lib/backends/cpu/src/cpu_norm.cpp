// CPU kernels of the normalization family: RMS_NORM, NORM and RMS_NORM_BACK, each over dim 0
// (one row at a time, rows split across threads). Inputs F32/F16/BF16, possibly strided;
// the result is contiguous F32 and may alias src[0] (each row is fully read before it is written).
#include <cmath>

#include "cpu_rows.h"
#include "kernels.h"

namespace loom::cpu {

namespace {

// x {n, ...} -> y {n, ...}: y = x / sqrt(mean(x^2) + eps).
void rms_norm_row(const float* x, float* y, int64_t n, float eps) {
  const double mean_sq = sum_sq_f32(x, n) / (double)n;
  const float r = (float)(1.0 / std::sqrt(mean_sq + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * r;
}

// x {n, ...} -> y {n, ...}: y = (x - mean) / sqrt(var + eps), var = mean((x - mean)^2).
void norm_row(const float* x, float* y, int64_t n, float eps) {
  const float mean = (float)(sum_f32(x, n) / (double)n);
  const double var = sum_sq_f32(x, n, mean) / (double)n;
  const float r = (float)(1.0 / std::sqrt(var + eps));
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) * r;
}

// Gradient of y = x * r, r = (mean(x^2) + eps)^(-1/2), for upstream g:
//   dr/dx_j = -r^3 x_j / n, so dx_j = r g_j - (r^3 / n) x_j sum_i(g_i x_i)
//                                    = r (g_j - x_j r^2 mean(g * x)).
void rms_norm_back_row(const float* g, const float* x, float* dx, int64_t n, float eps) {
  const double mean_sq = sum_sq_f32(x, n) / (double)n;
  const double r = 1.0 / std::sqrt(mean_sq + eps);
  const double gx = dot_f32(g, x, n) / (double)n;
  const float rf = (float)r;
  const float c = (float)(gx * r * r);
  for (int64_t i = 0; i < n; ++i) dx[i] = rf * (g[i] - x[i] * c);
}

// The rows of dst, split across threads; inputs are converted to f32 scratch when not F32 with
// unit stride. src[0] is x (RMS_NORM, NORM) or the upstream gradient (RMS_NORM_BACK, src[1] = x).
// Scratch per thread: 2 ne0 floats.
void norm_rows(const KernelArgs& args, Tensor* dst) {
  const Tensor* a = dst->src[0];
  const Tensor* b = dst->op == OpKind::RMS_NORM_BACK ? dst->src[1] : nullptr;
  const float eps = dst->param_f32(0);
  const int64_t ne0 = dst->ne[0];
  float* tmp_a = thread_scratch(args, (size_t)(2 * ne0) * sizeof(float));
  float* tmp_b = tmp_a + ne0;
  float* out = static_cast<float*>(dst->data);
  int64_t r0, r1;
  split_rows(dst->nrows(), args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    unravel_row(r, dst->ne, i1, i2, i3);
    const float* s0 = row_as_f32(a, i1, i2, i3, tmp_a);
    float* y = out + r * ne0;
    switch (dst->op) {
      case OpKind::RMS_NORM: rms_norm_row(s0, y, ne0, eps); break;
      case OpKind::NORM: norm_row(s0, y, ne0, eps); break;
      case OpKind::RMS_NORM_BACK: rms_norm_back_row(s0, row_as_f32(b, i1, i2, i3, tmp_b), y, ne0, eps); break;
      default: break;
    }
  }
}

}  // namespace

bool supports_norm(const Tensor* node) {
  const Tensor* a = node->src[0];
  if (!a || !is_plain_float(a->type) || !is_f32_contiguous(node) || !same_shape(*node, *a)) return false;
  switch (node->op) {
    case OpKind::RMS_NORM:
    case OpKind::NORM: return true;
    case OpKind::RMS_NORM_BACK: {
      const Tensor* x = node->src[1];
      return x && is_plain_float(x->type) && same_shape(*a, *x);
    }
    default: return false;
  }
}

size_t work_size_norm(const Tensor* node, int nth) {
  return scratch_bytes((size_t)(2 * node->ne[0]) * sizeof(float), nth);
}

void compute_norm(const KernelArgs& args, Tensor* node) {
  switch (node->op) {
    case OpKind::RMS_NORM:
    case OpKind::NORM:
    case OpKind::RMS_NORM_BACK: norm_rows(args, node); break;
    default: break;
  }
}

}  // namespace loom::cpu
