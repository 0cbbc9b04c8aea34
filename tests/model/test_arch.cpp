// Architectures and model files: preset shapes against the published parameter counts of the
// real models, tensor names/shapes per architecture, hyper-parameter keys (write, read back,
// llama.cpp defaults, rejection of bad values), the q4_k mix, the byte vocabulary and
// random-init files (determinism, N(0, 0.02), norms at 1).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

#include "gguf_test_util.h"
#include "loom/core/quants.h"
#include "loom/gguf/gguf.h"
#include "loom/model/arch.h"
#include "loom/model/forward.h"
#include "loom/model/layer_blocks.h"
#include "loom/model/model_file.h"

namespace loom {
namespace {

using gguf::Value;

TEST(Arch, PresetsMatchPublishedParameterCounts) {
  // Counts published with the models (Meta, Qwen model cards / safetensors metadata).
  EXPECT_EQ(count_params(preset_hparams(Arch::llama, "llama-8b")), 8030261248);
  EXPECT_EQ(count_params(preset_hparams(Arch::llama, "llama-70b")), 70553706496);
  EXPECT_EQ(count_params(preset_hparams(Arch::qwen3, "qwen3-8b")), 8190735360);
  EXPECT_EQ(count_params(preset_hparams(Arch::qwen3moe, "qwen3-30b-a3b")), 30532122624);
  const int64_t small = count_params(preset_hparams(Arch::llama, "small"));
  EXPECT_GT(small, 250000000);
  EXPECT_LT(small, 350000000);
}

TEST(Arch, PresetErrors) {
  EXPECT_THROW(preset_hparams(Arch::qwen3, "llama-8b"), Error);
  try {
    preset_hparams(Arch::llama, "huge");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(std::string(e.what()).find("llama-70b"), std::string::npos) << e.what();
  }
  for (Arch a : {Arch::llama, Arch::qwen2, Arch::qwen3, Arch::qwen3moe})
    for (const std::string& name : preset_names(a)) EXPECT_NO_THROW(validate_hparams(preset_hparams(a, name))) << name;
}

TEST(Arch, TensorListsFollowTheReferenceTable) {
  auto by_name = [](const HParams& hp) {
    std::map<std::string, TensorSpec> m;
    for (const TensorSpec& t : arch_tensors(hp)) m[t.name] = t;
    return m;
  };
  auto shape = [](const TensorSpec& t) { return std::vector<int64_t>(t.ne, t.ne + t.n_dims); };
  using V = std::vector<int64_t>;

  HParams q3 = preset_hparams(Arch::qwen3moe, "qwen3-30b-a3b");
  auto m = by_name(q3);
  EXPECT_EQ(m.size(), 3u + 48u * 12u);  // 2 norms, q/k/v/o, q/k norms, router, 3 expert tensors
  EXPECT_EQ(shape(m.at("token_embd.weight")), (V{2048, 151936}));
  EXPECT_EQ(shape(m.at("blk.47.attn_q.weight")), (V{2048, 4096}));
  EXPECT_EQ(shape(m.at("blk.0.attn_k.weight")), (V{2048, 512}));
  EXPECT_EQ(shape(m.at("blk.0.attn_output.weight")), (V{4096, 2048}));
  EXPECT_EQ(shape(m.at("blk.0.attn_q_norm.weight")), (V{128}));
  EXPECT_EQ(shape(m.at("blk.0.ffn_gate_inp.weight")), (V{2048, 128}));
  EXPECT_EQ(shape(m.at("blk.0.ffn_gate_exps.weight")), (V{2048, 768, 128}));
  EXPECT_EQ(shape(m.at("blk.0.ffn_down_exps.weight")), (V{768, 2048, 128}));
  EXPECT_EQ(m.at("blk.5.ffn_up_exps.weight").layer, 5);
  EXPECT_EQ(m.at("blk.5.ffn_up_exps.weight").role, TensorRole::ffn_up_exps);
  EXPECT_EQ(m.count("blk.0.ffn_gate.weight"), 0u);

  HParams q2 = preset_hparams(Arch::qwen2, "tiny");
  auto m2 = by_name(q2);
  EXPECT_EQ(shape(m2.at("blk.1.attn_q.bias")), (V{256}));
  EXPECT_EQ(shape(m2.at("blk.1.attn_k.bias")), (V{128}));
  EXPECT_EQ(m2.at("blk.1.attn_v.bias").role, TensorRole::attn_v_bias);
  EXPECT_EQ(m2.count("blk.0.attn_q_norm.weight"), 0u);

  HParams ll = preset_hparams(Arch::llama, "llama-8b");
  auto m3 = by_name(ll);
  EXPECT_EQ(m3.size(), 3u + 32u * 9u);
  EXPECT_EQ(shape(m3.at("blk.31.ffn_down.weight")), (V{14336, 4096}));
  EXPECT_EQ(shape(m3.at("output.weight")), (V{4096, 128256}));
  EXPECT_EQ(m3.at("output_norm.weight").layer, -1);
  ll.tied_embeddings = true;
  EXPECT_EQ(by_name(ll).count("output.weight"), 0u);
}

TEST(Arch, HParamsRoundTripThroughAFile) {
  test::ScratchDir dir("arch");
  for (const auto& [arch, preset] : std::vector<std::pair<Arch, const char*>>{
           {Arch::llama, "llama-70b"}, {Arch::qwen2, "small"}, {Arch::qwen3, "qwen3-8b"}, {Arch::qwen3moe, "qwen3-30b-a3b"}}) {
    SCOPED_TRACE(preset);
    const HParams hp = preset_hparams(arch, preset);
    gguf::Writer w;
    write_hparams(w, hp);
    w.write(dir.file("h.gguf"));
    auto f = gguf::File::open(dir.file("h.gguf"));
    const std::string a = arch_name(arch);
    EXPECT_EQ(f->get_string("general.architecture"), a);
    EXPECT_EQ(f->find(a + ".block_count")->type, gguf::ValueType::U32);
    EXPECT_EQ(f->find(a + ".rope.freq_base")->type, gguf::ValueType::F32);
    const HParams back = read_hparams(*f);
    EXPECT_EQ(back.arch, hp.arch);
    EXPECT_EQ(back.n_layer, hp.n_layer);
    EXPECT_EQ(back.n_embd, hp.n_embd);
    EXPECT_EQ(back.n_head, hp.n_head);
    EXPECT_EQ(back.n_head_kv, hp.n_head_kv);
    EXPECT_EQ(back.head_dim, hp.head_dim);
    EXPECT_EQ(back.n_ff, hp.n_ff);
    EXPECT_EQ(back.n_expert, hp.n_expert);
    EXPECT_EQ(back.n_expert_used, hp.n_expert_used);
    EXPECT_EQ(back.n_ff_exp, hp.n_ff_exp);
    EXPECT_EQ(back.n_vocab, hp.n_vocab);
    EXPECT_EQ(back.n_ctx_train, hp.n_ctx_train);
    EXPECT_EQ(back.rms_eps, hp.rms_eps);
    EXPECT_EQ(back.rope_theta, hp.rope_theta);
  }
}

gguf::Writer minimal_llama(const std::string& a = "llama") {
  gguf::Writer w;
  w.set("general.architecture", Value::string(a));
  w.set(a + ".context_length", Value::u32(4096));
  w.set(a + ".embedding_length", Value::u32(4096));
  w.set(a + ".block_count", Value::u32(32));
  w.set(a + ".feed_forward_length", Value::u32(11008));
  w.set(a + ".attention.head_count", Value::u32(32));
  w.set(a + ".attention.layer_norm_rms_epsilon", Value::f32(1e-6f));
  w.set("tokenizer.ggml.tokens", Value::string_array(std::vector<std::string>(32000, "x")));
  return w;
}

// What read_hparams makes of the file w writes.
HParams read_back(const gguf::Writer& w) {
  test::ScratchDir dir("arch");
  w.write(dir.file("m.gguf"));
  return read_hparams(*gguf::File::open(dir.file("m.gguf")));
}

TEST(Arch, ReadHParamsUsesLlamaCppDefaults) {
  test::ScratchDir dir("arch");
  minimal_llama().write(dir.file("m.gguf"));
  const HParams hp = read_hparams(*gguf::File::open(dir.file("m.gguf")));
  EXPECT_EQ(hp.n_head_kv, 32);      // head_count_kv defaults to head_count
  EXPECT_EQ(hp.head_dim, 128);      // n_embd / n_head
  EXPECT_EQ(hp.rope_theta, 10000.0f);
  EXPECT_EQ(hp.n_vocab, 32000);     // from the token list
  EXPECT_FLOAT_EQ(hp.rms_eps, 1e-6f);
}

void expect_read_error(gguf::Writer w, ErrorKind kind, std::string_view needle) {
  test::ScratchDir dir("arch");
  w.write(dir.file("m.gguf"));
  auto f = gguf::File::open(dir.file("m.gguf"));
  try {
    read_hparams(*f);
    ADD_FAILURE() << "accepted; expected " << needle;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("m.gguf"), std::string::npos) << e.what();
  }
}

TEST(Arch, ReadHParamsRejectsBadFiles) {
  gguf::Writer w = minimal_llama();
  w.set("general.architecture", Value::string("mamba"));
  expect_read_error(w, ErrorKind::invalid_input, "unknown architecture 'mamba'");

  w = minimal_llama();
  w.set("llama.block_count", Value::u32(0));
  expect_read_error(w, ErrorKind::invalid_input, "n_layer = 0");

  w = minimal_llama();
  w.set("llama.embedding_length", Value::u64(uint64_t(1) << 40));
  expect_read_error(w, ErrorKind::invalid_input, "out of range");

  w = minimal_llama();
  w.set("llama.attention.head_count_kv", Value::u32(5));
  expect_read_error(w, ErrorKind::invalid_input, "not a multiple of n_head_kv");

  w = minimal_llama();
  w.remove("llama.context_length");
  expect_read_error(w, ErrorKind::invalid_input, "missing llama.context_length");

  w = minimal_llama();
  w.set("llama.attention.layer_norm_rms_epsilon", Value::f32(NAN));
  expect_read_error(w, ErrorKind::invalid_input, "rms_eps");

  w = minimal_llama();
  w.set("llama.block_count", Value::string("32"));
  expect_read_error(w, ErrorKind::invalid_input, "llama.block_count");

  // partial rotary embeddings: phi3's only (llama.cpp's other graphs here assert whole heads);
  // never odd or past the head
  for (const std::string a : {"llama", "qwen2", "gemma2"}) {
    w = minimal_llama(a);
    w.set(a + ".rope.dimension_count", Value::u32(96));
    expect_read_error(w, ErrorKind::invalid_input, "only phi3, glm4 and glm4moe rotate part of each head");
  }
  for (uint32_t bad : {0u, 95u, 130u}) {
    w = minimal_llama("phi3");
    w.set("phi3.rope.dimension_count", Value::u32(bad));
    expect_read_error(w, ErrorKind::invalid_input, "rope.dimension_count");
  }
}

TEST(Arch, PartialRotaryEmbeddingsAreRead) {
  test::ScratchDir dir("arch");
  gguf::Writer w = minimal_llama("phi3");
  w.set("phi3.rope.dimension_count", Value::u32(96));
  w.write(dir.file("m.gguf"));
  const HParams read = read_hparams(*gguf::File::open(dir.file("m.gguf")));
  EXPECT_EQ(read.head_dim, 128);
  EXPECT_EQ(read.rot_dims(), 96);
  HParams hp = preset_hparams(Arch::phi3, "tiny");
  hp.n_rot = 24;  // the RoPE factors cover the rotated pairs only
  for (const TensorSpec& t : arch_tensors(hp)) {
    if (t.role == TensorRole::rope_factors_long || t.role == TensorRole::rope_factors_short) EXPECT_EQ(t.ne[0], 12);
  }
}

// glm4moe's keys as llama.cpp's loader reads them (GLM-4.5-Air's values).
gguf::Writer minimal_glm4moe() {
  gguf::Writer w = minimal_llama("glm4moe");
  const std::string a = "glm4moe.";
  w.set(a + "block_count", Value::u32(47));
  w.set(a + "attention.head_count", Value::u32(96));
  w.set(a + "attention.head_count_kv", Value::u32(8));
  w.set(a + "attention.key_length", Value::u32(128));
  w.set(a + "attention.value_length", Value::u32(128));
  w.set(a + "rope.dimension_count", Value::u32(64));
  w.set(a + "expert_count", Value::u32(128));
  w.set(a + "expert_used_count", Value::u32(8));
  w.set(a + "expert_feed_forward_length", Value::u32(1408));
  w.set(a + "expert_shared_count", Value::u32(1));
  w.set(a + "leading_dense_block_count", Value::u32(1));
  w.set(a + "expert_weights_scale", Value::f32(1.0f));
  w.set(a + "expert_weights_norm", Value::boolean(true));
  w.set(a + "expert_gating_func", Value::u32(2));
  w.set(a + "nextn_predict_layers", Value::u32(1));
  return w;
}

TEST(Arch, Glm4MoeKeysAreReadAsLlamaCppReadsThem) {
  test::ScratchDir dir("arch");
  minimal_glm4moe().write(dir.file("m.gguf"));
  const HParams hp = read_hparams(*gguf::File::open(dir.file("m.gguf")));
  EXPECT_EQ(hp.n_layer, 46);  // block_count counts the multi-token-prediction layer
  EXPECT_EQ(hp.n_layer_nextn, 1);
  EXPECT_EQ(hp.rot_dims(), 64);
  EXPECT_EQ(hp.n_layer_dense_lead, 1);
  EXPECT_EQ(hp.n_expert_shared, 1);
  EXPECT_EQ(hp.n_ff_shexp(), 1408);
  EXPECT_EQ(hp.expert_gating, ExpertGating::sigmoid);
  EXPECT_TRUE(hp.expert_weights_norm);
  EXPECT_FALSE(hp.qk_norm);  // no attn_q_norm tensor

  gguf::Writer w = minimal_glm4moe();  // llama.cpp: sigmoid when the key is absent, norm off
  w.remove("glm4moe.expert_gating_func");
  w.remove("glm4moe.expert_weights_norm");
  w.write(dir.file("d.gguf"));
  const HParams d = read_hparams(*gguf::File::open(dir.file("d.gguf")));
  EXPECT_EQ(d.expert_gating, ExpertGating::sigmoid);
  EXPECT_FALSE(d.expert_weights_norm);

  for (const char* key : {"expert_weights_scale", "expert_shared_count"}) {
    w = minimal_glm4moe();
    w.remove(std::string("glm4moe.") + key);
    expect_read_error(w, ErrorKind::invalid_input, key);
  }
  w = minimal_glm4moe();
  w.set("glm4moe.nextn_predict_layers", Value::u32(47));
  expect_read_error(w, ErrorKind::invalid_input, "nextn_predict_layers");
  w = minimal_glm4moe();
  w.set("glm4moe.expert_gating_func", Value::u32(3));
  expect_read_error(w, ErrorKind::unsupported, "expert_gating_func");
  w = minimal_glm4moe();
  w.set("glm4moe.rope.dimension_sections", Value::i32_array({8, 12, 12, 0}));
  expect_read_error(w, ErrorKind::unsupported, "M-RoPE");
  w = minimal_glm4moe();
  w.set("glm4moe.leading_dense_block_count", Value::u32(47));
  expect_read_error(w, ErrorKind::invalid_input, "n_layer_dense_lead");
  w = minimal_glm4moe();
  w.set("glm4moe.expert_weights_scale", Value::f32(0.0f));
  expect_read_error(w, ErrorKind::invalid_input, "expert_weights_scale");
}

// Cohere's keys as llama.cpp's loader reads them: a layer norm epsilon, logit_scale required,
// cohere2's window required with three local layers per global one, and only the local layers
// rotate; the output always token_embd.
gguf::Writer minimal_cohere(const std::string& a) {
  gguf::Writer w = minimal_llama(a);
  w.remove(a + ".attention.layer_norm_rms_epsilon");
  w.set(a + ".attention.layer_norm_epsilon", Value::f32(1e-5f));
  w.set(a + ".logit_scale", Value::f32(0.125f));
  if (a == "cohere2") w.set(a + ".attention.sliding_window", Value::u32(4096));
  return w;
}

TEST(Arch, CohereKeysAreReadAsLlamaCppReadsThem) {
  test::ScratchDir dir("arch");
  minimal_cohere("cohere2").write(dir.file("m.gguf"));
  const HParams hp = read_hparams(*gguf::File::open(dir.file("m.gguf")));
  EXPECT_FLOAT_EQ(hp.rms_eps, 1e-5f);
  EXPECT_FLOAT_EQ(hp.logit_multiplier(), 0.125f);
  EXPECT_EQ(hp.n_swa, 4096);
  EXPECT_TRUE(hp.tied_embeddings);
  for (int64_t il : {0, 1, 2}) EXPECT_TRUE(hp.is_swa_layer(il) && hp.rotates(il)) << il;
  EXPECT_FALSE(hp.is_swa_layer(3) || hp.rotates(3));  // the global layer: no window, no RoPE
  EXPECT_FALSE(hp.per_head_qk_norm());

  for (const std::string a : {"command-r", "cohere2"}) {
    gguf::Writer w = minimal_cohere(a);
    w.remove(a + ".logit_scale");
    expect_read_error(w, ErrorKind::invalid_input, "logit_scale");
    w = minimal_cohere(a);
    w.remove(a + ".attention.layer_norm_epsilon");
    expect_read_error(w, ErrorKind::invalid_input, "layer_norm_epsilon");
  }
  gguf::Writer w = minimal_cohere("cohere2");
  w.remove("cohere2.attention.sliding_window");
  expect_read_error(w, ErrorKind::invalid_input, "sliding_window");

  // Command R+ (64 layers): per-head q/k norm rows, no ffn_norm, no output.weight
  w = minimal_cohere("command-r");
  w.set("command-r.block_count", Value::u32(64));
  w.write(dir.file("p.gguf"));
  const HParams plus = read_hparams(*gguf::File::open(dir.file("p.gguf")));
  EXPECT_TRUE(plus.per_head_qk_norm());
  std::map<std::string, TensorSpec> m;
  for (const TensorSpec& t : arch_tensors(plus)) m[t.name] = t;
  EXPECT_EQ(m.at("blk.63.attn_q_norm.weight").ne[1], 32);
  EXPECT_EQ(m.at("blk.63.attn_k_norm.weight").ne[1], 32);
  EXPECT_EQ(m.count("blk.0.ffn_norm.weight"), 0u);
  EXPECT_EQ(m.count("output.weight"), 0u);
}

// EXAONE 4.0 as llama.cpp's loader reads it: sliding windows with 64 layers only (4096 wide unless
// the file says; three local layers of four, which alone rotate), a window key elsewhere not
// applied; post norms alone, per-head q/k norms, rope_freqs where the file has it.
TEST(Arch, Exaone4KeysAreReadAsLlamaCppReadsThem) {
  gguf::Writer w = minimal_llama("exaone4");
  w.set("exaone4.block_count", Value::u32(64));
  const HParams big = read_back(w);
  EXPECT_EQ(big.n_swa, 4096);
  EXPECT_TRUE(big.has_swa());
  for (int64_t il : {0, 1, 2, 60}) EXPECT_TRUE(big.is_swa_layer(il) && big.rotates(il)) << il;
  for (int64_t il : {3, 63}) EXPECT_FALSE(big.is_swa_layer(il) || big.rotates(il)) << il;

  w.set("exaone4.attention.sliding_window", Value::u32(128));
  EXPECT_EQ(read_back(w).n_swa, 128);

  w.set("exaone4.block_count", Value::u32(30));  // EXAONE 4.0 1.2B: the key is not applied
  const HParams small = read_back(w);
  EXPECT_FALSE(small.has_swa());
  for (int64_t il : {0, 3, 29}) EXPECT_TRUE(!small.is_swa_layer(il) && small.rotates(il)) << il;

  std::map<std::string, TensorSpec> m;
  HParams hp = preset_hparams(Arch::exaone4, "tiny");
  hp.rope_freqs = true;
  for (const TensorSpec& t : arch_tensors(hp)) m[t.name] = t;
  for (const char* absent : {"blk.0.attn_norm.weight", "blk.0.ffn_norm.weight"}) EXPECT_EQ(m.count(absent), 0u);
  EXPECT_EQ(m.at("blk.1.post_attention_norm.weight").role, TensorRole::attn_post_norm);
  EXPECT_EQ(m.at("blk.1.post_ffw_norm.weight").role, TensorRole::ffn_post_norm);
  EXPECT_EQ(m.at("blk.1.attn_q_norm.weight").ne[0], hp.head_dim);
  EXPECT_EQ(m.at("blk.1.attn_q_norm.weight").n_dims, 1);
  EXPECT_EQ(m.count("rope_freqs.weight"), 1u);

  hp.head_dim *= 2;  // llama.cpp's attn_output is {n_embd, n_embd}
  EXPECT_THROW(validate_hparams(hp), Error);
}

// Seed-OSS: a llama whose pre-FFN norm is named post_attention_norm, with q/k/v biases. Its
// attention.scale is not read (llama.cpp's seed_oss loader does not: scores stay 1/sqrt(head_dim)).
TEST(Arch, SeedOssTensorsAndScale) {
  const HParams hp = preset_hparams(Arch::seed_oss, "tiny");
  EXPECT_EQ(hp.n_embd_q(), 2 * hp.n_embd);
  std::map<std::string, TensorSpec> m;
  for (const TensorSpec& t : arch_tensors(hp)) m[t.name] = t;
  EXPECT_EQ(m.at("blk.0.post_attention_norm.weight").role, TensorRole::ffn_norm);
  EXPECT_EQ(m.count("blk.0.ffn_norm.weight"), 0u);
  EXPECT_EQ(m.at("blk.0.attn_q.bias").ne[0], hp.n_embd_q());
  EXPECT_EQ(m.at("blk.0.attn_output.weight").ne[0], hp.n_embd_q());

  gguf::Writer w = minimal_llama("seed_oss");
  w.set("seed_oss.attention.scale", Value::f32(0.0625f));
  const HParams read = read_back(w);
  EXPECT_FLOAT_EQ(read.attn_scale(), 1.0f / std::sqrt((float)read.head_dim));
}

// Ministral 3 as llama.cpp's mistral3 loader reads it: YaRN's ramp ends and log multiplier, the
// attention temperature (stepping once per original context). A llama file's keys are not read.
TEST(Arch, Mistral3KeysAreReadAsLlamaCppReadsThem) {
  gguf::Writer w = minimal_llama("mistral3");
  w.set("mistral3.rope.scaling.type", Value::string("yarn"));
  w.set("mistral3.rope.scaling.factor", Value::f32(16.0f));
  w.set("mistral3.rope.scaling.original_context_length", Value::u32(16384));
  w.set("mistral3.rope.scaling.yarn_beta_fast", Value::f32(8.0f));
  w.set("mistral3.rope.scaling.yarn_beta_slow", Value::f32(0.5f));
  w.set("mistral3.rope.scaling.yarn_log_multiplier", Value::f32(1.0f));
  w.set("mistral3.attention.temperature_scale", Value::f32(0.1f));
  const HParams hp = read_back(w);
  EXPECT_FALSE(arch_rope_neox(hp.arch));
  EXPECT_FLOAT_EQ(hp.attn_temperature(16383), 1.0f);
  EXPECT_FLOAT_EQ(hp.attn_temperature(16384), 1.0f + 0.1f * std::log(2.0f));
  EXPECT_FLOAT_EQ(hp.attn_temperature(3 * 16384 + 5), 1.0f + 0.1f * std::log(4.0f));
  // a log multiplier of 1 cancels YaRN's magnitude (the kernel's 1 + 0.1 ln 16); the file's ramp ends
  // unless the run gives its own
  const ops::RopeParams p = rope_params(hp);
  EXPECT_FLOAT_EQ(p.attn_factor * (1.0f + 0.1f * std::log(16.0f)), 1.0f);
  EXPECT_FLOAT_EQ(p.beta_fast, 8.0f);
  EXPECT_FLOAT_EQ(p.beta_slow, 0.5f);
  HParams run = hp;
  run.yarn.beta_fast = 32.0f;
  EXPECT_FLOAT_EQ(rope_params(run).beta_fast, 32.0f);

  const HParams plain = read_back(minimal_llama("mistral3"));  // llama.cpp's defaults, no temperature
  EXPECT_FLOAT_EQ(plain.yarn_beta_fast, 32.0f);
  EXPECT_FLOAT_EQ(plain.yarn_beta_slow, 1.0f);
  EXPECT_FLOAT_EQ(plain.attn_temperature(1 << 20), 1.0f);

  gguf::Writer l = minimal_llama();
  l.set("llama.attention.temperature_scale", Value::f32(0.1f));
  l.set("llama.rope.scaling.yarn_log_multiplier", Value::f32(1.0f));
  const HParams llama = read_back(l);
  EXPECT_EQ(llama.attn_temp_scale, 0.0f);
  EXPECT_EQ(llama.yarn_log_mul, 0.0f);
  HParams bad = preset_hparams(Arch::llama, "tiny");
  bad.attn_temp_scale = 0.1f;
  EXPECT_THROW(validate_hparams(bad), Error);
}

// Llama 4 as llama.cpp's llama4 loader reads it: experts every interleave_moe_layer_step layers beside a
// shared expert as wide; 8192-token chunks on three layers of four whatever the window key says (0 is
// refused: llama.cpp aborts on it); no RoPE on the fourth, whose queries get the temperature; unweighted
// q/k norms unless the model has 128 experts.
TEST(Arch, Llama4KeysAreReadAsLlamaCppReadsThem) {
  auto minimal = [] {
    gguf::Writer w = minimal_llama("llama4");
    w.set("llama4.expert_count", Value::u32(16));
    w.set("llama4.expert_used_count", Value::u32(1));
    w.set("llama4.expert_feed_forward_length", Value::u32(8192));
    w.set("llama4.interleave_moe_layer_step", Value::u32(2));
    w.set("llama4.attention.sliding_window", Value::u32(512));
    return w;
  };
  const HParams hp = read_back(minimal());
  EXPECT_EQ(hp.n_swa, 8192);
  EXPECT_TRUE(hp.swa_chunked);
  EXPECT_TRUE(hp.qk_rms_norm);
  EXPECT_FALSE(arch_rope_neox(hp.arch));
  EXPECT_EQ(hp.n_ff_shexp(), 8192);
  for (int64_t il : {0, 2, 30}) EXPECT_FALSE(hp.is_moe_layer(il)) << il;
  for (int64_t il : {1, 3, 31}) EXPECT_TRUE(hp.is_moe_layer(il)) << il;
  for (int64_t il : {0, 1, 2, 30}) EXPECT_TRUE(hp.is_swa_layer(il) && hp.rotates(il)) << il;
  for (int64_t il : {3, 31}) EXPECT_FALSE(hp.is_swa_layer(il) || hp.rotates(il)) << il;
  EXPECT_FLOAT_EQ(hp.attn_temperature(8190), 1.0f);
  EXPECT_FLOAT_EQ(hp.attn_temperature(8191), 1.0f + 0.1f * std::log(2.0f));
  std::map<std::string, TensorSpec> m;
  for (const TensorSpec& t : arch_tensors(hp)) m[t.name] = t;
  EXPECT_EQ(m.at("blk.0.ffn_gate.weight").ne[1], 11008);
  EXPECT_EQ(m.count("blk.0.ffn_gate_inp.weight"), 0u);
  EXPECT_EQ(m.at("blk.1.ffn_up_exps.weight").ne[2], 16);
  EXPECT_EQ(m.at("blk.1.ffn_down_shexp.weight").ne[0], 8192);

  gguf::Writer w = minimal();
  w.set("llama4.expert_count", Value::u32(128));  // Maverick: no q/k norms
  EXPECT_FALSE(read_back(w).qk_rms_norm);
  w = minimal();
  w.set("llama4.attention.sliding_window", Value::u32(0));
  expect_read_error(w, ErrorKind::unsupported, "sliding_window = 0");
  w = minimal();
  w.set("llama4.interleave_moe_layer_step", Value::u32(0));
  expect_read_error(w, ErrorKind::unsupported, "interleave_moe_layer_step = 0");
}

// Chunked masks: the query at position p sees the cache rows from the start of its chunk to p; the
// full mask everything up to p.
TEST(Arch, Llama4ChunkMasks) {
  HParams hp = preset_hparams(Arch::llama4, "tiny");
  hp.n_swa = 4;
  const int64_t T = 3, n_past = 5, n_kv = 8;
  Context c;
  std::vector<float> full((size_t)(n_kv * T)), chunk((size_t)(n_kv * T));
  ForwardInputs in;
  in.mask = c.new_tensor(DType::F32, {n_kv, T});
  in.mask_swa = c.new_tensor(DType::F32, {n_kv, T});
  in.mask->data = full.data();
  in.mask_swa->data = chunk.data();
  fill_masks(in, hp, n_past, T, n_kv);
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < n_kv; ++j) {
      const int64_t p = n_past + i;
      EXPECT_EQ(full[(size_t)(i * n_kv + j)] == 0.0f, j <= p) << p << " " << j;
      EXPECT_EQ(chunk[(size_t)(i * n_kv + j)] == 0.0f, j <= p && j >= p / 4 * 4) << p << " " << j;
    }
}

