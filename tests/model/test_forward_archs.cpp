// The newer architectures' forward (gemma, gemma2, gemma3, phi3, gpt-oss, granite, glm4moe, Llama 3's
// rope_freqs, Mixtral-shaped llama, qwen2moe, smollm3, glm4, command-r, cohere2, olmo2, granitemoe, olmoe,
// ernie4_5, ernie4_5-moe, exaone4, seed_oss) against a double-precision reference
// written from llama.cpp's graphs: scaled embeddings, GELU FFN, post norms, soft-capping, q/k norms, sliding windows
// with their layer pattern and local RoPE base, RoPE divisors and YaRN, fused projections, sinks, biased experts with
// gpt-oss's gating, sigmoid routing with a selection bias and a shared expert (gated in qwen2moe), Cohere's layer
// norms (per head in Command R+) and parallel attention and FFN, olmo2's post norms alone and q/k norms over all heads
// (OLMo 3's local layers without YaRN), EXAONE 4's post norms with per-head q/k norms (its 64-layer size rotating
// the local layers alone), Seed-OSS's wide q with biases. Small windows so the sliding mask cuts inside the
// sequence.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <numbers>
#include <numeric>
#include <vector>

#include "loom/core/error.h"
#include "loom/model/forward.h"
#include "loom/model/model_file.h"
#include "loom/model/session.h"
#include "reference_math.h"

namespace loom {
namespace {

void add_to(Vec& x, const Vec& b) {
  for (size_t i = 0; i < x.size(); ++i) x[i] += b[i];
}

struct RopeSpec {
  double base, freq_scale, attn_factor;
  bool yarn;
  int64_t n_ctx_orig;
  const Tensor* factors;
  double beta_fast = 32, beta_slow = 1, log_mul = 0;  // YaRN's ramp ends; mistral3's magnitude multiplier
};

// ggml's rotation (with YaRN's ramp and magnitude) of the first n_rot dims of every head of v at
// position pos; the rest of each head passes through.
void rope(Vec& v, int64_t n_heads, int64_t hd, int64_t n_rot, int64_t pos, bool neox, const RopeSpec& r) {
  double lo = 0, hi = 0, m = r.attn_factor;
  if (r.yarn) {
    auto corr = [&](double rot) {
      return n_rot * std::log(r.n_ctx_orig / (rot * 2 * std::numbers::pi)) / (2 * std::log(r.base));
    };
    lo = std::max(0.0, std::floor(corr(r.beta_fast)));
    hi = std::min(n_rot - 1.0, std::ceil(corr(r.beta_slow)));
    // HF's get_mscale(factor, mscale), llama.cpp's magnitude with rope.scaling.yarn_log_multiplier
    const double factor = 1.0 / r.freq_scale;
    auto mscale = [&](double k) { return factor <= 1 ? 1.0 : 0.1 * k * std::log(factor) + 1; };
    m *= r.log_mul != 0 ? mscale(1) / mscale(r.log_mul) : 1 + 0.1 * std::log(factor);
  }
  const Vec ff = r.factors ? weight_row(r.factors, 0) : Vec((size_t)n_rot / 2, 1.0);
  EXPECT_EQ(ff.size(), (size_t)n_rot / 2);
  for (int64_t h = 0; h < n_heads; ++h)
    for (int64_t i = 0; i < n_rot / 2; ++i) {
      const double e = (double)pos * std::pow(r.base, -2.0 * (double)i / (double)n_rot) / ff[(size_t)i];
      double theta = r.freq_scale * e;
      if (r.yarn) {
        const double ramp = 1 - std::clamp((i - lo) / std::max(0.001, hi - lo), 0.0, 1.0);
        theta = theta * (1 - ramp) + e * ramp;
      }
      const size_t a = (size_t)(h * hd + (neox ? i : 2 * i));
      const size_t b = (size_t)(h * hd + (neox ? i + n_rot / 2 : 2 * i + 1));
      const double x0 = v[a], x1 = v[b];
      v[a] = (x0 * std::cos(theta) - x1 * std::sin(theta)) * m;
      v[b] = (x0 * std::sin(theta) + x1 * std::cos(theta)) * m;
    }
}

// The architecture's norm of x[off, off + n) times w's row `row`: RMS, or Cohere's layer norm.
Vec arch_norm(const HParams& hp, const Vec& x, const Tensor* w, size_t off = 0, size_t n = 0, int64_t row = 0) {
  if (n == 0) n = x.size();
  const Vec wv = weight_row(w, row);
  double mean = 0, ss = 0;
  if (arch_is_cohere(hp.arch))
    for (size_t i = 0; i < n; ++i) mean += x[off + i] / (double)n;
  for (size_t i = 0; i < n; ++i) ss += (x[off + i] - mean) * (x[off + i] - mean);
  const double s = 1.0 / std::sqrt(ss / (double)n + hp.rms_eps);
  Vec y(n);
  for (size_t i = 0; i < n; ++i) y[i] = (x[off + i] - mean) * s * wv[i];
  return y;
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }
double gelu(double x) { return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))); }
double softcap(double x, double c) { return c > 0 ? c * std::tanh(x / c) : x; }

