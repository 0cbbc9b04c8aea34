// Forward pass of every architecture: embeddings (scaled for gemma), per layer attention (RoPE
// with its scaling and factors, GQA, KV cache write through set_rows, flash or plain attention,
// soft-capping, sinks, sliding windows; or, for training, windows that attend within themselves)
// and FFN (SwiGLU, GELU, phi3's fused gate/up, routed experts with softmax or sigmoid gating, a
// selection bias, renormalized and scaled weights, a shared expert (glm4moe; gated in qwen2moe),
// or gpt-oss gating),
// gemma's post norms, Cohere's layer norms and parallel attention and FFN, final norm, output
// projection for the requested rows, gemma2's logit soft-capping and the logit scales.
#include "loom/model/forward.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>

#include "loom/core/error.h"
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

// q {hd, n_head, T} and k, v {hd, n_kv, n_head_kv, n_seq} (T = n_seq rows of T / n_seq queries)
// -> {hd * n_head, T}. The plain path (mul_mat, soft_max, mul_mat) has a gradient rule for every
// op; flash attention (one sequence) is one fused kernel.
Tensor* attention(Context& c, const ForwardModel& fm, Tensor* q, Tensor* k, Tensor* v, Tensor* mask, Tensor* sinks,
                  const ForwardShape& s) {
  const HParams& hp = *fm.hp;
  const int64_t hd = hp.head_dim, T = s.n_tokens, n_seq = k->ne[3];
  const int64_t n_head = fm.n_head;
  const float scale = hp.attn_scale(), cap = hp.attn_softcap;
  if (n_seq > 1) q = reshape(c, q, {hd, n_head, T / n_seq, n_seq});
  Tensor* qp = permute(c, q, 0, 2, 1, 3);  // {hd, T / n_seq, n_head, n_seq}
  if (s.flash_attn) {
    LOOM_ASSERT(n_seq == 1, "flash attention over {} windows", n_seq);
    Tensor* o = flash_attn_ext(c, qp, k, v, mask, scale, 0.0f, cap, sinks);  // {hd, n_head, T}
    return reshape(c, o, {hd * n_head, T});
  }
  Tensor* kq = mul_mat(c, k, qp);  // {n_kv, T / n_seq, n_head, n_seq}
  if (cap > 0.0f) {                // soft-capped scores, then a softmax of scale 1
    kq = logit_softcap(c, ops::scale(c, kq, scale), cap);
    kq = soft_max(c, kq, mask, 1.0f, 0.0f, sinks);
  } else {
    kq = soft_max(c, kq, mask, scale, 0.0f, sinks);
  }
  Tensor* vt = cont(c, permute(c, v, 1, 0, 2, 3));            // {n_kv, hd, n_head_kv, n_seq}
  Tensor* kqv = mul_mat(c, vt, kq);                           // {hd, T / n_seq, n_head, n_seq}
  Tensor* o = cont(c, permute(c, kqv, 0, 2, 1, 3));           // {hd, n_head, T / n_seq, n_seq}
  return reshape(c, o, {hd * n_head, T});
}

// Keys and values attended to: the cache rows 0..n_kv as {hd, n_kv, n_head_kv} views (one row
// per position, heads side by side in a row) after this batch's rows are written.
struct AttendedKv {
  Tensor* k;
  Tensor* v;
};
AttendedKv cached_kv(Context& c, const ForwardModel& fm, const KvCache& kv, int64_t il, const QkvHeads& h,
                     Tensor* kv_slots, const ForwardShape& s) {
  const int64_t hd = fm.hp->head_dim, T = s.n_tokens, n_kv = s.n_kv, n_head_kv = fm.n_head_kv;
  Tensor* k_cache = set_rows(c, kv.k[(size_t)il], reshape(c, h.k, {hd * n_head_kv, T}), kv_slots);
  Tensor* v_cache = set_rows(c, kv.v[(size_t)il], h.v, kv_slots);
  Tensor* k = view_3d(c, k_cache, hd, n_kv, n_head_kv, k_cache->nb[1], row_size(k_cache->type, hd), 0);
  Tensor* v = view_3d(c, v_cache, hd, n_kv, n_head_kv, v_cache->nb[1], row_size(v_cache->type, hd), 0);
  // a quantized cache (-ctk/-ctv q8_0...) is read in place: flash attention converts K/V rows as
  // it goes, the plain path's K^T q is a matmul over quantized rows; a quantized V needs flash
  // attention (checked by Session, as llama.cpp does: V^T of quantized rows has no layout)
  return {k, v};
}

