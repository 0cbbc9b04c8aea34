// loom-bench's measurements in the library: the weight bytes a decoded token reads, and the read
// probe between generated tokens (--bandwidth): one reading per token, its time kept out.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <thread>

#include "loom/model/bench.h"
#include "loom/model/model_file.h"
#include "loom/model/session.h"

namespace loom {
namespace {

std::string tiny_model(Arch arch, const std::string& tag) {
  NewModelOptions o;
  o.hparams = preset_hparams(arch, "tiny");
  o.type = DType::Q8_0;
  o.seed = 3;
  const std::string name = "loom-bench-" + std::to_string(getpid()) + "-" + tag + ".gguf";
  o.output = (std::filesystem::temp_directory_path() / name).string();
  make_random_model(o);
  return o.output;
}

TEST(BenchModel, DecodedTokenReadsOneEmbeddingRowAndItsShareOfTheExperts) {
  const std::string path = tiny_model(Arch::llama, "llama");
  auto model = Model::load(path);
  ASSERT_NE(model->output, model->tok_embd);
  EXPECT_EQ(model->bytes_read_per_token(), model->n_bytes() - model->tok_embd->nbytes() + model->tok_embd->nb[1]);

  const std::string moe_path = tiny_model(Arch::qwen3moe, "moe");
  auto moe = Model::load(moe_path);
  const HParams& hp = moe->hparams();
  ASSERT_GT(hp.n_expert, hp.n_expert_used);
  size_t experts = 0;
  for (const Tensor* t : moe->weight_tensors())
    if (t->name.find("_exps") != std::string::npos) experts += t->nbytes();
  ASSERT_GT(experts, 0u);
  const double dense = (double)(moe->n_bytes() - experts - moe->tok_embd->nbytes() + moe->tok_embd->nb[1]);
  const double routed = (double)experts * (double)hp.n_expert_used / (double)hp.n_expert;
  EXPECT_NEAR((double)moe->bytes_read_per_token(), dense + routed, 1.0);
  std::filesystem::remove(path);
  std::filesystem::remove(moe_path);
}

// A one-thread session of a tiny llama, its file removed at the end.
struct TinySession {
  explicit TinySession(const std::string& tag)
      : path(tiny_model(Arch::llama, tag)), model(Model::load(path)), session(*model, params()) {}
  ~TinySession() { std::filesystem::remove(path); }
  static SessionParams params() {
    SessionParams sp;
    sp.n_ctx = 32;
    sp.n_threads = 1;
    return sp;
  }
  std::string path;
  std::unique_ptr<Model> model;
  Session session;
};

TEST(BenchModel, ProbeReadsOncePerTokenAndItsTimeIsLeftOut) {
  TinySession tiny("probe");
  int calls = 0;
  ReadProbeFn probe;
  probe.bytes_per_token = 1000000;
  probe.gbps = [&calls]() {  // a slow, steady "memory": 10, 20, 30 ... GB/s
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    return 10.0 * ++calls;
  };
  const BenchTest t = bench_run(tiny.session, 0, 3, 2, 0, &probe);
  EXPECT_EQ(calls, 3 * 4);  // warm-up and 2 repetitions, each a reading before its 3 tokens and after each
  ASSERT_EQ(t.token_gbps.size(), 6u);
  ASSERT_EQ(t.probe_gbps.size(), 6u);
  // the mean of the readings around each token: calls 5..8 in the first repetition, 9..12 in the second
  const double want[] = {55, 65, 75, 95, 105, 115};
  for (size_t i = 0; i < 6; ++i) EXPECT_DOUBLE_EQ(t.probe_gbps[i], want[i]);
  for (double ns : t.samples_ns) EXPECT_LT(ns, 3 * 20e6) << "the probe's sleeps were timed";
  for (size_t i = 0; i < 6; ++i) EXPECT_GT(t.token_gbps[i], 0.0);
  EXPECT_GT(t.median_bandwidth_ratio(), 0.0);
}

TEST(BenchModel, ControlTimesAReadInPlaceOfEachToken) {  // loom-bench --bandwidth-control
  TinySession tiny("control");
  int reads = 0, stand_ins = 0;
  ReadProbeFn probe;
  probe.bytes_per_token = 1000000;
  probe.gbps = [&reads]() { return 10.0 * ++reads; };
  probe.instead_of_decode = [&stand_ins]() {  // 1 MB in 10 ms: 0.1 GB/s
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    ++stand_ins;
  };
  const BenchTest t = bench_run(tiny.session, 0, 3, 2, 0, &probe);
  EXPECT_EQ(stand_ins, 3 * 3);  // warm-up and 2 repetitions of 3 tokens
  EXPECT_EQ(tiny.session.n_past(), 0) << "a token was decoded";
  ASSERT_EQ(t.token_gbps.size(), 6u);
  for (double g : t.token_gbps) {
    EXPECT_LT(g, 0.1);  // the stand-in's time is the token's
    EXPECT_GT(g, 0.01);
  }
}

TEST(BenchModel, MedianRatioOfTokensToReads) {
  BenchTest t;
  EXPECT_EQ(t.median_bandwidth_ratio(), 0.0);
  t.token_gbps = {9, 20, 45};
  t.probe_gbps = {10, 40, 50};  // 0.9, 0.5, 0.9
  EXPECT_DOUBLE_EQ(t.median_bandwidth_ratio(), 0.9);
  t.token_gbps.push_back(10);
  t.probe_gbps.push_back(100);  // 0.1, 0.5, 0.9, 0.9
  EXPECT_DOUBLE_EQ(t.median_bandwidth_ratio(), 0.7);
}

}  // namespace
}  // namespace loom
