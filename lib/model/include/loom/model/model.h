// A loaded model: hyper-parameters, tokenizer, and the weights as tensors grouped per layer.
// Weights on the CPU point straight into the file's mapping (no copy, pages read on use);
// header-only files load for planning (no data is touched).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_set>
#include <vector>

#include "loom/gguf/gguf.h"
#include "loom/graph/context.h"
#include "loom/model/arch.h"
#include "loom/model/control_vector.h"
#include "loom/model/lora.h"
#include "loom/model/placement.h"
#include "loom/model/tp_shard.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom {

struct LayerWeights {
  Tensor* attn_norm = nullptr;
  Tensor* wq = nullptr;
  Tensor* wk = nullptr;
  Tensor* wv = nullptr;
  Tensor* wqkv = nullptr;  // phi3: q, k, v rows in one matrix (wq/wk/wv null)
  Tensor* wo = nullptr;
  Tensor* bq = nullptr;  // qwen2, gpt-oss
  Tensor* bk = nullptr;
  Tensor* bv = nullptr;
  Tensor* bo = nullptr;      // gpt-oss
  Tensor* q_norm = nullptr;  // qwen3, qwen3moe, gemma3
  Tensor* k_norm = nullptr;
  Tensor* sinks = nullptr;           // gpt-oss
  Tensor* attn_post_norm = nullptr;  // gemma
  Tensor* ffn_norm = nullptr;
  Tensor* ffn_gate = nullptr;  // dense (phi3: null, gate rows inside ffn_up)
  Tensor* ffn_up = nullptr;
  Tensor* ffn_down = nullptr;
  Tensor* ffn_post_norm = nullptr;  // gemma
  Tensor* ffn_gate_inp = nullptr;   // router and experts
  Tensor* ffn_gate_exps = nullptr;
  Tensor* ffn_up_exps = nullptr;
  Tensor* ffn_down_exps = nullptr;
  Tensor* ffn_gate_inp_b = nullptr;  // gpt-oss biases
  Tensor* ffn_gate_exps_b = nullptr;
  Tensor* ffn_up_exps_b = nullptr;
  Tensor* ffn_down_exps_b = nullptr;
  Tensor* exp_probs_b = nullptr;     // glm4moe: the router's selection bias
  Tensor* ffn_gate_shexp = nullptr;  // glm4moe, qwen2moe: the shared expert
  Tensor* ffn_up_shexp = nullptr;
  Tensor* ffn_down_shexp = nullptr;
  Tensor* ffn_gate_inp_shexp = nullptr;  // qwen2moe: the shared expert's sigmoid gate
  std::vector<LoraLink> lora;  // --lora: the adapters' pairs for this layer's matrices
  Tensor* cvec = nullptr;      // --control-vector: added to the layer's output (F32 {n_embd})
};

// Where a per-layer role's tensor lives in l (nullptr for the global roles).
// clang-format off
inline Tensor** layer_role_slot(LayerWeights& l, TensorRole role) {
  switch (role) {
    case TensorRole::attn_norm: return &l.attn_norm;
    case TensorRole::attn_q: return &l.wq;
    case TensorRole::attn_k: return &l.wk;
    case TensorRole::attn_v: return &l.wv;
    case TensorRole::attn_qkv: return &l.wqkv;
    case TensorRole::attn_output: return &l.wo;
    case TensorRole::attn_q_bias: return &l.bq;
    case TensorRole::attn_k_bias: return &l.bk;
    case TensorRole::attn_v_bias: return &l.bv;
    case TensorRole::attn_output_bias: return &l.bo;
    case TensorRole::attn_q_norm: return &l.q_norm;
    case TensorRole::attn_k_norm: return &l.k_norm;
    case TensorRole::attn_sinks: return &l.sinks;
    case TensorRole::attn_post_norm: return &l.attn_post_norm;
    case TensorRole::ffn_norm: return &l.ffn_norm;
    case TensorRole::ffn_gate: return &l.ffn_gate;
    case TensorRole::ffn_up: return &l.ffn_up;
    case TensorRole::ffn_down: return &l.ffn_down;
    case TensorRole::ffn_post_norm: return &l.ffn_post_norm;
    case TensorRole::ffn_gate_inp: return &l.ffn_gate_inp;
    case TensorRole::ffn_gate_exps: return &l.ffn_gate_exps;
    case TensorRole::ffn_up_exps: return &l.ffn_up_exps;
    case TensorRole::ffn_down_exps: return &l.ffn_down_exps;
    case TensorRole::ffn_gate_inp_bias: return &l.ffn_gate_inp_b;
    case TensorRole::ffn_gate_exps_bias: return &l.ffn_gate_exps_b;
    case TensorRole::ffn_up_exps_bias: return &l.ffn_up_exps_b;
    case TensorRole::ffn_down_exps_bias: return &l.ffn_down_exps_b;
    case TensorRole::ffn_exp_probs_b: return &l.exp_probs_b;
    case TensorRole::ffn_gate_shexp: return &l.ffn_gate_shexp;
    case TensorRole::ffn_up_shexp: return &l.ffn_up_shexp;
    case TensorRole::ffn_down_shexp: return &l.ffn_down_shexp;
    case TensorRole::ffn_gate_inp_shexp: return &l.ffn_gate_inp_shexp;
    default: return nullptr;
  }
}
// clang-format on

