// Computing importance matrices (ImatrixCollector, loom-run --imatrix-out): the first layer's
// sums equal the normed embeddings' squares worked out here from the file, products sharing an
// input share its entry, experts are split as the router chose, layers on simulated devices give
// the CPU's sums, and the file written reads back to the same means.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <numeric>
#include <string>
#include <vector>

#include "loom/backend/registry.h"
#include "loom/gguf/gguf.h"
#include "loom/model/arch.h"
#include "loom/model/imatrix.h"
#include "loom/model/model.h"
#include "loom/model/model_file.h"
#include "loom/model/session.h"

namespace loom {
namespace {

std::string temp_path(const std::string& tag) {
  return (std::filesystem::temp_directory_path() / ("loom-imc-" + std::to_string(getpid()) + "-" + tag)).string();
}

std::string make_model(Arch arch, const std::string& tag, bool tied = false) {
  NewModelOptions o;
  o.type = DType::F32;
  o.hparams = preset_hparams(arch, "tiny");
  o.hparams.tied_embeddings = o.hparams.tied_embeddings || tied;
  o.seed = 21;
  o.output = temp_path(tag + ".gguf");
  make_random_model(o);
  return o.output;
}

const std::vector<int32_t> kTokens = {3, 14, 15, 92, 65, 35, 89, 79, 32, 38};

// Runs kTokens through a session (ubatches of 4) collecting into c.
void collect(Model& m, ImatrixCollector& c) {
  SessionParams sp;
  sp.n_ctx = 64;
  sp.n_ubatch = 4;
  sp.n_threads = 2;
  sp.imatrix = &c;
  Session s(m, sp);
  s.decode(kTokens, /*all_logits=*/true);
}

TEST(ImatrixCollect, FirstLayerSumsAreTheNormedEmbeddings) {
  const std::string path = make_model(Arch::llama, "llama");
  auto model = Model::load(path);
  ImatrixCollector c;
  collect(*model, c);
  const ImportanceMatrix m = c.result();
  EXPECT_EQ(m.entries.count("output.weight"), 0u);  // as llama-imatrix without --process-output
  EXPECT_EQ(m.entries.size(), 7u * (size_t)model->hparams().n_layer);
  EXPECT_EQ(m.entries.at("blk.1.attn_q.weight"), m.entries.at("blk.1.attn_v.weight"));
  EXPECT_EQ(m.entries.at("blk.1.ffn_gate.weight"), m.entries.at("blk.1.ffn_up.weight"));
  EXPECT_EQ(m.entries.at("blk.1.ffn_down.weight").size(), (size_t)model->hparams().n_ff);

  // layer 0's q input: each token's embedding row, RMS-normed, times attn_norm
  const auto f = gguf::File::open(path);
  const gguf::TensorInfo* emb = f->find_tensor("token_embd.weight");
  const gguf::TensorInfo* norm = f->find_tensor("blk.0.attn_norm.weight");
  const int64_t n = emb->ne[0];
  const auto* e = reinterpret_cast<const float*>(f->tensor_data(*emb));
  const auto* g = reinterpret_cast<const float*>(f->tensor_data(*norm));
  std::vector<double> want((size_t)n, 0.0);
  for (int32_t tok : kTokens) {
    const float* row = e + (size_t)tok * n;
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += (double)row[i] * row[i];
    const double inv = 1.0 / std::sqrt(ss / (double)n + model->hparams().rms_eps);
    for (int64_t i = 0; i < n; ++i) want[(size_t)i] += std::pow(row[i] * inv * g[i], 2) / (double)kTokens.size();
  }
  const std::vector<float>& got = m.entries.at("blk.0.attn_q.weight");
  ASSERT_EQ(got.size(), (size_t)n);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(got[(size_t)i], want[(size_t)i], 1e-4 * want[(size_t)i] + 1e-7) << i;

  // --process-output adds the output matrix; the file reads back to the same means
  ImatrixCollector with_output(true);
  collect(*model, with_output);
  EXPECT_EQ(with_output.result().entries.count("output.weight"), 1u);
  const std::string file = temp_path("m.imatrix");
  c.write(file, {"text.txt"}, 1, 64);
  const ImportanceMatrix back = read_importance_matrix(file);
  EXPECT_EQ(back.chunks, 1);
  EXPECT_EQ(back.datasets, (std::vector<std::string>{"text.txt"}));
  ASSERT_EQ(back.entries.size(), m.entries.size());
  for (const auto& [name, v] : m.entries) {
    const std::vector<float>& w = back.entries.at(name);
    ASSERT_EQ(w.size(), v.size()) << name;
    for (size_t i = 0; i < v.size(); ++i) EXPECT_NEAR(w[i], v[i], 1e-6f * std::fabs(v[i]) + 1e-12f) << name;
  }
  std::filesystem::remove(file);
  std::filesystem::remove(path);
}

// As llama-imatrix: only the layers' matrices (and output.weight when asked); a tied embedding's
// output product is not collected, even with --process-output.
TEST(ImatrixCollect, TiedEmbeddingIsNotCollected) {
  const std::string path = make_model(Arch::llama, "tied", true);
  auto model = Model::load(path);
  ImatrixCollector c(true);
  collect(*model, c);
  const ImportanceMatrix m = c.result();
  EXPECT_EQ(m.entries.size(), 7u * (size_t)model->hparams().n_layer);
  for (const auto& [name, v] : m.entries) EXPECT_EQ(name.rfind("blk.", 0), 0u) << name;
  std::filesystem::remove(path);
}

TEST(ImatrixCollect, ExpertsAreSplitAsTheRouterChose) {
  const std::string path = make_model(Arch::qwen3moe, "moe");
  auto model = Model::load(path);
  const HParams& hp = model->hparams();
  ImatrixCollector c;
  collect(*model, c);
  const std::string file = temp_path("moe.imatrix");
  c.write(file, {"t"}, 1, 64);
  const auto f = gguf::File::open(file);
  for (const char* name : {"blk.0.ffn_up_exps.weight", "blk.0.ffn_down_exps.weight"}) {
    const gguf::TensorInfo* counts = f->find_tensor(std::string(name) + ".counts");
    const gguf::TensorInfo* sums = f->find_tensor(std::string(name) + ".in_sum2");
    ASSERT_TRUE(counts && sums) << name;
    EXPECT_EQ(counts->ne[1], hp.n_expert);
    EXPECT_EQ(sums->ne[1], hp.n_expert);
    const auto* k = reinterpret_cast<const float*>(f->tensor_data(*counts));
    // every token went to n_expert_used experts
    EXPECT_EQ(std::accumulate(k, k + hp.n_expert, 0.0), (double)(kTokens.size() * (size_t)hp.n_expert_used)) << name;
  }
  // the up and gate stacks read the same input through the same choice
  const ImportanceMatrix m = c.result();
  EXPECT_EQ(m.entries.at("blk.0.ffn_up_exps.weight"), m.entries.at("blk.0.ffn_gate_exps.weight"));
  EXPECT_EQ(m.entries.at("blk.0.ffn_up_exps.weight").size(), (size_t)(hp.n_embd * hp.n_expert));
  std::filesystem::remove(file);
  std::filesystem::remove(path);
}

TEST(ImatrixCollect, LayersOnSimDevicesGiveTheCpusSums) {
  const std::string path = make_model(Arch::llama, "sim");
  auto cpu = Model::load(path);
  ImatrixCollector want;
  collect(*cpu, want);
  DeviceSet set = make_devices("2x64MiB", 2);
  ModelLoadOptions lo;
  lo.placement.devices = set.all;
  lo.placement.tensor_split = {1, 1};
  auto split = Model::load(path, lo);
  ImatrixCollector got;
  collect(*split, got);
  const ImportanceMatrix a = want.result(), b = got.result();
  ASSERT_EQ(a.entries.size(), b.entries.size());
  for (const auto& [name, v] : a.entries)
    for (size_t i = 0; i < v.size(); ++i)
      EXPECT_NEAR(b.entries.at(name)[i], v[i], 1e-5f * std::fabs(v[i]) + 1e-9f) << name << " " << i;
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace loom