// ERNIE 4.5 MoE as llama.cpp's loader reads it: the expert width, leading dense layers and the MoE
// layer step required, and only a step of 1 (llama.cpp's loader puts experts in every later layer).
TEST(Arch, Ernie45MoeKeysAreReadAsLlamaCppReadsThem) {
  auto minimal = [] {
    gguf::Writer w = minimal_llama("ernie4_5-moe");
    w.set("ernie4_5-moe.expert_count", Value::u32(64));
    w.set("ernie4_5-moe.expert_used_count", Value::u32(6));
    w.set("ernie4_5-moe.expert_feed_forward_length", Value::u32(1536));
    w.set("ernie4_5-moe.expert_shared_feed_forward_length", Value::u32(3072));
    w.set("ernie4_5-moe.leading_dense_block_count", Value::u32(1));
    w.set("ernie4_5-moe.interleave_moe_layer_step", Value::u32(1));
    return w;
  };
  const HParams hp = read_back(minimal());
  EXPECT_EQ(hp.n_ff_exp, 1536);
  EXPECT_EQ(hp.n_ff_shexp(), 3072);
  EXPECT_EQ(hp.n_layer_dense_lead, 1);
  EXPECT_FALSE(hp.is_moe_layer(0));
  EXPECT_TRUE(hp.is_moe_layer(1) && hp.is_moe_layer(31));
  EXPECT_TRUE(hp.expert_weights_norm);
  EXPECT_FALSE(arch_rope_neox(hp.arch));
  std::map<std::string, TensorSpec> m;
  for (const TensorSpec& t : arch_tensors(hp)) m[t.name] = t;
  EXPECT_EQ(m.count("blk.0.ffn_gate_inp.weight"), 0u);
  EXPECT_EQ(m.at("blk.0.ffn_gate.weight").ne[1], 11008);
  EXPECT_EQ(m.at("blk.1.exp_probs_b.bias").ne[0], 64);
  EXPECT_EQ(m.at("blk.1.ffn_up_shexp.weight").ne[1], 3072);

  gguf::Writer w = minimal();
  w.set("ernie4_5-moe.interleave_moe_layer_step", Value::u32(2));
  expect_read_error(w, ErrorKind::unsupported, "interleave_moe_layer_step");
  for (const char* key : {"interleave_moe_layer_step", "leading_dense_block_count", "expert_feed_forward_length"}) {
    w = minimal();
    w.remove(std::string("ernie4_5-moe.") + key);
    expect_read_error(w, ErrorKind::invalid_input, key);
  }
  w = minimal();
  w.remove("ernie4_5-moe.expert_shared_feed_forward_length");  // no shared expert
  EXPECT_EQ(read_back(w).n_expert_shared, 0);
}

