// The tensor list of each architecture: names and shapes as llama.cpp's loader expects them,
// with a role per tensor (what the forward reads it as, how tensor parallelism splits it).
#include <fmt/format.h>

#include "loom/model/arch.h"

namespace loom {

// clang-format off
const char* tensor_role_name(TensorRole role) {
  switch (role) {
    case TensorRole::token_embd: return "token_embd";
    case TensorRole::output_norm: return "output_norm";
    case TensorRole::output: return "output";
    case TensorRole::rope_freqs: return "rope_freqs";
    case TensorRole::rope_factors_long: return "rope_factors_long";
    case TensorRole::rope_factors_short: return "rope_factors_short";
    case TensorRole::attn_norm: return "attn_norm";
    case TensorRole::attn_q: return "attn_q";
    case TensorRole::attn_k: return "attn_k";
    case TensorRole::attn_v: return "attn_v";
    case TensorRole::attn_output: return "attn_output";
    case TensorRole::attn_qkv: return "attn_qkv";
    case TensorRole::attn_q_bias: return "attn_q_bias";
    case TensorRole::attn_k_bias: return "attn_k_bias";
    case TensorRole::attn_v_bias: return "attn_v_bias";
    case TensorRole::attn_output_bias: return "attn_output_bias";
    case TensorRole::attn_q_norm: return "attn_q_norm";
    case TensorRole::attn_k_norm: return "attn_k_norm";
    case TensorRole::attn_sinks: return "attn_sinks";
    case TensorRole::attn_post_norm: return "attn_post_norm";
    case TensorRole::ffn_norm: return "ffn_norm";
    case TensorRole::ffn_gate: return "ffn_gate";
    case TensorRole::ffn_up: return "ffn_up";
    case TensorRole::ffn_down: return "ffn_down";
    case TensorRole::ffn_post_norm: return "ffn_post_norm";
    case TensorRole::ffn_gate_inp: return "ffn_gate_inp";
    case TensorRole::ffn_gate_exps: return "ffn_gate_exps";
    case TensorRole::ffn_up_exps: return "ffn_up_exps";
    case TensorRole::ffn_down_exps: return "ffn_down_exps";
    case TensorRole::ffn_gate_inp_bias: return "ffn_gate_inp_bias";
    case TensorRole::ffn_gate_exps_bias: return "ffn_gate_exps_bias";
    case TensorRole::ffn_up_exps_bias: return "ffn_up_exps_bias";
    case TensorRole::ffn_down_exps_bias: return "ffn_down_exps_bias";
    case TensorRole::ffn_exp_probs_b: return "ffn_exp_probs_b";
    case TensorRole::ffn_gate_shexp: return "ffn_gate_shexp";
    case TensorRole::ffn_up_shexp: return "ffn_up_shexp";
    case TensorRole::ffn_down_shexp: return "ffn_down_shexp";
    case TensorRole::ffn_gate_inp_shexp: return "ffn_gate_inp_shexp";
    case TensorRole::nextn_eh_proj: return "nextn_eh_proj";
    case TensorRole::nextn_enorm: return "nextn_enorm";
    case TensorRole::nextn_hnorm: return "nextn_hnorm";
    case TensorRole::nextn_embed_tokens: return "nextn_embed_tokens";
    case TensorRole::nextn_shared_head_head: return "nextn_shared_head_head";
    case TensorRole::nextn_shared_head_norm: return "nextn_shared_head_norm";
  }
  return "?";
}

bool tensor_role_is_norm(TensorRole role) {
  switch (role) {
    case TensorRole::output_norm: case TensorRole::attn_norm: case TensorRole::ffn_norm:
    case TensorRole::attn_q_norm: case TensorRole::attn_k_norm:
    case TensorRole::attn_post_norm: case TensorRole::ffn_post_norm:
    case TensorRole::nextn_enorm: case TensorRole::nextn_hnorm: case TensorRole::nextn_shared_head_norm: return true;
    default: return false;
  }
}

bool tensor_role_is_vector(TensorRole role) {
  switch (role) {
    case TensorRole::rope_freqs: case TensorRole::rope_factors_long: case TensorRole::rope_factors_short:
    case TensorRole::attn_q_bias: case TensorRole::attn_k_bias: case TensorRole::attn_v_bias:
    case TensorRole::attn_output_bias: case TensorRole::attn_sinks:
    case TensorRole::ffn_gate_inp_bias: case TensorRole::ffn_gate_exps_bias: case TensorRole::ffn_up_exps_bias:
    case TensorRole::ffn_down_exps_bias: case TensorRole::ffn_exp_probs_b: case TensorRole::ffn_gate_inp_shexp:
      return true;
    default: return tensor_role_is_norm(role);
  }
}
// clang-format on

std::vector<TensorSpec> arch_tensors(const HParams& hp) {
  std::vector<TensorSpec> out;
  auto add = [&](std::string name, TensorRole role, int layer, std::initializer_list<int64_t> ne) {
    TensorSpec t;
    t.name = std::move(name);
    t.role = role;
    t.layer = layer;
    t.n_dims = (int)ne.size();
    int d = 0;
    for (int64_t n : ne) t.ne[d++] = n;
    out.push_back(std::move(t));
  };
  using R = TensorRole;
  const Arch a = hp.arch;
  const int64_t n_q = hp.n_embd_q(), n_kv = hp.n_embd_kv(), E = hp.n_embd, half_rot = hp.rot_dims() / 2;
  if (hp.rope_freqs) add("rope_freqs.weight", R::rope_freqs, -1, {half_rot});
  add("token_embd.weight", R::token_embd, -1, {E, hp.n_vocab});
  // glm4moe's multi-token-prediction layers follow the computed ones: a MoE layer's tensors and
  // their own, all unused
  for (int il = 0; il < (int)(hp.n_layer + hp.n_layer_nextn); ++il) {
    auto blk = [il](const char* what) { return fmt::format("blk.{}.{}", il, what); };
    const size_t first_of_layer = out.size();
    if (!arch_post_norms_only(a)) add(blk("attn_norm.weight"), R::attn_norm, il, {E});
    if (a == Arch::phi3) {
      add(blk("attn_qkv.weight"), R::attn_qkv, il, {E, n_q + 2 * n_kv});
    } else {
      add(blk("attn_q.weight"), R::attn_q, il, {E, n_q});
      add(blk("attn_k.weight"), R::attn_k, il, {E, n_kv});
      add(blk("attn_v.weight"), R::attn_v, il, {E, n_kv});
    }
    if (arch_has_qkv_bias(a)) {
      add(blk("attn_q.bias"), R::attn_q_bias, il, {n_q});
      add(blk("attn_k.bias"), R::attn_k_bias, il, {n_kv});
      add(blk("attn_v.bias"), R::attn_v_bias, il, {n_kv});
    }
    if (arch_whole_qk_norm(a)) {  // over the whole q and k
      add(blk("attn_q_norm.weight"), R::attn_q_norm, il, {n_q});
      add(blk("attn_k_norm.weight"), R::attn_k_norm, il, {n_kv});
    } else if (hp.per_head_qk_norm()) {  // Command R+: a weight row per head
      add(blk("attn_q_norm.weight"), R::attn_q_norm, il, {hp.head_dim, hp.n_head});
      add(blk("attn_k_norm.weight"), R::attn_k_norm, il, {hp.head_dim, hp.n_head_kv});
    } else if (arch_has_qk_norm(a) || hp.qk_norm) {
      add(blk("attn_q_norm.weight"), R::attn_q_norm, il, {hp.head_dim});
      add(blk("attn_k_norm.weight"), R::attn_k_norm, il, {hp.head_dim});
    }
    add(blk("attn_output.weight"), R::attn_output, il, {n_q, E});
    if (a == Arch::gpt_oss) {
      add(blk("attn_output.bias"), R::attn_output_bias, il, {E});
      add(blk("attn_sinks.weight"), R::attn_sinks, il, {hp.n_head});
    }
    if (arch_has_post_norms(a)) add(blk("post_attention_norm.weight"), R::attn_post_norm, il, {E});
    // gpt-oss, glm4moe and seed_oss name their pre-FFN norm post_attention_norm (they have no ffn_norm)
    const bool post_attention_ffn_norm = a == Arch::gpt_oss || a == Arch::glm4moe || a == Arch::seed_oss;
    // Cohere's FFN reads the attention's normed input, olmo2's and exaone4's the residual itself: no
    // norm of their own
    if (!arch_is_cohere(a) && !arch_post_norms_only(a))
      add(blk(post_attention_ffn_norm ? "post_attention_norm.weight" : "ffn_norm.weight"), R::ffn_norm, il, {E});
    if (hp.is_moe_layer(il)) {
      const int64_t n_ff = hp.n_ff_exp, n_e = hp.n_expert;
      add(blk("ffn_gate_inp.weight"), R::ffn_gate_inp, il, {E, n_e});
      if (a == Arch::glm4moe || a == Arch::ernie4_5_moe) add(blk("exp_probs_b.bias"), R::ffn_exp_probs_b, il, {n_e});
      add(blk("ffn_gate_exps.weight"), R::ffn_gate_exps, il, {E, n_ff, n_e});
      add(blk("ffn_down_exps.weight"), R::ffn_down_exps, il, {n_ff, E, n_e});
      add(blk("ffn_up_exps.weight"), R::ffn_up_exps, il, {E, n_ff, n_e});
      if (a == Arch::gpt_oss) {
        add(blk("ffn_gate_inp.bias"), R::ffn_gate_inp_bias, il, {n_e});
        add(blk("ffn_gate_exps.bias"), R::ffn_gate_exps_bias, il, {n_ff, n_e});
        add(blk("ffn_down_exps.bias"), R::ffn_down_exps_bias, il, {E, n_e});
        add(blk("ffn_up_exps.bias"), R::ffn_up_exps_bias, il, {n_ff, n_e});
      }
      if (a == Arch::qwen2moe) add(blk("ffn_gate_inp_shexp.weight"), R::ffn_gate_inp_shexp, il, {E});
      if (hp.n_expert_shared > 0) {
        add(blk("ffn_gate_shexp.weight"), R::ffn_gate_shexp, il, {E, hp.n_ff_shexp()});
        add(blk("ffn_down_shexp.weight"), R::ffn_down_shexp, il, {hp.n_ff_shexp(), E});
        add(blk("ffn_up_shexp.weight"), R::ffn_up_shexp, il, {E, hp.n_ff_shexp()});
      }
    } else if (arch_fused_gate_up(a)) {  // gate rows, then up rows
      add(blk("ffn_down.weight"), R::ffn_down, il, {hp.n_ff, E});
      add(blk("ffn_up.weight"), R::ffn_up, il, {E, 2 * hp.n_ff});
    } else {
      add(blk("ffn_gate.weight"), R::ffn_gate, il, {E, hp.n_ff});
      add(blk("ffn_down.weight"), R::ffn_down, il, {hp.n_ff, E});
      add(blk("ffn_up.weight"), R::ffn_up, il, {E, hp.n_ff});
    }
    if (arch_has_post_norms(a)) add(blk("post_ffw_norm.weight"), R::ffn_post_norm, il, {E});
    if (il >= hp.n_layer) {
      add(blk("nextn.eh_proj.weight"), R::nextn_eh_proj, il, {2 * E, E});
      add(blk("nextn.enorm.weight"), R::nextn_enorm, il, {E});
      add(blk("nextn.hnorm.weight"), R::nextn_hnorm, il, {E});
      add(blk("nextn.embed_tokens.weight"), R::nextn_embed_tokens, il, {E, hp.n_vocab});
      add(blk("nextn.shared_head_head.weight"), R::nextn_shared_head_head, il, {E, hp.n_vocab});
      add(blk("nextn.shared_head_norm.weight"), R::nextn_shared_head_norm, il, {E});
      for (size_t i = first_of_layer; i < out.size(); ++i) {
        TensorSpec& t = out[i];
        t.unused = true;
        t.optional = t.role == R::nextn_embed_tokens || t.role == R::nextn_shared_head_head ||
                     t.role == R::nextn_shared_head_norm;
      }
    }
  }
  add("output_norm.weight", R::output_norm, -1, {E});
  if (!hp.tied_embeddings) add("output.weight", R::output, -1, {E, hp.n_vocab});
  if (hp.rope_long_short) {
    add("rope_factors_long.weight", R::rope_factors_long, -1, {half_rot});
    add("rope_factors_short.weight", R::rope_factors_short, -1, {half_rot});
  }
  return out;
}

int64_t count_params(const HParams& hp) {
  int64_t total = 0;
  for (const TensorSpec& t : arch_tensors(hp))
    if (!t.optional) total += t.nelements();
  return total;
}

}  // namespace loom
