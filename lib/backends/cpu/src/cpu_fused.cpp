// CPU kernels of fused groups: RMS_NORM+MUL (one pass per row instead of two full tensors) and
// the topk-moe router (gating, bias, top-k, gather, renormalization and scale per token row).
// Each mirrors the unfused kernels' arithmetic step by step, so fused and unfused agree to the bit.
#include "cpu_fused.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "cpu_rows.h"

namespace loom::cpu {

namespace {

bool broadcasts(const Tensor* big, const Tensor* small) {
  for (int i = 0; i < kMaxDims; ++i)
    if (small->ne[i] == 0 || big->ne[i] % small->ne[i] != 0) return false;
  return true;
}

// ---- RMS_NORM + MUL ----------------------------------------------------------------------------

bool rms_norm_mul_supported(const FusedGroup& g) {
  const Tensor* x = g.inputs[0];
  const Tensor* w = g.inputs[1];
  const Tensor* y = g.outputs[0];
  if (!is_plain_float(x->type) || !is_plain_float(w->type) || !is_f32_contiguous(y) || !same_shape(*x, *y) ||
      !broadcasts(y, w))
    return false;
  if (overlaps(y, w)) return false;  // w is read by every row
  // y written in place over x is safe row by row (a row is summed before it is written).
  if (overlaps(y, x)) return x->data == y->data && is_f32_contiguous(x);
  return true;
}

// x {n, r1, r2, r3} float (any strides), w float broadcast over x -> y F32 contiguous like x:
// y = (x * r) * w, r = 1 / sqrt(mean(x^2) + eps). Scratch per thread: n + w.ne0 floats.
void rms_norm_mul(const KernelArgs& args, const FusedGroup& g) {
  const Tensor* x = g.inputs[0];
  const Tensor* w = g.inputs[1];
  Tensor* y = g.outputs[0];
  const int64_t ne0 = y->ne[0], nw0 = w->ne[0];
  float* tmp_x = thread_scratch(args, (size_t)(ne0 + nw0) * sizeof(float));
  float* tmp_w = tmp_x + ne0;
  float* out = static_cast<float*>(y->data);
  int64_t r0, r1;
  split_rows(y->nrows(), args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    unravel_row(r, y->ne, i1, i2, i3);
    const float* xs = row_as_f32(x, i1, i2, i3, tmp_x);
    const double mean_sq = sum_sq_f32(xs, ne0) / (double)ne0;
    const float rs = (float)(1.0 / std::sqrt(mean_sq + g.eps));
    const float* ws = row_as_f32(w, i1 % w->ne[1], i2 % w->ne[2], i3 % w->ne[3], tmp_w);
    float* yr = out + r * ne0;
    if (nw0 == ne0) {
      for (int64_t i = 0; i < ne0; ++i) yr[i] = (xs[i] * rs) * ws[i];
    } else {
      for (int64_t i = 0; i < ne0; ++i) yr[i] = (xs[i] * rs) * ws[i % nw0];
    }
  }
}

// ---- topk-moe --------------------------------------------------------------------------------

// The NaN-last descending order of TOP_K (equal values by ascending index).
inline bool greater_nan_last(float x, float y) { return !std::isnan(x) && (std::isnan(y) || x > y); }

size_t moe_probs_bytes(const FusedGroup& g) { return (size_t)(g.n_expert * g.n_tokens) * sizeof(float); }
// per thread: one gated row, the selection scores and the index permutation
size_t moe_thread_bytes(const FusedGroup& g) { return (size_t)g.n_expert * (2 * sizeof(float) + sizeof(int32_t)); }

bool topk_moe_supported(const FusedGroup& g) {
  const Tensor* logits = g.inputs[0];
  const Tensor* ids = g.outputs[1];
  return logits->type == DType::F32 && ids->type == DType::I32 && ids->is_contiguous() &&
         is_f32_contiguous(g.outputs[0]) && g.k >= 1 && g.k <= g.n_expert;
}

// gate(row * scale) in place, as SOFT_MAX (no mask) or SIGMOID compute it.
void moe_gate(const FusedGroup& g, float* p, int64_t n) {
  if (g.gating == MoeGating::sigmoid) {
    for (int64_t i = 0; i < n; ++i) p[i] = 1.0f / (1.0f + std::exp(-p[i]));
    return;
  }
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < n; ++i) {
    p[i] = p[i] * g.gate_scale;
    mx = std::max(mx, p[i]);
  }
  if (mx == -std::numeric_limits<float>::infinity()) {
    std::fill(p, p + n, 0.0f);
    return;
  }
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    p[i] = std::exp(p[i] - mx);
    sum += p[i];
  }
  const float inv = (float)(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) p[i] *= inv;
}