// Which routers renormalize their k softmax weights, as llama.cpp's graphs do: not qwen2moe's or
// olmoe's; qwen3moe's, granitemoe's and ernie4_5-moe's yes.
TEST(Arch, ExpertWeightsRenormalizedAsLlamaCpp) {
  for (const auto& [a, renorm] : {std::pair{"qwen2moe", false},
                                  {"olmoe", false},
                                  {"qwen3moe", true},
                                  {"granitemoe", true},
                                  {"ernie4_5-moe", true}}) {
    const Arch arch = *arch_from_name(a);
    EXPECT_EQ(preset_hparams(arch, "tiny").expert_weights_norm, renorm) << a;
    test::ScratchDir dir("arch");
    NewModelOptions o;
    o.hparams = preset_hparams(arch, "tiny");
    o.header_only = true;
    o.output = dir.file("m.gguf");
    make_random_model(o);
    EXPECT_EQ(read_hparams(*gguf::File::open(o.output)).expert_weights_norm, renorm) << a;
  }
}

TEST(Arch, Glm4MoeTensorList) {
  const HParams hp = preset_hparams(Arch::glm4moe, "glm-4.5-air");
  std::map<std::string, TensorSpec> m;
  for (const TensorSpec& t : arch_tensors(hp)) m[t.name] = t;
  auto shape = [](const TensorSpec& t) { return std::vector<int64_t>(t.ne, t.ne + t.n_dims); };
  using V = std::vector<int64_t>;
  EXPECT_EQ(shape(m.at("blk.0.ffn_gate.weight")), (V{4096, 10944}));  // the leading dense layer
  EXPECT_EQ(m.count("blk.0.ffn_gate_inp.weight"), 0u);
  EXPECT_EQ(shape(m.at("blk.1.attn_q.weight")), (V{4096, 12288}));
  EXPECT_EQ(shape(m.at("blk.1.attn_q.bias")), (V{12288}));
  EXPECT_EQ(shape(m.at("blk.1.exp_probs_b.bias")), (V{128}));
  EXPECT_EQ(shape(m.at("blk.1.ffn_up_exps.weight")), (V{4096, 1408, 128}));
  EXPECT_EQ(shape(m.at("blk.1.ffn_down_shexp.weight")), (V{1408, 4096}));
  EXPECT_EQ(m.count("blk.1.post_attention_norm.weight"), 1u);  // the pre-FFN norm's name
  EXPECT_EQ(m.count("blk.1.ffn_norm.weight"), 0u);
  EXPECT_EQ(m.count("blk.1.attn_q_norm.weight"), 0u);  // Air has none
  // the multi-token-prediction layer: a MoE layer and its own tensors, unused
  const TensorSpec& eh = m.at("blk.46.nextn.eh_proj.weight");
  EXPECT_EQ(shape(eh), (V{8192, 4096}));
  EXPECT_TRUE(eh.unused);
  EXPECT_FALSE(eh.optional);
  EXPECT_TRUE(m.at("blk.46.ffn_up_exps.weight").unused);
  EXPECT_TRUE(m.at("blk.46.nextn.shared_head_head.weight").optional);
  EXPECT_FALSE(m.at("blk.45.ffn_up_exps.weight").unused);
  // GLM-4.5-Air: 106B parameters in the 46 layers run (110B with the prediction layer and its
  // optional head)
  const double run = [&] {
    double n = 0;
    for (const TensorSpec& t : arch_tensors(hp))
      if (!t.unused) n += (double)t.nelements();
    return n;
  }();
  EXPECT_NEAR(run / 1e9, 106.0, 1.5);
}