// Keys and values of a batch of windows: this batch's own rows as {hd, n_kv, n_head_kv, n_seq}.
AttendedKv window_kv(Context& c, const ForwardModel& fm, const QkvHeads& h, const ForwardShape& s) {
  const int64_t hd = fm.hp->head_dim, n_head_kv = fm.n_head_kv;
  Tensor* k = permute(c, reshape(c, h.k, {hd, n_head_kv, s.n_kv, s.n_seq}), 0, 2, 1, 3);
  Tensor* v = permute(c, reshape(c, h.v, {hd, n_head_kv, s.n_kv, s.n_seq}), 0, 2, 1, 3);
  return {k, v};
}

// Tensor parallelism joins the members' row blocks of a result: all_gather_rows, exact (each
// element is one member's whole dot product). On one device a result passes through whole.
struct Join {
  Context& c;
  ForwardInputs& in;
  bool tensor_parallel;
  // The node is named "blk.<il>.<what>".
  Tensor* operator()(Tensor* part, int64_t begin, int64_t total, int64_t il, const char* what) const {
    if (!tensor_parallel) return part;
    Tensor* r = all_gather_rows(c, part, begin, total);
    r->name = fmt::format("blk.{}.{}", il, what);
    in.all_reduces.push_back(r);
    return r;
  }
};

// What a member without rows of a result adds to its join (at row 0): zeros {1, like's other dims}.
Tensor* zero_rows(Context& c, Tensor* like) {
  if (like->ne[0] != 1) {
    LOOM_ASSERT(like->ne[2] == 1 && like->ne[3] == 1, "zero rows like {}", describe(*like));
    like = cont(c, view_2d(c, like, 1, like->ne[1], like->nb[1], 0));
  }
  return scale(c, like, 0.0f);
}

// The k experts' outputs d {n_embd here, k, T} weighted by w {1, k, T} (null: as they are) and summed:
// {n_embd here, T}.
Tensor* weighted_sum(Context& c, Tensor* d, Tensor* w) {
  if (w) d = mul(c, d, w);
  const int64_t n = d->ne[0], k = d->ne[1], T = d->ne[2];
  Tensor* out = view_2d(c, d, n, T, d->nb[2], 0);
  for (int64_t i = 1; i < k; ++i) out = add(c, out, view_2d(c, d, n, T, d->nb[2], (size_t)i * d->nb[1]));
  return out;
}

// The chosen experts' SwiGLU FFNs on xe {n_embd, 1 or k, T} (ids {k, T}), their outputs weighted by
// w {1, k, T} where weigh_outputs (else as they are) and summed: {n_embd here, T} (x: its shape where
// a member holds no rows).
Tensor* expert_ffns(Context& c, const ForwardModel& fm, const LayerWeights& l, Tensor* x, Tensor* xe, Tensor* ids,
                    Tensor* w, bool weigh_outputs, const Join& join, int64_t il) {
  Tensor* h = l.ffn_gate_exps  // {n_ff_exp here, k, T}
                  ? swiglu(c, mul_mat_id(c, l.ffn_gate_exps, xe, ids), mul_mat_id(c, l.ffn_up_exps, xe, ids))
                  : zero_rows(c, w);
  h = join(h, l.ffn_gate_exps ? fm.first.ff_exp : 0, fm.hp->n_ff_exp, il, "ffn_exp_gather");
  if (!l.ffn_down_exps) return zero_rows(c, x);
  return weighted_sum(c, mul_mat_id(c, l.ffn_down_exps, h, ids), weigh_outputs ? w : nullptr);
}

