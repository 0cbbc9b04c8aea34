// CPU kernels of the training family: CROSS_ENTROPY_LOSS (+ _BACK) and the optimizer steps
// OPT_STEP_ADAMW / OPT_STEP_SGD, which update the parameter (and AdamW's m, v) in place.
// The loss sums per-row values in row order on one thread, so it does not depend on the
// thread count (resumed training reproduces an uninterrupted run).
#include <cmath>

#include "cpu_rows.h"
#include "kernels.h"

namespace loom::cpu {
namespace {

bool f32_contig(const Tensor* t) { return t && t->type == DType::F32 && t->is_contiguous(); }
bool f32_unit(const Tensor* t) { return t && t->type == DType::F32 && t->nb[0] == sizeof(float); }

// log(sum(exp(x))) of one row, in double.
double log_sum_exp(const float* x, int64_t n) {
  float mx = x[0];
  for (int64_t i = 1; i < n; ++i) mx = std::max(mx, x[i]);
  if (std::isinf(mx)) return mx;
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += std::exp((double)(x[i] - mx));
  return mx + std::log(s);
}

double* row_values(const KernelArgs& args) {
  const auto p = reinterpret_cast<uintptr_t>(args.wdata);
  return reinterpret_cast<double*>((p + 63) / 64 * 64);
}

// logits F32 {V, rows...}, labels F32 like logits -> dst {1} = mean over rows of
// -sum_i labels[i] * log_softmax(logits)[i] (terms with a zero label are skipped, so a -inf
// logit with no probability mass costs nothing).
void cross_entropy_loss(const KernelArgs& args, Tensor* dst) {
  const Tensor* logits = dst->src[0];
  const Tensor* labels = dst->src[1];
  const int64_t V = logits->ne[0], rows = logits->nrows();
  double* loss = row_values(args);
  int64_t r0, r1;
  split_rows(rows, args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    unravel_row(r, logits->ne, i1, i2, i3);
    const float* x = reinterpret_cast<const float*>(row_ptr(logits, i1, i2, i3));
    const float* p = reinterpret_cast<const float*>(row_ptr(labels, i1, i2, i3));
    const double lse = log_sum_exp(x, V);
    double l = 0;
    for (int64_t i = 0; i < V; ++i)
      if (p[i] != 0.0f) l -= (double)p[i] * ((double)x[i] - lse);
    loss[r] = l;
  }
  args.barrier();
  if (args.ith == 0) {
    double s = 0;
    for (int64_t r = 0; r < rows; ++r) s += loss[r];
    *static_cast<float*>(dst->data) = (float)(s / (double)rows);
  }
}

// grad F32 {1}, logits, labels F32 {V, rows...} -> dst like logits = (softmax(logits) - labels) * grad / rows.
void cross_entropy_loss_back(const KernelArgs& args, Tensor* dst) {
  const Tensor* grad = dst->src[0];
  const Tensor* logits = dst->src[1];
  const Tensor* labels = dst->src[2];
  const int64_t V = logits->ne[0], rows = logits->nrows();
  const double g = (double)load_f32(grad->type, grad->data) / (double)rows;
  int64_t r0, r1;
  split_rows(rows, args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    unravel_row(r, logits->ne, i1, i2, i3);
    const float* x = reinterpret_cast<const float*>(row_ptr(logits, i1, i2, i3));
    const float* p = reinterpret_cast<const float*>(row_ptr(labels, i1, i2, i3));
    float* d = reinterpret_cast<float*>(row_ptr(dst, i1, i2, i3));
    const double lse = log_sum_exp(x, V);
    for (int64_t i = 0; i < V; ++i) d[i] = (float)((std::exp((double)x[i] - lse) - (double)p[i]) * g);
  }
}

// param, grad, m, v F32 (contiguous, same shape), hp F32 {alpha, beta1, beta2, eps, wd,
// 1/(1-beta1^t), 1/(1-beta2^t)}: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// w = w (1 - alpha wd) - alpha (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps).
void opt_step_adamw(const KernelArgs& args, Tensor* dst) {
  float* __restrict w = static_cast<float*>(dst->src[0]->data);
  const float* __restrict g = static_cast<const float*>(dst->src[1]->data);
  float* __restrict m = static_cast<float*>(dst->src[2]->data);
  float* __restrict v = static_cast<float*>(dst->src[3]->data);
  const float* hp = static_cast<const float*>(dst->src[4]->data);
  const float alpha = hp[0], beta1 = hp[1], beta2 = hp[2], eps = hp[3], wd = hp[4];
  const float beta1h = hp[5], beta2h = hp[6], keep = 1.0f - alpha * wd;
  int64_t i0, i1;
  split_rows(dst->src[0]->nelements(), args.ith, args.nth, i0, i1);
  for (int64_t i = i0; i < i1; ++i) {
    const float gi = g[i];
    const float mi = m[i] * beta1 + gi * (1.0f - beta1);
    const float vi = v[i] * beta2 + gi * gi * (1.0f - beta2);
    m[i] = mi;
    v[i] = vi;
    w[i] = w[i] * keep - alpha * (mi * beta1h) / (std::sqrt(vi * beta2h) + eps);
  }
}

// param, grad F32, hp F32 {alpha, wd}: w = w (1 - alpha wd) - alpha g.
void opt_step_sgd(const KernelArgs& args, Tensor* dst) {
  float* __restrict w = static_cast<float*>(dst->src[0]->data);
  const float* __restrict g = static_cast<const float*>(dst->src[1]->data);
  const float* hp = static_cast<const float*>(dst->src[2]->data);
  const float alpha = hp[0], keep = 1.0f - hp[0] * hp[1];
  int64_t i0, i1;
  split_rows(dst->src[0]->nelements(), args.ith, args.nth, i0, i1);
  for (int64_t i = i0; i < i1; ++i) w[i] = w[i] * keep - alpha * g[i];
}

}  // namespace

bool supports_train(const Tensor* node) {
  const Tensor* const* s = node->src;
  switch (node->op) {
    case OpKind::CROSS_ENTROPY_LOSS:
      return f32_unit(s[0]) && f32_unit(s[1]) && node->type == DType::F32;
    case OpKind::CROSS_ENTROPY_LOSS_BACK:
      return s[0] && is_plain_float(s[0]->type) && f32_unit(s[1]) && f32_unit(s[2]) && f32_unit(node);
    case OpKind::OPT_STEP_ADAMW:
      return f32_contig(s[0]) && f32_contig(s[1]) && f32_contig(s[2]) && f32_contig(s[3]) && f32_contig(s[4]);
    case OpKind::OPT_STEP_SGD:
      return f32_contig(s[0]) && f32_contig(s[1]) && f32_contig(s[2]);
    default:
      return false;
  }
}

size_t work_size_train(const Tensor* node, int) {
  if (node->op == OpKind::CROSS_ENTROPY_LOSS) return sizeof(double) * (size_t)node->src[0]->nrows() + 64;
  return 0;
}

void compute_train(const KernelArgs& args, Tensor* node) {
  switch (node->op) {
    case OpKind::CROSS_ENTROPY_LOSS:
      return cross_entropy_loss(args, node);
    case OpKind::CROSS_ENTROPY_LOSS_BACK:
      return cross_entropy_loss_back(args, node);
    case OpKind::OPT_STEP_ADAMW:
      return opt_step_adamw(args, node);
    case OpKind::OPT_STEP_SGD:
      return opt_step_sgd(args, node);
    default:
      return;
  }
}

}  // namespace loom::cpu