TEST(ModelFile, Q4KFollowsTheQ4KMMix) {
  const HParams hp = preset_hparams(Arch::llama, "llama-70b");
  std::map<DType, int> down, attn_v;
  size_t bytes = 0;
  for (const TensorSpec& t : arch_tensors(hp)) {
    const DType type = tensor_type_for(t, hp, DType::Q4_K);
    bytes += gguf::tensor_nbytes(type, t.ne, t.name);
    if (t.role == TensorRole::ffn_down) down[type]++;
    if (t.role == TensorRole::attn_v) attn_v[type]++;
    if (t.role == TensorRole::output) {
      EXPECT_EQ(type, DType::Q6_K);
    }
    if (t.role == TensorRole::token_embd) {
      EXPECT_EQ(type, DType::Q4_K);
    }
    if (tensor_role_is_vector(t.role)) {
      EXPECT_EQ(type, DType::F32);
    }
  }
  // use_more_bits(i, 80): i < 10, i >= 70, or (i - 10) % 3 == 2 -> 10 + 10 + 20 layers.
  EXPECT_EQ(down[DType::Q6_K], 40);
  EXPECT_EQ(down[DType::Q4_K], 40);
  EXPECT_EQ(attn_v[DType::Q6_K], 40);
  // llama.cpp's Llama-3-70B Q4_K_M is 39.59 GiB (it also has q5_k attn_v, which loom lacks).
  EXPECT_NEAR((double)bytes / (1ull << 30), 39.59, 0.1);

  const HParams moe = preset_hparams(Arch::qwen3moe, "tiny");  // n_ff_exp 128: no room for q4_k rows
  for (const TensorSpec& t : arch_tensors(moe)) {
    const DType type = tensor_type_for(t, moe, DType::Q4_K);
    if (t.role == TensorRole::ffn_gate_inp) {
      EXPECT_EQ(type, DType::F32);
    }
    if (t.role == TensorRole::ffn_down_exps) {
      EXPECT_TRUE(type == DType::Q8_0 || type == DType::Q4_0) << dtype_name(type);
    }
    if (t.role == TensorRole::ffn_up_exps) {
      EXPECT_EQ(type, DType::Q4_K);
    }
  }
  EXPECT_EQ(file_type_for(DType::Q4_K), 15u);
  EXPECT_EQ(file_type_for(DType::BF16), 32u);
  EXPECT_THROW(file_type_for(DType::I32), Error);
}

