// Architecture tables: presets (tiny/small for tests, real shapes for planning), hyper-parameter
// validation, the per-architecture tensor list, and the GGUF keys for hyper-parameters
// (written as llama.cpp's converters do, read back with llama.cpp's defaults).
#include "loom/model/arch.h"

#include <fmt/format.h>

#include <cmath>

#include "loom/core/error.h"
#include "loom/gguf/gguf.h"

namespace loom {

const char* arch_name(Arch arch) {
  switch (arch) {
    case Arch::llama: return "llama";
    case Arch::qwen2: return "qwen2";
    case Arch::qwen3: return "qwen3";
    case Arch::qwen3moe: return "qwen3moe";
  }
  return "?";
}

std::optional<Arch> arch_from_name(std::string_view name) {
  for (Arch a : {Arch::llama, Arch::qwen2, Arch::qwen3, Arch::qwen3moe})
    if (name == arch_name(a)) return a;
  return std::nullopt;
}

bool arch_is_moe(Arch arch) { return arch == Arch::qwen3moe; }
bool arch_has_qk_norm(Arch arch) { return arch == Arch::qwen3 || arch == Arch::qwen3moe; }
bool arch_has_qkv_bias(Arch arch) { return arch == Arch::qwen2; }
bool arch_rope_neox(Arch arch) { return arch != Arch::llama; }

namespace {

HParams tiny(Arch arch) {
  HParams hp;
  hp.arch = arch;
  hp.n_layer = 2;
  hp.n_embd = 256;
  hp.n_head = 8;
  hp.n_head_kv = 4;
  hp.head_dim = 32;
  hp.n_ff = 512;
  if (arch_is_moe(arch)) {
    hp.n_expert = 4;
    hp.n_expert_used = 2;
    hp.n_ff_exp = 128;
  }
  hp.n_vocab = 384;  // room for the 256 byte tokens of the default vocabulary plus specials
  hp.n_ctx_train = 512;
  hp.rms_eps = arch == Arch::llama ? 1e-5f : 1e-6f;
  hp.rope_theta = 10000.0f;
  return hp;
}

// ~300M parameters, llama-like proportions (291M for llama; the MoE variant is ~370M).
HParams small(Arch arch) {
  HParams hp;
  hp.arch = arch;
  hp.n_layer = 20;
  hp.n_embd = 1024;
  hp.n_head = 16;
  hp.n_head_kv = 4;
  hp.head_dim = 64;
  hp.n_ff = 2816;
  if (arch_is_moe(arch)) {
    hp.n_expert = 8;
    hp.n_expert_used = 2;
    hp.n_ff_exp = 512;
  }
  hp.n_vocab = 32000;
  hp.n_ctx_train = 2048;
  hp.rms_eps = arch == Arch::llama ? 1e-5f : 1e-6f;
  hp.rope_theta = arch == Arch::llama ? 10000.0f : 1000000.0f;
  return hp;
}

struct RealPreset {
  const char* name;
  Arch arch;
  HParams (*make)();
};

HParams llama3(int64_t n_layer, int64_t n_embd, int64_t n_head, int64_t n_ff) {
  HParams hp;
  hp.arch = Arch::llama;
  hp.n_layer = n_layer;
  hp.n_embd = n_embd;
  hp.n_head = n_head;
  hp.n_head_kv = 8;
  hp.head_dim = 128;
  hp.n_ff = n_ff;
  hp.n_vocab = 128256;
  hp.n_ctx_train = 8192;
  hp.rms_eps = 1e-5f;
  hp.rope_theta = 500000.0f;
  return hp;
}

HParams qwen3_8b() {
  HParams hp;
  hp.arch = Arch::qwen3;
  hp.n_layer = 36;
  hp.n_embd = 4096;
  hp.n_head = 32;
  hp.n_head_kv = 8;
  hp.head_dim = 128;
  hp.n_ff = 12288;
  hp.n_vocab = 151936;
  hp.n_ctx_train = 40960;
  hp.rms_eps = 1e-6f;
  hp.rope_theta = 1000000.0f;
  return hp;
}

HParams qwen3_30b_a3b() {
  HParams hp;
  hp.arch = Arch::qwen3moe;
  hp.n_layer = 48;
  hp.n_embd = 2048;
  hp.n_head = 32;
  hp.n_head_kv = 4;
  hp.head_dim = 128;
  hp.n_ff = 6144;
  hp.n_expert = 128;
  hp.n_expert_used = 8;
  hp.n_ff_exp = 768;
  hp.n_vocab = 151936;
  hp.n_ctx_train = 40960;
  hp.rms_eps = 1e-6f;
  hp.rope_theta = 1000000.0f;
  return hp;
}

const RealPreset kRealPresets[] = {
    {"llama-8b", Arch::llama, [] { return llama3(32, 4096, 32, 14336); }},
    {"llama-70b", Arch::llama, [] { return llama3(80, 8192, 64, 28672); }},
    {"qwen3-8b", Arch::qwen3, qwen3_8b},
    {"qwen3-30b-a3b", Arch::qwen3moe, qwen3_30b_a3b},
};

}  // namespace

std::vector<std::string> preset_names(Arch arch) {
  std::vector<std::string> names = {"tiny", "small"};
  for (const RealPreset& p : kRealPresets)
    if (p.arch == arch) names.push_back(p.name);
  return names;
}

HParams preset_hparams(Arch arch, std::string_view name) {
  if (name == "tiny") return tiny(arch);
  if (name == "small") return small(arch);
  for (const RealPreset& p : kRealPresets) {
    if (name != p.name) continue;
    LOOM_CHECK(p.arch == arch, usage, "preset '{}' is a {} model, not {} (use --arch {})", name, arch_name(p.arch),
               arch_name(arch), arch_name(p.arch));
    return p.make();
  }
  fail(ErrorKind::usage, "unknown preset '{}' for {} (choose from: {})", name, arch_name(arch),
       fmt::join(preset_names(arch), ", "));
}

void validate_hparams(const HParams& hp) {
  const char* a = arch_name(hp.arch);
  auto in_range = [&](const char* what, int64_t v, int64_t lo, int64_t hi) {
    LOOM_CHECK(v >= lo && v <= hi, invalid_input, "{}: {} = {} is out of range [{}, {}]", a, what, v, lo, hi);
  };
  in_range("n_layer", hp.n_layer, 1, 4096);
  in_range("n_embd", hp.n_embd, 1, 1 << 20);
  in_range("n_head", hp.n_head, 1, 1 << 14);
  in_range("n_head_kv", hp.n_head_kv, 1, hp.n_head);
  LOOM_CHECK(hp.n_head % hp.n_head_kv == 0, invalid_input, "{}: n_head = {} is not a multiple of n_head_kv = {}", a,
             hp.n_head, hp.n_head_kv);
  in_range("head_dim", hp.head_dim, 1, 1 << 14);
  in_range("n_vocab", hp.n_vocab, 1, 1 << 24);
  in_range("n_ctx_train", hp.n_ctx_train, 1, 1 << 26);
  if (arch_is_moe(hp.arch)) {
    in_range("n_ff", hp.n_ff, 0, 1 << 22);
    in_range("n_expert", hp.n_expert, 1, 1 << 12);
    in_range("n_expert_used", hp.n_expert_used, 1, hp.n_expert);
    in_range("n_ff_exp", hp.n_ff_exp, 1, 1 << 20);
  } else {
    in_range("n_ff", hp.n_ff, 1, 1 << 22);
    LOOM_CHECK(hp.n_expert == 0 && hp.n_expert_used == 0 && hp.n_ff_exp == 0, invalid_input,
               "{}: a dense architecture has no experts (n_expert = {}, n_expert_used = {}, n_ff_exp = {})", a,
               hp.n_expert, hp.n_expert_used, hp.n_ff_exp);
  }
  LOOM_CHECK(std::isfinite(hp.rms_eps) && hp.rms_eps > 0 && hp.rms_eps < 1, invalid_input,
             "{}: rms_eps = {} must be in (0, 1)", a, hp.rms_eps);
  LOOM_CHECK(std::isfinite(hp.rope_theta) && hp.rope_theta > 0, invalid_input, "{}: rope_theta = {} must be positive",
             a, hp.rope_theta);
  // Each range above keeps every product below 2^63; cap the whole model at 2^46 parameters.
  double total = 0;
  for (const TensorSpec& t : arch_tensors(hp)) total += (double)t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3];
  LOOM_CHECK(total <= std::ldexp(1.0, 46), invalid_input, "{}: {:.3g} parameters is absurd", a, total);
}