// Where the tensor of a role lives: in `l` for per-layer roles, else in `m` (the Model or any
// struct with tok_embd / output_norm / output / rope_freqs / rope_long / rope_short members).
template <class Weights>
Tensor** role_slot(Weights& m, LayerWeights* l, TensorRole role) {
  switch (role) {
    case TensorRole::token_embd: return &m.tok_embd;
    case TensorRole::output_norm: return &m.output_norm;
    case TensorRole::output: return &m.output;
    case TensorRole::rope_freqs: return &m.rope_freqs;
    case TensorRole::rope_factors_long: return &m.rope_long;
    case TensorRole::rope_factors_short: return &m.rope_short;
    default: return layer_role_slot(*l, role);
  }
}

// Tensor parallel: where one member's rows start in each joined result (all_gather_rows).
struct TpRowStarts {
  int64_t q = 0;       // attention output {n_embd_q} (its first query head's rows)
  int64_t embd = 0;    // attn_output and ffn_down results {n_embd}
  int64_t ff = 0;      // dense FFN hidden {n_ff}
  int64_t ff_exp = 0;  // expert FFN hidden {n_ff_exp}
  int64_t ff_shexp = 0;  // shared expert hidden {n_ff_shexp} (glm4moe, qwen2moe)
};

// One member's weights. Tensors absent (nullptr) when the member's range is empty.
struct TpShard {
  int rank = 0;
  Device* device = nullptr;
  int64_t n_head = 0;     // local query heads
  int64_t n_head_kv = 0;  // local KV heads
  int64_t n_ff = 0, n_ff_exp = 0, n_ff_shexp = 0, n_vocab = 0;
  TpRowStarts first;  // where this member's rows start in the joined results
  std::vector<LayerWeights> layers;
  Tensor* output_norm = nullptr;
  Tensor* output = nullptr;  // vocabulary rows of this member
  Tensor* rope_freqs = nullptr;  // mirrored RoPE divisors (null when the model has none)
  Tensor* rope_long = nullptr;
  Tensor* rope_short = nullptr;
  Context ctx;               // owns the tensors above
  size_t bytes = 0;          // on device (planned or allocated)
  std::vector<std::unique_ptr<Buffer>> buffers;
};

// One --override-kv: the metadata value a key takes instead of the file's.
struct KvOverride {
  std::string key;
  gguf::Value value;
};
// Parses llama.cpp's --override-kv text: KEY=TYPE:VALUE, several separated by commas; TYPE int
// (64-bit), float (finite), bool (true or false) or str (at most 127 bytes). Throws usage naming
// `flag` and the entry.
std::vector<KvOverride> parse_kv_overrides(std::string_view spec, std::string_view flag = "--override-kv");

struct ModelLoadOptions {
  bool need_data = true;  // false: planning only (header-only files accepted, nothing allocated)
  PlacementParams placement;  // devices empty: the CPU alone
  // Called after each weight tensor copied into device or CPU memory: bytes done of total (for a
  // progress line; big models take seconds to load). Not called when nothing is copied.
  std::function<void(size_t done, size_t total)> progress;
  // Training (lib/train): true for each weight to train, which is then loaded as a writable F32
  // copy (converted from the file's type; never used in place in the mapping, never repacked)
  // flagged kFlagParam; the other weights are not flagged. Unset: inference (every weight flagged).
  std::function<bool(const TensorSpec& spec, DType file_type)> trainable;
  // Tensors whose names start with this are allowed in the file and not loaded (a training
  // checkpoint's optimizer state, "opt."). Empty: every tensor must belong to the model.
  std::string ignore_prefix;
  // Metadata values used instead of the file's (keys the file lacks are added), before anything
  // is read from it: hyper-parameters, tokenizer, chat template.
  std::vector<KvOverride> kv_overrides;
  // LoRA adapters applied to the products (lora.h), each placed with the matrix it adapts.
  // Not with training or -sm tensor.
  std::vector<LoraAdapterSpec> adapters;
  ControlVectorOptions control_vectors;  // likewise, placed with their layers
  HParams::YarnTuning yarn;              // --yarn-ext-factor, --yarn-attn-factor, --yarn-beta-*
};