TEST(ModelFile, ByteToUnicodeIsGpt2s) {
  EXPECT_EQ(byte_to_unicode('A'), "A");
  EXPECT_EQ(byte_to_unicode(' '), "\xc4\xa0");   // U+0120 'Ġ'
  EXPECT_EQ(byte_to_unicode('\n'), "\xc4\x8a");  // U+010A 'Ċ'
  EXPECT_EQ(byte_to_unicode(0), "\xc4\x80");     // U+0100 'Ā'
  EXPECT_EQ(byte_to_unicode(0xad), "\xc5\x83");  // U+0143 'Ń' (soft hyphen is not printable)
  EXPECT_EQ(byte_to_unicode(0xe9), "\xc3\xa9");  // 'é' stands for itself
}

TEST(ModelFile, NormalRngIsStandardNormalAndDeterministic) {
  NormalRng a(7), b(7), c(8);
  double sum = 0, sq = 0;
  bool differs = false;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const float x = a.next();
    EXPECT_EQ(x, b.next());
    differs |= x != c.next();
    sum += x;
    sq += (double)x * x;
  }
  EXPECT_TRUE(differs);
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(sq / n, 1.0, 0.015);
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(ModelFile, TinyRandomModelIsDeterministicAndWellFormed) {
  test::ScratchDir dir("model");
  NewModelOptions o;
  o.hparams = preset_hparams(Arch::qwen3, "tiny");
  o.seed = 5;
  o.output = dir.file("a.gguf");
  const NewModelResult r = make_random_model(o);
  o.output = dir.file("b.gguf");
  make_random_model(o);
  o.seed = 6;
  o.output = dir.file("c.gguf");
  make_random_model(o);
  EXPECT_EQ(read_all(dir.file("a.gguf")), read_all(dir.file("b.gguf")));
  EXPECT_NE(read_all(dir.file("a.gguf")), read_all(dir.file("c.gguf")));

  auto f = gguf::File::open(dir.file("a.gguf"));
  EXPECT_EQ((int64_t)f->tensors().size(), r.n_tensors);
  EXPECT_EQ(f->file_size(), r.file_size);
  EXPECT_EQ(f->get_int("general.file_type"), 0);
  EXPECT_EQ(f->find("general.quantization_version"), nullptr);
  const HParams hp = read_hparams(*f);
  EXPECT_EQ(hp.n_layer, 2);
  EXPECT_EQ(hp.n_vocab, 384);
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f->find("tokenizer.ggml.tokens")->array_size(), 384u);
  EXPECT_EQ(f->find("tokenizer.ggml.tokens")->strings[32], "\xc4\xa0");
  EXPECT_EQ(f->get_int("tokenizer.ggml.eos_token_id"), 256);

  const gguf::TensorInfo* norm = f->find_tensor("blk.1.attn_k_norm.weight");
  ASSERT_NE(norm, nullptr);
  const float* nd = reinterpret_cast<const float*>(f->tensor_data(*norm));
  for (int i = 0; i < 32; ++i) EXPECT_EQ(nd[i], 1.0f);
  const gguf::TensorInfo* q = f->find_tensor("blk.0.attn_q.weight");
  const float* qd = reinterpret_cast<const float*>(f->tensor_data(*q));
  double sum = 0, sq = 0;
  const int64_t n = q->nelements();
  for (int64_t i = 0; i < n; ++i) {
    sum += qd[i];
    sq += (double)qd[i] * qd[i];
  }
  EXPECT_NEAR(sum / n, 0.0, 0.001);
  EXPECT_NEAR(std::sqrt(sq / n), 0.02, 0.0005);
}

