// The GGUF keys of the hyper-parameters: written as llama.cpp's converters write them, read
// back with llama.cpp's defaults (per architecture: sliding windows, soft-capping, RoPE bases).
#include <fmt/format.h>

#include <cmath>

#include "loom/core/error.h"
#include "loom/model/arch.h"
#include "loom/gguf/gguf.h"

namespace loom {

namespace {

const char* rope_scaling_name(RopeScaling s) {
  switch (s) {
    case RopeScaling::none: return "none";
    case RopeScaling::linear: return "linear";
    case RopeScaling::yarn: return "yarn";
  }
  return "?";
}

}  // namespace

void write_hparams(gguf::Writer& w, const HParams& hp) {
  using gguf::Value;
  validate_hparams(hp);
  const std::string a = arch_name(hp.arch);
  auto u32 = [&](const char* key, int64_t v) { w.set(a + "." + key, Value::u32((uint32_t)v)); };
  auto f32 = [&](const char* key, float v) { w.set(a + "." + key, Value::f32(v)); };
  w.set("general.architecture", Value::string(a));
  u32("vocab_size", hp.n_vocab);
  u32("context_length", hp.n_ctx_train);
  u32("embedding_length", hp.n_embd);
  u32("block_count", hp.n_layer + hp.n_layer_nextn);
  // a llama's and granitemoe's experts are feed_forward_length wide
  u32("feed_forward_length", arch_experts_n_ff_wide(hp.arch) && hp.is_moe() ? hp.n_ff_exp : hp.n_ff);
  u32("attention.head_count", hp.n_head);
  u32("attention.head_count_kv", hp.n_head_kv);
  u32("attention.key_length", hp.head_dim);
  u32("attention.value_length", hp.head_dim);
  u32("rope.dimension_count", hp.rot_dims());
  f32("rope.freq_base", hp.rope_theta);
  f32(arch_is_cohere(hp.arch) ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon", hp.rms_eps);
  if (hp.is_moe()) {
    u32("expert_count", hp.n_expert);
    u32("expert_used_count", hp.n_expert_used);
    if (!arch_experts_n_ff_wide(hp.arch)) u32("expert_feed_forward_length", hp.n_ff_exp);
  }
  if (hp.arch == Arch::qwen2moe || (hp.n_ff_shared > 0 && hp.arch != Arch::llama4))
    u32("expert_shared_feed_forward_length", hp.n_ff_shared);
  if (hp.arch == Arch::llama4) u32("interleave_moe_layer_step", hp.n_moe_layer_step);
  if (hp.arch == Arch::glm4moe) {
    u32("expert_shared_count", hp.n_expert_shared);
    u32("leading_dense_block_count", hp.n_layer_dense_lead);
    f32("expert_weights_scale", hp.expert_weights_scale);
    w.set(a + ".expert_weights_norm", Value::boolean(hp.expert_weights_norm));
    u32("expert_gating_func", hp.expert_gating == ExpertGating::softmax ? 1 : 2);  // llama.cpp's numbering
    u32("nextn_predict_layers", hp.n_layer_nextn);
  }
  if (hp.arch == Arch::ernie4_5_moe) {  // experts in every layer past the dense ones (llama.cpp's loader)
    u32("leading_dense_block_count", hp.n_layer_dense_lead);
    u32("interleave_moe_layer_step", 1);
  }
  if (hp.rope_scaling != RopeScaling::none) {
    w.set(a + ".rope.scaling.type", Value::string(rope_scaling_name(hp.rope_scaling)));
    f32("rope.scaling.factor", 1.0f / hp.rope_freq_scale);
  }
  if (hp.n_ctx_orig > 0) u32("rope.scaling.original_context_length", hp.n_ctx_orig);
  if (hp.rope_attn_factor != 1.0f) f32("rope.scaling.attn_factor", hp.rope_attn_factor);
  if (hp.arch == Arch::mistral3) {
    if (hp.rope_scaling == RopeScaling::yarn) {
      f32("rope.scaling.yarn_beta_fast", hp.yarn_beta_fast);
      f32("rope.scaling.yarn_beta_slow", hp.yarn_beta_slow);
    }
    if (hp.yarn_log_mul != 0.0f) f32("rope.scaling.yarn_log_multiplier", hp.yarn_log_mul);
    if (hp.attn_temp_scale != 0.0f) f32("attention.temperature_scale", hp.attn_temp_scale);
  }
  if (hp.n_swa > 0) u32("attention.sliding_window", hp.n_swa);
  if ((hp.arch == Arch::gpt_oss || hp.arch == Arch::llama4) && hp.rope_theta_swa != hp.rope_theta)
    f32("rope.freq_base_swa", hp.rope_theta_swa);
  if (hp.arch == Arch::olmo2 && hp.n_swa > 0) u32("attention.sliding_window_pattern", hp.swa_period);
  if (hp.arch == Arch::gemma2) {
    f32("attn_logit_softcapping", hp.attn_softcap);
    f32("final_logit_softcapping", hp.final_softcap);
  }
  if (arch_is_cohere(hp.arch)) f32("logit_scale", hp.logit_scale);
  if (arch_is_granite(hp.arch)) {
    f32("logit_scale", hp.logit_scale);
    if (hp.embedding_scale != 0.0f) f32("embedding_scale", hp.embedding_scale);
    if (hp.residual_scale != 0.0f) f32("residual_scale", hp.residual_scale);
    if (hp.attention_scale != 0.0f) f32("attention.scale", hp.attention_scale);
  }
}

namespace {

// An integer key that may also be a per-layer array (llama.cpp accepts both); arrays must be
// uniform since loom's layers all have the same shape.
std::optional<int64_t> find_layer_int(const gguf::File& f, const std::string& key) {
  const gguf::Value* v = f.find(key);
  if (!v) return std::nullopt;
  if (v->type == gguf::ValueType::ARRAY && gguf::is_integer_type(v->array_type)) {
    LOOM_CHECK(!v->ints.empty(), invalid_input, "{}: '{}' is an empty array", f.path(), key);
    for (int64_t x : v->ints)
      LOOM_CHECK(x == v->ints[0], unsupported, "{}: '{}' differs between layers, which loom does not support",
                 f.path(), key);
    return v->ints[0];
  }
  return f.find_int(key);
}

// A key llama.cpp requires: its integer (or uniform per-layer array) or float value, else
// invalid_input naming it.
int64_t required_int(const gguf::File& f, const std::string& key) {
  std::optional<int64_t> v = find_layer_int(f, key);
  LOOM_CHECK(v.has_value(), invalid_input, "{}: missing {}", f.path(), key);
  return *v;
}
double required_float(const gguf::File& f, const std::string& key) {
  LOOM_CHECK(f.find(key) != nullptr, invalid_input, "{}: missing {}", f.path(), key);
  return f.get_float(key);
}

// rope.scaling.*, the sliding window and soft-capping, with each architecture's defaults as
// llama.cpp's loader sets them.
void read_arch_features(const gguf::File& f, const std::string& a, HParams& hp) {
  const std::string scaling = f.find_string(a + "rope.scaling.type").value_or("linear");
  const double factor = f.find_float(a + "rope.scaling.factor").value_or(
      f.find_float(a + "rope.scale_linear").value_or(0.0));
  if (scaling == "none") {
    hp.rope_scaling = RopeScaling::none;
  } else if (scaling == "linear") {
    hp.rope_scaling = factor != 0.0 ? RopeScaling::linear : RopeScaling::none;
  } else if (scaling == "yarn") {
    hp.rope_scaling = RopeScaling::yarn;
  } else {
    fail(ErrorKind::unsupported, "{}: RoPE scaling type '{}' is not supported (none, linear, yarn)", f.path(),
         scaling);
  }
  LOOM_CHECK(std::isfinite(factor) && factor >= 0, invalid_input, "{}: {}rope.scaling.factor = {} is not usable",
             f.path(), a, factor);
  hp.rope_freq_scale = hp.rope_scaling != RopeScaling::none && factor != 0.0 ? (float)(1.0 / factor) : 1.0f;
  hp.n_ctx_orig = f.find_int(a + "rope.scaling.original_context_length").value_or(0);
  hp.rope_attn_factor = (float)f.find_float(a + "rope.scaling.attn_factor").value_or(1.0);
  hp.rope_theta_swa = hp.rope_theta;
  hp.rope_freq_scale_swa = hp.rope_freq_scale;
  const std::optional<int64_t> swa = find_layer_int(f, a + "attention.sliding_window");
  switch (hp.arch) {
    case Arch::gemma2:
      hp.n_swa = swa.value_or(4096);
      hp.swa_period = 2;
      hp.attn_softcap = (float)f.find_float(a + "attn_logit_softcapping").value_or(50.0);
      hp.final_softcap = (float)f.find_float(a + "final_logit_softcapping").value_or(30.0);
      break;
    case Arch::gemma3:
      LOOM_CHECK(swa.has_value(), invalid_input, "{}: missing {}attention.sliding_window", f.path(), a);
      hp.n_swa = *swa;
      hp.swa_period = 6;
      hp.rope_theta_swa = 10000.0f;  // fixed by llama.cpp; the global layers alone are scaled
      hp.rope_freq_scale_swa = 1.0f;
      break;
    case Arch::gpt_oss:
      LOOM_CHECK(swa.has_value(), invalid_input, "{}: missing {}attention.sliding_window", f.path(), a);
      hp.n_swa = *swa;
      hp.swa_period = find_layer_int(f, a + "attention.sliding_window_pattern").value_or(2);
      hp.rope_theta_swa = (float)f.find_float(a + "rope.freq_base_swa").value_or(hp.rope_theta);
      break;
    case Arch::command_r:  // llama.cpp: logit_scale required (0: not applied), no window
      hp.logit_scale = (float)required_float(f, a + "logit_scale");
      hp.n_swa = 0;
      hp.swa_period = 0;
      break;
    case Arch::cohere2:  // llama.cpp: the window required, three local layers per global one
      LOOM_CHECK(swa.has_value(), invalid_input, "{}: missing {}attention.sliding_window", f.path(), a);
      hp.n_swa = *swa;
      hp.swa_period = 4;
      hp.logit_scale = (float)required_float(f, a + "logit_scale");
      break;
    case Arch::olmo2:  // OLMo 3: a window turns on 3 local layers of 4 (or the pattern's), rotating unscaled
      // with the global base (llama.cpp's graph reads rope.freq_base_swa but rotates with freq_base)
      hp.n_swa = swa.value_or(0);
      hp.swa_period = hp.n_swa > 0 ? find_layer_int(f, a + "attention.sliding_window_pattern").value_or(4) : 0;
      hp.rope_freq_scale_swa = 1.0f;
      break;
    case Arch::exaone4:  // llama.cpp: windows with 64 layers only (EXAONE 4.0 32B), 4096 wide unless the
      // file says, three local layers of four; elsewhere a window key is not applied
      hp.n_swa = swa.value_or(hp.n_layer == 64 ? 4096 : 0);
      hp.swa_period = hp.n_layer == 64 ? 4 : 0;
      break;
    case Arch::mistral3:  // YaRN's ramp ends and magnitude multiplier, the attention temperature (optional)
      hp.yarn_beta_fast = (float)f.find_float(a + "rope.scaling.yarn_beta_fast").value_or(32.0);
      hp.yarn_beta_slow = (float)f.find_float(a + "rope.scaling.yarn_beta_slow").value_or(1.0);
      hp.yarn_log_mul = (float)f.find_float(a + "rope.scaling.yarn_log_multiplier").value_or(0.0);
      hp.attn_temp_scale = (float)f.find_float(a + "attention.temperature_scale").value_or(0.0);
      hp.n_swa = swa.value_or(0);  // not applied, as in llama
      hp.swa_period = 0;
      break;
    case Arch::llama4:  // llama.cpp: the chunks, the layers without RoPE and the temperature are fixed; a
      // window key of 0 would turn the chunks off, and llama.cpp aborts on such a file
      LOOM_CHECK(!swa || *swa != 0, unsupported,
                 "{}: {}attention.sliding_window = 0 (no chunked attention) is not supported (llama.cpp aborts on it)",
                 f.path(), a);
      set_llama4_fixed(hp);
      hp.swa_period = find_layer_int(f, a + "attention.sliding_window_pattern").value_or(4);
      hp.rope_theta_swa = (float)f.find_float(a + "rope.freq_base_swa").value_or(hp.rope_theta);
      break;
    case Arch::smollm3:  // fixed by llama.cpp's loader (no key)
      hp.n_no_rope_layer_step = 4;
      hp.n_swa = 0;
      hp.swa_period = 0;
      break;
    case Arch::granite:
    case Arch::granitemoe: {
      // llama.cpp: logit_scale required, the others 0 (not applied) when absent; RoPE switched
      // off by rope.scaling.finetuned = false, which loom does not support
      hp.logit_scale = (float)required_float(f, a + "logit_scale");
      hp.embedding_scale = (float)f.find_float(a + "embedding_scale").value_or(0.0);
      hp.residual_scale = (float)f.find_float(a + "residual_scale").value_or(0.0);
      hp.attention_scale = (float)f.find_float(a + "attention.scale").value_or(0.0);
      const gguf::Value* finetuned = f.find(a + "rope.scaling.finetuned");
      LOOM_CHECK(!finetuned || f.get_bool(a + "rope.scaling.finetuned"), unsupported,
                 "{}: {}rope.scaling.finetuned = false (no RoPE) is not supported", f.path(), a);
      hp.n_swa = 0;
      hp.swa_period = 0;
      break;
    }
    default:  // llama (Mistral) and phi3 carry a window llama.cpp does not apply: kept for info only
      hp.n_swa = swa.value_or(0);
      hp.swa_period = 0;
      break;
  }
}

// glm4moe: shared experts, leading dense layers and the router's keys as llama.cpp requires them
// (expert_shared_count and expert_weights_scale; the gating sigmoid unless the file says softmax).
void read_glm4moe_router(const gguf::File& f, const std::string& a, HParams& hp) {
  hp.n_expert_shared = required_int(f, a + "expert_shared_count");
  hp.n_layer_dense_lead = f.find_int(a + "leading_dense_block_count").value_or(0);
  hp.expert_weights_scale = (float)required_float(f, a + "expert_weights_scale");
  hp.expert_weights_norm = f.find(a + "expert_weights_norm") && f.get_bool(a + "expert_weights_norm");
  const int64_t gating = f.find_int(a + "expert_gating_func").value_or(0);
  LOOM_CHECK(gating == 0 || gating == 1 || gating == 2, unsupported,
             "{}: {}expert_gating_func = {} is not supported (1 softmax, 2 sigmoid)", f.path(), a, gating);
  hp.expert_gating = gating == 1 ? ExpertGating::softmax : ExpertGating::sigmoid;
  if (hp.n_layer_dense_lead > 0)
    LOOM_CHECK(hp.n_ff > 0, invalid_input, "{}: missing {}feed_forward_length for the leading dense layers", f.path(),
               a);
  // M-RoPE (GLM-4.5V's sections) is the vision models' position scheme
  if (const gguf::Value* sec = f.find(a + "rope.dimension_sections"); sec && sec->type == gguf::ValueType::ARRAY)
    for (int64_t x : sec->ints)
      LOOM_CHECK(x == 0, unsupported, "{}: {}rope.dimension_sections (M-RoPE) is not supported", f.path(), a);
  hp.qk_norm = f.find_tensor("blk.0.attn_q_norm.weight") != nullptr;
}

// ernie4_5-moe: the expert width, the leading dense layers and the MoE layer step as llama.cpp
// requires them. Its loader puts experts in every layer past the dense ones while its graph skips
// layers the step leaves out, so only a step of 1 runs there.
void read_ernie_moe_layers(const gguf::File& f, const std::string& a, HParams& hp) {
  hp.n_ff_exp = required_int(f, a + "expert_feed_forward_length");
  hp.n_layer_dense_lead = required_int(f, a + "leading_dense_block_count");
  const int64_t step = required_int(f, a + "interleave_moe_layer_step");
  LOOM_CHECK(step == 1, unsupported,
             "{}: {}interleave_moe_layer_step = {} is not supported (dense layers between MoE layers; llama.cpp loads "
             "step 1 only)",
             f.path(), a, step);
  if (hp.n_layer_dense_lead > 0)
    LOOM_CHECK(hp.n_ff > 0, invalid_input, "{}: missing {}feed_forward_length for the leading dense layers", f.path(),
               a);
}

// llama4: the expert width and the MoE layer step required; a shared expert as wide as a routed one in
// every MoE layer; dense layers between them feed_forward_length wide.
void read_llama4_moe_layers(const gguf::File& f, const std::string& a, HParams& hp) {
  hp.n_ff_exp = required_int(f, a + "expert_feed_forward_length");
  hp.n_moe_layer_step = required_int(f, a + "interleave_moe_layer_step");
  LOOM_CHECK(hp.n_moe_layer_step > 0, unsupported,
             "{}: {}interleave_moe_layer_step = 0 (a llama4 without MoE layers) is not supported", f.path(), a);
  hp.n_expert_shared = 1;
  hp.n_ff_shared = hp.n_ff_exp;
  if (hp.n_moe_layer_step > 1)
    LOOM_CHECK(hp.n_ff > 0, invalid_input, "{}: missing {}feed_forward_length for the dense layers", f.path(), a);
}

}  // namespace

HParams read_hparams(const gguf::File& f) {
  const std::optional<std::string> name = f.find_string("general.architecture");
  LOOM_CHECK(name.has_value(), invalid_input, "{}: missing general.architecture", f.path());
  const std::optional<Arch> arch = arch_from_name(*name);
  LOOM_CHECK(arch.has_value(), invalid_input, "{}: unknown architecture '{}' (loom supports {})", f.path(), *name,
             arch_names());
  HParams hp;
  hp.arch = *arch;
  const std::string a = *name + ".";
  auto required = [&](const char* key) { return required_int(f, a + key); };
  hp.n_ctx_train = required("context_length");
  hp.n_embd = required("embedding_length");
  hp.n_layer = required("block_count");
  if (hp.arch == Arch::glm4moe) {  // the multi-token-prediction layers are counted in block_count
    hp.n_layer_nextn = f.find_int(a + "nextn_predict_layers").value_or(0);
    LOOM_CHECK(hp.n_layer_nextn >= 0 && hp.n_layer_nextn < hp.n_layer, invalid_input,
               "{}: {}nextn_predict_layers = {} must be below block_count {}", f.path(), a, hp.n_layer_nextn,
               hp.n_layer);
    hp.n_layer -= hp.n_layer_nextn;
  }
  hp.n_head = required("attention.head_count");
  hp.n_head_kv = find_layer_int(f, a + "attention.head_count_kv").value_or(hp.n_head);
  LOOM_CHECK(hp.n_head > 0, invalid_input, "{}: {}attention.head_count = {} must be positive", f.path(), a, hp.n_head);
  if (auto k = f.find_int(a + "attention.key_length")) {
    hp.head_dim = *k;
  } else {
    LOOM_CHECK(hp.n_embd % hp.n_head == 0, invalid_input,
               "{}: embedding_length {} is not a multiple of head_count {} and key_length is missing", f.path(),
               hp.n_embd, hp.n_head);
    hp.head_dim = hp.n_embd / hp.n_head;
  }
  const int64_t v_len = f.find_int(a + "attention.value_length").value_or(hp.head_dim);
  LOOM_CHECK(v_len == hp.head_dim, unsupported, "{}: key_length {} != value_length {} is not supported", f.path(),
             hp.head_dim, v_len);
  const int64_t rope_dims = f.find_int(a + "rope.dimension_count").value_or(hp.head_dim);
  // Partial rotary embeddings are phi3's (Phi-4-mini: 96 of 128 dims) and GLM's (half of each head);
  // llama.cpp's other graphs loom has assert whole heads.
  LOOM_CHECK(rope_dims > 0 && rope_dims <= hp.head_dim && rope_dims % 2 == 0, invalid_input,
             "{}: {}rope.dimension_count = {} must be even and in [2, key_length {}]", f.path(), a, rope_dims,
             hp.head_dim);
  LOOM_CHECK(rope_dims == hp.head_dim || arch_partial_rope(hp.arch), invalid_input,
             "{}: {}rope.dimension_count {} != key_length {}: only phi3, glm4 and glm4moe rotate part of each head",
             f.path(), a, rope_dims, hp.head_dim);
  hp.n_rot = rope_dims == hp.head_dim ? 0 : rope_dims;
  hp.rms_eps = (float)required_float(
      f, a + (arch_is_cohere(hp.arch) ? "attention.layer_norm_epsilon" : "attention.layer_norm_rms_epsilon"));
  hp.rope_theta = (float)f.find_float(a + "rope.freq_base").value_or(10000.0);
  hp.n_expert = find_layer_int(f, a + "expert_count").value_or(0);
  if (arch_is_moe(hp.arch)) {
    hp.n_ff = find_layer_int(f, a + "feed_forward_length").value_or(0);
    hp.n_expert = required("expert_count");
    hp.n_expert_used = required("expert_used_count");
    hp.n_ff_exp = f.find_int(a + "expert_feed_forward_length").value_or(0);
    if (hp.n_ff_exp == 0 && hp.n_expert_used > 0) hp.n_ff_exp = hp.n_ff / hp.n_expert_used;
    if (arch_experts_n_ff_wide(hp.arch)) {  // granitemoe, olmoe
      hp.n_ff = required("feed_forward_length");
      hp.n_ff_exp = hp.n_ff;
    }
    if (hp.arch == Arch::ernie4_5_moe) read_ernie_moe_layers(f, a, hp);
    if (hp.arch == Arch::llama4) read_llama4_moe_layers(f, a, hp);
    if (hp.arch == Arch::granitemoe || hp.arch == Arch::ernie4_5_moe) {  // a shared expert where its width is given
      hp.n_ff_shared = f.find_int(a + "expert_shared_feed_forward_length").value_or(0);
      hp.n_expert_shared = hp.n_ff_shared > 0 ? 1 : 0;
    }
    hp.expert_weights_norm = !arch_expert_weights_raw(hp.arch);  // glm4moe's file says (below)
    if (hp.arch == Arch::glm4moe) read_glm4moe_router(f, a, hp);
    if (hp.arch == Arch::qwen2moe) {  // llama.cpp: the shared expert n_ff wide unless the key says
      hp.n_expert_shared = 1;
      hp.n_ff_shared = f.find_int(a + "expert_shared_feed_forward_length").value_or(0);
      if (hp.n_ff_shared == 0) hp.n_ff_shared = hp.n_ff;
    }
  } else if (arch_experts_optional(hp.arch) && hp.n_expert > 0) {  // Mixtral: experts of feed_forward_length
    hp.n_expert_used = required("expert_used_count");
    hp.n_ff = required("feed_forward_length");
    hp.n_ff_exp = hp.n_ff;
  } else {
    hp.n_ff = required("feed_forward_length");
  }
  if (auto v = f.find_int(a + "vocab_size")) {
    hp.n_vocab = *v;
  } else if (const gguf::Value* tokens = f.find("tokenizer.ggml.tokens"); tokens && tokens->type == gguf::ValueType::ARRAY) {
    hp.n_vocab = (int64_t)tokens->array_size();
  } else if (const gguf::TensorInfo* emb = f.find_tensor("token_embd.weight")) {
    hp.n_vocab = emb->ne[1];
  } else {
    fail(ErrorKind::invalid_input, "{}: cannot tell the vocabulary size (no {}vocab_size, token list or token_embd)",
         f.path(), a);
  }
  read_arch_features(f, a, hp);
  // Cohere's output is token_embd whatever the file holds (an output.weight is a tensor too many)
  hp.tied_embeddings = arch_is_cohere(hp.arch) || (!f.tensors().empty() && f.find_tensor("output.weight") == nullptr);
  hp.rope_freqs = arch_reads_rope_freqs(hp.arch) && f.find_tensor("rope_freqs.weight") != nullptr;
  hp.rope_long_short = hp.arch == Arch::phi3 && f.find_tensor("rope_factors_long.weight") != nullptr;
  try {
    validate_hparams(hp);
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("{}: {}", f.path(), e.what()));
  }
  return hp;
}

}  // namespace loom
