// Tensor parallelism end to end in one process: 2-, 3- and 4-way splits over simulated devices
// (even, uneven, with a CPU member, with a member that gets no heads) give the greedy tokens of
// one device and logits within 1e-4, for llama, qwen3 and qwen3moe whose dimensions do not
// divide by the member count; per-member compute and weights shrink to about 1/N; two
// AllReduce per layer and token.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "loom/core/error.h"
#include "loom/model/model_file.h"
#include "loom/model/session.h"
#include "loom/backend/registry.h"

namespace loom {
namespace {

// Dimensions chosen not to divide: 3 KV heads, FFN 7 blocks of 32, vocab 301, 3 blocks of experts.
HParams odd_hparams(Arch arch) {
  HParams hp = preset_hparams(arch, "tiny");
  hp.n_layer = 2;
  hp.n_embd = 96;
  hp.n_head = 6;
  hp.n_head_kv = 3;
  hp.head_dim = 16;
  hp.n_ff = 224;
  hp.n_vocab = 301;
  hp.n_ctx_train = 128;
  if (arch == Arch::phi3) hp.n_rot = 12;  // Phi-4-mini: 3/4 of each head rotates
  if (arch == Arch::glm4moe || arch == Arch::glm4) hp.n_rot = 8;  // GLM: half
  if (arch == Arch::smollm3) hp.n_layer = 4;  // the 4th has no RoPE
  if (arch_is_moe(arch)) {
    hp.n_expert = 5;
    hp.n_expert_used = 2;
    hp.n_ff_exp = arch_experts_n_ff_wide(arch) ? hp.n_ff : 96;
  }
  if (arch == Arch::olmoe) hp.n_head_kv = hp.n_head;  // its k norm as wide as q's
  if (arch == Arch::seed_oss) hp.head_dim = 32;       // Seed-OSS: q twice as wide as the embedding
  hp.rope_freqs = arch == Arch::exaone4;              // EXAONE 4.0's Llama 3 RoPE divisors
  if (arch == Arch::mistral3) hp.n_ctx_orig = 4;      // the attention temperature from position 4
  if (arch == Arch::llama4) {  // a dense layer, then experts beside the shared one; the 4th layer without RoPE
    hp.n_layer = 4;
    hp.n_ff_shared = hp.n_ff_exp;
  }
  if (arch == Arch::ernie4_5_moe) hp.n_ff_shared = 160;  // a dense layer, then experts and a shared one
  if (arch == Arch::granitemoe) {  // Granite MoE Shared's expert
    hp.n_ff_shared = 160;
    hp.n_expert_shared = 1;
  }
  return hp;
}

// Model files of this process, removed when it exits.
std::string temp_path(const std::string& tag) {
  static const bool cleanup = [] {
    std::atexit([] {
      std::error_code ec;
      for (const auto& e : std::filesystem::directory_iterator(std::filesystem::temp_directory_path(), ec))
        if (e.path().filename().string().rfind("loom-tp-" + std::to_string(getpid()) + "-", 0) == 0)
          std::filesystem::remove(e.path(), ec);
    });
    return true;
  }();
  (void)cleanup;
  return (std::filesystem::temp_directory_path() / ("loom-tp-" + std::to_string(getpid()) + "-" + tag + ".gguf"))
      .string();
}

std::string make_model(Arch arch, DType type, bool header_only = false, const HParams* hp = nullptr) {
  NewModelOptions o;
  o.hparams = hp ? *hp : odd_hparams(arch);
  o.type = type;
  o.seed = 7;
  o.header_only = header_only;
  o.output = temp_path(std::string(arch_name(arch)) + "-" + dtype_name(type) + (header_only ? "-h" : ""));
  if (!std::filesystem::exists(o.output)) make_random_model(o);
  return o.output;
}

const std::vector<int32_t> kPrompt = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38};

struct RunResult {
  std::vector<std::vector<float>> logits;
  std::vector<int32_t> tokens;
  uint64_t all_reduce_per_token = 0;
};

// The prompt (ubatches of 4, so several graphs), then 6 greedy steps.
RunResult run(Model& m) {
  SessionParams sp;
  sp.n_ctx = 64;
  sp.n_ubatch = 4;
  sp.n_threads = 2;
  sp.type_k = sp.type_v = DType::F32;
  Session s(m, sp);
  RunResult r;
  s.decode(kPrompt);
  for (int i = 0; i < 6; ++i) {
    std::span<const float> l = s.logits(0);
    r.logits.emplace_back(l.begin(), l.end());
    int32_t best = (int32_t)(std::max_element(l.begin(), l.end()) - l.begin());
    r.tokens.push_back(best);
    const uint64_t before = s.n_all_reduce();
    s.decode(std::span<const int32_t>(&best, 1));
    r.all_reduce_per_token = s.n_all_reduce() - before;
  }
  return r;
}

struct Config {
  const char* name;
  int n_sim;
  bool cpu_member;
  std::vector<float> split;
};

const Config kConfigs[] = {
    {"two_even", 2, false, {1, 1}},        {"two_uneven", 2, false, {3, 1}},
    {"three_uneven", 3, false, {3, 2, 2}}, {"four_even_one_without_heads", 4, false, {1, 1, 1, 1}},
    {"sim_and_cpu", 1, true, {1, 1}},
};

std::unique_ptr<Model> load_tp(const std::string& path, DeviceSet& set, const Config& c, bool need_data = true) {
  ModelLoadOptions lo;
  lo.need_data = need_data;
  lo.placement.devices = set.all;
  lo.placement.split_mode = SplitMode::tensor;
  lo.placement.tensor_split = c.split;
  for (int i = 0; i < c.n_sim; ++i) lo.placement.tp_members.push_back(set.all[(size_t)i]);
  if (c.cpu_member) lo.placement.tp_members.push_back(set.cpu);
  return Model::load(path, lo);
}

struct Case {
  Arch arch;
  DType type;
};
void PrintTo(const Case& c, std::ostream* os) { *os << arch_name(c.arch) << " " << dtype_name(c.type); }

class TensorParallel : public ::testing::TestWithParam<Case> {};

TEST_P(TensorParallel, SameTokensAndLogitsAsOneDevice) {
  const std::string path = make_model(GetParam().arch, GetParam().type);
  auto single = Model::load(path);
  const RunResult want = run(*single);
  EXPECT_EQ(want.all_reduce_per_token, 0u);
  for (const Config& c : kConfigs) {
    SCOPED_TRACE(c.name);
    DeviceSet set = make_devices(std::to_string(c.n_sim) + "x64MiB", 2);
    auto m = load_tp(path, set, c);
    ASSERT_TRUE(m->tensor_parallel());
    const RunResult got = run(*m);
    EXPECT_EQ(got.tokens, want.tokens);
    // every result element is one member's whole dot product: the same bits as one device
    EXPECT_EQ(got.logits, want.logits);
    // joins: attention heads, attn_output rows, FFN hidden rows, ffn_down rows; glm4moe's shared
    // expert its own hidden rows; olmo2's q and k for their norms over all heads
    const HParams& hp = m->hparams();
    int64_t shared = 0;  // one join per MoE layer with a shared expert
    for (int64_t il = 0; il < hp.n_layer; ++il) shared += hp.n_expert_shared > 0 && hp.is_moe_layer(il);
    const int64_t qk = arch_whole_qk_norm(hp.arch) ? 2 * hp.n_layer : 0;
    EXPECT_EQ(got.all_reduce_per_token, (uint64_t)(4 * hp.n_layer + shared + qk));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Archs, TensorParallel,
    ::testing::Values(Case{Arch::llama, DType::F32}, Case{Arch::qwen3, DType::F32}, Case{Arch::qwen3moe, DType::F32},
                      Case{Arch::llama, DType::Q8_0}, Case{Arch::qwen2, DType::F32}, Case{Arch::gemma2, DType::F32},
                      Case{Arch::gemma3, DType::F32}, Case{Arch::phi3, DType::F32}, Case{Arch::gpt_oss, DType::F32},
                      Case{Arch::qwen2, DType::Q4_0}, Case{Arch::qwen3moe, DType::Q8_0},
                      Case{Arch::granite, DType::F32}, Case{Arch::gemma, DType::F32}, Case{Arch::glm4moe, DType::F32},
                      Case{Arch::glm4moe, DType::Q8_0}, Case{Arch::qwen2moe, DType::F32},
                      Case{Arch::smollm3, DType::F32}, Case{Arch::glm4, DType::F32}, Case{Arch::command_r, DType::F32},
                      Case{Arch::cohere2, DType::Q8_0}, Case{Arch::olmo2, DType::F32},
                      Case{Arch::granitemoe, DType::F32}, Case{Arch::olmoe, DType::F32},
                      Case{Arch::ernie4_5, DType::Q8_0}, Case{Arch::exaone4, DType::F32},
                      Case{Arch::seed_oss, DType::Q8_0}, Case{Arch::ernie4_5_moe, DType::F32},
                      Case{Arch::mistral3, DType::F32}, Case{Arch::llama4, DType::F32}),
    [](const auto& info) {
      std::string name = std::string(arch_name(info.param.arch)) + "_" + dtype_name(info.param.type);
      std::replace(name.begin(), name.end(), '-', '_');  // "gpt-oss"
      return name;
    });

// Command R+'s per-head q/k norms (64 layers and more): each member takes its heads' rows. The norm
// weights differ, so a member normalizing with another head's row would show in the logits.
TEST(TensorParallelCohere, PerHeadQkNormsFollowTheHeads) {
  NewModelOptions o;
  o.hparams = odd_hparams(Arch::command_r);
  o.hparams.n_layer = 64;
  ASSERT_TRUE(o.hparams.per_head_qk_norm());
  o.type = DType::F32;
  o.seed = 7;
  o.norm_jitter = 0.2f;
  o.output = temp_path("command-r-plus");
  make_random_model(o);
  auto single = Model::load(o.output);
  const RunResult want = run(*single);
  for (const Config& c : {kConfigs[1], kConfigs[2]}) {
    SCOPED_TRACE(c.name);
    DeviceSet set = make_devices(std::to_string(c.n_sim) + "x64MiB", 2);
    auto m = load_tp(o.output, set, c);
    const RunResult got = run(*m);
    EXPECT_EQ(got.tokens, want.tokens);
    EXPECT_EQ(got.logits, want.logits);
  }
}

TEST(TensorParallelBf16, ReductionInBf16HalvesTheBytesAndStaysClose) {
  const std::string path = make_model(Arch::llama, DType::F32);
  auto single = Model::load(path);
  SessionParams sp;
  sp.n_ctx = 64;
  sp.type_k = sp.type_v = DType::F32;
  Session one(*single, sp);
  one.decode(kPrompt);
  DeviceSet set = make_devices("2x64MiB", 2);
  auto m = load_tp(path, set, kConfigs[1]);
  size_t bytes[2] = {0, 0};
  for (int bf16 = 0; bf16 < 2; ++bf16) {
    if (bf16) sp.reduce_bf16_min = 0;
    Session s(*m, sp);
    s.decode(kPrompt);
    bytes[bf16] = s.all_reduce_bytes();
    double max_diff = 0, max_abs = 0;
    for (size_t i = 0; i < one.logits(0).size(); ++i) {
      max_diff = std::max(max_diff, (double)std::fabs(s.logits(0)[i] - one.logits(0)[i]));
      max_abs = std::max(max_abs, (double)std::fabs(one.logits(0)[i]));
    }
    EXPECT_LT(max_diff, bf16 ? 2e-2 * max_abs : 1e-4) << "bf16 " << bf16;
    if (bf16) {
      EXPECT_GT(max_diff, 0.0);  // it did round
    }
  }
  EXPECT_EQ(bytes[1] * 2, bytes[0]);
}

TEST(TensorParallelMemory, WeightsPerMemberWithinOneGranuleOfTheirShare) {
  const std::string path = make_model(Arch::llama, DType::Q8_0);
  for (const Config& c : kConfigs) {
    SCOPED_TRACE(c.name);
    DeviceSet set = make_devices(std::to_string(c.n_sim) + "x64MiB", 2);
    auto m = load_tp(path, set, c, /*need_data=*/false);
    const HParams& hp = m->hparams();
    const TpLayout& lay = m->tp_layout();
    float sum = 0;
    for (float p : c.split) sum += p;
    for (const auto& sh : m->tp_shards()) {
      const double share = c.split[(size_t)sh->rank] / sum;
      // each split axis within one granule of the member's share
      EXPECT_LE(std::fabs((double)sh->n_head_kv - share * (double)hp.n_head_kv), 1.0);
      EXPECT_LE(std::fabs((double)sh->n_ff - share * (double)hp.n_ff), (double)lay.row_granule);
      EXPECT_LE(std::fabs((double)sh->n_vocab - share * (double)hp.n_vocab), (double)lay.row_granule);
      const tp::Range embd = lay.embd[(size_t)sh->rank];
      EXPECT_LE(std::fabs((double)embd.size() - share * (double)hp.n_embd), (double)lay.row_granule);
      EXPECT_EQ(sh->first.embd, embd.begin);
      const LayerWeights& l = sh->layers[0];
      if (sh->n_ff > 0) {
        EXPECT_EQ(l.ffn_up->ne[1], sh->n_ff);
      } else {
        EXPECT_EQ(l.ffn_up, nullptr);  // zero-size slices are absent, not empty tensors
      }
      // attn_output and ffn_down: whole input columns, this member's embedding rows
      if (embd.size() > 0) {
        EXPECT_EQ(l.wo->ne[0], hp.n_embd_q());
        EXPECT_EQ(l.wo->ne[1], embd.size());
        EXPECT_EQ(l.ffn_down->ne[0], hp.n_ff);
        EXPECT_EQ(l.ffn_down->ne[1], embd.size());
      }
      EXPECT_EQ(l.attn_norm->ne[0], hp.n_embd);  // mirrored
    }
  }
}

TEST(TensorParallelMemory, ComputeBuffersShrinkToAboutOneOverN) {
  // planning only, on a header-only model with real proportions (FFN and vocab dominate)
  HParams hp = preset_hparams(Arch::llama, "tiny");
  hp.n_layer = 4;
  hp.n_embd = 2048;
  hp.n_head = 16;
  hp.n_head_kv = 8;
  hp.head_dim = 128;
  hp.n_ff = 5632;
  hp.n_vocab = 32000;
  hp.n_ctx_train = 2048;
  const std::string path = make_model(Arch::llama, DType::Q8_0, /*header_only=*/true, &hp);
  auto compute_of = [&](int n, bool tp) {
    DeviceSet set = make_devices(std::to_string(n) + "x64GiB", 2);
    ModelLoadOptions lo;
    lo.need_data = false;
    lo.placement.devices = set.all;
    if (tp) {
      lo.placement.split_mode = SplitMode::tensor;
      lo.placement.tensor_split.assign((size_t)n, 1.0f);
    }
    auto m = Model::load(path, lo);
    SessionParams sp;
    sp.n_ctx = 2048;
    Session s(*m, sp);
    std::vector<size_t> out;
    for (const MemoryBreakdown& b : s.memory_breakdown()) out.push_back(b.compute_bytes);
    out.pop_back();  // the host
    return out;
  };
  const size_t single = compute_of(1, false)[0];
  // what every member keeps whole: a few rows of the residual stream {n_embd, ubatch} and the
  // attention mask {n_ctx, ubatch} (f32)
  const double row = 4.0 * (double)hp.n_embd * 512, mask = 4.0 * 2048 * 512;
  for (int n : {2, 3, 4}) {
    for (size_t bytes : compute_of(n, true)) {
      EXPECT_LT((double)bytes, (double)single / n + 4 * row + mask) << n << "-way: " << bytes << " of " << single;
      EXPECT_GT((double)bytes, 0.5 * (double)single / n);
    }
  }
}

TEST(TensorParallelErrors, BadSplitsAreUsageErrors) {
  const std::string path = make_model(Arch::llama, DType::F32);
  DeviceSet set = make_devices("2x64MiB", 2);
  Config c{"bad", 2, false, {1, 1, 1}};
  try {
    load_tp(path, set, c);
    ADD_FAILURE() << "3 proportions for 2 members must be refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(std::string(e.what()).find("-ts"), std::string::npos) << e.what();
  }
  // a member too small for its shard fails cleanly, naming the device
  DeviceSet tiny = make_devices("2x64KiB", 2);
  try {
    load_tp(path, tiny, Config{"small", 2, false, {1, 1}});
    ADD_FAILURE() << "64 KiB cannot hold a shard";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::out_of_memory);
    EXPECT_NE(std::string(e.what()).find("SIM"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// Prompt, then the state moves to another session (other split), which continues greedily.
std::vector<int32_t> continue_from(Model& m, const std::vector<uint8_t>& state, int n, std::vector<float>* first) {
  SessionParams sp;
  sp.n_ctx = 64;
  sp.n_ubatch = 4;
  sp.type_k = sp.type_v = DType::F32;
  Session s(m, sp);
  s.load_state(state);
  EXPECT_EQ(s.n_past(), (int64_t)kPrompt.size() - 1);
  std::vector<int32_t> out;
  int32_t tok = kPrompt.back();
  for (int i = 0; i < n; ++i) {
    s.decode(std::span<const int32_t>(&tok, 1));
    std::span<const float> l = s.logits(0);
    if (i == 0 && first) first->assign(l.begin(), l.end());
    tok = (int32_t)(std::max_element(l.begin(), l.end()) - l.begin());
    out.push_back(tok);
  }
  return out;
}

std::vector<uint8_t> state_after_prompt(Model& m) {
  SessionParams sp;
  sp.n_ctx = 64;
  sp.n_ubatch = 4;
  sp.type_k = sp.type_v = DType::F32;
  Session s(m, sp);
  // all but the last prompt token: the continuation feeds that one
  s.decode(std::span<const int32_t>(kPrompt.data(), kPrompt.size() - 1));
  std::vector<uint8_t> st = s.save_state();
  s.decode(std::span<const int32_t>(&kPrompt.back(), 1));
  return st;
}

TEST(TensorParallelState, SequenceStateMovesBetweenSplits) {
  const std::string path = make_model(Arch::qwen3, DType::F32);
  auto single = Model::load(path);
  const std::vector<uint8_t> st_single = state_after_prompt(*single);
  std::vector<float> want_logits;
  const std::vector<int32_t> want = continue_from(*single, st_single, 5, &want_logits);
  for (const Config& c : {kConfigs[2], kConfigs[3], kConfigs[4]}) {
    SCOPED_TRACE(c.name);
    DeviceSet set = make_devices(std::to_string(c.n_sim) + "x64MiB", 2);
    auto m = load_tp(path, set, c);
    // the same bytes whichever split wrote them
    const std::vector<uint8_t> st_tp = state_after_prompt(*m);
    ASSERT_EQ(st_tp.size(), st_single.size());
    double max_diff = 0;
    const size_t n = (st_tp.size() - 48) / sizeof(float);
    for (size_t i = 0; i < n; ++i) {
      float a, b;
      std::memcpy(&a, st_tp.data() + 48 + i * 4, 4);
      std::memcpy(&b, st_single.data() + 48 + i * 4, 4);
      max_diff = std::max(max_diff, (double)std::fabs(a - b));
    }
    EXPECT_LT(max_diff, 1e-4);
    // one device -> tensor parallel, and back
    std::vector<float> got_logits;
    EXPECT_EQ(continue_from(*m, st_single, 5, &got_logits), want);
    for (size_t i = 0; i < want_logits.size(); ++i) ASSERT_NEAR(got_logits[i], want_logits[i], 1e-4);
    EXPECT_EQ(continue_from(*single, st_tp, 5, nullptr), want);
  }
  std::vector<uint8_t> bad = st_single;
  bad[0] ^= 1;
  SessionParams sp;
  sp.n_ctx = 64;
  Session s(*single, sp);
  EXPECT_THROW(s.load_state(bad), Error);        // not a state
  EXPECT_THROW(s.load_state(st_single), Error);  // f32 state, f16 cache
}

}  // namespace
}  // namespace loom