const char* tensor_role_name(TensorRole role) {
  switch (role) {
    case TensorRole::token_embd: return "token_embd";
    case TensorRole::output_norm: return "output_norm";
    case TensorRole::output: return "output";
    case TensorRole::attn_norm: return "attn_norm";
    case TensorRole::attn_q: return "attn_q";
    case TensorRole::attn_k: return "attn_k";
    case TensorRole::attn_v: return "attn_v";
    case TensorRole::attn_output: return "attn_output";
    case TensorRole::attn_q_bias: return "attn_q_bias";
    case TensorRole::attn_k_bias: return "attn_k_bias";
    case TensorRole::attn_v_bias: return "attn_v_bias";
    case TensorRole::attn_q_norm: return "attn_q_norm";
    case TensorRole::attn_k_norm: return "attn_k_norm";
    case TensorRole::ffn_norm: return "ffn_norm";
    case TensorRole::ffn_gate: return "ffn_gate";
    case TensorRole::ffn_up: return "ffn_up";
    case TensorRole::ffn_down: return "ffn_down";
    case TensorRole::ffn_gate_inp: return "ffn_gate_inp";
    case TensorRole::ffn_gate_exps: return "ffn_gate_exps";
    case TensorRole::ffn_up_exps: return "ffn_up_exps";
    case TensorRole::ffn_down_exps: return "ffn_down_exps";
  }
  return "?";
}

