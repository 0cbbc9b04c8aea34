// Model architectures (llama with Llama 3 / Mistral / Mixtral shapes, qwen2, qwen3, qwen3moe,
// qwen2moe, gemma, gemma2, gemma3, phi3, gpt-oss, granite, granitemoe, glm4, glm4moe, smollm3, command-r,
// cohere2, olmo2, olmoe, ernie4_5, ernie4_5-moe, exaone4, seed_oss, mistral3, llama4): hyper-parameters, named presets
// with the real shapes, the tensor list of each architecture (names and shapes as llama.cpp's GGUF files have them,
// with a role per tensor), and the GGUF keys that carry the hyper-parameters.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace loom::gguf {
class File;
class Writer;
}  // namespace loom::gguf

namespace loom {

// clang-format off
enum class Arch { llama, qwen2, qwen3, qwen3moe, gemma, gemma2, gemma3, phi3, gpt_oss, granite, glm4moe, qwen2moe,
                  smollm3, glm4, command_r, cohere2, olmo2, granitemoe, olmoe, ernie4_5, exaone4, seed_oss,
                  ernie4_5_moe, mistral3, llama4 };
// clang-format on

const char* arch_name(Arch arch);  // the general.architecture string ("gpt-oss", "command-r")
std::optional<Arch> arch_from_name(std::string_view name);
std::string arch_names();          // "llama, qwen2, ..." for messages
// always routed experts (qwen2moe, qwen3moe, gpt-oss, glm4moe, granitemoe, olmoe, ernie4_5-moe, llama4); llama and
// mistral3 may have them too
bool arch_is_moe(Arch arch);
// granite and granitemoe: IBM's embedding, residual, attention and logit multipliers
bool arch_is_granite(Arch arch);
// llama (Mixtral), mistral3, granitemoe and olmoe: experts as wide as feed_forward_length (no
// expert_feed_forward_length)
bool arch_experts_n_ff_wide(Arch arch);
// llama and mistral3: dense, or routed experts where the file has expert_count (Mixtral)
bool arch_experts_optional(Arch arch);
// qwen2moe and olmoe (softmax), llama4 (sigmoid): the k chosen weights are used as they are, not
// renormalized to sum 1
bool arch_expert_weights_raw(Arch arch);
// llama4: the experts are chosen by the router's logits and each one's input is multiplied by its
// sigmoid weight before its FFN (the outputs are summed as they are)
bool arch_weights_expert_input(Arch arch);
// qwen3, qwen3moe, gemma3, exaone4 (glm4moe: where the file has them, HParams::qk_norm)
bool arch_has_qk_norm(Arch arch);
bool arch_has_qkv_bias(Arch arch);  // qwen2, qwen2moe, gpt-oss, glm4, glm4moe, seed_oss
// llama, mistral3 and exaone4: a rope_freqs.weight of per-pair divisors where the file has one (Llama 3's RoPE
// scaling)
bool arch_reads_rope_freqs(Arch arch);
// rotate halves instead of adjacent pairs (not llama, mistral3, llama4, granite(moe), smollm3, glm4, Cohere's,
// ernie4_5(-moe))
bool arch_rope_neox(Arch arch);
bool arch_is_gemma(Arch arch);      // gemma, gemma2, gemma3: scaled embeddings, GELU FFN, tied output
// gemma2, gemma3, glm4, olmo2, exaone4: norms on the attention's and the FFN's outputs
bool arch_has_post_norms(Arch arch);
bool arch_fused_gate_up(Arch arch);   // phi3, glm4: ffn_up holds the gate rows, then the up rows
bool arch_partial_rope(Arch arch);    // phi3, glm4, glm4moe: rope.dimension_count may be below the head size
// command-r, cohere2 (Cohere): layer norms (mean removed, weight, no bias) instead of RMS norms; the
// FFN reads the attention's normed input and both branches add to the residual (no ffn_norm);
// the output always tied; the logits multiplied by logit_scale.
bool arch_is_cohere(Arch arch);
// olmo2 (OLMo 2, OLMo 3), exaone4: no norms before the attention and the FFN, only after them (post norms).
bool arch_post_norms_only(Arch arch);
// olmo2 and olmoe: RMS q/k norms over the whole q and k vectors (weights {n_embd_q}, {n_embd_kv}), not per head.
bool arch_whole_qk_norm(Arch arch);

enum class RopeScaling { none, linear, yarn };
// How a router's logits become expert weights: softmax (Mixtral, qwen3moe) or sigmoid (glm4moe).
enum class ExpertGating { softmax, sigmoid };

struct HParams {
  Arch arch = Arch::llama;
  int64_t n_layer = 0;
  int64_t n_embd = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // key_length == value_length
  int64_t n_rot = 0;     // rope.dimension_count: dims rotated per head, the rest pass through (0: head_dim)
  int64_t n_ff = 0;      // dense FFN width (written for qwen3moe too, unused by its tensors)
  int64_t n_expert = 0;  // routed experts: qwen3moe, gpt-oss, a Mixtral-shaped llama
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;  // expert width (a llama's experts are n_ff wide, as llama.cpp reads them)
  // glm4moe: shared experts (one dense FFN n_ff_exp * n_expert_shared wide beside the routed ones),
  // leading dense layers (n_ff wide), and the multi-token-prediction layers after the n_layer
  // computed ones (in the file, never run: llama.cpp skips them too). qwen2moe: one shared expert
  // n_ff_shared wide whose output a sigmoid gate of its own (ffn_gate_inp_shexp) scales.
  // granitemoe, ernie4_5-moe: one shared expert n_ff_shared wide where the file gives that width
  // (Granite MoE Shared, ERNIE 4.5's two shared experts as one); ernie4_5-moe: leading dense layers too.
  int64_t n_expert_shared = 0;
  int64_t n_ff_shared = 0;
  int64_t n_layer_dense_lead = 0;
  int64_t n_layer_nextn = 0;
  // The router: gating, then (glm4moe) a selection bias exp_probs_b added for the top-k choice only,
  // the k weights renormalized to sum 1 (expert_weights_norm) and scaled (expert_weights_scale, 0: not).
  ExpertGating expert_gating = ExpertGating::softmax;
  bool expert_weights_norm = true;
  float expert_weights_scale = 0.0f;
  bool qk_norm = false;  // glm4moe: attn_q_norm / attn_k_norm present (GLM-4.5 has them, Air not)
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-5f;  // every norm's epsilon (Cohere's layer norms: attention.layernorm_epsilon)
  float rope_theta = 10000.0f;
  bool tied_embeddings = false;  // no output.weight: the output projection reuses token_embd