Vec softmax(Vec s) {
  const double mx = *std::max_element(s.begin(), s.end());
  double sum = 0;
  for (double& e : s) sum += (e = std::exp(e - mx));
  for (double& e : s) e /= sum;
  return s;
}

// down(silu(gate h) * up h)
Vec swiglu_ffn(const Tensor* gate, const Tensor* up, const Tensor* down, const Vec& h) {
  Vec g = matvec(gate, h), u = matvec(up, h);
  for (size_t j = 0; j < g.size(); ++j) g[j] = silu(g[j]) * u[j];
  return matvec(down, g);
}

Vec moe(const Model& m, const LayerWeights& l, const Vec& h) {
  const HParams& hp = m.hparams();
  Vec logits = matvec(l.ffn_gate_inp, h);
  const bool oai = l.ffn_gate_inp_b != nullptr;
  if (oai) add_to(logits, weight_row(l.ffn_gate_inp_b, 0));
  const bool llama4 = hp.arch == Arch::llama4;  // chosen by logits, sigmoid weights on the input
  Vec probs = oai || llama4 ? logits : softmax(logits);
  if (hp.expert_gating == ExpertGating::sigmoid || llama4)
    for (size_t e = 0; e < probs.size(); ++e) probs[e] = 1 / (1 + std::exp(-logits[e]));
  Vec chosen_by = llama4 ? logits : probs;  // glm4moe: the selection bias picks, the weights stay unbiased
  if (l.exp_probs_b) add_to(chosen_by, weight_row(l.exp_probs_b, 0));
  std::vector<int> idx((size_t)hp.n_expert);
  std::iota(idx.begin(), idx.end(), 0);
  std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return chosen_by[(size_t)a] > chosen_by[(size_t)b]; });
  Vec w((size_t)hp.n_expert_used);
  for (int64_t e = 0; e < hp.n_expert_used; ++e) w[(size_t)e] = probs[(size_t)idx[(size_t)e]];
  if (oai) {
    w = softmax(w);
  } else if (hp.expert_weights_norm) {
    const double sum = std::accumulate(w.begin(), w.end(), 0.0);
    for (double& x : w) x /= sum;
  }
  if (hp.expert_weights_scale > 0)
    for (double& x : w) x *= hp.expert_weights_scale;
  Vec out(h.size(), 0.0);
  for (int64_t e = 0; e < hp.n_expert_used; ++e) {
    const int ex = idx[(size_t)e];
    Vec in = h;
    if (llama4)
      for (double& x : in) x *= w[(size_t)e];
    Vec g = matvec(l.ffn_gate_exps, in, ex), u = matvec(l.ffn_up_exps, in, ex);
    if (oai) {
      add_to(g, weight_row(l.ffn_gate_exps_b, ex));
      add_to(u, weight_row(l.ffn_up_exps_b, ex));
      for (size_t j = 0; j < g.size(); ++j) {
        const double x = std::min(g[j], 7.0), y = std::clamp(u[j], -7.0, 7.0);
        g[j] = x / (1 + std::exp(-1.702 * x)) * (y + 1);
      }
    } else {
      for (size_t j = 0; j < g.size(); ++j) g[j] = silu(g[j]) * u[j];
    }
    Vec d = matvec(l.ffn_down_exps, g, ex);
    if (oai) add_to(d, weight_row(l.ffn_down_exps_b, ex));
    for (size_t j = 0; j < d.size(); ++j) out[j] += (llama4 ? 1.0 : w[(size_t)e]) * d[j];
  }
  return out;
}