bool tensor_role_is_vector(TensorRole role) {
  switch (role) {
    case TensorRole::output_norm: case TensorRole::attn_norm: case TensorRole::ffn_norm:
    case TensorRole::attn_q_norm: case TensorRole::attn_k_norm:
    case TensorRole::attn_q_bias: case TensorRole::attn_k_bias: case TensorRole::attn_v_bias: return true;
    default: return false;
  }
}

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
  const int64_t n_q = hp.n_embd_q(), n_kv = hp.n_embd_kv();
  add("token_embd.weight", TensorRole::token_embd, -1, {hp.n_embd, hp.n_vocab});
  for (int il = 0; il < (int)hp.n_layer; ++il) {
    auto blk = [il](const char* what) { return fmt::format("blk.{}.{}", il, what); };
    add(blk("attn_norm.weight"), TensorRole::attn_norm, il, {hp.n_embd});
    add(blk("attn_q.weight"), TensorRole::attn_q, il, {hp.n_embd, n_q});
    add(blk("attn_k.weight"), TensorRole::attn_k, il, {hp.n_embd, n_kv});
    add(blk("attn_v.weight"), TensorRole::attn_v, il, {hp.n_embd, n_kv});
    if (arch_has_qkv_bias(hp.arch)) {
      add(blk("attn_q.bias"), TensorRole::attn_q_bias, il, {n_q});
      add(blk("attn_k.bias"), TensorRole::attn_k_bias, il, {n_kv});
      add(blk("attn_v.bias"), TensorRole::attn_v_bias, il, {n_kv});
    }
    if (arch_has_qk_norm(hp.arch)) {
      add(blk("attn_q_norm.weight"), TensorRole::attn_q_norm, il, {hp.head_dim});
      add(blk("attn_k_norm.weight"), TensorRole::attn_k_norm, il, {hp.head_dim});
    }
    add(blk("attn_output.weight"), TensorRole::attn_output, il, {n_q, hp.n_embd});
    add(blk("ffn_norm.weight"), TensorRole::ffn_norm, il, {hp.n_embd});
    if (arch_is_moe(hp.arch)) {
      add(blk("ffn_gate_inp.weight"), TensorRole::ffn_gate_inp, il, {hp.n_embd, hp.n_expert});
      add(blk("ffn_gate_exps.weight"), TensorRole::ffn_gate_exps, il, {hp.n_embd, hp.n_ff_exp, hp.n_expert});
      add(blk("ffn_down_exps.weight"), TensorRole::ffn_down_exps, il, {hp.n_ff_exp, hp.n_embd, hp.n_expert});
      add(blk("ffn_up_exps.weight"), TensorRole::ffn_up_exps, il, {hp.n_embd, hp.n_ff_exp, hp.n_expert});
    } else {
      add(blk("ffn_gate.weight"), TensorRole::ffn_gate, il, {hp.n_embd, hp.n_ff});
      add(blk("ffn_down.weight"), TensorRole::ffn_down, il, {hp.n_ff, hp.n_embd});
      add(blk("ffn_up.weight"), TensorRole::ffn_up, il, {hp.n_embd, hp.n_ff});
    }
  }
  add("output_norm.weight", TensorRole::output_norm, -1, {hp.n_embd});
  if (!hp.tied_embeddings) add("output.weight", TensorRole::output, -1, {hp.n_embd, hp.n_vocab});
  return out;
}

