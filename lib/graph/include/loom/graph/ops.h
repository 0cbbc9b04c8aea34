// Op builders: each checks its sources' shapes and types (throwing loom::Error naming the op),
// creates the result tensor in the Context and records op, sources and parameters.
// Shapes are GGUF order, fastest first: a PyTorch (rows, cols) matrix is ne = {cols, rows}.
// The comment on each builder is the op's definition; every backend implements exactly it.
#pragma once

#include <cstdint>

#include "loom/graph/context.h"

namespace loom::ops {

// ---- views (share memory with a; no compute) --------------------------------------------
// nb1.. are byte strides of dims 1..; offset in bytes from a's first element.
Tensor* view_1d(Context& c, Tensor* a, int64_t ne0, size_t offset);
Tensor* view_2d(Context& c, Tensor* a, int64_t ne0, int64_t ne1, size_t nb1, size_t offset);
Tensor* view_3d(Context& c, Tensor* a, int64_t ne0, int64_t ne1, int64_t ne2, size_t nb1, size_t nb2, size_t offset);
Tensor* view_4d(Context& c, Tensor* a, int64_t ne0, int64_t ne1, int64_t ne2, int64_t ne3, size_t nb1, size_t nb2,
                size_t nb3, size_t offset);
// a must be contiguous; element count unchanged.
Tensor* reshape(Context& c, Tensor* a, std::initializer_list<int64_t> ne);
// Dim i of a becomes dim axis_i of the result (ggml's convention).
Tensor* permute(Context& c, Tensor* a, int axis0, int axis1, int axis2, int axis3);
Tensor* transpose(Context& c, Tensor* a);  // swap dims 0 and 1

// ---- data movement -------------------------------------------------------------------------
// Copy a into b's memory converting the type (same element count); result is a view of b.
Tensor* cpy(Context& c, Tensor* a, Tensor* b);
Tensor* dup(Context& c, Tensor* a);   // a new tensor with a's values and shape
Tensor* cont(Context& c, Tensor* a);  // contiguous copy of a (a may be any view)
// Tensor parallelism: the sum of a (contiguous f32) over the members of the group running the
// graph. A kernel copies the local value; the executor then sums it through its Communicator,
// so on one device (or with no group) it is the identity.
Tensor* all_reduce(Context& c, Tensor* a);
// The members' row blocks joined along dim 0, exactly: a holds this member's rows
// [begin, begin + a->ne[0]) of a result of `total` rows. The kernel writes a among zeros and the
// executor's sum fills in the other members' rows (adding zeros changes no bits).
Tensor* all_gather_rows(Context& c, Tensor* a, int64_t begin, int64_t total);
// Concatenate along dim (other dims equal).
Tensor* concat(Context& c, Tensor* a, Tensor* b, int dim);
// Tile a to like's shape (like.ne[i] % a.ne[i] == 0). Result F32.
Tensor* repeat(Context& c, Tensor* a, Tensor* like);
// Sum a's tiles back into like's shape (a.ne[i] % like.ne[i] == 0). Result F32.
Tensor* repeat_back(Context& c, Tensor* a, Tensor* like);
// a {n0, rows, a2, a3} any type, ids I32 {n, a2, a3}: result F32 {n0, n, a2, a3},
// result[:, i, j, k] = a[:, ids[i, j, k], j, k].
Tensor* get_rows(Context& c, Tensor* a, Tensor* ids);
// Gradient of get_rows for 2-D a: grad {n0, n}, ids I32 {n}; result F32 of like's shape {n0, rows},
// result[:, r] = sum over i with ids[i] == r of grad[:, i].
Tensor* get_rows_back(Context& c, Tensor* grad, Tensor* ids, Tensor* like);
// Write rows of src into dst: dst {n0, rows, d2, d3} any type, src F32 {n0, n, d2, d3},
// ids I32 {n, i1, i2} broadcast over dims 2, 3 (d2 % i1 == 0, d3 % i2 == 0):
// dst[:, ids[i, j % i1, k % i2], j, k] = src[:, i, j, k]. Result is a view of dst (in place).
Tensor* set_rows(Context& c, Tensor* dst, Tensor* src, Tensor* ids);

// ---- element-wise (b broadcast over a: a.ne[i] % b.ne[i] == 0); result has a's shape, F32 ----
Tensor* add(Context& c, Tensor* a, Tensor* b);
Tensor* sub(Context& c, Tensor* a, Tensor* b);
Tensor* mul(Context& c, Tensor* a, Tensor* b);
Tensor* div(Context& c, Tensor* a, Tensor* b);
// a {n0, n_used, t}, b {n0, n_expert}, ids I32 {n_used, t}: result[:, i, j] = a[:, i, j] + b[:, ids[i, j]].
Tensor* add_id(Context& c, Tensor* a, Tensor* b, Tensor* ids);
Tensor* scale(Context& c, Tensor* a, float s, float bias = 0.0f);  // a * s + bias
Tensor* clamp(Context& c, Tensor* a, float min, float max);
Tensor* silu(Context& c, Tensor* a);      // x * sigmoid(x)
Tensor* gelu(Context& c, Tensor* a);      // tanh approximation: 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))
Tensor* tanh(Context& c, Tensor* a);
Tensor* sigmoid(Context& c, Tensor* a);
Tensor* softplus(Context& c, Tensor* a);  // log(1 + exp(x))
Tensor* exp(Context& c, Tensor* a);
Tensor* log(Context& c, Tensor* a);
Tensor* sqr(Context& c, Tensor* a);
Tensor* sqrt(Context& c, Tensor* a);
Tensor* swiglu(Context& c, Tensor* a, Tensor* b);     // silu(a) * b, same shapes
// gpt-oss's gate (a) and up (b), same shapes: x = min(a, limit), y = clamp(b, -limit, limit),
// x / (1 + exp(-alpha x)) * (y + 1).
Tensor* swiglu_oai(Context& c, Tensor* a, Tensor* b, float alpha, float limit);
Tensor* silu_back(Context& c, Tensor* grad, Tensor* x);  // grad * d silu(x)/dx

// ---- normalization over dim 0 ------------------------------------------------------------
Tensor* rms_norm(Context& c, Tensor* a, float eps);  // x / sqrt(mean(x^2) + eps)
Tensor* norm(Context& c, Tensor* a, float eps);      // (x - mean) / sqrt(var + eps)
Tensor* rms_norm_back(Context& c, Tensor* grad, Tensor* x, float eps);  // d rms_norm(x) given grad

// ---- reductions and selection ----------------------------------------------------------
Tensor* sum(Context& c, Tensor* a);       // F32 {1}: all elements
Tensor* sum_rows(Context& c, Tensor* a);  // F32 {1, ne1, ne2, ne3}
Tensor* mean(Context& c, Tensor* a);      // F32 {1, ne1, ne2, ne3}: mean of each row
Tensor* argmax(Context& c, Tensor* a);    // a 2-D: I32 {ne1}, index of the largest (first on ties)
enum class SortOrder : int32_t { ascending = 0, descending = 1 };
Tensor* argsort(Context& c, Tensor* a, SortOrder order);  // I32, a's shape: per-row permutation (stable)
Tensor* top_k(Context& c, Tensor* a, int64_t k);  // I32 {k, ne1, ne2, ne3}: indices of the k largest, descending
Tensor* count_equal(Context& c, Tensor* a, Tensor* b);  // I32 {1}: number of equal elements (I32 inputs)

// ---- matrix products (result F32) ----------------------------------------------------------
// a {K, M, a2, a3} any type, b {K, N, b2, b3} F32 (b2 % a2 == 0, b3 % a3 == 0): result {M, N, b2, b3},
// result[m, n, i, j] = sum_k a[k, m, i / (b2 / a2), j / (b3 / a3)] * b[k, n, i, j].
Tensor* mul_mat(Context& c, Tensor* a, Tensor* b);
// Experts: as {K, M, E} any type, b F32 {K, bn, T} with bn == n_used or 1, ids I32 {n_used, T}:
// result {M, n_used, T}, result[:, i, t] = as[:, :, ids[i, t]] x b[:, i % bn, t].
Tensor* mul_mat_id(Context& c, Tensor* as, Tensor* b, Tensor* ids);
// a {M, K, a2, a3}, b {N, K, b2, b3} (b2 % a2 == 0 likewise): result {M, N, b2, b3},
// result[m, n] = sum_k a[m, k] * b[n, k] (the weight gradient of mul_mat).
Tensor* out_prod(Context& c, Tensor* a, Tensor* b);

// ---- attention ---------------------------------------------------------------------------
enum RopeMode : int32_t { kRopeNormal = 0, kRopeNeox = 2 };  // adjacent pairs / halves
struct RopeParams {
  int32_t n_dims = 0;          // rotated dims (<= head dim; the rest pass through)
  int32_t mode = kRopeNormal;
  int32_t n_ctx_orig = 0;
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;     // positions are multiplied by it (linear scaling)
  float attn_factor = 1.0f;    // multiplies cos and sin
  float ext_factor = 0.0f;     // YaRN: > 0 mixes interpolated and extrapolated angles per pair
  float beta_fast = 32.0f;     // YaRN: the ramp's ends, in rotations over n_ctx_orig
  float beta_slow = 1.0f;
};
// a F32 {head_dim, n_head, T}, pos I32 {T}, freq_factors F32 {n_dims / 2} or nullptr:
// for pair i (dims (2i, 2i+1) normal, (i, i + n_dims/2) neox): e = pos * freq_base^(-2i/n_dims) / ff[i],
// theta = freq_scale * e; (x0, x1) -> (x0 cos - x1 sin, x0 sin + x1 cos) * m with m = attn_factor.
// YaRN (ext_factor != 0): with the pair's ramp r = 1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1) *
// ext_factor, theta = freq_scale e (1 - r) + e r, and m *= 1 + 0.1 ln(1 / freq_scale); lo = floor(d(beta_fast)),
// hi = ceil(d(beta_slow)) clamped to [0, n_dims - 1], d(b) = n_dims ln(n_ctx_orig / (2 pi b)) / (2 ln freq_base).
Tensor* rope(Context& c, Tensor* a, Tensor* pos, Tensor* freq_factors, const RopeParams& p);
// The gradient: the same rotation by -theta.
Tensor* rope_back(Context& c, Tensor* grad, Tensor* pos, Tensor* freq_factors, const RopeParams& p);
// What every backend's rope kernel works out once from a ROPE/ROPE_BACK node's parameters: the
// YaRN ramp's ends lo, hi (0 without YaRN) and the magnitude m multiplying cos and sin.
struct RopeRamp {
  double lo = 0, hi = 0;
  float mscale = 1;
};
RopeRamp rope_ramp(const Tensor* rope_node);
// a F32 {n_kv, n_q, h, b}; mask F32/F16 {n_kv, >= n_q, m2, m3} broadcast over dims 2, 3 or nullptr:
// softmax over dim 0 of (a * scale + slope_h * mask); slope_h = 1 unless max_bias > 0 (ALiBi).
// sinks F32 {h} or nullptr: head h's sink joins each row's max and sum as one more logit
// (exp(sink_h - max) in the denominator) without an output of its own (gpt-oss).
Tensor* soft_max(Context& c, Tensor* a, Tensor* mask, float scale, float max_bias = 0.0f, Tensor* sinks = nullptr);
// grad and y (the soft_max output) same shape: scale * y * (grad - sum(grad * y)).
Tensor* soft_max_back(Context& c, Tensor* grad, Tensor* y, float scale, float max_bias = 0.0f);
// q F32 {D, n_q, h, b}, k {D, n_kv, h_kv, b} and v {Dv, n_kv, h_kv, b} F32/F16/BF16 or a quantized
// cache type in whole blocks (h % h_kv == 0, GQA),
// mask F16/F32 {n_kv, >= n_q, 1, 1} or nullptr: result F32 {Dv, h, n_q, b} (heads before tokens),
// softmax(q k^T * scale (+ softcap: c * tanh(s / c)) + slope * mask) v; sinks F32 {h} or nullptr as
// in soft_max.
Tensor* flash_attn_ext(Context& c, Tensor* q, Tensor* k, Tensor* v, Tensor* mask, float scale, float max_bias = 0.0f,
                       float softcap = 0.0f, Tensor* sinks = nullptr);

// ---- training ----------------------------------------------------------------------------
// logits F32 {V, N}, labels F32 {V, N} (probabilities): F32 {1} = mean over rows of
// -sum(labels * log_softmax(logits)).
Tensor* cross_entropy_loss(Context& c, Tensor* logits, Tensor* labels);
// grad F32 {1}: result {V, N} = (softmax(logits) - labels) * grad / N.
Tensor* cross_entropy_loss_back(Context& c, Tensor* grad, Tensor* logits, Tensor* labels);
// AdamW in place on param (result is a view of param); m, v F32 like param;
// hp F32 {7}: alpha, beta1, beta2, eps, wd, 1/(1-beta1^t), 1/(1-beta2^t).
Tensor* opt_step_adamw(Context& c, Tensor* param, Tensor* grad, Tensor* m, Tensor* v, Tensor* hp);
// SGD in place: hp F32 {2}: alpha, wd. param = param * (1 - alpha * wd) - alpha * grad.
Tensor* opt_step_sgd(Context& c, Tensor* param, Tensor* grad, Tensor* hp);

}  // namespace loom::ops