// One token: p = gate(logits row) (already in p), then ids, weights.
void moe_row(const FusedGroup& g, const float* p, const float* bias, float* sel, int32_t* idx, int32_t* id_row, float* w) {
  const int64_t E = g.n_expert, k = g.k;
  const float* s = p;
  if (bias) {
    for (int64_t i = 0; i < E; ++i) sel[i] = p[i] + bias[i];
    s = sel;
  }
  std::iota(idx, idx + E, 0);
  std::partial_sort(idx, idx + k, idx + E, [s](int32_t i, int32_t j) {
    if (greater_nan_last(s[i], s[j])) return true;
    if (greater_nan_last(s[j], s[i])) return false;
    return i < j;
  });
  for (int64_t j = 0; j < k; ++j) {
    id_row[j] = idx[j];
    w[j] = p[idx[j]];
  }
  if (g.normalize) {
    const float sum = (float)sum_f32(w, k);
    for (int64_t j = 0; j < k; ++j) w[j] = w[j] / sum;
  }
  if (g.has_scale)
    for (int64_t j = 0; j < k; ++j) w[j] = w[j] * g.scale + g.scale_bias;
}

// logits F32 {E, T}, bias F32 {E} or null -> ids I32 {k, T}, weights F32 {k, T} (any 1-dims):
// p = gate(logits); ids = top_k(p + bias); w = p[ids]; w /= sum(w) if normalized; w = w * s + b
// if scaled. When an output overlaps the logits (the allocator may reuse their bytes, dead after
// the gate in unfused order), every row is gated into scratch first, then a barrier.
void topk_moe(const KernelArgs& args, const FusedGroup& g) {
  const Tensor* logits = g.inputs[0];
  const float* bias = g.inputs[1] ? static_cast<const float*>(g.inputs[1]->data) : nullptr;
  const int64_t E = g.n_expert, T = g.n_tokens, k = g.k;
  const bool staged = overlaps(g.outputs[0], logits) || overlaps(g.outputs[1], logits);
  float* probs = static_cast<float*>(args.wdata);
  float* row = thread_scratch(args, moe_thread_bytes(g), (moe_probs_bytes(g) + 63) / 64 * 64);
  float* sel = row + E;
  int32_t* idx = reinterpret_cast<int32_t*>(sel + E);
  int32_t* ids = static_cast<int32_t*>(g.outputs[1]->data);
  float* weights = static_cast<float*>(g.outputs[0]->data);
  int64_t t0, t1;
  split_rows(T, args.ith, args.nth, t0, t1);
  auto gate_row = [&](int64_t t, float* p) {
    const float* l = row_as_f32(logits, t, 0, 0, sel);
    std::copy(l, l + E, p);
    moe_gate(g, p, E);
  };
  if (!staged) {
    for (int64_t t = t0; t < t1; ++t) {
      gate_row(t, row);
      moe_row(g, row, bias, sel, idx, ids + t * k, weights + t * k);
    }
    return;
  }
  for (int64_t t = t0; t < t1; ++t) gate_row(t, probs + t * E);
  args.barrier();
  for (int64_t t = t0; t < t1; ++t) moe_row(g, probs + t * E, bias, sel, idx, ids + t * k, weights + t * k);
}

}  // namespace

bool fused_supported(const FusedGroup& group) {
  switch (group.kind) {
    case FusionKind::rms_norm_mul: return rms_norm_mul_supported(group);
    case FusionKind::topk_moe: return topk_moe_supported(group);
  }
  return false;
}

size_t work_size_fused(const FusedGroup& group, int nth) {
  switch (group.kind) {
    case FusionKind::rms_norm_mul:
      return scratch_bytes((size_t)(group.outputs[0]->ne[0] + group.inputs[1]->ne[0]) * sizeof(float), nth);
    case FusionKind::topk_moe:
      return (moe_probs_bytes(group) + 63) / 64 * 64 + scratch_bytes(moe_thread_bytes(group), nth);
  }
  return 0;
}

void compute_fused(const KernelArgs& args, const FusedGroup& group) {
  switch (group.kind) {
    case FusionKind::rms_norm_mul: return rms_norm_mul(args, group);
    case FusionKind::topk_moe: return topk_moe(args, group);
  }
}

}  // namespace loom::cpu