  // RoPE scaling (rope.scaling.*): linear multiplies positions by rope_freq_scale; yarn mixes
  // interpolation and extrapolation per pair (ops::rope). n_ctx_orig 0 means n_ctx_train.
  RopeScaling rope_scaling = RopeScaling::none;
  float rope_freq_scale = 1.0f;   // 1 / rope.scaling.factor
  float rope_attn_factor = 1.0f;  // rope.scaling.attn_factor
  int64_t n_ctx_orig = 0;         // rope.scaling.original_context_length
  bool rope_freqs = false;        // llama: a rope_freqs.weight of per-pair divisors (Llama 3)
  bool rope_long_short = false;   // phi3: rope_factors_long / _short, long past n_ctx_orig
  // llama.cpp's YaRN tuning flags, the run's choice (not in the file): ext_factor < 0 means 1
  // under YaRN scaling and 0 otherwise; attn_factor multiplies rope_attn_factor; the ramp's ends.
  // The ramp's ends are the file's (yarn_beta_*) unless given.
  struct YarnTuning {
    float ext_factor = -1.0f, attn_factor = 1.0f;
    std::optional<float> beta_fast, beta_slow;
  } yarn;
  // mistral3 reads YaRN's ramp ends from the file (rope.scaling.yarn_beta_fast / _slow; llama.cpp's
  // defaults elsewhere) and rope.scaling.yarn_log_multiplier (0: none), which divides YaRN's
  // magnitude 1 + 0.1 ln(factor) by 1 + 0.1 m ln(factor).
  float yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f, yarn_log_mul = 0.0f;
  // Llama 4's attention temperature (0: off): the queries at position p are multiplied by
  // 1 + s ln(1 + floor((p + offset) / floor)). mistral3: attention.temperature_scale, offset 0, the
  // floor the original context (attn_temp_floor 0); llama4: 0.1, 1 and 8192, on its layers without RoPE.
  float attn_temp_scale = 0.0f, attn_temp_offset = 0.0f;
  int64_t attn_temp_floor = 0;
  bool attn_temp_nope_only = false;  // llama4: only the queries of the layers without RoPE
  // llama4: layer il has experts when (il + 1) is a multiple of n_moe_layer_step (0: every layer from
  // n_layer_dense_lead); its windows are chunks (position p sees p - p % n_swa .. p); unweighted RMS
  // norms on the roped q and k (all but the 128-expert model).
  int64_t n_moe_layer_step = 0;
  bool swa_chunked = false;
  bool qk_rms_norm = false;

