// LoRA adapters (--lora): a model with an adapter computes what the model with the merged
// weights W + s B A computes, scale 0 is the base model, several adapters add up, and every bad
// adapter file is refused with the error kind its flag documents.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>

#include "gguf_test_util.h"
#include "loom/core/error.h"
#include "loom/gguf/gguf.h"
#include "loom/model/lora.h"
#include "loom/model/model.h"
#include "loom/model/model_file.h"
#include "loom/model/session.h"

namespace loom {
namespace {

const std::vector<int32_t> kTokens = {1, 17, 42, 99, 5, 230, 77, 3};

// Logits of every position of kTokens (one decode) with the given adapters.
std::vector<float> logits_of(const std::string& path, const std::vector<LoraAdapterSpec>& adapters) {
  ModelLoadOptions lo;
  lo.adapters = adapters;
  std::unique_ptr<Model> m = Model::load(path, lo);
  SessionParams sp;
  sp.n_ctx = 64;
  sp.n_threads = 2;
  Session s(*m, sp);
  s.decode(kTokens, true);
  std::vector<float> out;
  for (size_t i = 0; i < kTokens.size(); ++i) {
    const std::span<const float> l = s.logits((int64_t)i);
    out.insert(out.end(), l.begin(), l.end());
  }
  return out;
}

// The base file with every adapted matrix replaced by W + sum of s B A (F32 base, in double).
void write_merged(const std::string& base, const std::vector<LoraAdapterSpec>& adapters, const std::string& out) {
  std::unique_ptr<gguf::File> f = gguf::File::open(base);
  std::vector<std::unique_ptr<gguf::File>> ads;
  for (const LoraAdapterSpec& a : adapters) ads.push_back(gguf::File::open(a.path));
  gguf::Writer w;
  for (const auto& [k, v] : f->metadata()) w.set(k, v);
  std::vector<std::vector<float>> keep;
  for (const gguf::TensorInfo& t : f->tensors()) {
    ASSERT_EQ(t.type, DType::F32);
    const float* src = reinterpret_cast<const float*>(f->tensor_data(t));
    std::vector<double> m(src, src + t.nelements());
    const int64_t n_in = t.ne[0], n_out = t.ne[1];
    for (size_t j = 0; j < ads.size(); ++j) {
      const gguf::TensorInfo* ia = ads[j]->find_tensor(t.name + ".lora_a");
      const gguf::TensorInfo* ib = ads[j]->find_tensor(t.name + ".lora_b");
      if (!ia) continue;
      ASSERT_TRUE(ib && ia->type == DType::F32 && ib->type == DType::F32);
      const float* A = reinterpret_cast<const float*>(ads[j]->tensor_data(*ia));
      const float* B = reinterpret_cast<const float*>(ads[j]->tensor_data(*ib));
      const int64_t r = ia->ne[1];
      const double alpha = ads[j]->get_float("adapter.lora.alpha");
      const double s = alpha != 0 ? adapters[j].scale * alpha / (double)r : adapters[j].scale;
      for (int64_t o = 0; o < n_out; ++o)
        for (int64_t i = 0; i < n_in; ++i) {
          double d = 0;
          for (int64_t k = 0; k < r; ++k) d += (double)B[o * r + k] * A[k * n_in + i];
          m[(size_t)(o * n_in + i)] += s * d;
        }
    }
    keep.emplace_back(m.begin(), m.end());
    w.add_tensor(t.name, DType::F32, t.n_dims, t.ne, keep.back().data());
  }
  w.write(out);
}

// The relative max difference of two logit vectors.
double max_rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, (double)std::fabs(a[i] - b[i]));
    den = std::max(den, (double)std::fabs(b[i]));
  }
  return num / den;
}

class LoraTest : public ::testing::Test {
 protected:
  test::ScratchDir dir{"lora"};
  std::string base = dir.file("base.gguf");
  void SetUp() override {
    NewModelOptions n;
    n.hparams = preset_hparams(Arch::llama, "tiny");
    n.seed = 11;
    n.output = base;
    make_random_model(n);
  }
  std::string adapter(const std::string& name, std::vector<std::string> targets, int64_t rank, float alpha,
                      uint64_t seed, DType type = DType::F32) {
    NewLoraOptions o;
    o.base = base;
    o.output = dir.file(name);
    o.targets = std::move(targets);
    o.rank = rank;
    o.alpha = alpha;
    o.seed = seed;
    o.sigma = 0.05f;
    o.type = type;
    make_random_lora(o);
    return o.output;
  }
};

