// The ops the newer architectures need, against double-precision references written here:
// TANH (gemma2's soft-capping), SWIGLU_OAI (gpt-oss), YaRN RoPE (gpt-oss, Llama-style long
// context) and attention sinks in SOFT_MAX and FLASH_ATTN_EXT (gpt-oss).
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "op_harness.h"

namespace loom::test {
namespace {

TEST(ArchOps, TanhAndSwigluOai) {
  OpRunner r;
  Tensor* a = r.input(DType::F32, {37, 5});
  Tensor* b = r.input(DType::F32, {37, 5});
  Tensor* t = ops::tanh(r.ctx, a);
  Tensor* s = ops::swiglu_oai(r.ctx, a, b, 1.702f, 7.0f);
  r.alloc();
  r.fill_normal(a, 6.0f);  // past the limit on both sides
  r.fill_normal(b, 6.0f);
  r.compute(t);
  r.compute(s);
  const std::vector<float> av = r.get_f32(a), bv = r.get_f32(b), tv = r.get_f32(t), sv = r.get_f32(s);
  for (size_t i = 0; i < av.size(); ++i) {
    EXPECT_NEAR(tv[i], std::tanh((double)av[i]), 1e-6);
    const double x = std::min((double)av[i], 7.0), y = std::clamp((double)bv[i], -7.0, 7.0);
    const double want = x / (1.0 + std::exp(-1.702 * x)) * (y + 1.0);
    EXPECT_NEAR(sv[i], want, 1e-5 * std::max(1.0, std::fabs(want))) << i;
  }
  EXPECT_THROW(ops::swiglu_oai(r.ctx, a, b, 1.0f, -1.0f), Error);
}

// ggml's YaRN rotation of pair i at position p, written out.
void yarn_pair(const ops::RopeParams& p, int i, double pos, double& c, double& s) {
  const double e = pos * std::pow((double)p.freq_base, -2.0 * i / p.n_dims);
  double theta = p.freq_scale * e, m = p.attn_factor;
  if (p.ext_factor != 0.0f) {
    auto corr = [&](double rot) {
      return p.n_dims * std::log(p.n_ctx_orig / (rot * 2 * std::numbers::pi)) / (2 * std::log((double)p.freq_base));
    };
    const double lo = std::max(0.0, std::floor(corr(p.beta_fast)));
    const double hi = std::min(p.n_dims - 1.0, std::ceil(corr(p.beta_slow)));
    const double y = (i - lo) / std::max(0.001, hi - lo);
    const double ramp = (1 - std::clamp(y, 0.0, 1.0)) * p.ext_factor;
    theta = theta * (1 - ramp) + e * ramp;
    m *= 1 + 0.1 * std::log(1.0 / p.freq_scale);
  }
  c = std::cos(theta) * m;
  s = std::sin(theta) * m;
}

TEST(ArchOps, YarnRopeMatchesReference) {
  for (int mode : {ops::kRopeNormal, ops::kRopeNeox}) {
    OpRunner r;
    const int64_t hd = 64, nh = 3, T = 5;
    Tensor* a = r.input(DType::F32, {hd, nh, T});
    Tensor* pos = r.input(DType::I32, {T});
    ops::RopeParams p;
    p.n_dims = (int32_t)hd;
    p.mode = mode;
    p.n_ctx_orig = 4096;
    p.freq_base = 150000.0f;
    p.freq_scale = 1.0f / 32;
    p.ext_factor = 1.0f;
    p.attn_factor = 0.9f;
    Tensor* y = ops::rope(r.ctx, a, pos, nullptr, p);
    r.alloc();
    r.fill_normal(a);
    r.set_i32(pos, {0, 7, 300, 4095, 90000});
    r.compute(y);
    const std::vector<float> x = r.get_f32(a), got = r.get_f32(y);
    const int32_t positions[] = {0, 7, 300, 4095, 90000};
    std::vector<double> want(x.size());
    const int64_t half = hd / 2;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < nh; ++h)
        for (int i = 0; i < half; ++i) {
          double c, s;
          yarn_pair(p, i, positions[t], c, s);
          const int64_t j0 = mode == ops::kRopeNeox ? i : 2 * i, j1 = mode == ops::kRopeNeox ? i + half : 2 * i + 1;
          const size_t base = (size_t)((t * nh + h) * hd);
          want[base + j0] = x[base + j0] * c - x[base + j1] * s;
          want[base + j1] = x[base + j0] * s + x[base + j1] * c;
        }
    EXPECT_LT(nmse(got, want), 1e-10) << "mode " << mode;
  }
}

// softmax over keys of (scores * scale + mask) with head h's sink in the denominator.
std::vector<double> ref_softmax_sinks(const std::vector<float>& a, const std::vector<float>& mask,
                                      const std::vector<float>& sinks, int64_t n, int64_t rows, int64_t heads,
                                      double scale) {
  std::vector<double> out(a.size());
  for (int64_t h = 0; h < heads; ++h)
    for (int64_t r = 0; r < rows; ++r) {
      double mx = sinks[(size_t)h], sum = 0;
      std::vector<double> v((size_t)n);
      for (int64_t i = 0; i < n; ++i) {
        v[(size_t)i] = a[(size_t)((h * rows + r) * n + i)] * scale + mask[(size_t)(r * n + i)];
        mx = std::max(mx, v[(size_t)i]);
      }
      for (double& x : v) sum += std::exp(x - mx);
      sum += std::exp(sinks[(size_t)h] - mx);
      for (int64_t i = 0; i < n; ++i) out[(size_t)((h * rows + r) * n + i)] = std::exp(v[(size_t)i] - mx) / sum;
    }
  return out;
}

TEST(ArchOps, SoftMaxWithSinks) {
  OpRunner r;
  const int64_t n = 13, rows = 4, heads = 3;
  Tensor* a = r.input(DType::F32, {n, rows, heads});
  Tensor* m = r.input(DType::F32, {n, rows});
  Tensor* sinks = r.input(DType::F32, {heads});
  Tensor* y = ops::soft_max(r.ctx, a, m, 0.5f, 0.0f, sinks);
  r.alloc();
  r.fill_normal(a, 2.0f);
  std::vector<float> mv((size_t)(n * rows), 0.0f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = i + 9; j < n; ++j) mv[(size_t)(i * n + j)] = -INFINITY;
  r.set_f32(m, mv);
  r.set_f32(sinks, {3.0f, -1.0f, 0.5f});
  r.compute(y);
  const std::vector<float> got = r.get_f32(y);
  EXPECT_LT(nmse(got, ref_softmax_sinks(r.get_f32(a), mv, {3.0f, -1.0f, 0.5f}, n, rows, heads, 0.5)), 1e-12);
  // a row's weights sum to less than one: the sink took its share
  double row0 = 0;
  for (int64_t i = 0; i < n; ++i) row0 += got[(size_t)i];
  EXPECT_LT(row0, 0.99);
  Tensor* bad = r.ctx.new_tensor(DType::F32, {heads + 1}, "bad_sinks");
  EXPECT_THROW(ops::soft_max(r.ctx, a, m, 0.5f, 0.0f, bad), Error);
}

TEST(ArchOps, FlashAttentionWithSinksMatchesExplicit) {
  for (int64_t n_q : {1, 6}) {
    OpRunner r;
    const int64_t D = 32, n_kv = 20, h = 4, h_kv = 2;
    Tensor* q = r.input(DType::F32, {D, n_q, h});
    Tensor* k = r.input(DType::F32, {D, n_kv, h_kv});
    Tensor* v = r.input(DType::F32, {D, n_kv, h_kv});
    Tensor* m = r.input(DType::F32, {n_kv, n_q});
    Tensor* sinks = r.input(DType::F32, {h});
    const float scale = 1.0f / std::sqrt((float)D);
    Tensor* o = ops::flash_attn_ext(r.ctx, q, k, v, m, scale, 0.0f, 0.0f, sinks);  // {D, h, n_q}
    r.alloc();
    r.fill_normal(q);
    r.fill_normal(k);
    r.fill_normal(v);
    std::vector<float> mv((size_t)(n_kv * n_q), 0.0f);
    for (int64_t i = 0; i < n_q; ++i)  // a sliding window: keys before i + 6 and after i + 14 hidden
      for (int64_t j = 0; j < n_kv; ++j)
        if (j < i + 6 || j > i + 14) mv[(size_t)(i * n_kv + j)] = -INFINITY;
    r.set_f32(m, mv);
    r.set_f32(sinks, {1.5f, -2.0f, 0.0f, 4.0f});
    r.compute(o);
    const std::vector<float> qv = r.get_f32(q), kv = r.get_f32(k), vv = r.get_f32(v), got = r.get_f32(o);
    const float sk[] = {1.5f, -2.0f, 0.0f, 4.0f};
    std::vector<double> want(got.size());
    for (int64_t hh = 0; hh < h; ++hh)
      for (int64_t i = 0; i < n_q; ++i) {
        const int64_t g = hh / (h / h_kv);
        std::vector<double> s((size_t)n_kv);
        double mx = sk[hh], sum = 0;
        for (int64_t j = 0; j < n_kv; ++j) {
          double d = 0;
          for (int64_t x = 0; x < D; ++x) d += (double)qv[(size_t)((hh * n_q + i) * D + x)] * kv[(size_t)((g * n_kv + j) * D + x)];
          s[(size_t)j] = d * scale + mv[(size_t)(i * n_kv + j)];
          mx = std::max(mx, s[(size_t)j]);
        }
        for (double x : s) sum += std::exp(x - mx);
        sum += std::exp(sk[hh] - mx);
        for (int64_t x = 0; x < D; ++x) {
          double acc = 0;
          for (int64_t j = 0; j < n_kv; ++j) acc += std::exp(s[(size_t)j] - mx) * vv[(size_t)((g * n_kv + j) * D + x)];
          want[(size_t)((i * h + hh) * D + x)] = acc / sum;
        }
      }
    EXPECT_LT(nmse(got, want), 1e-9) << "n_q " << n_q;
  }
}

}  // namespace
}  // namespace loom::test
