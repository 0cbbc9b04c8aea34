// Model architectures (llama, qwen2, qwen3, qwen3moe): hyper-parameters, named presets with the
// real shapes, the tensor list of each architecture (names and shapes as llama.cpp's GGUF
// files have them, with a role per tensor), and the GGUF keys that carry the hyper-parameters.
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

enum class Arch { llama, qwen2, qwen3, qwen3moe };

const char* arch_name(Arch arch);  // the general.architecture string
std::optional<Arch> arch_from_name(std::string_view name);
bool arch_is_moe(Arch arch);
bool arch_has_qk_norm(Arch arch);   // qwen3, qwen3moe
bool arch_has_qkv_bias(Arch arch);  // qwen2
bool arch_rope_neox(Arch arch);     // rotate halves (qwen*) instead of adjacent pairs (llama)

struct HParams {
  Arch arch = Arch::llama;
  int64_t n_layer = 0;
  int64_t n_embd = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t head_dim = 0;  // key_length == value_length
  int64_t n_ff = 0;      // dense FFN width (written for qwen3moe too, unused by its tensors)
  int64_t n_expert = 0;  // qwen3moe only
  int64_t n_expert_used = 0;
  int64_t n_ff_exp = 0;
  int64_t n_vocab = 0;
  int64_t n_ctx_train = 0;
  float rms_eps = 1e-5f;
  float rope_theta = 10000.0f;
  bool tied_embeddings = false;  // no output.weight: the output projection reuses token_embd

  int64_t n_embd_q() const { return head_dim * n_head; }
  int64_t n_embd_kv() const { return head_dim * n_head_kv; }
};

// Presets: "tiny" and "small" exist for every architecture; the real shapes are tied to theirs
// ("llama-8b", "llama-70b" for llama; "qwen3-8b" for qwen3; "qwen3-30b-a3b" for qwen3moe).
// Throws usage naming the preset and listing the valid ones.
HParams preset_hparams(Arch arch, std::string_view name);
std::vector<std::string> preset_names(Arch arch);

// Throws invalid_input naming the first absurd or inconsistent value.
void validate_hparams(const HParams& hp);

enum class TensorRole {
  token_embd, output_norm, output,
  attn_norm, attn_q, attn_k, attn_v, attn_output,
  attn_q_bias, attn_k_bias, attn_v_bias,
  attn_q_norm, attn_k_norm,
  ffn_norm, ffn_gate, ffn_up, ffn_down,
  ffn_gate_inp, ffn_gate_exps, ffn_up_exps, ffn_down_exps,
};
const char* tensor_role_name(TensorRole role);  // "attn_q", ...
// Norms and biases (1-D, kept in F32); everything else is a weight matrix.
bool tensor_role_is_vector(TensorRole role);

struct TensorSpec {
  std::string name;  // "blk.3.attn_q.weight"
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // fastest first: a PyTorch (out, in) weight is {in, out}
  TensorRole role = TensorRole::token_embd;
  int layer = -1;  // -1 for global tensors
  int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

// All tensors of the architecture in file order: token_embd, then per layer, then output_norm
// and output (absent when tied).
std::vector<TensorSpec> arch_tensors(const HParams& hp);
int64_t count_params(const HParams& hp);

// `general.architecture` and the `<arch>.*` keys (u32 counts, f32 eps/theta).
void write_hparams(gguf::Writer& w, const HParams& hp);
// The reverse, with llama.cpp's defaults (head_count_kv = head_count, key_length =
// n_embd/n_head, rope.freq_base 10000, vocab from the token list or token_embd) and validation;
// an unknown architecture is invalid_input naming it.
HParams read_hparams(const gguf::File& file);

}  // namespace loom
