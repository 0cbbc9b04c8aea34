// The CUDA kernels' launchers, callable from host C++ (dispatch.cpp). Tensors are passed as
// TView: device pointer, shape, byte strides and a type code (GGUF ids, as loom::DType).
// Every launcher queues work on `s` and returns at once; errors surface at the next sync.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "block_decode.h"  // TypeCode: the type ids the kernels understand

namespace loom::cuda::k {

struct TView {
  char* data;
  int64_t ne[4];
  int64_t nb[4];
  int type;
};

// ---- element-wise (elementwise.cu) --------------------------------------------------------------
enum class Binary : int { add, sub, mul, div };
// dst = a op b, b broadcast over a (a.ne[i] % b.ne[i] == 0); dst F32 with a's shape.
void binary(cudaStream_t s, Binary op, const TView& a, const TView& b, const TView& dst);
enum class Unary : int { scale, clamp, silu, gelu, tanh, sigmoid, softplus, exp, log, sqr, sqrt, copy, tile };
// dst = f(a); p0, p1: scale/bias or min/max. tile (REPEAT): a repeated to dst's shape (dst.ne[i] % a.ne[i] == 0).
void unary(cudaStream_t s, Unary op, const TView& a, const TView& dst, float p0, float p1);
// dst = silu(a) * b; oai (gpt-oss): a clamped above by limit, b to [-limit, limit],
// dst = a sigmoid(alpha a) (b + 1)
void swiglu(cudaStream_t s, const TView& a, const TView& b, const TView& dst, bool oai = false, float alpha = 0,
            float limit = 0);
// dst[:, i, j] = a[:, i, j] + b[:, ids[i, j]]
void add_id(cudaStream_t s, const TView& a, const TView& b, const TView& ids, const TView& dst);
// Any-to-any element copy of the plain types (F32/F16/BF16/I32), shapes with equal element counts.
void convert(cudaStream_t s, const TView& src, const TView& dst);

// ---- rows (rows.cu) -----------------------------------------------------------------------------
// dst F32 {n0, n, a2, a3}: dst[:, i, j, k] = a[:, ids[i, j, k], j, k] (a any supported type).
void get_rows(cudaStream_t s, const TView& a, const TView& ids, const TView& dst);
// dst[:, ids[i, j % i1, k % i2], j, k] = src[:, i, j, k]; dst F32/F16/BF16.
void set_rows(cudaStream_t s, const TView& src, const TView& ids, const TView& dst);
// Dequantize a block-type matrix (rows contiguous) into a contiguous F16 or F32 matrix.
void dequantize(cudaStream_t s, const TView& a, void* dst, bool to_f16);

// ---- norms, rope, softmax, attention (attention.cu) --------------------------------------------
// y = x / sqrt(mean(x^2) + eps) (* w when w.data, w broadcast over y)
void rms_norm(cudaStream_t s, const TView& x, const TView& w, const TView& dst, float eps);
void norm(cudaStream_t s, const TView& x, const TView& dst, float eps);
// mscale: attn_factor, times YaRN's magnitude when ext_factor != 0; lo, hi: YaRN's ramp ends (pairs)
struct RopeArgs {
  int n_dims, mode;
  float freq_base, freq_scale, mscale, ext_factor;
  double lo, hi;
  bool backward;
};
void rope(cudaStream_t s, const TView& a, const TView& pos, const TView& ff, const TView& dst, const RopeArgs& r);
// sinks F32 {h} or none: in each row's max and sum only
void soft_max(cudaStream_t s, const TView& a, const TView& mask, const TView& sinks, const TView& dst, float scale,
              float max_bias);
// q F32 {D, n_q, h, b}, k/v F32/F16/BF16 {D, n_kv, h_kv, b}, mask or null: dst F32 {Dv, h, n_q, b}
// sinks F32 {h} or none: one more logit per head in the softmax's sum, with no value row
void flash_attn(cudaStream_t s, const TView& q, const TView& kk, const TView& v, const TView& mask,
                const TView& sinks, const TView& dst, float scale, float max_bias, float softcap);
int max_head_dim();  // flash_attn's limit on D and Dv

// ---- matrix products (matmul.cu) ----------------------------------------------------------------
// dst {M, N, b2, b3} = a^T b for a block type a {K, M, a2, a3} and F32 b, read in place
// (decode-sized N; one warp per row of a).
// act: how b is rounded first (ActMode, act_round.h: the CPU's rounding for a's type); with
// `scratch` (act_scratch_bytes of device memory) b's columns are rounded once into it before the
// products, else each warp rounds them again for its row.
void mul_mat_q(cudaStream_t s, const TView& a, const TView& b, const TView& dst, int act, float* scratch);
// Experts: as {K, M, E}, b F32 {K, bn, T}, ids I32 {n_used, T}: dst {M, n_used, T}.
void mul_mat_id(cudaStream_t s, const TView& as, const TView& b, const TView& ids, const TView& dst, int act,
                float* scratch);
// Scratch bytes for b's `columns` columns of K values rounded (0 when act is kActNone).
size_t act_scratch_bytes(int64_t K, int64_t columns, int act);
// dst[m, n] = sum_k a[m, k] * b[n, k] (F32 only; small shapes in training).
void out_prod(cudaStream_t s, const TView& a, const TView& b, const TView& dst);

// ---- selection and MoE routing (select.cu) ------------------------------------------------------
// Per row (ne0 <= 1024): indices sorted by value (ties: lower index first); the first k kept.
void argsort(cudaStream_t s, const TView& a, const TView& dst, bool descending, int k);
struct TopkMoeArgs {
  bool sigmoid, normalize, has_scale;
  float gate_scale, scale, scale_bias;
  int n_expert, k, n_tokens;
};
// logits F32 {n_expert, T}, bias F32 {n_expert} or null: weights F32 {k, T}, ids I32 {k, T}.
void topk_moe(cudaStream_t s, const TView& logits, const TView& bias, float* weights, int32_t* ids,
              const TopkMoeArgs& a);
int max_sort_row();  // longest row argsort / topk_moe sort
void argmax(cudaStream_t s, const TView& a, const TView& dst);
void sum_rows(cudaStream_t s, const TView& a, const TView& dst, bool mean);

// ---- training (train.cu) ------------------------------------------------------------------------
// loss F32 {1} = mean over rows of -sum(labels * log_softmax(logits)); scratch: one double per row
void cross_entropy(cudaStream_t s, const TView& logits, const TView& labels, const TView& loss, double* scratch);
void cross_entropy_back(cudaStream_t s, const TView& grad, const TView& logits, const TView& labels,
                        const TView& dst);
// hp: alpha, beta1, beta2, eps, wd, 1/(1-beta1^t), 1/(1-beta2^t) (device F32)
void adamw(cudaStream_t s, const TView& param, const TView& grad, const TView& m, const TView& v,
           const TView& hp);
void sgd(cudaStream_t s, const TView& param, const TView& grad, const TView& hp);

}  // namespace loom::cuda::k