Tensor* moe_ffn(Context& c, const ForwardModel& fm, const LayerWeights& l, Tensor* x, int64_t T, ForwardInputs& in,
                const Join& join, int64_t il) {
  const HParams& hp = *fm.hp;
  const int64_t k = hp.n_expert_used;
  Tensor* router = mul_mat(c, l.ffn_gate_inp, x);  // {n_expert, T}
  Tensor* probs = hp.expert_gating == ExpertGating::sigmoid ? sigmoid(c, router) : soft_max(c, router, nullptr, 1.0f);
  // glm4moe: the selection bias only picks the experts; their weights are the unbiased gates
  Tensor* ids = top_k(c, l.exp_probs_b ? add(c, probs, l.exp_probs_b) : probs, k);  // {k, T}
  Tensor* w = get_rows(c, reshape(c, probs, {1, hp.n_expert, T}), ids);             // {1, k, T}
  if (hp.expert_weights_norm) {                                                     // the k weights sum to 1
    Tensor* w_sum = sum_rows(c, reshape(c, w, {k, T}));                             // {1, T}
    w = div(c, w, reshape(c, w_sum, {1, 1, T}));
  }
  if (hp.expert_weights_scale > 0.0f) w = scale(c, w, hp.expert_weights_scale);
  in.expand_first.push_back(w);
  return expert_ffns(c, fm, l, x, reshape(c, x, {hp.n_embd, 1, T}), ids, w, true, join, il);
}

// llama4: the k experts with the largest router logits, each fed the input times its sigmoid weight;
// their outputs summed as they are.
Tensor* moe_ffn_weighted_input(Context& c, const ForwardModel& fm, const LayerWeights& l, Tensor* x, int64_t T,
                               ForwardInputs& in, const Join& join, int64_t il) {
  const HParams& hp = *fm.hp;
  const int64_t k = hp.n_expert_used;
  Tensor* logits = mul_mat(c, l.ffn_gate_inp, x);                                     // {n_expert, T}
  Tensor* ids = top_k(c, logits, k);                                                  // {k, T}
  Tensor* w = sigmoid(c, get_rows(c, reshape(c, logits, {1, hp.n_expert, T}), ids));  // {1, k, T}
  in.expand_first.push_back(w);
  Tensor* xe = repeat(c, reshape(c, x, {hp.n_embd, 1, T}), c.new_tensor(DType::F32, {hp.n_embd, k, T}));
  return expert_ffns(c, fm, l, x, mul(c, xe, w), ids, w, false, join, il);
}

// The shared expert (glm4moe, qwen2moe): a SwiGLU FFN n_ff_shexp wide beside the routed ones, on the
// same input; qwen2moe scales its output by a gate of its own, sigmoid(g x) computed as llama.cpp
// does (silu(y) / y).
Tensor* shared_expert(Context& c, const ForwardModel& fm, const LayerWeights& l, Tensor* x, const Join& join,
                      int64_t il) {
  Tensor* h = l.ffn_up_shexp ? swiglu(c, lora_mm(c, l.lora, l.ffn_gate_shexp, x), lora_mm(c, l.lora, l.ffn_up_shexp, x))
                             : zero_rows(c, x);  // {n_ff_shexp here, T}
  h = join(h, l.ffn_up_shexp ? fm.first.ff_shexp : 0, fm.hp->n_ff_shexp(), il, "ffn_shexp_gather");
  Tensor* out = l.ffn_down_shexp ? lora_mm(c, l.lora, l.ffn_down_shexp, h) : zero_rows(c, x);
  if (!l.ffn_gate_inp_shexp) return out;
  Tensor* y = mul_mat(c, l.ffn_gate_inp_shexp, x);  // {1, T}
  return mul(c, out, div(c, silu(c, y), y));
}