int64_t count_params(const HParams& hp) {
  int64_t total = 0;
  for (const TensorSpec& t : arch_tensors(hp)) total += t.nelements();
  return total;
}

void write_hparams(gguf::Writer& w, const HParams& hp) {
  using gguf::Value;
  validate_hparams(hp);
  const std::string a = arch_name(hp.arch);
  auto u32 = [&](const char* key, int64_t v) { w.set(a + "." + key, Value::u32((uint32_t)v)); };
  w.set("general.architecture", Value::string(a));
  u32("vocab_size", hp.n_vocab);
  u32("context_length", hp.n_ctx_train);
  u32("embedding_length", hp.n_embd);
  u32("block_count", hp.n_layer);
  u32("feed_forward_length", hp.n_ff);
  u32("attention.head_count", hp.n_head);
  u32("attention.head_count_kv", hp.n_head_kv);
  u32("attention.key_length", hp.head_dim);
  u32("attention.value_length", hp.head_dim);
  u32("rope.dimension_count", hp.head_dim);
  w.set(a + ".rope.freq_base", Value::f32(hp.rope_theta));
  w.set(a + ".attention.layer_norm_rms_epsilon", Value::f32(hp.rms_eps));
  if (arch_is_moe(hp.arch)) {
    u32("expert_count", hp.n_expert);
    u32("expert_used_count", hp.n_expert_used);
    u32("expert_feed_forward_length", hp.n_ff_exp);
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

}  // namespace

HParams read_hparams(const gguf::File& f) {
  const std::optional<std::string> name = f.find_string("general.architecture");
  LOOM_CHECK(name.has_value(), invalid_input, "{}: missing general.architecture", f.path());
  const std::optional<Arch> arch = arch_from_name(*name);
  LOOM_CHECK(arch.has_value(), invalid_input, "{}: unknown architecture '{}' (loom supports llama, qwen2, qwen3, qwen3moe)",
             f.path(), *name);
  HParams hp;
  hp.arch = *arch;
  const std::string a = *name + ".";
  auto required = [&](const char* key) {
    std::optional<int64_t> v = find_layer_int(f, a + key);
    LOOM_CHECK(v.has_value(), invalid_input, "{}: missing {}{}", f.path(), a, key);
    return *v;
  };
  hp.n_ctx_train = required("context_length");
  hp.n_embd = required("embedding_length");
  hp.n_layer = required("block_count");
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
  LOOM_CHECK(rope_dims == hp.head_dim, unsupported, "{}: partial rotary embeddings ({} of {} dims) are not supported",
             f.path(), rope_dims, hp.head_dim);
  hp.rms_eps = (float)f.get_float(a + "attention.layer_norm_rms_epsilon");
  hp.rope_theta = (float)f.find_float(a + "rope.freq_base").value_or(10000.0);
  if (arch_is_moe(hp.arch)) {
    hp.n_ff = find_layer_int(f, a + "feed_forward_length").value_or(0);
    hp.n_expert = required("expert_count");
    hp.n_expert_used = required("expert_used_count");
    hp.n_ff_exp = f.find_int(a + "expert_feed_forward_length").value_or(0);
    if (hp.n_ff_exp == 0 && hp.n_expert_used > 0) hp.n_ff_exp = hp.n_ff / hp.n_expert_used;
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
  hp.tied_embeddings = !f.tensors().empty() && f.find_tensor("output.weight") == nullptr;
  try {
    validate_hparams(hp);
  } catch (const Error& e) {
    throw Error(e.kind(), fmt::format("{}: {}", f.path(), e.what()));
  }
  return hp;
}

}  // namespace loom
