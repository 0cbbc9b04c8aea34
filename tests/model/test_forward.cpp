// The model forward pass against an independent reference: plain double-precision loops over
// the weights (dequantized with the dtype table), no engine ops. Covers every architecture,
// decode with the KV cache against full recomputation, and quantized weights.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numeric>
#include <vector>

#include "loom/core/error.h"
#include "loom/cpu/cpu.h"
#include "loom/model/model_file.h"
#include "loom/model/session.h"
#include "reference_math.h"

namespace loom {
namespace {

void rope(Vec& v, int64_t n_heads, int64_t hd, int64_t pos, double base, bool neox) {
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < hd / 2; ++i) {
      const double theta = (double)pos * std::pow(base, -2.0 * (double)i / (double)hd);
      const size_t a = (size_t)(h * hd + (neox ? i : 2 * i));
      const size_t b = (size_t)(h * hd + (neox ? i + hd / 2 : 2 * i + 1));
      const double x0 = v[a], x1 = v[b];
      v[a] = x0 * std::cos(theta) - x1 * std::sin(theta);
      v[b] = x0 * std::sin(theta) + x1 * std::cos(theta);
    }
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }

// logits[t] for every token of the sequence (causal), all in double precision.
std::vector<Vec> reference_forward(const Model& m, const std::vector<int32_t>& tokens) {
  const HParams& hp = m.hparams();
  const int64_t T = (int64_t)tokens.size(), hd = hp.head_dim;
  const bool neox = arch_rope_neox(hp.arch);
  std::vector<Vec> x;
  for (int32_t t : tokens) x.push_back(weight_row(m.tok_embd, t));
  for (const LayerWeights& l : m.layers) {
    std::vector<Vec> q(T), k(T), v(T);
    for (int64_t i = 0; i < T; ++i) {
      Vec h = rms_norm(x[(size_t)i], l.attn_norm, hp.rms_eps);
      q[i] = matvec(l.wq, h);
      k[i] = matvec(l.wk, h);
      v[i] = matvec(l.wv, h);
      if (l.bq) {
        Vec bq = weight_row(l.bq, 0), bk = weight_row(l.bk, 0), bv = weight_row(l.bv, 0);
        for (size_t j = 0; j < q[i].size(); ++j) q[i][j] += bq[j];
        for (size_t j = 0; j < k[i].size(); ++j) k[i][j] += bk[j], v[i][j] += bv[j];
      }
      if (l.q_norm) {
        for (int64_t h2 = 0; h2 < hp.n_head; ++h2) {
          Vec n = rms_norm(q[i], l.q_norm, hp.rms_eps, (size_t)(h2 * hd), (size_t)hd);
          std::copy(n.begin(), n.end(), q[i].begin() + h2 * hd);
        }
        for (int64_t h2 = 0; h2 < hp.n_head_kv; ++h2) {
          Vec n = rms_norm(k[i], l.k_norm, hp.rms_eps, (size_t)(h2 * hd), (size_t)hd);
          std::copy(n.begin(), n.end(), k[i].begin() + h2 * hd);
        }
      }
      rope(q[i], hp.n_head, hd, i, hp.rope_theta, neox);
      rope(k[i], hp.n_head_kv, hd, i, hp.rope_theta, neox);
    }
    for (int64_t i = 0; i < T; ++i) {
      Vec o((size_t)(hp.n_head * hd), 0.0);
      for (int64_t h = 0; h < hp.n_head; ++h) {
        const int64_t kvh = h / (hp.n_head / hp.n_head_kv);
        Vec s((size_t)(i + 1));
        for (int64_t j = 0; j <= i; ++j) {
          double d = 0;
          for (int64_t e = 0; e < hd; ++e) d += q[i][(size_t)(h * hd + e)] * k[j][(size_t)(kvh * hd + e)];
          s[(size_t)j] = d / std::sqrt((double)hd);
        }
        const double mx = *std::max_element(s.begin(), s.end());
        double sum = 0;
        for (double& e : s) sum += (e = std::exp(e - mx));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t e = 0; e < hd; ++e) o[(size_t)(h * hd + e)] += s[(size_t)j] / sum * v[j][(size_t)(kvh * hd + e)];
      }
      Vec a = matvec(l.wo, o);
      for (size_t e = 0; e < a.size(); ++e) x[i][e] += a[e];
      Vec h = rms_norm(x[(size_t)i], l.ffn_norm, hp.rms_eps);
      Vec out(h.size(), 0.0);
      if (l.ffn_gate_inp) {
        Vec logits = matvec(l.ffn_gate_inp, h);
        const double mx = *std::max_element(logits.begin(), logits.end());
        double sum = 0;
        for (double& e : logits) sum += (e = std::exp(e - mx));
        for (double& e : logits) e /= sum;
        std::vector<int> idx((size_t)hp.n_expert);
        std::iota(idx.begin(), idx.end(), 0);
        std::stable_sort(idx.begin(), idx.end(), [&](int a2, int b2) { return logits[(size_t)a2] > logits[(size_t)b2]; });
        double wsum = 0;
        for (int64_t e = 0; e < hp.n_expert_used; ++e) wsum += logits[(size_t)idx[(size_t)e]];
        for (int64_t e = 0; e < hp.n_expert_used; ++e) {
          const int ex = idx[(size_t)e];
          Vec g = matvec(l.ffn_gate_exps, h, ex), u = matvec(l.ffn_up_exps, h, ex);
          for (size_t j = 0; j < g.size(); ++j) g[j] = silu(g[j]) * u[j];
          Vec d = matvec(l.ffn_down_exps, g, ex);
          for (size_t j = 0; j < d.size(); ++j) out[j] += logits[(size_t)ex] / wsum * d[j];
        }
      } else {
        Vec g = matvec(l.ffn_gate, h), u = matvec(l.ffn_up, h);
        for (size_t j = 0; j < g.size(); ++j) g[j] = silu(g[j]) * u[j];
        out = matvec(l.ffn_down, g);
      }
      for (size_t e = 0; e < out.size(); ++e) x[i][e] += out[e];
    }
  }
  std::vector<Vec> logits;
  for (int64_t i = 0; i < T; ++i) logits.push_back(matvec(m.output, rms_norm(x[(size_t)i], m.output_norm, hp.rms_eps)));
  return logits;
}

