// Forward pass of llama / qwen2 / qwen3 / qwen3moe: embeddings, per layer attention (RoPE, GQA,
// KV cache write through set_rows, flash or plain attention) and FFN (SwiGLU or routed experts),
// final norm and output projection for the requested rows.
#include "forward.h"

#include <fmt/format.h>

#include <cmath>

#include "loom/graph/ops.h"
#include "loom/model/layer_blocks.h"

namespace loom {

namespace {

using namespace ops;

// Gives every tensor of a layer a name ("blk.3.mul_mat-12"), so plans and errors can say which.
void name_unnamed(Context& c, size_t first, const std::string& prefix) {
  for (size_t i = first; i < c.size(); ++i) {
    Tensor* t = c.at(i);
    if (!t->name.empty()) continue;
    std::string op = op_name(t->op);
    for (char& ch : op) ch = (char)std::tolower((unsigned char)ch);
    t->name = fmt::format("{}.{}-{}", prefix, op, i - first);
  }
}

Tensor* attention(Context& c, const ForwardModel& fm, Tensor* q, Tensor* k_cache, Tensor* v_cache, Tensor* mask,
                  const ForwardShape& s) {
  const HParams& hp = *fm.hp;
  const int64_t hd = hp.head_dim, T = s.n_tokens, n_kv = s.n_kv;
  const int64_t n_head = fm.n_head, n_head_kv = fm.n_head_kv;
  const float scale = 1.0f / std::sqrt((float)hd);
  // cache views {hd, n_kv, n_head_kv}: one row per position, heads side by side in a row
  Tensor* k = view_3d(c, k_cache, hd, n_kv, n_head_kv, k_cache->nb[1], row_size(k_cache->type, hd), 0);
  Tensor* v = view_3d(c, v_cache, hd, n_kv, n_head_kv, v_cache->nb[1], row_size(v_cache->type, hd), 0);
  // a quantized cache (-ctk/-ctv q8_0...) is read in place: flash attention converts K/V rows as
  // it goes, the plain path's K^T q is a matmul over quantized rows; a quantized V needs flash
  // attention (checked by Session, as llama.cpp does: V^T of quantized rows has no layout)
  Tensor* qp = permute(c, q, 0, 2, 1, 3);  // {hd, T, n_head}
  if (s.flash_attn) {
    Tensor* o = flash_attn_ext(c, qp, k, v, mask, scale);  // {hd, n_head, T}
    return reshape(c, o, {hd * n_head, T});
  }
  Tensor* kq = mul_mat(c, k, qp);                             // {n_kv, T, n_head}
  kq = soft_max(c, kq, mask, scale);
  Tensor* vt = cont(c, permute(c, v, 1, 0, 2, 3));            // {n_kv, hd, n_head_kv}
  Tensor* kqv = mul_mat(c, vt, kq);                           // {hd, T, n_head}
  Tensor* o = cont(c, permute(c, kqv, 0, 2, 1, 3));           // {hd, n_head, T}
  return reshape(c, o, {hd * n_head, T});
}

Tensor* moe_ffn(Context& c, const HParams& hp, const LayerWeights& l, Tensor* x, int64_t T, ForwardInputs& in) {
  const int64_t k = hp.n_expert_used;
  Tensor* router = mul_mat(c, l.ffn_gate_inp, x);                        // {n_expert, T}
  Tensor* probs = soft_max(c, router, nullptr, 1.0f);
  Tensor* ids = top_k(c, probs, k);                                      // {k, T}
  Tensor* w = get_rows(c, reshape(c, probs, {1, hp.n_expert, T}), ids);  // {1, k, T}
  Tensor* w_sum = sum_rows(c, reshape(c, w, {k, T}));                    // {1, T}
  w = div(c, w, reshape(c, w_sum, {1, 1, T}));                           // renormalize the k weights
  in.expand_first.push_back(w);
  Tensor* xe = reshape(c, x, {hp.n_embd, 1, T});
  Tensor* g = mul_mat_id(c, l.ffn_gate_exps, xe, ids);  // {n_ff_exp, k, T}
  Tensor* u = mul_mat_id(c, l.ffn_up_exps, xe, ids);
  Tensor* d = mul_mat_id(c, l.ffn_down_exps, swiglu(c, g, u), ids);  // {n_embd, k, T}
  d = mul(c, d, w);
  Tensor* out = view_2d(c, d, hp.n_embd, T, d->nb[2], 0);
  for (int64_t i = 1; i < k; ++i) out = add(c, out, view_2d(c, d, hp.n_embd, T, d->nb[2], (size_t)i * d->nb[1]));
  return out;
}

// Tensor parallel: the partial sum x is summed over the members right after this node runs
// (an explicit node, so plans show it and tests count it).
Tensor* all_reduce(Context& c, Tensor* x, ForwardInputs& in, const std::string& name) {
  Tensor* r = ops::all_reduce(c, x);
  r->name = name;
  in.all_reduces.push_back(r);
  return r;
}

}  // namespace

ForwardModel forward_model(const Model& model) {
  ForwardModel fm;
  fm.hp = &model.hparams();
  fm.n_head = fm.hp->n_head;
  fm.n_head_kv = fm.hp->n_head_kv;
  fm.tok_embd = model.tok_embd;
  fm.output_norm = model.output_norm;
  fm.output = model.output;
  fm.layers = &model.layers;
  return fm;
}

ForwardModel forward_model(const Model& model, const TpShard& shard) {
  ForwardModel fm = forward_model(model);
  fm.n_head = shard.n_head;
  fm.n_head_kv = shard.n_head_kv;
  fm.output_norm = shard.output_norm;
  fm.output = shard.output;
  fm.layers = &shard.layers;
  fm.tensor_parallel = true;
  return fm;
}

ForwardInputs build_forward(Context& c, const ForwardModel& model, const KvCache& kv, const ForwardShape& s) {
  const HParams& hp = *model.hp;
  const int64_t T = s.n_tokens, hd = hp.head_dim;
  ForwardInputs in;
  in.tokens = c.new_tensor(DType::I32, {T}, "inp_tokens");
  in.positions = c.new_tensor(DType::I32, {T}, "inp_pos");
  in.kv_slots = c.new_tensor(DType::I32, {T}, "inp_kv_slots");
  in.mask = c.new_tensor(DType::F32, {s.n_kv, T}, "inp_mask");
  for (Tensor* t : {in.tokens, in.positions, in.kv_slots, in.mask}) t->flags |= kFlagInput;

  const RopeParams rope_p = rope_params(hp);

  Tensor* x = get_rows(c, model.tok_embd, in.tokens);  // {n_embd, T}
  x->name = "inp_embd";
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const size_t first_tensor = c.size();
    const LayerWeights& l = (*model.layers)[(size_t)il];
    Tensor* cur = norm_mul(c, x, l.attn_norm, hp.rms_eps);
    cur->name = fmt::format("blk.{}.attn_norm-out", il);
    if (model.n_head_kv == 0) {  // a member without heads adds nothing to the sum
      cur = scale(c, cur, 0.0f);
    } else {
      const QkvHeads h = project_qkv(c, hp, l, cur, model.n_head, model.n_head_kv, in.positions, rope_p);
      Tensor* k_stored = set_rows(c, kv.k[(size_t)il], reshape(c, h.k, {hd * model.n_head_kv, T}), in.kv_slots);
      Tensor* v_stored = set_rows(c, kv.v[(size_t)il], h.v, in.kv_slots);
      cur = attention(c, model, h.q, k_stored, v_stored, in.mask, s);
      cur = mul_mat(c, l.wo, cur);
    }
    cur->name = fmt::format("blk.{}.attn_out", il);
    if (model.tensor_parallel) cur = all_reduce(c, cur, in, fmt::format("blk.{}.attn_all_reduce", il));
    if (il == hp.n_layer - 1 && s.n_outputs < T) {  // only the requested rows go on
      in.out_rows = c.new_tensor(DType::I32, {s.n_outputs}, "inp_out_rows");
      in.out_rows->flags |= kFlagInput;
      cur = get_rows(c, cur, in.out_rows);
      x = get_rows(c, x, in.out_rows);
    }
    Tensor* ffn_in = add(c, cur, x);
    cur = norm_mul(c, ffn_in, l.ffn_norm, hp.rms_eps);
    cur->name = fmt::format("blk.{}.ffn_norm-out", il);
    const int64_t t_out = ffn_in->ne[1];
    if (l.ffn_gate_inp ? !l.ffn_down_exps : !l.ffn_down) {  // a member without FFN rows
      cur = scale(c, cur, 0.0f);
    } else if (l.ffn_gate_inp) {
      cur = moe_ffn(c, hp, l, cur, t_out, in);
    } else {
      cur = dense_ffn(c, l, cur);
    }
    if (model.tensor_parallel) cur = all_reduce(c, cur, in, fmt::format("blk.{}.ffn_all_reduce", il));
    ffn_in->name = fmt::format("blk.{}.ffn_inp", il);
    x = add(c, cur, ffn_in);
    x->name = fmt::format("blk.{}.out", il);
    name_unnamed(c, first_tensor, fmt::format("blk.{}", il));
  }
  const size_t first_tensor = c.size();
  x = norm_mul(c, x, model.output_norm, hp.rms_eps);
  x->name = "result_norm";
  if (model.output) {
    in.logits = mul_mat(c, model.output, x);
    in.logits->name = "logits";
    in.logits->flags |= kFlagOutput;
    in.last = in.logits;
  } else {
    x->flags |= kFlagOutput;
    in.last = x;
  }
  name_unnamed(c, first_tensor, "output");
  return in;
}

void build_graph(Graph& g, const ForwardInputs& in) {
  for (Tensor* t : in.expand_first) g.build_forward(t);
  g.build_forward(in.last);
}

}  // namespace loom
