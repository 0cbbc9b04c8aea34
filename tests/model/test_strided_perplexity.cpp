// --ppl-stride (llama-perplexity's perplexity_v2): the window's size as llama-perplexity makes it,
// and each window's score against the same positions computed one by one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "loom/model/generate.h"
#include "loom/model/model_file.h"
#include "loom/model/session.h"

namespace loom {
namespace {

TEST(StridedPerplexity, WindowIsLlamaPerplexitysKvCache) {
  EXPECT_EQ(strided_perplexity_ctx(64, 2048, 32, false), 2080) << "32 sequences of 64, + 16, padded to 32";
  EXPECT_EQ(strided_perplexity_ctx(512, 512, 256, false), 640);
  EXPECT_EQ(strided_perplexity_ctx(512, 512, 256, true), 768) << "flash attention pads to 256";
  EXPECT_EQ(strided_perplexity_ctx(100, 50, 20, false), 128) << "n_batch under n_ctx: one sequence";
}

TEST(StridedPerplexity, WindowsScoreTheirLastStridePredictions) {
  NewModelOptions o;
  o.hparams = preset_hparams(Arch::llama, "tiny");
  o.seed = 3;
  o.output = (std::filesystem::temp_directory_path() / ("loom-sppl-" + std::to_string(getpid()) + ".gguf")).string();
  make_random_model(o);
  auto model = Model::load(o.output);
  SessionParams sp;
  sp.n_ctx = 24;
  sp.n_batch = 10;  // windows decoded in several batches
  sp.type_k = sp.type_v = DType::F32;
  Session s(*model, sp);
  std::string text;
  for (int i = 0; i < 20; ++i) text += "pack my box with five dozen liquor jugs ";
  const int64_t stride = 7;
  std::vector<double> seen;
  const PerplexityResult r = strided_perplexity(s, text, stride, 3, [&](int64_t i, int64_t start, double ppl) {
    EXPECT_EQ(start, (i - 1) * stride);
    seen.push_back(ppl);
  });
  ASSERT_EQ(r.running_ppl.size(), 3u);
  EXPECT_EQ(seen, r.running_ppl);
  EXPECT_EQ(r.n_scored, 3 * stride);

  // the same: each window's last `stride` predictions from a fresh session, one decode per window
  const std::vector<int32_t> tokens = model->tokenizer().tokenize(text, true, false);
  Session ref(*model, sp);
  double nll = 0;
  int64_t count = 0;
  for (int64_t w = 0; w < 3; ++w) {
    ref.clear();
    ref.decode(std::span<const int32_t>(tokens.data() + w * stride, (size_t)sp.n_ctx), true);
    for (int64_t j = sp.n_ctx - stride - 1; j < sp.n_ctx - 1; ++j) {
      nll -= token_logprob_f32(ref.logits(j), tokens[(size_t)(w * stride + j + 1)]);
      ++count;
    }
    EXPECT_NEAR(r.running_ppl[(size_t)w], std::exp(nll / (double)count), 1e-4 * r.running_ppl[(size_t)w]) << w;
  }
  EXPECT_THROW(strided_perplexity(s, text, sp.n_ctx, 1, nullptr), Error) << "a stride of the whole window";
  std::filesystem::remove(o.output);
}

}  // namespace
}  // namespace loom
