// Training forward pass, mirroring lib/model/src/forward.cpp op for op (embeddings, per layer
// RMSNorm, Q/K/V projections with optional biases and q/k norms, RoPE, GQA attention, SwiGLU or
// routed experts, final norm and output projection) with windows as a batch dimension instead
// of a KV cache, then the loss and the accuracy count.
#include "loom/train/train_forward.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "loom/graph/ops.h"
#include "loom/model/layer_blocks.h"

namespace loom::train {

namespace {

using namespace ops;

// q {hd, n_head, T}, k {hd, n_head_kv, T}, v {n_embd_kv, T} -> {hd * n_head, T}, attention only
// inside each window of n_ctx tokens (the window is dim 3 of every product).
Tensor* attention(Context& c, const HParams& hp, Tensor* q, Tensor* k, Tensor* v, Tensor* mask, const BatchShape& s) {
  const int64_t hd = hp.head_dim, L = s.n_ctx, B = s.n_seq;
  const float scale = 1.0f / std::sqrt((float)hd);
  Tensor* qp = permute(c, reshape(c, q, {hd, hp.n_head, L, B}), 0, 2, 1, 3);     // {hd, L, n_head, B}
  Tensor* kp = permute(c, reshape(c, k, {hd, hp.n_head_kv, L, B}), 0, 2, 1, 3);  // {hd, L, n_head_kv, B}
  Tensor* kq = mul_mat(c, kp, qp);                                                // {L, L, n_head, B}
  kq = soft_max(c, kq, mask, scale);
  Tensor* vp = reshape(c, v, {hd, hp.n_head_kv, L, B});
  Tensor* vt = cont(c, permute(c, vp, 1, 2, 0, 3));    // {L, hd, n_head_kv, B}
  Tensor* kqv = mul_mat(c, vt, kq);                    // {hd, L, n_head, B}
  Tensor* o = cont(c, permute(c, kqv, 0, 2, 1, 3));    // {hd, n_head, L, B}
  return reshape(c, o, {hd * hp.n_head, L * B});
}

Tensor* moe_ffn(Context& c, const HParams& hp, const LayerWeights& l, Tensor* x, int64_t T) {
  const int64_t k = hp.n_expert_used;
  Tensor* router = mul_mat(c, l.ffn_gate_inp, x);                        // {n_expert, T}
  Tensor* probs = soft_max(c, router, nullptr, 1.0f);
  Tensor* ids = top_k(c, probs, k);                                      // {k, T}
  Tensor* w = get_rows(c, reshape(c, probs, {1, hp.n_expert, T}), ids);  // {1, k, T}
  Tensor* w_sum = sum_rows(c, reshape(c, w, {k, T}));                    // {1, T}
  w = div(c, w, reshape(c, w_sum, {1, 1, T}));                           // renormalize the k weights
  Tensor* xe = reshape(c, x, {hp.n_embd, 1, T});
  Tensor* g = mul_mat_id(c, l.ffn_gate_exps, xe, ids);  // {n_ff_exp, k, T}
  Tensor* u = mul_mat_id(c, l.ffn_up_exps, xe, ids);
  Tensor* d = mul_mat_id(c, l.ffn_down_exps, swiglu(c, g, u), ids);  // {n_embd, k, T}
  d = mul(c, d, w);
  Tensor* out = view_2d(c, d, hp.n_embd, T, d->nb[2], 0);
  for (int64_t i = 1; i < k; ++i) out = add(c, out, view_2d(c, d, hp.n_embd, T, d->nb[2], (size_t)i * d->nb[1]));
  return out;
}

}  // namespace

ForwardGraph build_train_forward(Context& c, const ModelWeights& m, const BatchShape& s) {
  const HParams& hp = m.hp;
  const int64_t T = s.n_tokens();
  ForwardGraph fg;
  fg.tokens = c.new_tensor(DType::I32, {T}, "inp_tokens");
  fg.positions = c.new_tensor(DType::I32, {T}, "inp_pos");
  fg.mask = c.new_tensor(DType::F32, {s.n_ctx, s.n_ctx}, "inp_mask");
  fg.targets = c.new_tensor(DType::F32, {hp.n_vocab, T}, "inp_targets");
  fg.target_ids = c.new_tensor(DType::I32, {T}, "inp_target_ids");
  for (Tensor* t : {fg.tokens, fg.positions, fg.mask, fg.targets, fg.target_ids}) t->flags |= kFlagInput;

  const RopeParams rope_p = rope_params(hp);

  Tensor* x = get_rows(c, m.tok_embd, fg.tokens);  // {n_embd, T}
  x->name = "inp_embd";
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& l = m.layers[(size_t)il];
    Tensor* cur = norm_mul(c, x, l.attn_norm, hp.rms_eps);
    cur->name = fmt::format("blk.{}.attn_norm-out", il);
    const QkvHeads h = project_qkv(c, hp, l, cur, hp.n_head, hp.n_head_kv, fg.positions, rope_p, m.rope_freqs);
    cur = attention(c, hp, h.q, h.k, h.v, fg.mask, s);
    cur = mul_mat(c, l.wo, cur);
    cur->name = fmt::format("blk.{}.attn_out", il);
    Tensor* ffn_in = add(c, cur, x);
    cur = norm_mul(c, ffn_in, l.ffn_norm, hp.rms_eps);
    cur->name = fmt::format("blk.{}.ffn_norm-out", il);
    if (l.ffn_gate_inp) {
      cur = moe_ffn(c, hp, l, cur, T);
    } else {
      cur = dense_ffn(c, l, cur);
    }
    x = add(c, cur, ffn_in);
    x->name = fmt::format("blk.{}.out", il);
  }
  x = norm_mul(c, x, m.output_norm, hp.rms_eps);
  fg.logits = mul_mat(c, m.output, x);
  fg.logits->name = "logits";
  fg.loss = cross_entropy_loss(c, fg.logits, fg.targets);
  fg.loss->name = "loss";
  fg.loss->flags |= kFlagLoss | kFlagOutput;
  fg.n_correct = count_equal(c, argmax(c, fg.logits), fg.target_ids);
  fg.n_correct->name = "n_correct";
  fg.n_correct->flags |= kFlagOutput;
  return fg;
}

void fill_inputs(const ForwardGraph& g, const BatchShape& s, const std::vector<const int32_t*>& tokens,
                 const std::vector<const int32_t*>& next) {
  const int64_t L = s.n_ctx, V = g.targets->ne[0];
  auto* tok = static_cast<int32_t*>(g.tokens->data);
  auto* pos = static_cast<int32_t*>(g.positions->data);
  auto* ids = static_cast<int32_t*>(g.target_ids->data);
  auto* onehot = static_cast<float*>(g.targets->data);
  std::memset(onehot, 0, sizeof(float) * (size_t)(V * s.n_tokens()));
  for (int64_t w = 0; w < s.n_seq; ++w)
    for (int64_t i = 0; i < L; ++i) {
      const int64_t t = w * L + i;
      tok[t] = tokens[(size_t)w][i];
      pos[t] = (int32_t)i;
      ids[t] = next[(size_t)w][i];
      onehot[t * V + ids[t]] = 1.0f;
    }
  auto* mask = static_cast<float*>(g.mask->data);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t i = 0; i < L; ++i)
    for (int64_t j = 0; j < L; ++j) mask[i * L + j] = j <= i ? 0.0f : neg_inf;
}

}  // namespace loom::train