TEST_F(LoraTest, AdaptersEqualTheMergedWeights) {
  const std::vector<LoraAdapterSpec> ads = {
      {adapter("a.gguf", {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "output"}, 4,
               16.0f, 1),
       0.75f},
      {adapter("b.gguf", {"attn_v", "ffn_down"}, 8, 0.0f, 2), 2.0f}};  // alpha 0: the scale alone
  const std::vector<float> with = logits_of(base, ads);
  const std::vector<float> plain = logits_of(base, {});
  write_merged(base, ads, dir.file("merged.gguf"));
  const std::vector<float> merged = logits_of(dir.file("merged.gguf"), {});
  EXPECT_LT(max_rel_diff(with, merged), 1e-4);
  EXPECT_GT(max_rel_diff(plain, merged), 1e-2) << "the adapters changed nothing: the test could not fail";
}

// The shared experts' matrices (glm4moe, qwen2moe) take adapters as llama.cpp's FFN builder
// applies them; glm4moe's multi-token-prediction layer (never run) gets none from new-lora.
TEST_F(LoraTest, SharedExpertAdaptersEqualTheMergedWeights) {
  for (Arch arch : {Arch::glm4moe, Arch::qwen2moe}) {
    SCOPED_TRACE(arch_name(arch));
    NewModelOptions n;
    n.hparams = preset_hparams(arch, "tiny");
    n.seed = 12;
    n.output = base;
    make_random_model(n);
    const std::string a =
        adapter("shexp.gguf", {"ffn_gate_shexp", "ffn_up_shexp", "ffn_down_shexp", "attn_q"}, 4, 16.0f, 5);
    const HParams& hp = n.hparams;  // pairs: every run layer's attn_q, the MoE layers' three shared matrices
    EXPECT_EQ(gguf::File::open(a)->tensors().size(),
              (size_t)(2 * (hp.n_layer + 3 * (hp.n_layer - hp.n_layer_dense_lead))));
    const std::vector<float> with = logits_of(base, {{a, 1.0f}});
    write_merged(base, {{a, 1.0f}}, dir.file("merged.gguf"));
    const std::vector<float> merged = logits_of(dir.file("merged.gguf"), {});
    EXPECT_LT(max_rel_diff(with, merged), 1e-4);
    EXPECT_GT(max_rel_diff(logits_of(base, {}), merged), 1e-3) << "the adapter changed nothing";
  }
}

TEST_F(LoraTest, ScaleZeroIsTheBaseModelAndTheScaleIsLinear) {
  const std::string a = adapter("a.gguf", {"attn_q", "ffn_up"}, 4, 8.0f, 3);
  EXPECT_EQ(logits_of(base, {{a, 0.0f}}), logits_of(base, {}));
  // the same adapter twice at scale 1 is the adapter once at scale 2 (llama.cpp's CLI applies
  // every --lora it is given)
  EXPECT_LT(max_rel_diff(logits_of(base, {{a, 1.0f}, {a, 1.0f}}), logits_of(base, {{a, 2.0f}})), 1e-5);
}

TEST_F(LoraTest, HalfPrecisionAdaptersLoad) {
  const std::string a = adapter("h.gguf", {"attn_q", "ffn_down"}, 16, 32.0f, 4, DType::F16);
  EXPECT_GT(max_rel_diff(logits_of(base, {{a, 1.0f}}), logits_of(base, {})), 1e-3);
}

// Writes an adapter file from scratch: metadata, then tensors (name, ne0, ne1) of F32 zeros.
std::string write_adapter(const std::string& path, const std::vector<std::pair<std::string, std::string>>& kv,
                          const std::vector<std::tuple<std::string, int64_t, int64_t>>& tensors) {
  gguf::Writer w;
  for (const auto& [k, v] : kv) w.set(k, gguf::Value::string(v));
  for (const auto& [name, n0, n1] : tensors) {
    const int64_t ne[2] = {n0, n1};
    w.add_tensor(name, DType::F32, 2, ne, [](uint8_t* dst, size_t n) { std::memset(dst, 0, n); });
  }
  w.write(path);
  return path;
}