std::string make_model(Arch arch, DType type, const std::string& tag) {
  NewModelOptions o;
  o.hparams = preset_hparams(arch, "tiny");
  o.type = type;
  o.seed = 7;
  o.output = (std::filesystem::temp_directory_path() / ("loom-fwd-" + std::to_string(getpid()) + "-" + tag + ".gguf")).string();
  make_random_model(o);
  return o.output;
}

const std::vector<int32_t> kTokens = {1, 17, 42, 99, 3, 250, 7, 64, 128, 5, 33};

struct Case {
  Arch arch;
  DType type;
  double tol;
};

class ForwardTest : public ::testing::TestWithParam<Case> {};

TEST_P(ForwardTest, LogitsMatchDoubleReference) {
  const Case c = GetParam();
  const std::string path =
      make_model(c.arch, c.type, std::string(arch_name(c.arch)) + "-" + dtype_name(c.type));
  auto model = Model::load(path);
  // The reference reads the weights as the file stores them (the CPU's copy may be repacked).
  ModelLoadOptions file_layout;
  file_layout.placement.repack = false;
  auto plain = Model::load(path, file_layout);
  for (bool flash : {true, false}) {
    SessionParams sp;
    sp.n_ctx = 64;
    sp.n_ubatch = 4;  // several ubatches: exercises the KV cache across batches
    sp.type_k = sp.type_v = DType::F32;
    sp.n_threads = 2;
    sp.flash_attn = flash;
    Session s(*model, sp);
    s.decode(kTokens, /*all_logits=*/true);
    std::vector<Vec> want = reference_forward(*plain, kTokens);
    ASSERT_EQ(s.n_outputs(), (int64_t)kTokens.size());
    for (size_t i = 0; i < kTokens.size(); ++i)
      EXPECT_LT(rel_err(s.logits((int64_t)i), want[i]), c.tol) << "token " << i << (flash ? " flash" : " plain");
  }
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Archs, ForwardTest,
                         ::testing::Values(Case{Arch::llama, DType::F32, 1e-4}, Case{Arch::qwen2, DType::F32, 1e-4},
                                           Case{Arch::qwen3, DType::F32, 1e-4}, Case{Arch::qwen3moe, DType::F32, 1e-4},
                                           Case{Arch::llama, DType::F16, 1e-3}, Case{Arch::llama, DType::BF16, 1e-3},
                                           // quantized weights: the CPU quantizes activations to 8 bits
                                           // for integer dot products, as llama.cpp does
                                           Case{Arch::llama, DType::Q8_0, 3e-2},
                                           // a random router is near-uniform: 8-bit activations can flip
                                           // a top-k choice, so the MoE bound is looser
                                           Case{Arch::qwen3moe, DType::Q4_0, 1e-1},
                                           Case{Arch::qwen3moe, DType::Q4_K, 1e-1},
                                           Case{Arch::llama, DType::Q4_K, 3e-2}),
                         [](const auto& info) {
                           return std::string(arch_name(info.param.arch)) + "_" + dtype_name(info.param.type);
                         });

