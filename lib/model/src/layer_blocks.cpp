#include "loom/model/layer_blocks.h"

#include <array>
#include <cmath>

namespace loom {

using namespace ops;

Tensor* norm_mul(Context& c, Tensor* x, Tensor* w, float eps) { return mul(c, rms_norm(c, x, eps), w); }

Tensor* arch_norm(Context& c, const HParams& hp, Tensor* x, Tensor* w) {
  return arch_is_cohere(hp.arch) ? mul(c, ops::norm(c, x, hp.rms_eps), w) : norm_mul(c, x, w, hp.rms_eps);
}

RopeParams rope_params(const HParams& hp, bool swa_layer) {
  RopeParams p;
  p.n_dims = (int32_t)hp.rot_dims();
  p.mode = arch_rope_neox(hp.arch) ? kRopeNeox : kRopeNormal;
  p.n_ctx_orig = (int32_t)hp.n_ctx_orig_or_train();
  p.freq_base = swa_layer ? hp.rope_theta_swa : hp.rope_theta;
  p.freq_scale = swa_layer ? hp.rope_freq_scale_swa : hp.rope_freq_scale;
  if (hp.rope_scaling == RopeScaling::none) p.freq_scale = 1.0f;
  p.ext_factor = hp.yarn.ext_factor >= 0.0f ? hp.yarn.ext_factor : hp.rope_scaling == RopeScaling::yarn ? 1.0f : 0.0f;
  p.attn_factor = hp.rope_attn_factor * hp.yarn.attn_factor;
  p.beta_fast = hp.yarn.beta_fast.value_or(hp.yarn_beta_fast);
  p.beta_slow = hp.yarn.beta_slow.value_or(hp.yarn_beta_slow);
  // mistral3's yarn_log_multiplier m: YaRN's magnitude (the kernel's 1 + 0.1 ln f) over 1 + 0.1 m ln f
  const float factor = 1.0f / p.freq_scale;
  if (hp.yarn_log_mul != 0.0f && p.ext_factor != 0.0f && factor > 1.0f)
    p.attn_factor /= 0.1f * hp.yarn_log_mul * std::log(factor) + 1.0f;
  if (swa_layer && hp.arch == Arch::olmo2) {  // OLMo 3's local layers: plain RoPE, no YaRN
    p.freq_scale = 1.0f;
    p.ext_factor = 0.0f;
    p.attn_factor = 1.0f;
  }
  return p;
}

QkvHeads project_qkv(Context& c, const HParams& hp, const LayerWeights& l, Tensor* cur, int64_t n_head,
                     int64_t n_head_kv, Tensor* positions, const RopeParams& rope_p, Tensor* rope_factors, bool rotate,
                     const WholeQkRows* whole) {
  const int64_t hd = hp.head_dim, T = cur->ne[1];
  Tensor *q, *k, *v;
  std::array<Tensor*, 3> products{};
  if (l.wqkv) {  // phi3: rows q | k | v of one product
    Tensor* qkv = lora_mm(c, l.lora, l.wqkv, cur);
    const size_t f = sizeof(float), n_q = (size_t)(hd * n_head), n_kv = (size_t)(hd * n_head_kv);
    q = cont(c, view_2d(c, qkv, (int64_t)n_q, T, qkv->nb[1], 0));
    k = cont(c, view_2d(c, qkv, (int64_t)n_kv, T, qkv->nb[1], n_q * f));
    v = cont(c, view_2d(c, qkv, (int64_t)n_kv, T, qkv->nb[1], (n_q + n_kv) * f));
  } else {
    q = mul_mat(c, l.wq, cur);
    k = mul_mat(c, l.wk, cur);
    v = mul_mat(c, l.wv, cur);
    products = {q, k, v};
    // the adapters' deltas after the three products, which stay one run (one phase on the CPU)
    q = add_lora(c, l.lora, l.wq, cur, q);
    k = add_lora(c, l.lora, l.wk, cur, k);
    v = add_lora(c, l.lora, l.wv, cur, v);
  }
  if (l.bq) q = add(c, q, l.bq);
  if (l.bk) k = add(c, k, l.bk);
  if (l.bv) v = add(c, v, l.bv);
  std::array<Tensor*, 2> joins{};
  if (arch_whole_qk_norm(hp.arch)) {  // RMS norms over the whole q and k, before they split into heads
    auto norm_whole = [&](Tensor* part, Tensor* w, bool is_k) {
      if (!whole) return arch_norm(c, hp, part, w);
      Tensor* all = joins[is_k] = whole->join(part, is_k);
      Tensor* normed = arch_norm(c, hp, all, w);
      const size_t first = (size_t)(is_k ? whole->k_first : whole->q_first);
      return cont(c, view_2d(c, normed, part->ne[0], T, normed->nb[1], first * sizeof(float)));
    };
    q = norm_whole(q, l.q_norm, false);
    k = norm_whole(k, l.k_norm, true);
  }
  q = reshape(c, q, {hd, n_head, T});
  k = reshape(c, k, {hd, n_head_kv, T});
  if (l.q_norm && !arch_whole_qk_norm(hp.arch)) q = arch_norm(c, hp, q, l.q_norm);
  if (l.k_norm && !arch_whole_qk_norm(hp.arch)) k = arch_norm(c, hp, k, l.k_norm);
  if (rotate) {
    q = rope(c, q, positions, rope_factors, rope_p);
    k = rope(c, k, positions, rope_factors, rope_p);
  }
  return {q, k, v, {products[0], products[1], products[2]}, {joins[0], joins[1]}};
}

Tensor* dense_ffn_hidden(Context& c, const LayerWeights& l, Tensor* x, bool gelu_gate) {
  if (!l.ffn_gate) {  // phi3: gate rows, then up rows, in ffn_up
    Tensor* gu = lora_mm(c, l.lora, l.ffn_up, x);
    const int64_t n_ff = gu->ne[0] / 2, T = gu->ne[1];
    Tensor* g = view_2d(c, gu, n_ff, T, gu->nb[1], 0);
    Tensor* u = view_2d(c, gu, n_ff, T, gu->nb[1], (size_t)n_ff * sizeof(float));
    return swiglu(c, g, u);
  }
  Tensor* g = mul_mat(c, l.ffn_gate, x);
  Tensor* u = mul_mat(c, l.ffn_up, x);
  g = add_lora(c, l.lora, l.ffn_gate, x, g);
  u = add_lora(c, l.lora, l.ffn_up, x, u);
  return gelu_gate ? mul(c, gelu(c, g), u) : swiglu(c, g, u);
}

Tensor* dense_ffn(Context& c, const LayerWeights& l, Tensor* x, bool gelu_gate) {
  return lora_mm(c, l.lora, l.ffn_down, dense_ffn_hidden(c, l, x, gelu_gate));
}

Tensor* logit_softcap(Context& c, Tensor* x, float cap) {
  return cap > 0.0f ? ops::scale(c, ops::tanh(c, ops::scale(c, x, 1.0f / cap)), cap) : x;
}

}  // namespace loom