  // Sliding-window attention: layer il sees the last n_swa positions when swa_period > 0 and
  // il % swa_period < swa_period - 1 (gemma2 2, gemma3 6, gpt-oss 2, cohere2 4, OLMo 3 4); those
  // layers rotate with rope_theta_swa / rope_freq_scale_swa (OLMo 3's without YaRN).
  int64_t n_swa = 0;
  int64_t swa_period = 0;
  float rope_theta_swa = 10000.0f;
  float rope_freq_scale_swa = 1.0f;
  // granite: the embeddings times embedding_scale, each residual branch (attention, FFN) times
  // residual_scale before its add, the scores times attention_scale instead of 1/sqrt(head_dim),
  // the logits divided by logit_scale (0: not applied). Cohere multiplies them by logit_scale.
  float embedding_scale = 0.0f, residual_scale = 0.0f, attention_scale = 0.0f, logit_scale = 0.0f;
  int64_t n_no_rope_layer_step = 0;  // smollm3, llama4: every 4th layer (il + 1 a multiple) has no RoPE (0: all have)
  float attn_softcap = 0.0f;   // gemma2: c tanh(s / c) on attention scores (0: off)
  float final_softcap = 0.0f;  // gemma2: the same on the logits

  int64_t n_embd_q() const { return head_dim * n_head; }
  int64_t rot_dims() const { return n_rot > 0 ? n_rot : head_dim; }
  int64_t n_embd_kv() const { return head_dim * n_head_kv; }
  int64_t n_ctx_orig_or_train() const { return n_ctx_orig > 0 ? n_ctx_orig : n_ctx_train; }
  bool is_moe() const { return n_expert > 0; }
  bool is_moe_layer(int64_t il) const {
    if (n_expert == 0) return false;
    return n_moe_layer_step > 0 ? (il + 1) % n_moe_layer_step == 0 : il >= n_layer_dense_lead;
  }
  int64_t n_ff_shexp() const { return n_ff_shared > 0 ? n_ff_shared : n_ff_exp * n_expert_shared; }
  bool is_swa_layer(int64_t il) const { return n_swa > 0 && swa_period > 0 && il % swa_period < swa_period - 1; }
  bool has_swa() const { return n_swa > 0 && swa_period > 1; }
  // The query multiplier of attn_temp_scale at position pos (1 where it is off).
  float attn_temperature(int64_t pos) const;
  // smollm3 and llama4 leave out RoPE in every 4th layer, cohere2 and exaone4 with a window in their global
  // (not sliding-window) layers
  bool rotates(int64_t il) const {
    if (arch == Arch::cohere2 || (arch == Arch::exaone4 && has_swa())) return is_swa_layer(il);
    return n_no_rope_layer_step == 0 || (il + 1) % n_no_rope_layer_step != 0;
  }
  // What the logits are multiplied by: 1 / logit_scale (granite), logit_scale (Cohere), 1.
  float logit_multiplier() const;
  // command-r's 64+ layer sizes (Command R+) carry per-head q/k layer norms {head_dim, heads}.
  bool per_head_qk_norm() const { return arch == Arch::command_r && n_layer >= 64; }
  // The attention's score scale: 1/sqrt(head_dim), but gemma's 27B sizes use 1/sqrt(n_embd / n_head)
  // and granite its attention_scale.
  float attn_scale() const;
};

// Presets: "tiny" and "small" exist for every architecture; the real shapes are tied to theirs
// ("llama-8b", "llama-70b" for llama; "qwen3-8b" for qwen3; "qwen3-30b-a3b" for qwen3moe;
// "gemma3-27b"; "gpt-oss-20b"; "glm-4.5-air").
// Throws usage naming the preset and listing the valid ones.
HParams preset_hparams(Arch arch, std::string_view name);
std::vector<std::string> preset_names(Arch arch);

// The presets' long-context setup (phi3's long/short factors, gpt-oss's YaRN): an original context
// of a quarter of n_ctx_train, and phi3's LongRoPE magnitude for it.
void set_original_context(HParams& hp);
// What llama.cpp's llama4 loader fixes (no keys): 8192-token chunks on three layers of four, no RoPE
// on the fourth, whose queries get the temperature (0.1, offset 1, floor 8192); unweighted q/k RMS
// norms unless the model has 128 experts (Maverick).
void set_llama4_fixed(HParams& hp);

// Throws invalid_input naming the first absurd or inconsistent value.
void validate_hparams(const HParams& hp);

// clang-format off
enum class TensorRole {
  token_embd, output_norm, output,
  rope_freqs, rope_factors_long, rope_factors_short,  // global RoPE divisors (llama 3, phi3)
  attn_norm, attn_q, attn_k, attn_v, attn_output,
  attn_qkv,                                           // phi3: q, k and v rows in one matrix
  attn_q_bias, attn_k_bias, attn_v_bias, attn_output_bias,
  attn_q_norm, attn_k_norm,
  attn_sinks,                                         // gpt-oss: one logit per head
  attn_post_norm,                                     // gemma: on the attention's output
  ffn_norm, ffn_gate, ffn_up, ffn_down,               // phi3's ffn_up holds gate and up rows
  ffn_post_norm,                                      // gemma: on the FFN's output
  ffn_gate_inp, ffn_gate_exps, ffn_up_exps, ffn_down_exps,
  ffn_gate_inp_bias, ffn_gate_exps_bias, ffn_up_exps_bias, ffn_down_exps_bias,  // gpt-oss
  ffn_exp_probs_b,                                    // glm4moe: the router's selection bias
  ffn_gate_shexp, ffn_up_shexp, ffn_down_shexp,       // glm4moe, qwen2moe: the shared expert
  ffn_gate_inp_shexp,                                 // qwen2moe: the shared expert's gate {n_embd}
  // glm4moe's multi-token-prediction layers (read past, never computed)
  nextn_eh_proj, nextn_enorm, nextn_hnorm, nextn_embed_tokens, nextn_shared_head_head, nextn_shared_head_norm,
};
// clang-format on
const char* tensor_role_name(TensorRole role);  // "attn_q", ...
// Norms, biases, sinks and RoPE factors (kept in F32); everything else is a weight matrix.
bool tensor_role_is_vector(TensorRole role);
bool tensor_role_is_norm(TensorRole role);

struct TensorSpec {
  std::string name;  // "blk.3.attn_q.weight"
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // fastest first: a PyTorch (out, in) weight is {in, out}
  TensorRole role = TensorRole::token_embd;
  int layer = -1;  // -1 for global tensors
  // In the file but never computed (glm4moe's multi-token-prediction layers): checked and counted
  // by the loader, not loaded; optional ones may be absent (and are not written by loom-gguf new).
  bool unused = false;
  bool optional = false;
  int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

// All tensors of the architecture in file order: token_embd, then per layer, then output_norm
// and output (absent when tied); glm4moe's unused multi-token-prediction layers come after the
// computed ones.
std::vector<TensorSpec> arch_tensors(const HParams& hp);
int64_t count_params(const HParams& hp);

// `general.architecture` and the `<arch>.*` keys (u32 counts, f32 eps/theta, the RoPE scaling,
// sliding-window and soft-capping keys of the architectures that have them).
void write_hparams(gguf::Writer& w, const HParams& hp);
// The reverse, with llama.cpp's defaults (head_count_kv = head_count, key_length =
// n_embd/n_head, rope.freq_base 10000, vocab from the token list or token_embd, each
// architecture's sliding-window and soft-capping defaults) and validation; an unknown
// architecture is invalid_input naming it. Which optional tensors exist (rope_freqs, a tied
// output) is read from the file's tensor list.
HParams read_hparams(const gguf::File& file);

}  // namespace loom