class Model {
 public:
  // Throws invalid_input naming the file and the missing/misshapen tensor or bad key.
  static std::unique_ptr<Model> load(const std::string& path, const ModelLoadOptions& opt = {});

  const HParams& hparams() const { return hp_; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const gguf::File& file() const { return *file_; }
  // The file's identity, mixed with each adapter's identity and scale and the control vectors'
  // values and layers when there are some (a --prompt-cache file holds the state of one such
  // combination).
  uint64_t identity() const;
  Context& weights() { return weights_; }
  std::vector<Tensor*> weight_tensors() const;

  Tensor* tok_embd = nullptr;
  Tensor* output_norm = nullptr;
  Tensor* output = nullptr;  // token_embd when tied
  Tensor* rope_freqs = nullptr;  // llama 3: per-pair RoPE divisors (null when absent)
  Tensor* rope_long = nullptr;   // phi3: divisors past n_ctx_orig, and within it
  Tensor* rope_short = nullptr;
  std::vector<LayerWeights> layers;
  std::vector<LoraLink> output_lora;  // --lora pairs of `output`

  size_t n_params() const { return n_params_; }
  size_t n_bytes() const { return n_bytes_; }
  // Weight bytes one decoded token reads: every weight but the token embedding, of which it reads
  // one row (all of it when it is the output too); routed experts at n_expert_used / n_expert.
  size_t bytes_read_per_token() const;
  // "llama 256M Q8_0"-like description used by loom-bench.
  std::string type_name() const;

  const WeightPlacement& placement() const { return placement_; }
  const std::vector<Device*>& devices() const { return placement_.devices; }
  int device_of(const Tensor* weight) const;
  // Bytes of weights each device holds (index as devices()).
  const std::vector<size_t>& device_bytes() const { return device_bytes_; }
  // Whether the CPU's weights are used in place in the file mapping (--mmap, or a copy would not
  // fit the available RAM) rather than copied into a huge-page-backed CPU buffer.
  bool cpu_weights_mapped() const { return cpu_mapped_; }
  bool has_data() const { return has_data_; }
  // Split mode tensor: one shard per member held by this process (all members in-process; one
  // under MPI), in rank order. Empty in the other split modes.
  bool tensor_parallel() const { return !tp_shards_.empty(); }
  const std::vector<std::unique_ptr<TpShard>>& tp_shards() const { return tp_shards_; }
  const TpLayout& tp_layout() const { return tp_layout_; }
  // Planning only (a model without data): places the weights again for other params.
  void set_placement(const PlacementParams& p);

 private:
  Model() = default;
  void place(const PlacementParams& p, const std::function<void(size_t, size_t)>& progress = {});
  void place_tensor_parallel(const PlacementParams& p);  // tp_shard.cpp
  void add_adapter(const LoraAdapterSpec& spec, bool bind_data);  // lora.cpp
  void add_control_vectors(const ControlVectorOptions& o, bool bind_data);  // control_vector.cpp
  HParams hp_;
  std::unique_ptr<gguf::File> file_;
  std::vector<std::unique_ptr<gguf::File>> adapter_files_;  // their tensors' bytes are mapped
  std::vector<float> adapter_scales_;
  std::vector<float> cvec_data_;                  // the summed directions the layers' cvec tensors hold
  std::pair<int64_t, int64_t> cvec_range_{0, 0};  // the layers that take them
  std::unique_ptr<Tokenizer> tokenizer_;
  Context weights_;
  size_t n_params_ = 0;
  size_t n_bytes_ = 0;
  bool has_data_ = false;
  bool cpu_mapped_ = false;
  WeightPlacement placement_;
  std::vector<size_t> device_bytes_;
  std::vector<std::unique_ptr<Buffer>> buffers_;  // weights copied to non-CPU devices
  std::shared_ptr<void> owned_devices_;            // a CPU device when the caller gave none
  std::vector<std::unique_ptr<TpShard>> tp_shards_;
  TpLayout tp_layout_;
  std::unordered_set<const Tensor*> trained_;  // ModelLoadOptions::trainable said yes
};

}  // namespace loom
