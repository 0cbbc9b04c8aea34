// Helpers for the training tests: a scratch directory per test, tiny random models written
// with make_random_model (as `loom-gguf new` does), and parameter snapshots.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "loom/model/arch.h"
#include "loom/model/model_file.h"
#include "loom/train/train_model.h"

namespace loom::test {

namespace fs = std::filesystem;

inline fs::path scratch_dir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  fs::path d = fs::temp_directory_path() /
               ("loom-train-" + std::to_string(::getpid()) + "-" + info->test_suite_name() + "-" + info->name());
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

// A very small model of an architecture: 1-2 layers, 64 wide, byte vocabulary of 300 tokens.
inline HParams small_hparams(Arch arch, int64_t n_layer = 1) {
  HParams hp = preset_hparams(arch, "tiny");
  hp.n_layer = n_layer;
  hp.n_embd = 64;
  hp.n_head = 4;
  hp.n_head_kv = 2;
  hp.head_dim = 16;
  hp.n_ff = 96;
  if (arch_is_moe(arch)) {
    hp.n_expert = 4;
    hp.n_expert_used = 2;
    hp.n_ff_exp = 32;
  }
  hp.n_vocab = 300;
  hp.n_ctx_train = 64;
  // windows of 8-16 tokens reach past the sliding window and (phi3, gpt-oss) the original
  // context; every layer pattern has a local and a global layer
  if (hp.n_swa > 0) hp.n_swa = 4;
  if (hp.swa_period > 1) hp.n_layer = std::max(hp.n_layer, hp.swa_period);
  if (hp.n_ctx_orig > 0) hp.n_ctx_orig = 8;
  if (arch == Arch::phi3) hp.n_rot = 12;  // Phi-4-mini: 3/4 of each head rotates (the others rotate all)
  if (arch == Arch::glm4moe) {            // half of each head rotated, a MoE layer after the dense one, Air's scale
    hp.n_rot = 8;
    hp.n_layer = std::max<int64_t>(hp.n_layer, 2);
    hp.expert_weights_scale = 1.0f;
  }
  if (arch == Arch::qwen2moe) hp.n_ff_shared = 64;
  if (arch == Arch::llama4) hp.n_ff_shared = hp.n_ff_exp;  // the shared expert as wide as a routed one
  if (arch == Arch::olmoe) {  // experts n_ff wide, its k norm as wide as q's
    hp.n_ff_exp = hp.n_ff;
    hp.n_head_kv = hp.n_head;
  }
  if (arch == Arch::granitemoe) {  // experts n_ff wide, Granite MoE Shared's expert, milder multipliers
    hp.n_ff_exp = hp.n_ff;
    hp.n_ff_shared = 48;
    hp.n_expert_shared = 1;
  }
  if (arch == Arch::glm4) hp.n_rot = 8;  // half of each head, in adjacent pairs
  if (arch == Arch::ernie4_5_moe) {      // a dense layer, then experts with a selection bias and a shared one
    hp.n_layer = std::max<int64_t>(hp.n_layer, 2);
    hp.n_ff_shared = 48;
  }
  if (arch_is_cohere(arch)) hp.logit_scale = 1.0f;  // Cohere's tied output, not scaled down 4-16x
  if (arch == Arch::smollm3) {  // the 4th layer has no RoPE; untied, since 64-wide tied embeddings
    hp.n_layer = 4;             // under 4 layers need more than the overfit test's 100 steps
    hp.tied_embeddings = false;
  }
  if (arch_is_granite(arch)) {  // milder multipliers than Granite 3's: a few steps must overfit
    hp.embedding_scale = 2.0f;
    hp.residual_scale = 0.5f;
    hp.attention_scale = 0.3f;
    hp.logit_scale = 2.0f;
  }
  return hp;
}

// The architectures loom-train trains.
// clang-format off
inline constexpr Arch kTrainedArchs[] = {
    Arch::llama, Arch::qwen2, Arch::qwen3, Arch::qwen3moe, Arch::gemma, Arch::gemma2, Arch::gemma3, Arch::phi3,
    Arch::gpt_oss, Arch::granite, Arch::glm4moe, Arch::qwen2moe, Arch::smollm3, Arch::glm4, Arch::command_r,
    Arch::cohere2, Arch::olmo2, Arch::granitemoe, Arch::olmoe, Arch::ernie4_5, Arch::exaone4, Arch::seed_oss,
    Arch::ernie4_5_moe, Arch::mistral3, Arch::llama4};
// clang-format on

inline std::string write_model(const fs::path& dir, const HParams& hp, uint64_t seed = 5, DType type = DType::F32,
                               const std::string& name = "model.gguf") {
  NewModelOptions o;
  o.hparams = hp;
  o.type = type;
  o.seed = seed;
  o.output = (dir / name).string();
  make_random_model(o);
  return o.output;
}

// The trained tensors' values, read from whatever device holds them.
inline std::vector<std::vector<float>> snapshot(const train::TrainModel& m) {
  std::vector<std::vector<float>> out;
  for (const Tensor* p : m.params()) out.push_back(train::read_f32(p));
  return out;
}

inline double max_abs_diff(const std::vector<std::vector<float>>& a, const std::vector<std::vector<float>>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[i].size(); ++j) m = std::max(m, (double)std::fabs(a[i][j] - b[i][j]));
  return m;
}

// A deterministic text: sentences from a small word list.
inline std::string sample_text(size_t n_chars, uint32_t seed = 1) {
  static const char* const words[] = {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "and",
                                      "runs", "far", "away", "from", "a", "small", "red", "house", "near"};
  std::string s;
  uint32_t x = seed;
  while (s.size() < n_chars) {
    x = x * 1664525u + 1013904223u;
    s += words[(x >> 8) % (sizeof(words) / sizeof(words[0]))];
    s += (x >> 20) % 7 == 0 ? ".\n" : " ";
  }
  return s;
}

}  // namespace loom::test