TEST(ModelFile, QuantizedTinyModelDecodesToTheSameWeights) {
  test::ScratchDir dir("model");
  NewModelOptions o;
  o.hparams = preset_hparams(Arch::llama, "tiny");
  o.output = dir.file("f32.gguf");
  make_random_model(o);
  o.type = DType::Q8_0;
  o.output = dir.file("q8.gguf");
  make_random_model(o);
  auto a = gguf::File::open(dir.file("f32.gguf"));
  auto b = gguf::File::open(dir.file("q8.gguf"));
  EXPECT_EQ(b->get_int("general.file_type"), 7);
  EXPECT_EQ(b->get_int("general.quantization_version"), 2);
  const gguf::TensorInfo* ta = a->find_tensor("blk.1.ffn_down.weight");
  const gguf::TensorInfo* tb = b->find_tensor("blk.1.ffn_down.weight");
  ASSERT_EQ(tb->type, DType::Q8_0);
  EXPECT_EQ(b->find_tensor("blk.1.ffn_norm.weight")->type, DType::F32);
  std::vector<float> deq((size_t)tb->nelements());
  dequantize_q8_0_row(b->tensor_data(*tb), deq.data(), tb->nelements());
  const float* ref = reinterpret_cast<const float*>(a->tensor_data(*ta));
  double err = 0;
  for (size_t i = 0; i < deq.size(); ++i) err = std::max(err, (double)std::fabs(deq[i] - ref[i]));
  EXPECT_LT(err, 0.002);  // q8_0 step is amax/127 of ~0.1
}

