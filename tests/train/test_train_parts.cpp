// The parts of lib/train: optimizer step graphs against REFERENCE.md's AdamW formula and plain
// SGD (with global-norm clipping), learning-rate schedules, dataset windows / split / shuffles,
// the BPE trainer (determinism, merges, round trip through lib/model's tokenizer) and the
// progress line.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <set>

#include "loom/cpu/cpu.h"
#include "loom/train/bpe.h"
#include "loom/train/dataset.h"
#include "loom/train/optimizer.h"
#include "loom/train/progress.h"
#include "train_test_util.h"

namespace loom::test {
namespace {

using namespace loom::train;

// Two parameters; acc holds n_micro-summed gradients; several steps against a double reference.
void check_optimizer(OptimizerKind kind, float clip) {
  Context c;
  std::vector<ParamState> ps;
  for (int64_t n : {7, 5}) {
    ParamState s;
    s.param = c.new_tensor(DType::F32, {n}, fmt::format("w{}", n));
    s.grad_acc = c.new_like(s.param);
    if (kind == OptimizerKind::adamw) {
      s.m = c.new_like(s.param);
      s.v = c.new_like(s.param);
    }
    ps.push_back(s);
  }
  OptimizerGraph og = build_optimizer_graph(c, ps, kind);
  Graph g;
  g.build_forward(og.grad_norm);
  for (Tensor* t : og.steps) g.build_forward(t);
  cpu::CpuDevice dev(3);
  auto buf = cpu::alloc_all(c, dev.buffer_type());
  buf->clear(0);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<std::vector<double>> w(2), m(2), v(2);
  for (size_t i = 0; i < 2; ++i) {
    auto* d = static_cast<float*>(ps[i].param->data);
    for (int64_t j = 0; j < ps[i].param->nelements(); ++j) w[i].push_back(d[j] = nd(rng));
    m[i].assign(w[i].size(), 0.0);
    v[i].assign(w[i].size(), 0.0);
  }
  OptimizerParams p;
  p.kind = kind;
  p.wd = 0.05f;
  p.grad_clip = clip;
  const int n_micro = 2;
  for (int t = 1; t <= 4; ++t) {
    const float lr = 0.01f * (float)t;
    std::vector<std::vector<double>> gr(2);
    double norm2 = 0;
    for (size_t i = 0; i < 2; ++i) {
      auto* a = static_cast<float*>(ps[i].grad_acc->data);
      for (int64_t j = 0; j < ps[i].param->nelements(); ++j) {
        a[j] = nd(rng);
        gr[i].push_back((double)a[j] / n_micro);
        norm2 += gr[i].back() * gr[i].back();
      }
    }
    const double norm = std::sqrt(norm2);
    const double f = clip > 0 ? std::min(1.0, clip / norm) : 1.0;
    if (kind == OptimizerKind::adamw) {
      const auto h = adamw_hparams(p, lr, t);
      std::memcpy(og.hp->data, h.data(), sizeof(h));
    } else {
      const auto h = sgd_hparams(p, lr);
      std::memcpy(og.hp->data, h.data(), sizeof(h));
    }
    auto* cl = static_cast<float*>(og.clip->data);
    cl[0] = clip > 0 ? clip : INFINITY;
    cl[1] = 1.0f / n_micro;
    cpu::compute_graph(g, dev.pool());
    EXPECT_NEAR(*static_cast<float*>(og.grad_norm->data), norm, 1e-5 * norm);
    for (size_t i = 0; i < 2; ++i)
      for (size_t j = 0; j < w[i].size(); ++j) {
        const double gj = gr[i][j] * f;
        if (kind == OptimizerKind::adamw) {  // REFERENCE.md
          m[i][j] = 0.9 * m[i][j] + 0.1 * gj;
          v[i][j] = 0.999 * v[i][j] + 0.001 * gj * gj;
          const double mh = m[i][j] / (1 - std::pow(0.9, t)), vh = v[i][j] / (1 - std::pow(0.999, t));
          w[i][j] = w[i][j] * (1 - lr * 0.05) - lr * mh / (std::sqrt(vh) + 1e-8);
        } else {
          w[i][j] = w[i][j] * (1 - lr * 0.05) - lr * gj;
        }
        EXPECT_NEAR(static_cast<float*>(ps[i].param->data)[j], w[i][j], 1e-5) << "step " << t;
      }
  }
}

TEST(Optimizer, AdamWStepsMatchTheFormula) { check_optimizer(OptimizerKind::adamw, 0); }
TEST(Optimizer, AdamWWithGlobalNormClipping) { check_optimizer(OptimizerKind::adamw, 0.5f); }
TEST(Optimizer, SgdStepsMatchTheFormula) { check_optimizer(OptimizerKind::sgd, 0); }
TEST(Optimizer, SgdWithGlobalNormClipping) { check_optimizer(OptimizerKind::sgd, 0.5f); }

TEST(Optimizer, LearningRateSchedules) {
  OptimizerParams p;
  p.lr = 1.0f;
  EXPECT_FLOAT_EQ(lr_at(p, 0, 10), 1.0f);
  EXPECT_FLOAT_EQ(lr_at(p, 9, 10), 1.0f);
  p.warmup = 4;
  EXPECT_FLOAT_EQ(lr_at(p, 0, 10), 0.25f);
  EXPECT_FLOAT_EQ(lr_at(p, 3, 10), 1.0f);
  p.schedule = LrSchedule::cosine;
  p.lr_min = 0.1f;
  EXPECT_FLOAT_EQ(lr_at(p, 4, 10), 1.0f);   // first step after warmup
  EXPECT_FLOAT_EQ(lr_at(p, 9, 10), 0.1f);   // last step reaches lr_min
  EXPECT_NEAR(lr_at(p, 7, 11), 0.55f, 1e-6);  // halfway: the mean
  p.schedule = LrSchedule::exponential;
  EXPECT_FLOAT_EQ(lr_at(p, 9, 10), 0.1f);
  EXPECT_NEAR(lr_at(p, 7, 11), std::sqrt(0.1), 1e-6);  // geometric halfway
  EXPECT_THROW(schedule_from_name("linear"), Error);
  EXPECT_THROW(optimizer_from_name("adam"), Error);
}

TEST(Dataset, WindowsLabelsSplitAndShuffles) {
  std::vector<int32_t> toks(1000);
  std::iota(toks.begin(), toks.end(), 0);
  DatasetOptions o;
  o.n_ctx = 10;
  o.val_split = 0.1;
  o.seed = 9;
  Dataset d(toks, o);
  // 99 windows of 11 tokens every 10: 9 held out (the end), the training window that
  // overlaps the first held-out one dropped
  EXPECT_EQ(d.n_val(), 9);
  EXPECT_EQ(d.n_train(), 89);
  for (int64_t i = 0; i < d.n_train(); ++i) {
    EXPECT_EQ(d.train_targets(i)[0], d.train_inputs(i)[1]);  // labels shifted by one
    EXPECT_LT(d.train_inputs(i)[10], d.val_inputs(0)[0]);    // no shared token with validation
  }
  const auto e0 = d.epoch_order(0), e0b = d.epoch_order(0), e1 = d.epoch_order(1);
  EXPECT_EQ(e0, e0b);
  EXPECT_NE(e0, e1);
  EXPECT_EQ(std::set<int64_t>(e0.begin(), e0.end()).size(), (size_t)d.n_train());
  o.seed = 10;
  EXPECT_NE(Dataset(toks, o).epoch_order(0), e0);
  o.stride = 5;
  EXPECT_EQ(Dataset(toks, o).n_train() + Dataset(toks, o).n_val(), 197 - 1);
  // a stride past the end (a checkpoint's or --stride's) makes the one window at 0, no overflow
  o.val_split = 0;
  o.stride = std::numeric_limits<int64_t>::max();
  EXPECT_EQ(Dataset(toks, o).n_train(), 1);
  o.n_ctx = 2000;
  EXPECT_THROW(Dataset(toks, o), Error);
  o.n_ctx = std::numeric_limits<int64_t>::max();
  EXPECT_THROW(Dataset(toks, o), Error);
}

TEST(Bpe, LearnsDeterministicMergesThatRoundTrip) {
  // valid UTF-8 round-trips (invalid bytes become U+FFFD in llama.cpp's BPE, by design)
  const std::string text = sample_text(20000, 4) + " caf\xc3\xa9 na\xc3\xafve \xe2\x82\xac 12345 tabs\t\tend";
  const BpeVocab v = train_bpe(text, 320);
  EXPECT_EQ(v.tokens.size(), 320u);
  EXPECT_EQ(v.merges.size() + 257, v.tokens.size());
  EXPECT_EQ(v.tokens[256], "<|endoftext|>");
  EXPECT_EQ(v.tokens[32], "\xc4\xa0");  // space is 'Ġ' in GPT-2's alphabet
  const BpeVocab v2 = train_bpe(text, 320);
  EXPECT_EQ(v.merges, v2.merges);
  // frequent words become single tokens, with their leading space
  EXPECT_NE(std::find(v.tokens.begin(), v.tokens.end(), "\xc4\xa0quick"), v.tokens.end());
  auto tok = Tokenizer::from_spec(bpe_spec(v));
  const std::vector<int32_t> ids = tok->tokenize(text, false, false);
  EXPECT_LT(ids.size(), text.size() / 3);  // real compression
  EXPECT_EQ(tok->detokenize(ids), text);
  EXPECT_LE(tok->tokenize(" the quick", false, false).size(), 3u);
  // too little text: fewer tokens than asked, never an invented merge
  EXPECT_EQ(train_bpe("abab", 1000).tokens.size(), 258u);
  EXPECT_THROW(train_bpe("x", 100), Error);
  // invalid UTF-8 is counted as U+FFFD, as the tokenizer reads it
  const BpeVocab bad = train_bpe("\xff\xfe ab \xff\xfe ab", 300);
  EXPECT_NE(std::find(bad.tokens.begin(), bad.tokens.end(), byte_to_unicode(0xef) + byte_to_unicode(0xbf) + byte_to_unicode(0xbd)),
            bad.tokens.end());
}

TEST(Progress, LineHasTheReferenceShape) {
  EpochStats s;
  s.add(2.0, 40, 100);
  s.add(3.0, 42, 100);
  EXPECT_DOUBLE_EQ(s.loss(), 2.5);
  EXPECT_NEAR(s.loss_unc(), 0.5, 1e-12);  // sqrt(var / n) with var = 0.5
  EXPECT_DOUBLE_EQ(s.acc(), 0.41);
  const std::string line = format_progress("train", 140, 320, s, 47.2, 62.0);
  EXPECT_EQ(line,
            "train: [███▌    ] data=0000140/0000320 loss=2.50000±0.50000 acc=41.00±3.49% t=00:00:47 ETA=00:01:02");
  EXPECT_EQ(format_progress("val", 5, 5, s, 0, 0).rfind("val:   [████████] data=0000005/0000005 ", 0), 0u);
}

}  // namespace
}  // namespace loom::test