// logits[t] for every token (causal), in double precision; n_ctx picks phi3's factors.
std::vector<Vec> reference_forward(const Model& m, const std::vector<int32_t>& tokens, int64_t n_ctx) {
  const HParams& hp = m.hparams();
  const int64_t T = (int64_t)tokens.size(), hd = hp.head_dim, n_q = hp.n_embd_q(), n_kv = hp.n_embd_kv();
  const bool neox = arch_rope_neox(hp.arch), gemma = arch_is_gemma(hp.arch);
  const Tensor* factors = m.rope_freqs;
  if (m.rope_long) factors = n_ctx > hp.n_ctx_orig_or_train() ? m.rope_long : m.rope_short;
  std::vector<Vec> x;
  for (int32_t t : tokens) {
    x.push_back(weight_row(m.tok_embd, t));
    if (gemma)
      for (double& e : x.back()) e *= std::sqrt((double)hp.n_embd);
    if (hp.embedding_scale != 0)  // granite
      for (double& e : x.back()) e *= hp.embedding_scale;
  }
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const LayerWeights& l = m.layers[(size_t)il];
    const bool swa = hp.is_swa_layer(il);
    RopeSpec rs{swa ? hp.rope_theta_swa : hp.rope_theta,
                hp.rope_scaling == RopeScaling::none ? 1.0 : (swa ? hp.rope_freq_scale_swa : hp.rope_freq_scale),
                hp.rope_attn_factor,
                hp.rope_scaling == RopeScaling::yarn,
                hp.n_ctx_orig_or_train(),
                factors,
                hp.yarn_beta_fast,
                hp.yarn_beta_slow,
                hp.yarn_log_mul};
    if (swa && hp.arch == Arch::olmo2) rs = {hp.rope_theta, 1.0, 1.0, false, hp.n_ctx_orig_or_train(), nullptr};
    std::vector<Vec> q(T), k(T), v(T), normed(T);
    for (int64_t i = 0; i < T; ++i) {
      Vec h = l.attn_norm ? arch_norm(hp, x[(size_t)i], l.attn_norm) : x[(size_t)i];  // olmo2: none
      normed[i] = h;
      if (l.wqkv) {
        Vec all = matvec(l.wqkv, h);
        q[i] = Vec(all.begin(), all.begin() + n_q);
        k[i] = Vec(all.begin() + n_q, all.begin() + n_q + n_kv);
        v[i] = Vec(all.begin() + n_q + n_kv, all.end());
      } else {
        q[i] = matvec(l.wq, h);
        k[i] = matvec(l.wk, h);
        v[i] = matvec(l.wv, h);
      }
      if (l.bq) {
        add_to(q[i], weight_row(l.bq, 0));
        add_to(k[i], weight_row(l.bk, 0));
        add_to(v[i], weight_row(l.bv, 0));
      }
      if (arch_whole_qk_norm(hp.arch)) {  // over the whole q and k
        q[i] = arch_norm(hp, q[i], l.q_norm);
        k[i] = arch_norm(hp, k[i], l.k_norm);
      } else if (l.q_norm) {  // Command R+: a weight row per head
        const bool per_head = l.q_norm->ne[1] > 1;
        for (int64_t h2 = 0; h2 < hp.n_head; ++h2) {
          Vec n = arch_norm(hp, q[i], l.q_norm, (size_t)(h2 * hd), (size_t)hd, per_head ? h2 : 0);
          std::copy(n.begin(), n.end(), q[i].begin() + h2 * hd);
        }
        for (int64_t h2 = 0; h2 < hp.n_head_kv; ++h2) {
          Vec n = arch_norm(hp, k[i], l.k_norm, (size_t)(h2 * hd), (size_t)hd, per_head ? h2 : 0);
          std::copy(n.begin(), n.end(), k[i].begin() + h2 * hd);
        }
      }
      // cohere2 and windowed exaone4: global layers have none; smollm3: every 4th layer has none
      const bool local_rotate_only = hp.arch == Arch::cohere2 || (hp.arch == Arch::exaone4 && hp.swa_period > 0);
      const int64_t step = hp.n_no_rope_layer_step;
      const bool roped = local_rotate_only ? swa : step == 0 || (il + 1) % step != 0;
      if (roped) {
        rope(q[i], hp.n_head, hd, hp.rot_dims(), i, neox, rs);
        rope(k[i], hp.n_head_kv, hd, hp.rot_dims(), i, neox, rs);
      }
      if (hp.arch == Arch::llama4 && roped && hp.n_expert != 128) {  // unweighted RMS norms of every head
        for (auto [v2, heads] : {std::pair{&q[i], hp.n_head}, {&k[i], hp.n_head_kv}})
          for (int64_t h2 = 0; h2 < heads; ++h2) {
            double ss = 0;
            for (int64_t e = 0; e < hd; ++e) ss += (*v2)[(size_t)(h2 * hd + e)] * (*v2)[(size_t)(h2 * hd + e)];
            for (int64_t e = 0; e < hd; ++e) (*v2)[(size_t)(h2 * hd + e)] /= std::sqrt(ss / (double)hd + hp.rms_eps);
          }
      }
      // Llama 4's temperature on the queries, one step per original context: mistral3's in every layer,
      // llama4's (offset 1, floor 8192) in the layers without RoPE
      const bool l4 = hp.arch == Arch::llama4;
      const double floor = l4 ? 8192.0 : (double)hp.n_ctx_orig_or_train(), offset = l4 ? 1.0 : 0.0;
      const double temp = 1 + hp.attn_temp_scale * std::log(1.0 + std::floor(((double)i + offset) / floor));
      if (!l4 || !roped)
        for (double& e : q[i]) e *= temp;
    }
    const Vec sinks = l.sinks ? weight_row(l.sinks, 0) : Vec();
    // a file's attention.scale (granite) replaces 1/sqrt(head_dim)
    const double scale = hp.attention_scale != 0 ? hp.attention_scale : hp.attn_scale();
    for (int64_t i = 0; i < T; ++i) {
      Vec o((size_t)n_q, 0.0);
      // a window of n_swa positions, or llama4's chunk from a multiple of n_swa
      const int64_t first = !swa ? 0 : hp.swa_chunked ? i - i % hp.n_swa : std::max<int64_t>(0, i - hp.n_swa + 1);
      for (int64_t h = 0; h < hp.n_head; ++h) {
        const int64_t kvh = h / (hp.n_head / hp.n_head_kv);
        Vec s;
        for (int64_t j = first; j <= i; ++j) {
          double d = 0;
          for (int64_t e = 0; e < hd; ++e) d += q[i][(size_t)(h * hd + e)] * k[j][(size_t)(kvh * hd + e)];
          s.push_back(softcap(d * scale, hp.attn_softcap));
        }
        if (!sinks.empty()) s.push_back(sinks[(size_t)h]);  // the sink's weight is dropped below
        s = softmax(s);
        for (int64_t j = first; j <= i; ++j)
          for (int64_t e = 0; e < hd; ++e)
            o[(size_t)(h * hd + e)] += s[(size_t)(j - first)] * v[j][(size_t)(kvh * hd + e)];
      }
      Vec a = matvec(l.wo, o);
      if (l.bo) add_to(a, weight_row(l.bo, 0));
      if (l.attn_post_norm) a = arch_norm(hp, a, l.attn_post_norm);
      if (hp.residual_scale != 0)  // granite: each branch scaled before its residual add
        for (double& e : a) e *= hp.residual_scale;
      const bool parallel = arch_is_cohere(hp.arch);  // the FFN reads the attention's input
      if (!parallel) add_to(x[i], a);
      Vec h = parallel ? normed[i] : l.ffn_norm ? arch_norm(hp, x[(size_t)i], l.ffn_norm) : x[(size_t)i];
      Vec out;
      if (l.ffn_gate_inp) {
        out = moe(m, l, h);
        if (l.ffn_up_shexp) {
          Vec shared = swiglu_ffn(l.ffn_gate_shexp, l.ffn_up_shexp, l.ffn_down_shexp, h);
          if (l.ffn_gate_inp_shexp) {  // qwen2moe: the shared expert's own sigmoid gate
            const Vec g = weight_row(l.ffn_gate_inp_shexp, 0);
            const double y = std::inner_product(g.begin(), g.end(), h.begin(), 0.0);
            for (double& e : shared) e /= 1 + std::exp(-y);
          }
          add_to(out, shared);
        }
      } else if (!l.ffn_gate) {  // phi3: gate rows then up rows
        Vec gu = matvec(l.ffn_up, h);
        const size_t n_ff = gu.size() / 2;
        Vec g(n_ff);
        for (size_t j = 0; j < n_ff; ++j) g[j] = silu(gu[j]) * gu[n_ff + j];
        out = matvec(l.ffn_down, g);
      } else {
        Vec g = matvec(l.ffn_gate, h), u = matvec(l.ffn_up, h);
        for (size_t j = 0; j < g.size(); ++j) g[j] = (gemma ? gelu(g[j]) : silu(g[j])) * u[j];
        out = matvec(l.ffn_down, g);
      }
      if (l.ffn_post_norm) out = arch_norm(hp, out, l.ffn_post_norm);
      if (hp.residual_scale != 0)
        for (double& e : out) e *= hp.residual_scale;
      add_to(x[i], out);
      if (parallel) add_to(x[i], a);
    }
  }
  std::vector<Vec> logits;
  for (int64_t i = 0; i < T; ++i) {
    Vec y = matvec(m.output, arch_norm(hp, x[(size_t)i], m.output_norm));
    const double granite_div = arch_is_granite(hp.arch) && hp.logit_scale != 0 ? hp.logit_scale : 1.0;
    const double cohere_mul = arch_is_cohere(hp.arch) && hp.logit_scale != 0 ? hp.logit_scale : 1.0;
    for (double& e : y) e = softcap(e, hp.final_softcap) / granite_div * cohere_mul;
    logits.push_back(y);
  }
  return logits;
}