TEST_F(LoraTest, BadAdaptersAreRefusedNamingTheProblem) {
  const std::vector<std::pair<std::string, std::string>> ok_kv = {
      {"general.architecture", "llama"}, {"general.type", "adapter"}, {"adapter.type", "lora"}};
  // tiny llama: n_embd 256, attn_k {256, 128}
  const std::string q = "blk.0.attn_q.weight";
  struct Case {
    const char* name;
    std::vector<std::pair<std::string, std::string>> kv;
    std::vector<std::tuple<std::string, int64_t, int64_t>> tensors;
    ErrorKind kind;
    const char* needle;
  };
  const std::vector<Case> cases = {
      {"model.gguf",
       {{"general.architecture", "llama"}},
       {{q + ".lora_a", 256, 4}},
       ErrorKind::invalid_input,
       "not a LoRA adapter"},
      {"arch.gguf",
       {{"general.architecture", "qwen2"}, {"general.type", "adapter"}, {"adapter.type", "lora"}},
       {{q + ".lora_a", 256, 4}, {q + ".lora_b", 4, 256}},
       ErrorKind::invalid_input,
       "an adapter for 'qwen2'"},
      {"cvec.gguf",
       {{"general.architecture", "llama"}, {"general.type", "adapter"}, {"adapter.type", "control_vector"}},
       {{q + ".lora_a", 256, 4}},
       ErrorKind::unsupported,
       "adapter.type is 'control_vector'"},
      {"half.gguf", ok_kv, {{q + ".lora_a", 256, 4}}, ErrorKind::invalid_input, "has .lora_a but not .lora_b"},
      {"shape.gguf",
       ok_kv,
       {{q + ".lora_a", 256, 4}, {q + ".lora_b", 4, 128}},
       ErrorKind::invalid_input,
       "expected [256, r] and [r, 256]"},
      {"rank.gguf",
       ok_kv,
       {{q + ".lora_a", 256, 4}, {q + ".lora_b", 8, 256}},
       ErrorKind::invalid_input,
       "expected [256, r] and [r, 256]"},
      {"unknown.gguf",
       ok_kv,
       {{"blk.9.attn_q.weight.lora_a", 256, 4}, {"blk.9.attn_q.weight.lora_b", 4, 256}},
       ErrorKind::invalid_input,
       "not a tensor of the model"},
      {"embd.gguf",
       ok_kv,
       {{"token_embd.weight.lora_a", 256, 4}, {"token_embd.weight.lora_b", 4, 512}},
       ErrorKind::unsupported,
       "token_embd.weight"},
      {"stray.gguf", ok_kv, {{"blk.0.attn_q.bias", 256, 1}}, ErrorKind::invalid_input, "not a LoRA pair's"},
      {"empty.gguf", ok_kv, {}, ErrorKind::invalid_input, "no .lora_a / .lora_b pairs"},
  };
  for (const Case& c : cases) {
    const std::string path = write_adapter(dir.file(c.name), c.kv, c.tensors);
    ModelLoadOptions lo;
    lo.adapters = {{path, 1.0f}};
    try {
      Model::load(base, lo);
      ADD_FAILURE() << c.name << " loaded";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), c.kind) << c.name << ": " << e.what();
      EXPECT_NE(std::string(e.what()).find(c.needle), std::string::npos) << c.name << ": " << e.what();
    }
  }
  // a file that is not GGUF at all, and one that does not exist
  for (const std::string& path : {base + ".missing", dir.file("junk.gguf")}) {
    if (path.ends_with("junk.gguf")) std::ofstream(path) << "not a gguf file at all";
    ModelLoadOptions lo;
    lo.adapters = {{path, 1.0f}};
    EXPECT_THROW(Model::load(base, lo), Error) << path;
  }
}

TEST_F(LoraTest, PlanningCountsTheAdapterAndTrainingOrTensorSplitRefuseIt) {
  const std::string a = adapter("a.gguf", {"attn_q", "ffn_down"}, 8, 16.0f, 5);
  ModelLoadOptions lo;
  lo.need_data = false;
  const size_t plain = Model::load(base, lo)->n_bytes();
  lo.adapters = {{a, 1.0f}};
  const std::unique_ptr<Model> m = Model::load(base, lo);
  // tiny llama: 2 layers, attn_q {256, 256} and ffn_down {512, 256}, F32, rank 8
  const size_t adapter_bytes = 2 * 4 * 8 * ((256 + 256) + (512 + 256));
  EXPECT_EQ(m->n_bytes(), plain + adapter_bytes);
  lo.trainable = [](const TensorSpec&, DType) { return true; };
  EXPECT_THROW(Model::load(base, lo), Error);
}

}  // namespace
}  // namespace loom