TEST(ModelFile, HeaderOnly70BIsSparseAndFast) {
  test::ScratchDir dir("model");
  NewModelOptions o;
  o.hparams = preset_hparams(Arch::llama, "llama-70b");
  o.type = DType::Q4_K;
  o.header_only = true;
  o.output = dir.file("70b.gguf");
  const NewModelResult r = make_random_model(o);
  struct stat st {};
  ASSERT_EQ(::stat(o.output.c_str(), &st), 0);
  EXPECT_GT((double)st.st_size, 30e9);
  EXPECT_LT((double)st.st_blocks * 512, 10.0 * (1 << 20));
  auto f = gguf::File::open(o.output);
  EXPECT_EQ(f->tensors().size(), 3u + 80u * 9u);
  EXPECT_EQ(f->tensor_bytes_total(), r.tensor_bytes);
  EXPECT_EQ(read_hparams(*f).n_layer, 80);
}

TEST(ModelFile, VocabGraftAndErrors) {
  test::ScratchDir dir("model");
  const std::string vocab = std::string(LOOM_SHARED_DIR) + "/data/vocab/ggml-vocab-llama-spm.gguf";
  NewModelOptions o;
  o.hparams = preset_hparams(Arch::llama, "tiny");
  o.header_only = true;
  if (std::filesystem::exists(vocab)) {
    o.vocab_path = vocab;
    o.output = dir.file("v.gguf");
    make_random_model(o);
    auto f = gguf::File::open(o.output);
    auto v = gguf::File::open(vocab);
    EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "llama");
    EXPECT_TRUE(*f->find("tokenizer.ggml.tokens") == *v->find("tokenizer.ggml.tokens"));
    EXPECT_EQ(read_hparams(*f).n_vocab, (int64_t)v->find("tokenizer.ggml.tokens")->array_size());
    EXPECT_EQ(f->find_tensor("token_embd.weight")->ne[1], (int64_t)v->find("tokenizer.ggml.tokens")->array_size());
  }
  o.vocab_path.clear();
  o.hparams.n_vocab = 128;
  o.output = dir.file("small-vocab.gguf");
  EXPECT_THROW(make_random_model(o), Error);
  EXPECT_FALSE(std::filesystem::exists(o.output));
}

}  // namespace
}  // namespace loom