// gpt-oss: top-k of the biased router logits, softmax over the k chosen, experts with biases and
// SWIGLU_OAI (alpha 1.702, limit 7 as llama.cpp computes them).
Tensor* moe_ffn_oai(Context& c, const ForwardModel& fm, const LayerWeights& l, Tensor* x, int64_t T, const Join& join,
                    int64_t il) {
  const HParams& hp = *fm.hp;
  const int64_t k = hp.n_expert_used;
  Tensor* logits = add(c, mul_mat(c, l.ffn_gate_inp, x), l.ffn_gate_inp_b);  // {n_expert, T}
  Tensor* ids = top_k(c, logits, k);                                          // {k, T}
  Tensor* w = get_rows(c, reshape(c, logits, {1, hp.n_expert, T}), ids);      // {1, k, T}
  w = reshape(c, soft_max(c, reshape(c, w, {k, T}), nullptr, 1.0f), {1, k, T});
  Tensor* xe = reshape(c, x, {hp.n_embd, 1, T});
  Tensor* h = nullptr;  // {n_ff_exp here, k, T}
  if (l.ffn_gate_exps) {
    Tensor* u = add_id(c, mul_mat_id(c, l.ffn_up_exps, xe, ids), l.ffn_up_exps_b, ids);
    Tensor* g = add_id(c, mul_mat_id(c, l.ffn_gate_exps, xe, ids), l.ffn_gate_exps_b, ids);
    h = swiglu_oai(c, g, u, 1.702f, 7.0f);
  } else {
    h = zero_rows(c, w);
  }
  h = join(h, l.ffn_gate_exps ? fm.first.ff_exp : 0, hp.n_ff_exp, il, "ffn_exp_gather");
  if (!l.ffn_down_exps) return zero_rows(c, x);
  Tensor* d = mul_mat_id(c, l.ffn_down_exps, h, ids);  // {n_embd here, k, T}
  if (l.ffn_down_exps_b) d = add_id(c, d, l.ffn_down_exps_b, ids);
  return weighted_sum(c, d, w);
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
  fm.output_lora = model.output_lora;
  fm.rope_freqs = model.rope_freqs;
  fm.rope_long = model.rope_long;
  fm.rope_short = model.rope_short;
  fm.layers = &model.layers;
  return fm;
}

ForwardModel forward_model(const Model& model, const TpShard& shard) {
  ForwardModel fm = forward_model(model);
  fm.n_head = shard.n_head;
  fm.n_head_kv = shard.n_head_kv;
  fm.output_norm = shard.output_norm;
  fm.output = shard.output;
  fm.rope_freqs = shard.rope_freqs;
  fm.rope_long = shard.rope_long;
  fm.rope_short = shard.rope_short;
  fm.layers = &shard.layers;
  fm.tensor_parallel = true;
  fm.first = shard.first;
  return fm;
}

void fill_masks(const ForwardInputs& in, const HParams& hp, int64_t n_past, int64_t T, int64_t n_kv) {
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (Tensor* m : {in.mask, in.mask_swa}) {
    auto* data = m ? static_cast<float*>(m->data) : nullptr;
    if (!data) continue;
    const int64_t window = m == in.mask_swa ? hp.n_swa : std::numeric_limits<int64_t>::max();
    const bool chunks = m == in.mask_swa && hp.swa_chunked;  // llama4: from the start of p's chunk
    for (int64_t i = 0; i < T; ++i) {
      const int64_t p = n_past + i, first = chunks ? p - p % window : p - window + 1;
      for (int64_t j = 0; j < n_kv; ++j) data[i * n_kv + j] = j <= p && j >= first ? 0.0f : neg_inf;
    }
  }
}

void fill_attn_temp(const ForwardInputs& in, const HParams& hp) {
  auto* out = in.attn_temp ? static_cast<float*>(in.attn_temp->data) : nullptr;
  const auto* pos = static_cast<const int32_t*>(in.positions->data);
  if (!out || !pos) return;
  for (int64_t i = 0; i < in.positions->ne[0]; ++i) out[i] = hp.attn_temperature(pos[i]);
}

void mark_inputs_refilled(const ForwardInputs& in) {
  for (Tensor* t : {in.tokens, in.positions, in.kv_slots, in.mask, in.mask_swa, in.attn_temp, in.out_rows})
    if (t) t->flags |= kFlagRefilled;
}

