#include "loom/model/layer_blocks.h"

namespace loom {

using namespace ops;

Tensor* norm_mul(Context& c, Tensor* x, Tensor* w, float eps) { return mul(c, rms_norm(c, x, eps), w); }

RopeParams rope_params(const HParams& hp) {
  RopeParams p;
  p.n_dims = (int32_t)hp.head_dim;
  p.mode = arch_rope_neox(hp.arch) ? kRopeNeox : kRopeNormal;
  p.n_ctx_orig = (int32_t)hp.n_ctx_train;
  p.freq_base = hp.rope_theta;
  return p;
}

QkvHeads project_qkv(Context& c, const HParams& hp, const LayerWeights& l, Tensor* cur, int64_t n_head,
                     int64_t n_head_kv, Tensor* positions, const RopeParams& rope_p) {
  const int64_t hd = hp.head_dim, T = cur->ne[1];
  Tensor* q = mul_mat(c, l.wq, cur);
  Tensor* k = mul_mat(c, l.wk, cur);
  Tensor* v = mul_mat(c, l.wv, cur);
  if (l.bq) q = add(c, q, l.bq);
  if (l.bk) k = add(c, k, l.bk);
  if (l.bv) v = add(c, v, l.bv);
  q = reshape(c, q, {hd, n_head, T});
  k = reshape(c, k, {hd, n_head_kv, T});
  if (l.q_norm) q = norm_mul(c, q, l.q_norm, hp.rms_eps);
  if (l.k_norm) k = norm_mul(c, k, l.k_norm, hp.rms_eps);
  q = rope(c, q, positions, nullptr, rope_p);
  k = rope(c, k, positions, nullptr, rope_p);
  return {q, k, v};
}

Tensor* dense_ffn(Context& c, const LayerWeights& l, Tensor* x) {
  return mul_mat(c, l.ffn_down, swiglu(c, mul_mat(c, l.ffn_gate, x), mul_mat(c, l.ffn_up, x)));
}

}  // namespace loom