struct Case {
  const char* name;
  Arch arch;
  bool rope_freqs = false;
  int64_t n_expert = 0;  // llama: Mixtral-shaped
  int64_t n_rot = 0;     // partial rotary embeddings (Phi-4-mini: 3/4 of each head; 0: the preset's)
  bool qk_norm = false;  // glm4moe: GLM-4.5's q/k norms, 3 layers, weights not renormalized
  int64_t n_layer = 0;   // command-r: 64 layers carry Command R+'s per-head q/k norms
  bool olmo3 = false;    // olmo2: OLMo 3's windows (3 local layers of 4) and YaRN on the global ones
  int64_t n_ff_shared = 0;  // granitemoe: Granite MoE Shared's expert
};

HParams case_hparams(const Case& c) {
  HParams hp = preset_hparams(c.arch, "tiny");
  if (hp.n_swa > 0 && c.arch != Arch::llama4) hp.n_swa = 4;  // the window cuts into the 11-token sequence
  // (llama4's chunks are 8192 wide whatever the file says; test_arch.cpp checks their masks)
  hp.rope_freqs = c.rope_freqs;
  if (c.n_rot > 0) hp.n_rot = c.n_rot;
  if (c.n_layer > 0) {  // many layers, each small
    hp.n_layer = c.n_layer;
    hp.n_embd = 64;
    hp.n_head = 4;
    hp.n_head_kv = 2;
    hp.head_dim = 16;
    hp.n_ff = 96;
  }
  if (c.arch == Arch::exaone4 && hp.n_layer == 64) {  // EXAONE 4.0 32B's windows
    hp.n_swa = 4;
    hp.swa_period = 4;
  }
  if (c.arch == Arch::mistral3) {  // YaRN with its own ramp ends and magnitude; temperatures 1, 1.35, 1.55
    hp.n_ctx_orig = 4;
    hp.rope_theta = hp.rope_theta_swa = 100.0f;  // the ramp over dims 0-4 with these ends, dim 0 alone with 32, 1
    hp.yarn_beta_fast = 0.5f;
    hp.yarn_beta_slow = 0.25f;
    hp.yarn_log_mul = 0.5f;
    hp.attn_temp_scale = 0.5f;
  }
  if (c.n_ff_shared > 0) {
    hp.n_ff_shared = c.n_ff_shared;
    hp.n_expert_shared = 1;
  }
  if (c.olmo3) {
    hp.n_layer = 4;
    hp.n_swa = 4;
    hp.swa_period = 4;
    hp.rope_scaling = RopeScaling::yarn;
    hp.rope_freq_scale = 0.25f;
    hp.n_ctx_orig = 128;
  }
  if (c.qk_norm) {
    hp.qk_norm = true;
    hp.n_layer = 3;
    hp.expert_weights_norm = false;
  }
  if (c.n_expert > 0) {
    hp.n_expert = c.n_expert;
    hp.n_expert_used = 2;
    hp.n_ff_exp = hp.n_ff;
  }
  return hp;
}