ForwardInputs build_forward(Context& c, const ForwardModel& model, const KvCache& kv, const ForwardShape& s) {
  const HParams& hp = *model.hp;
  const int64_t T = s.n_tokens;
  const bool windows = s.n_seq > 0;
  LOOM_ASSERT(!windows || (T == s.n_seq * s.n_kv && s.n_outputs == T), "{} windows of {} tokens, {} tokens, {} outputs",
              s.n_seq, s.n_kv, T, s.n_outputs);
  ForwardInputs in;
  in.tokens = c.new_tensor(DType::I32, {T}, "inp_tokens");
  in.positions = c.new_tensor(DType::I32, {T}, "inp_pos");
  if (!windows) in.kv_slots = c.new_tensor(DType::I32, {T}, "inp_kv_slots");
  in.mask = c.new_tensor(DType::F32, {s.n_kv, windows ? s.n_kv : T}, "inp_mask");
  if (hp.has_swa()) in.mask_swa = c.new_tensor(DType::F32, {s.n_kv, windows ? s.n_kv : T}, "inp_mask_swa");
  // Llama 4's attention temperature (mistral3): one multiplier per position, broadcast over the queries
  if (hp.attn_temp_scale != 0.0f) in.attn_temp = c.new_tensor(DType::F32, {1, 1, T}, "inp_attn_temp");
  for (Tensor* t : {in.tokens, in.positions, in.kv_slots, in.mask, in.mask_swa, in.attn_temp})
    if (t) t->flags |= kFlagInput;
  // phi3 rotates with the long factors when the context reaches past the original one
  Tensor* rope_factors = model.rope_freqs;
  if (model.rope_long) rope_factors = kv.size > hp.n_ctx_orig_or_train() ? model.rope_long : model.rope_short;
  const bool gemma = arch_is_gemma(hp.arch);

  Tensor* x = get_rows(c, model.tok_embd, in.tokens);  // {n_embd, T}
  x->name = "inp_embd";
  if (gemma) x = scale(c, x, std::sqrt((float)hp.n_embd));
  if (hp.embedding_scale != 0.0f) x = scale(c, x, hp.embedding_scale);  // granite
  const Join join{c, in, model.tensor_parallel};
  const bool parallel_ffn = arch_is_cohere(hp.arch);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const size_t first_tensor = c.size();
    const LayerWeights& l = (*model.layers)[(size_t)il];
    const bool swa = hp.is_swa_layer(il);
    Tensor* cur = x;  // olmo2 norms only the attention's output
    if (l.attn_norm) {
      cur = arch_norm(c, hp, x, l.attn_norm);
      cur->name = fmt::format("blk.{}.attn_norm-out", il);
    }
    Tensor* normed = cur;  // Cohere: the FFN's input too
    // olmo2, olmoe under -sm tensor: q and k are joined for their norms (in the same order on every member)
    const bool join_qk = model.tensor_parallel && arch_whole_qk_norm(hp.arch);
    const int64_t k_first = model.first.q / (hp.n_head / hp.n_head_kv);
    const WholeQkRows whole{[&](Tensor* part, bool is_k) {
                              return join(part, is_k ? k_first : model.first.q, is_k ? hp.n_embd_kv() : hp.n_embd_q(),
                                          il, is_k ? "k_gather" : "q_gather");
                            },
                            model.first.q, k_first};
    Tensor* attn = nullptr;  // {n_embd_q here, T}
    if (model.n_head_kv == 0) {  // a member without heads
      if (join_qk)
        for (bool is_k : {false, true}) in.expand_first.push_back(whole.join(zero_rows(c, cur), is_k));
      attn = zero_rows(c, cur);
    } else {
      QkvHeads h = project_qkv(c, hp, l, cur, model.n_head, model.n_head_kv, in.positions, rope_params(hp, swa),
                               rope_factors, hp.rotates(il), join_qk ? &whole : nullptr);
      if (hp.qk_rms_norm && hp.rotates(il)) {  // llama4: unweighted RMS norms of the roped heads
        h.q = rms_norm(c, h.q, hp.rms_eps);
        h.k = rms_norm(c, h.k, hp.rms_eps);
      }
      for (Tensor* t : h.products)
        if (t) in.expand_first.push_back(t);
      for (Tensor* t : h.joins)
        if (t) in.expand_first.push_back(t);
      const AttendedKv a = windows ? window_kv(c, model, h, s) : cached_kv(c, model, kv, il, h, in.kv_slots, s);
      // the temperature: mistral3's queries in every layer, llama4's in the layers without RoPE
      const bool temp = in.attn_temp && (!hp.attn_temp_nope_only || !hp.rotates(il));
      Tensor* q = temp ? mul(c, h.q, in.attn_temp) : h.q;
      attn = attention(c, model, q, a.k, a.v, swa ? in.mask_swa : in.mask, l.sinks, s);
    }
    attn = join(attn, model.n_head_kv > 0 ? model.first.q : 0, hp.n_embd_q(), il, "attn_gather");
    if (l.wo) {
      cur = lora_mm(c, l.lora, l.wo, attn);
      if (l.bo) cur = add(c, cur, l.bo);
    } else {
      cur = zero_rows(c, cur);
    }
    cur = join(cur, l.wo ? model.first.embd : 0, hp.n_embd, il, "attn_out_gather");
    cur->name = fmt::format("blk.{}.attn_out", il);
    if (il == hp.n_layer - 1 && s.n_outputs < T) {  // only the requested rows go on
      in.out_rows = c.new_tensor(DType::I32, {s.n_outputs}, "inp_out_rows");
      in.out_rows->flags |= kFlagInput;
      cur = get_rows(c, cur, in.out_rows);
      x = get_rows(c, x, in.out_rows);
      if (parallel_ffn) normed = get_rows(c, normed, in.out_rows);
    }
    if (l.attn_post_norm) cur = arch_norm(c, hp, cur, l.attn_post_norm);
    if (hp.residual_scale != 0.0f) cur = scale(c, cur, hp.residual_scale);  // granite
    Tensor* attn_out = cur;
    Tensor* ffn_in = parallel_ffn ? x : add(c, cur, x);  // what the FFN's output is added to
    if (parallel_ffn) {
      cur = normed;
    } else {
      ffn_in->name = fmt::format("blk.{}.ffn_inp", il);
      cur = ffn_in;  // olmo2 norms only the FFN's output
      if (l.ffn_norm) {
        cur = arch_norm(c, hp, ffn_in, l.ffn_norm);
        cur->name = fmt::format("blk.{}.ffn_norm-out", il);
      }
    }
    const int64_t t_out = ffn_in->ne[1];
    if (l.ffn_gate_inp_b) {
      cur = moe_ffn_oai(c, model, l, cur, t_out, join, il);
    } else if (l.ffn_gate_inp) {
      Tensor* routed = arch_weights_expert_input(hp.arch)
                           ? moe_ffn_weighted_input(c, model, l, cur, t_out, in, join, il)
                           : moe_ffn(c, model, l, cur, t_out, in, join, il);
      cur = hp.n_expert_shared > 0 ? add(c, routed, shared_expert(c, model, l, cur, join, il)) : routed;
    } else {
      Tensor* h = l.ffn_up ? dense_ffn_hidden(c, l, cur, gemma) : zero_rows(c, cur);  // {n_ff here, T}
      h = join(h, l.ffn_up ? model.first.ff : 0, hp.n_ff, il, "ffn_gather");
      cur = l.ffn_down ? lora_mm(c, l.lora, l.ffn_down, h) : zero_rows(c, cur);
    }
    cur = join(cur, l.ffn_down || l.ffn_down_exps ? model.first.embd : 0, hp.n_embd, il, "ffn_out_gather");
    if (l.ffn_post_norm) cur = arch_norm(c, hp, cur, l.ffn_post_norm);
    if (hp.residual_scale != 0.0f) cur = scale(c, cur, hp.residual_scale);
    x = add(c, cur, ffn_in);
    if (parallel_ffn) x = add(c, x, attn_out);  // as llama.cpp: (FFN + residual) + attention
    if (l.cvec) x = add(c, x, l.cvec);  // --control-vector
    x->name = fmt::format("blk.{}.out", il);
    name_unnamed(c, first_tensor, fmt::format("blk.{}", il));
  }
  const size_t first_tensor = c.size();
  x = arch_norm(c, hp, x, model.output_norm);
  x->name = "result_norm";
  if (model.output) {
    in.logits = logit_softcap(c, lora_mm(c, model.output_lora, model.output, x), hp.final_softcap);
    if (hp.logit_multiplier() != 1.0f) in.logits = scale(c, in.logits, hp.logit_multiplier());  // granite, Cohere
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