// Decoding one token at a time through the KV cache equals recomputing the whole sequence.
TEST(ForwardDecode, IncrementalEqualsFullRecompute) {
  for (Arch arch : {Arch::llama, Arch::qwen3moe}) {
    const std::string path = make_model(arch, DType::F32, std::string("inc-") + arch_name(arch));
    auto model = Model::load(path);
    SessionParams sp;
    sp.n_ctx = 64;
    sp.type_k = sp.type_v = DType::F32;
    sp.n_threads = 2;
    Session full(*model, sp), inc(*model, sp);
    full.decode(kTokens, true);
    for (size_t i = 0; i < kTokens.size(); ++i) {
      inc.decode(std::span<const int32_t>(&kTokens[i], 1));
      std::span<const float> a = inc.logits(0), b = full.logits((int64_t)i);
      double err = 0, den = 0;
      for (size_t j = 0; j < a.size(); ++j) {
        err = std::max(err, (double)std::abs(a[j] - b[j]));
        den = std::max(den, (double)std::abs(b[j]));
      }
      EXPECT_LT(err / den, 1e-5) << arch_name(arch) << " token " << i;
    }
    std::filesystem::remove(path);
  }
}

// -tb (n_threads_batch): a batch of tokens runs on that many CPU threads and one token on
// n_threads, llama.cpp's rule; the logits are the same as with one count for both.
TEST(ForwardDecode, BatchThreadsRunBatchesOnly) {
  const std::string path = make_model(Arch::llama, DType::Q8_0, "tb");
  auto model = Model::load(path);
  auto* cpu = dynamic_cast<cpu::CpuDevice*>(model->devices().back());
  ASSERT_NE(cpu, nullptr);
  SessionParams sp;
  sp.n_ctx = 64;
  sp.n_threads = 1;
  std::vector<float> want_batch, want_one;
  {
    Session ref(*model, sp);
    ref.decode(kTokens, true);
    for (size_t i = 0; i < kTokens.size(); ++i)
      want_batch.insert(want_batch.end(), ref.logits((int64_t)i).begin(), ref.logits((int64_t)i).end());
    ref.decode(std::span<const int32_t>(&kTokens[0], 1));
    want_one.assign(ref.logits(0).begin(), ref.logits(0).end());
    EXPECT_EQ(cpu->n_threads(), 1);
  }
  sp.n_threads_batch = 2;
  Session s(*model, sp);
  s.decode(kTokens, true);
  EXPECT_EQ(cpu->n_threads(), 2) << "a batch runs on -tb threads";
  std::vector<float> got_batch;
  for (size_t i = 0; i < kTokens.size(); ++i)
    got_batch.insert(got_batch.end(), s.logits((int64_t)i).begin(), s.logits((int64_t)i).end());
  s.decode(std::span<const int32_t>(&kTokens[0], 1));
  EXPECT_EQ(cpu->n_threads(), 1) << "one token runs on -t threads";
  ASSERT_EQ(got_batch.size(), want_batch.size());
  for (size_t j = 0; j < got_batch.size(); ++j) ASSERT_NEAR(got_batch[j], want_batch[j], 1e-5f) << j;
  for (size_t j = 0; j < want_one.size(); ++j) ASSERT_NEAR(s.logits(0)[j], want_one[j], 1e-5f) << j;
  std::filesystem::remove(path);
}

TEST(ForwardDecode, ContextOverflowIsRefused) {
  const std::string path = make_model(Arch::llama, DType::F32, "overflow");
  auto model = Model::load(path);
  SessionParams sp;
  sp.n_ctx = 8;
  Session s(*model, sp);
  EXPECT_THROW(s.decode(kTokens), Error);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// -ctk/-ctv q8_0 and f16: the cache's own rounding is the only difference from the reference.
TEST(ForwardCache, QuantizedAndHalfCachesStayCloseToTheReference) {
  const std::string path = make_model(Arch::qwen3, DType::F32, "cache-types");
  auto model = Model::load(path);
  std::vector<Vec> want = reference_forward(*model, kTokens);
  for (DType t : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0})
    for (bool flash : {true, false}) {
      SessionParams sp;
      sp.n_ctx = 64;
      sp.n_ubatch = 4;
      sp.type_k = sp.type_v = t;
      // without flash attention a quantized V is refused (as llama.cpp): K quantized, V f16
      if (!flash && dtype_info(t).is_quantized) sp.type_v = DType::F16;
      sp.flash_attn = flash;
      Session s(*model, sp);
      s.decode(kTokens, true);
      // q4_0 keeps 4 bits a value (~1/16 of a block's range): ~10% on a random model's logits, where a
      // cache read wrong is ~100%
      const double tol = t == DType::F16 ? 5e-3 : t == DType::Q4_0 ? 0.2 : 3e-2;
      for (size_t i = 0; i < kTokens.size(); ++i)
        EXPECT_LT(rel_err(s.logits((int64_t)i), want[i]), tol) << dtype_name(t) << (flash ? " flash" : " plain")
                                                              << " token " << i;
    }
  SessionParams plain_q8v;
  plain_q8v.n_ctx = 64;
  plain_q8v.type_v = DType::Q8_0;
  plain_q8v.flash_attn = false;
  try {
    Session s(*model, plain_q8v);
    ADD_FAILURE() << "a quantized V cache without flash attention was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage) << e.what();
  }
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace loom