std::string make_model(const Case& c) {
  NewModelOptions o;
  o.hparams = case_hparams(c);
  o.type = DType::F32;
  o.seed = 11;
  o.norm_jitter = 0.2f;  // each norm weight its own, so a norm applied with another's weights shows
  o.output =
      (std::filesystem::temp_directory_path() / ("loom-fwd-arch-" + std::to_string(getpid()) + "-" + c.name + ".gguf"))
          .string();
  make_random_model(o);
  return o.output;
}

const std::vector<int32_t> kTokens = {1, 17, 42, 99, 3, 250, 7, 64, 128, 5, 33};

class ArchForwardTest : public ::testing::TestWithParam<Case> {};

TEST_P(ArchForwardTest, LogitsMatchDoubleReference) {
  const Case c = GetParam();
  const std::string path = make_model(c);
  auto model = Model::load(path);
  EXPECT_EQ(model->hparams().rope_freqs, c.rope_freqs);
  ModelLoadOptions file_layout;
  file_layout.placement.repack = false;
  auto plain = Model::load(path, file_layout);
  // phi3 switches to its long factors past n_ctx_orig (128 in the tiny preset)
  for (int64_t n_ctx : {int64_t{64}, int64_t{256}}) {
    if (n_ctx == 256 && c.arch != Arch::phi3) continue;
    const std::vector<Vec> want = reference_forward(*plain, kTokens, n_ctx);
    for (bool flash : {true, false}) {
      SessionParams sp;
      sp.n_ctx = n_ctx;
      sp.n_ubatch = 4;  // several ubatches: the cache and the window masks across batches
      sp.type_k = sp.type_v = DType::F32;
      sp.n_threads = 2;
      sp.flash_attn = flash;
      Session s(*model, sp);
      s.decode(kTokens, /*all_logits=*/true);
      ASSERT_EQ(s.n_outputs(), (int64_t)kTokens.size());
      for (size_t i = 0; i < kTokens.size(); ++i)
        EXPECT_LT(rel_err(s.logits((int64_t)i), want[i]), 1e-4)
            << "token " << i << (flash ? " flash" : " plain") << " n_ctx " << n_ctx;
    }
  }
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(
    Archs, ArchForwardTest,
    ::testing::Values(Case{"gemma", Arch::gemma}, Case{"gemma2", Arch::gemma2}, Case{"gemma3", Arch::gemma3},
                      Case{"phi3", Arch::phi3}, Case{"gpt_oss", Arch::gpt_oss}, Case{"llama3", Arch::llama, true},
                      Case{"mixtral", Arch::llama, false, 4}, Case{"phi4_mini", Arch::phi3, false, 0, 24},
                      Case{"granite", Arch::granite}, Case{"glm45_air", Arch::glm4moe},
                      Case{"qwen2moe", Arch::qwen2moe}, Case{"smollm3", Arch::smollm3}, Case{"glm4", Arch::glm4},
                      Case{"glm45", Arch::glm4moe, false, 0, 0, true}, Case{"command_r", Arch::command_r},
                      Case{"cohere2", Arch::cohere2}, Case{"command_r_plus", Arch::command_r, false, 0, 0, false, 64},
                      Case{"olmo2", Arch::olmo2}, Case{"olmo3", Arch::olmo2, false, 0, 0, false, 0, true},
                      Case{"granitemoe", Arch::granitemoe}, Case{"olmoe", Arch::olmoe},
                      Case{"ernie4_5", Arch::ernie4_5}, Case{"exaone4", Arch::exaone4, true},
                      Case{"exaone4_32b", Arch::exaone4, true, 0, 0, false, 64}, Case{"seed_oss", Arch::seed_oss},
                      Case{"ernie4_5_moe", Arch::ernie4_5_moe}, Case{"mistral3", Arch::mistral3, true},
                      Case{"mistral3_moe", Arch::mistral3, false, 4}, Case{"llama4", Arch::llama4, true},
                      Case{"granitemoe_shared", Arch::granitemoe, false, 0, 0, false, 0, false, 192}),
    [](const auto& info) { return std::string(info.param.name); });

// Llama 4's temperature reaches only the layers without RoPE, mistral3's every layer: counted in the
// graph, since no sequence here reaches llama4's first step (position 8191).
TEST(ArchForward, TemperatureReachesTheLayersLlamaCppGivesIt) {
  for (const Case& c : {Case{"temp-llama4", Arch::llama4}, Case{"temp-mistral3", Arch::mistral3}}) {
    const std::string path = make_model(c);
    auto model = Model::load(path);
    const HParams& hp = model->hparams();
    Context ctx;
    ForwardShape s;
    s.n_tokens = s.n_kv = s.n_outputs = 4;
    s.n_seq = 1;
    const ForwardInputs in = build_forward(ctx, *model, KvCache{}, s);
    ASSERT_NE(in.attn_temp, nullptr) << c.name;
    int64_t users = 0, want = 0;
    for (Tensor& t : ctx.tensors())
      for (Tensor* src : t.src) users += src == in.attn_temp;
    for (int64_t il = 0; il < hp.n_layer; ++il) want += c.arch == Arch::mistral3 || !hp.rotates(il);
    EXPECT_EQ(users, want) << c.name;
    EXPECT_LT(want, c.arch == Arch::llama4 ? hp.n_layer : hp.n_layer + 1) << c.name;
    std::filesystem::remove(path);
  }
}

// The hyper-parameters survive the file: what write_hparams wrote, read_hparams reads back.
TEST(ArchHParams, RoundTripThroughTheFile) {
  for (const Case& c : {Case{"rt-gemma", Arch::gemma},
                        Case{"rt-gemma2", Arch::gemma2},
                        Case{"rt-gemma3", Arch::gemma3},
                        Case{"rt-phi3", Arch::phi3},
                        Case{"rt-gpt_oss", Arch::gpt_oss},
                        Case{"rt-llama3", Arch::llama, true},
                        Case{"rt-phi4_mini", Arch::phi3, false, 0, 24},
                        Case{"rt-granite", Arch::granite},
                        Case{"rt-glm45_air", Arch::glm4moe},
                        Case{"rt-glm45", Arch::glm4moe, false, 0, 0, true},
                        Case{"rt-qwen2moe", Arch::qwen2moe},
                        Case{"rt-smollm3", Arch::smollm3},
                        Case{"rt-glm4", Arch::glm4},
                        Case{"rt-command_r", Arch::command_r},
                        Case{"rt-cohere2", Arch::cohere2},
                        Case{"rt-command_r_plus", Arch::command_r, false, 0, 0, false, 64},
                        Case{"rt-olmo2", Arch::olmo2},
                        Case{"rt-olmo3", Arch::olmo2, false, 0, 0, false, 0, true},
                        Case{"rt-granitemoe", Arch::granitemoe},
                        Case{"rt-granitemoe_shared", Arch::granitemoe, false, 0, 0, false, 0, false, 192},
                        Case{"rt-olmoe", Arch::olmoe},
                        Case{"rt-ernie4_5", Arch::ernie4_5},
                        Case{"rt-exaone4", Arch::exaone4, true},
                        Case{"rt-exaone4_32b", Arch::exaone4, true, 0, 0, false, 64},
                        Case{"rt-seed_oss", Arch::seed_oss},
                        Case{"rt-ernie4_5_moe", Arch::ernie4_5_moe},
                        Case{"rt-mistral3", Arch::mistral3, true},
                        Case{"rt-llama4", Arch::llama4, true}}) {
    const std::string path = make_model(c);
    const HParams want = case_hparams(c);
    const HParams got = Model::load(path)->hparams();
    EXPECT_EQ(got.n_swa, want.n_swa) << c.name;
    EXPECT_EQ(got.swa_period, want.swa_period) << c.name;
    EXPECT_EQ(got.rope_scaling, want.rope_scaling) << c.name;
    EXPECT_FLOAT_EQ(got.rope_freq_scale, want.rope_freq_scale) << c.name;
    EXPECT_FLOAT_EQ(got.rope_theta_swa, want.rope_theta_swa) << c.name;
    EXPECT_FLOAT_EQ(got.rope_attn_factor, want.rope_attn_factor) << c.name;
    EXPECT_EQ(got.n_ctx_orig, want.n_ctx_orig) << c.name;
    EXPECT_FLOAT_EQ(got.attn_softcap, want.attn_softcap) << c.name;
    EXPECT_FLOAT_EQ(got.final_softcap, want.final_softcap) << c.name;
    EXPECT_EQ(got.tied_embeddings, want.tied_embeddings) << c.name;
    EXPECT_EQ(got.rope_freqs, want.rope_freqs) << c.name;
    EXPECT_EQ(got.rope_long_short, want.rope_long_short) << c.name;
    EXPECT_EQ(got.n_ff_exp, want.n_ff_exp) << c.name;
    EXPECT_EQ(got.n_rot, want.n_rot) << c.name;
    EXPECT_FLOAT_EQ(got.embedding_scale, want.embedding_scale) << c.name;
    EXPECT_FLOAT_EQ(got.residual_scale, want.residual_scale) << c.name;
    EXPECT_FLOAT_EQ(got.attention_scale, want.attention_scale) << c.name;
    EXPECT_FLOAT_EQ(got.logit_scale, want.logit_scale) << c.name;
    EXPECT_EQ(got.n_layer, want.n_layer) << c.name;
    EXPECT_EQ(got.n_layer_nextn, want.n_layer_nextn) << c.name;
    EXPECT_EQ(got.n_layer_dense_lead, want.n_layer_dense_lead) << c.name;
    EXPECT_EQ(got.n_expert_shared, want.n_expert_shared) << c.name;
    EXPECT_EQ(got.n_ff_shexp(), want.n_ff_shexp()) << c.name;
    EXPECT_EQ(got.expert_gating, want.expert_gating) << c.name;
    EXPECT_EQ(got.expert_weights_norm, want.expert_weights_norm) << c.name;
    EXPECT_FLOAT_EQ(got.expert_weights_scale, want.expert_weights_scale) << c.name;
    EXPECT_EQ(got.qk_norm, want.qk_norm) << c.name;
    EXPECT_EQ(got.n_no_rope_layer_step, want.n_no_rope_layer_step) << c.name;
    EXPECT_FLOAT_EQ(got.rms_eps, want.rms_eps) << c.name;
    EXPECT_EQ(got.per_head_qk_norm(), want.per_head_qk_norm()) << c.name;
    EXPECT_FLOAT_EQ(got.yarn_beta_fast, want.yarn_beta_fast) << c.name;
    EXPECT_FLOAT_EQ(got.yarn_beta_slow, want.yarn_beta_slow) << c.name;
    EXPECT_FLOAT_EQ(got.yarn_log_mul, want.yarn_log_mul) << c.name;
    EXPECT_FLOAT_EQ(got.attn_temp_scale, want.attn_temp_scale) << c.name;
    std::filesystem::remove(path);
  }
}

}  // namespace
}  // namespace loom
