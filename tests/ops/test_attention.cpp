// Attention ops on the CPU (ROPE, ROPE_BACK, SOFT_MAX, SOFT_MAX_BACK, FLASH_ATTN_EXT) against
// double-precision loops written here: rope normal/neox with partial rotation, frequency
// factors and scaling; softmax with broadcast F32/F16 masks, -inf, ALiBi and all-masked rows;
// flash attention against an explicit softmax(QK^T)V incl. GQA, softcap and masks, and against
// the mul_mat + soft_max + mul_mat composition used without flash attention. 1 and 3 threads.
#include <cmath>
#include <limits>
#include <string>

#include "op_harness.h"

namespace loom::test {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr float kNegInfF = -std::numeric_limits<float>::infinity();

// ALiBi slope as REFERENCE.md / ggml define it (1 when max_bias == 0).
double alibi(double max_bias, int64_t n_head, int64_t h) {
  if (max_bias <= 0) return 1.0;
  int64_t n2 = 1;
  while (n2 * 2 <= n_head) n2 *= 2;
  const double m0 = std::pow(2.0, -max_bias / (double)n2), m1 = std::pow(2.0, -max_bias / 2.0 / (double)n2);
  return h < n2 ? std::pow(m0, (double)(h + 1)) : std::pow(m1, (double)(2 * (h - n2) + 1));
}

// ---- ROPE ----------------------------------------------------------------------------------

// x {hd, n_head, T, n3}: rotate each pair i by theta = pos * fs * base^(-2i/n_dims) / ff[i]
// (by -theta when back), times attn_factor; dims >= n_dims unchanged.
std::vector<double> ref_rope(const std::vector<float>& x, const int64_t* ne, const std::vector<int32_t>& pos,
                             const std::vector<float>* ff, const ops::RopeParams& p, bool back) {
  std::vector<double> y(x.begin(), x.end());
  const int half = p.n_dims / 2;
  for (int64_t i3 = 0; i3 < ne[3]; ++i3)
    for (int64_t t = 0; t < ne[2]; ++t)
      for (int64_t h = 0; h < ne[1]; ++h)
        for (int i = 0; i < half; ++i) {
          double theta = pos[(size_t)t] * (double)p.freq_scale * std::pow((double)p.freq_base, -2.0 * i / p.n_dims);
          if (ff) theta /= (double)(*ff)[(size_t)i];
          const double c = std::cos(theta) * p.attn_factor, s = (back ? -1 : 1) * std::sin(theta) * p.attn_factor;
          const int64_t j0 = p.mode == ops::kRopeNeox ? i : 2 * i, j1 = p.mode == ops::kRopeNeox ? i + half : 2 * i + 1;
          const double x0 = x[idx(ne, j0, h, t, i3)], x1 = x[idx(ne, j1, h, t, i3)];
          y[idx(ne, j0, h, t, i3)] = x0 * c - x1 * s;
          y[idx(ne, j1, h, t, i3)] = x0 * s + x1 * c;
        }
  return y;
}

struct RopeParam {
  int mode;
  int n_dims;  // of head dim 12
  bool freq_factors;
  bool scaled;  // freq_scale 0.25, attn_factor 0.8
  bool back;
  int threads;
};

class AttentionRopeTest : public testing::TestWithParam<RopeParam> {};

TEST_P(AttentionRopeTest, MatchesDoubleReference) {
  const RopeParam& rp = GetParam();
  OpRunner r;
  const int64_t hd = 12, n_head = 3, T = 5;
  // a strided view (as q/k are views of a fused projection): rows 4 floats apart of their data
  Tensor* base = r.input(DType::F32, {hd + 4, n_head, T, 2}, "x_base");
  Tensor* x = ops::view_4d(r.ctx, base, hd, n_head, T, 2, base->nb[1], base->nb[2], base->nb[3], 0);
  Tensor* pos = r.input(DType::I32, {T}, "pos");
  Tensor* ff = rp.freq_factors ? r.input(DType::F32, {rp.n_dims / 2}, "ff") : nullptr;
  ops::RopeParams p;
  p.n_dims = rp.n_dims;
  p.mode = rp.mode;
  p.freq_base = 10000.0f;
  p.freq_scale = rp.scaled ? 0.25f : 1.0f;
  p.attn_factor = rp.scaled ? 0.8f : 1.0f;
  Tensor* out = rp.back ? ops::rope_back(r.ctx, x, pos, ff, p) : ops::rope(r.ctx, x, pos, ff, p);
  ASSERT_TRUE(cpu::supports(out));
  r.alloc();
  r.fill_normal(base);
  const std::vector<int32_t> posv = {0, 1, 17, 1000, 4095};
  r.set_i32(pos, posv);
  std::vector<float> ffv;
  if (ff) {
    r.fill_uniform(ff, 1.0f, 8.0f);
    ffv = r.get_f32(ff);
  }
  r.compute(out, rp.threads);
  const auto want = ref_rope(r.get_f32(x), x->ne, posv, ff ? &ffv : nullptr, p, rp.back);
  EXPECT_LE(nmse(r.get_f32(out), want), 1e-7);
}

std::vector<RopeParam> rope_params() {
  std::vector<RopeParam> v;
  for (int mode : {(int)ops::kRopeNormal, (int)ops::kRopeNeox})
    for (int nd : {12, 8})
      for (bool ff : {false, true})
        for (bool scaled : {false, true})
          for (bool back : {false, true})
            for (int th : {1, 3}) v.push_back({mode, nd, ff, scaled, back, th});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Modes, AttentionRopeTest, testing::ValuesIn(rope_params()),
                         [](const testing::TestParamInfo<RopeParam>& i) {
                           const RopeParam& p = i.param;
                           return std::string(p.mode == ops::kRopeNeox ? "neox" : "normal") + "_nd" +
                                  std::to_string(p.n_dims) + (p.freq_factors ? "_ff" : "") +
                                  (p.scaled ? "_scaled" : "") + (p.back ? "_back" : "") + "_t" +
                                  std::to_string(p.threads);
                         });

// The kernel keeps each position's angles per thread across nodes and graphs: new positions at
// the same token index, and new parameters, must not reuse them.
TEST(AttentionRope, CachedAnglesFollowPositionsAndParameters) {
  for (int th : {1, 2}) {
    OpRunner r;
    const int64_t hd = 16, n_head = 2, T = 3;
    Tensor* x = r.input(DType::F32, {hd, n_head, T}, "x");
    Tensor* pos = r.input(DType::I32, {T}, "pos");
    ops::RopeParams p;
    p.n_dims = hd;
    Tensor* out = ops::rope(r.ctx, x, pos, nullptr, p);
    ops::RopeParams p2 = p;
    p2.freq_base = 500000.0f;
    Tensor* out2 = ops::rope(r.ctx, x, pos, nullptr, p2);
    r.alloc();
    r.fill_normal(x);
    // positions change under the same parameters, then the parameters change
    for (const ops::RopeParams* params : {&p, &p2})
      for (const std::vector<int32_t>& posv : {std::vector<int32_t>{0, 1, 2}, {7, 8, 9}, {7, 300, 9}}) {
        r.set_i32(pos, posv);
        Tensor* y = params == &p ? out : out2;
        r.compute(y, th);
        EXPECT_LE(nmse(r.get_f32(y), ref_rope(r.get_f32(x), x->ne, posv, nullptr, *params, false)), 1e-7)
            << "threads " << th << " base " << params->freq_base << " pos " << posv[1];
      }
  }
}

TEST(AttentionRope, BackInvertsForward) {
  for (int mode : {(int)ops::kRopeNormal, (int)ops::kRopeNeox}) {
    OpRunner r;
    const int64_t hd = 64, n_head = 4, T = 6;
    Tensor* x = r.input(DType::F32, {hd, n_head, T}, "x");
    Tensor* pos = r.input(DType::I32, {T}, "pos");
    Tensor* ff = r.input(DType::F32, {24}, "ff");
    ops::RopeParams p;
    p.n_dims = 48;
    p.mode = mode;
    p.freq_base = 500000.0f;
    p.freq_scale = 0.5f;
    Tensor* y = ops::rope(r.ctx, x, pos, ff, p);
    Tensor* back = ops::rope_back(r.ctx, y, pos, ff, p);
    r.alloc();
    r.fill_normal(x);
    r.fill_ints(pos, 0, 30000);
    r.fill_uniform(ff, 1.0f, 4.0f);
    r.compute(back, 3);
    const auto xv = r.get_f32(x);
    const auto yv = r.get_f32(y);
    EXPECT_LE(nmse(r.get_f32(back), std::vector<double>(xv.begin(), xv.end())), 1e-12) << mode;
    // and the forward pass did rotate: y differs from x in the rotated dims
    EXPECT_GT(nmse(yv, std::vector<double>(xv.begin(), xv.end())), 0.1) << mode;
  }
}

// ---- SOFT_MAX ------------------------------------------------------------------------------

struct SoftmaxCase {
  const char* name;
  int64_t n_kv, n_q, h, b;
  bool mask;
  DType mask_type;
  int64_t mask_rows, m2, m3;  // mask {n_kv, mask_rows, m2, m3}
  float scale, max_bias;
};
const SoftmaxCase kSoftmaxCases[] = {
    {"plain", 37, 5, 3, 1, false, DType::F32, 0, 1, 1, 0.7f, 0.0f},
    {"causal_f32", 17, 6, 2, 2, true, DType::F32, 9, 1, 1, 0.5f, 0.0f},
    {"broadcast_f16", 23, 4, 4, 2, true, DType::F16, 4, 2, 1, 1.3f, 0.0f},
    {"alibi", 19, 3, 6, 1, true, DType::F32, 3, 1, 1, 0.9f, 8.0f},
    {"alibi_f16_broadcast", 40, 2, 5, 2, true, DType::F16, 5, 1, 2, 1.0f, 4.0f},
};

// a {n_kv, n_q, h, b} -> softmax(a * scale + slope_h * mask) over dim 0; all -inf rows give 0.
std::vector<double> ref_soft_max(const std::vector<float>& a, const int64_t* ne, const std::vector<float>* mask,
                                 const int64_t* mne, float scale, float max_bias) {
  std::vector<double> y(a.size());
  std::vector<double> v((size_t)ne[0]);
  for (int64_t i3 = 0; i3 < ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < ne[1]; ++i1) {
        const double slope = alibi(max_bias, ne[2], i2);
        double mx = -kInf;
        for (int64_t i = 0; i < ne[0]; ++i) {
          v[(size_t)i] = (double)a[idx(ne, i, i1, i2, i3)] * scale;
          if (mask) v[(size_t)i] += slope * (double)(*mask)[idx(mne, i, i1, i2 % mne[2], i3 % mne[3])];
          mx = std::max(mx, v[(size_t)i]);
        }
        double sum = 0;
        for (int64_t i = 0; i < ne[0]; ++i) sum += mx == -kInf ? 0.0 : std::exp(v[(size_t)i] - mx);
        for (int64_t i = 0; i < ne[0]; ++i)
          y[idx(ne, i, i1, i2, i3)] = mx == -kInf ? 0.0 : std::exp(v[(size_t)i] - mx) / sum;
      }
  return y;
}

// Mask values: a causal pattern (-inf above the diagonal shifted by the key count) and finite
// position-like biases elsewhere; row `all_masked` (if >= 0) is -inf everywhere.
std::vector<float> make_mask(const int64_t* mne, int64_t n_q, int64_t all_masked, std::mt19937& rng) {
  std::uniform_real_distribution<float> d(-3.0f, 0.0f);
  std::vector<float> m((size_t)(mne[0] * mne[1] * mne[2] * mne[3]));
  for (int64_t i3 = 0; i3 < mne[3]; ++i3)
    for (int64_t i2 = 0; i2 < mne[2]; ++i2)
      for (int64_t q = 0; q < mne[1]; ++q)
        for (int64_t k = 0; k < mne[0]; ++k) {
          const bool hidden = k > mne[0] - n_q + q || q == all_masked;
          m[idx(mne, k, q, i2, i3)] = hidden ? kNegInfF : d(rng);
        }
  return m;
}

class AttentionSoftmaxTest : public testing::TestWithParam<std::tuple<SoftmaxCase, int>> {};

TEST_P(AttentionSoftmaxTest, MatchesDoubleReference) {
  const SoftmaxCase& c = std::get<0>(GetParam());
  const int threads = std::get<1>(GetParam());
  OpRunner r;
  Tensor* a = r.input(DType::F32, {c.n_kv, c.n_q, c.h, c.b}, "a");
  Tensor* mask = c.mask ? r.input(c.mask_type, {c.n_kv, c.mask_rows, c.m2, c.m3}, "mask") : nullptr;
  Tensor* out = ops::soft_max(r.ctx, a, mask, c.scale, c.max_bias);
  ASSERT_TRUE(cpu::supports(out));
  r.alloc();
  r.fill_normal(a, 2.0f);
  std::vector<float> mv;
  if (mask) {
    mv = make_mask(mask->ne, c.n_q, c.n_q > 2 ? 1 : -1, r.rng);
    r.set_f32(mask, mv);
    mv = r.get_f32(mask);  // as stored (F16 rounding)
  }
  r.compute(out, threads);
  const auto got = r.get_f32(out);
  const auto want =
      ref_soft_max(r.get_f32(a), a->ne, mask ? &mv : nullptr, mask ? mask->ne : nullptr, c.scale, c.max_bias);
  EXPECT_LE(nmse(got, want), 1e-6);
  for (float g : got) ASSERT_FALSE(std::isnan(g));
  if (mask && c.n_q > 2) {  // the all-masked row 1 is zeros
    for (int64_t i = 0; i < c.n_kv; ++i) EXPECT_EQ(got[idx(a->ne, i, 1)], 0.0f);
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, AttentionSoftmaxTest,
                         testing::Combine(testing::ValuesIn(kSoftmaxCases), testing::Values(1, 3)),
                         [](const testing::TestParamInfo<std::tuple<SoftmaxCase, int>>& i) {
                           return std::string(std::get<0>(i.param).name) + "_t" + std::to_string(std::get<1>(i.param));
                         });

TEST(AttentionSoftmax, BackMatchesReference) {
  for (int th : {1, 3}) {
    OpRunner r;
    const int64_t ne[4] = {29, 4, 3, 1};
    Tensor* g = r.input(DType::F32, {ne[0], ne[1], ne[2]}, "grad");
    Tensor* y = r.input(DType::F32, {ne[0], ne[1], ne[2]}, "y");
    const float scale = 0.6f;
    Tensor* out = ops::soft_max_back(r.ctx, g, y, scale);
    ASSERT_TRUE(cpu::supports(out));
    r.alloc();
    r.fill_normal(g);
    r.fill_normal(y);
    const auto yin = r.get_f32(y);
    std::vector<float> yv(yin.size());  // a real softmax output
    const auto ys = ref_soft_max(yin, ne, nullptr, nullptr, 1.0f, 0.0f);
    for (size_t i = 0; i < yv.size(); ++i) yv[i] = (float)ys[i];
    r.set_f32(y, yv);
    r.compute(out, th);
    const auto gv = r.get_f32(g);
    std::vector<double> want(gv.size());
    for (int64_t row = 0; row < ne[1] * ne[2]; ++row) {
      double dot = 0;
      for (int64_t i = 0; i < ne[0]; ++i) dot += (double)gv[(size_t)(row * ne[0] + i)] * yv[(size_t)(row * ne[0] + i)];
      for (int64_t i = 0; i < ne[0]; ++i) {
        const size_t k = (size_t)(row * ne[0] + i);
        want[k] = scale * (double)yv[k] * ((double)gv[k] - dot);
      }
    }
    EXPECT_LE(nmse(r.get_f32(out), want), 1e-7) << th;
  }
}

// ---- FLASH_ATTN_EXT ----------------------------------------------------------------------------

struct FlashCase {
  const char* name;
  int64_t D, Dv, n_q, n_kv, h, h_kv, b;
  bool mask;
  DType mask_type;
  float scale, max_bias, softcap;
  float q_sigma;
  // keys [0, hide_first) and the last hide_last hidden from every row: a sliding window's older
  // keys and the cache's padding past the context (decode reads only the keys between)
  int64_t hide_first = 0, hide_last = 0;
};
const FlashCase kFlashCases[] = {
    {"basic", 16, 16, 3, 7, 2, 2, 1, false, DType::F32, 0.25f, 0.0f, 0.0f, 1.0f},
    {"gqa_causal_f16_mask", 40, 24, 5, 13, 4, 2, 2, true, DType::F16, 0.158f, 0.0f, 0.0f, 1.0f},
    {"softcap_alibi", 32, 32, 4, 9, 6, 3, 1, true, DType::F32, 0.5f, 8.0f, 20.0f, 3.0f},
    {"decode_gqa", 64, 64, 1, 33, 8, 2, 1, true, DType::F16, 0.125f, 0.0f, 0.0f, 1.0f},
    {"long_kv", 8, 12, 2, 300, 2, 1, 1, false, DType::F32, 0.35f, 0.0f, 0.0f, 2.0f},
    // a prompt (96 rows per kv head: the tiled kernel's key-major softmax) with ALiBi and softcap
    {"prompt_alibi_softcap", 64, 48, 40, 150, 8, 2, 1, true, DType::F16, 0.125f, 8.0f, 30.0f, 2.0f},
    // a prompt with whole 32-value blocks per row: also run over quantized K/V (-ctk/-ctv q8_0, q4_0)
    {"prompt_gqa", 64, 64, 40, 150, 8, 2, 1, true, DType::F16, 0.125f, 0.0f, 0.0f, 1.0f},
    {"decode_window_padded", 64, 64, 1, 300, 8, 2, 1, true, DType::F16, 0.125f, 0.0f, 0.0f, 1.0f, 70, 190},
    {"decode_window_chunks", 64, 64, 1, 300, 8, 2, 1, true, DType::F16, 0.125f, 0.0f, 0.0f, 1.0f, 70, 30},
    {"decode_rows_padded", 32, 32, 2, 256, 4, 1, 2, true, DType::F32, 0.2f, 0.0f, 0.0f, 1.0f, 0, 200},
};

// q {D, n_q, h, b}, k {D, n_kv, h_kv, b}, v {Dv, n_kv, h_kv, b} -> {Dv, h, n_q, b}
std::vector<double> ref_attention(const std::vector<float>& q, const int64_t* qne, const std::vector<float>& k,
                                  const int64_t* kne, const std::vector<float>& v, const int64_t* vne,
                                  const std::vector<float>* mask, const int64_t* mne, const FlashCase& c) {
  const int64_t D = qne[0], n_q = qne[1], H = qne[2], B = qne[3], n_kv = kne[1], Dv = vne[0];
  const int64_t one[4] = {Dv, H, n_q, B};
  std::vector<double> out((size_t)(Dv * H * n_q * B), 0.0);
  std::vector<double> s((size_t)n_kv);
  for (int64_t ib = 0; ib < B; ++ib)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t iq = 0; iq < n_q; ++iq) {
        const int64_t hk = h / (H / kne[2]);
        double mx = -kInf;
        for (int64_t j = 0; j < n_kv; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += (double)q[idx(qne, d, iq, h, ib)] * k[idx(kne, d, j, hk, ib)];
          dot *= c.scale;
          if (c.softcap != 0) dot = c.softcap * std::tanh(dot / c.softcap);
          if (mask) dot += alibi(c.max_bias, H, h) * (double)(*mask)[idx(mne, j, iq)];
          s[(size_t)j] = dot;
          mx = std::max(mx, dot);
        }
        if (mx == -kInf) continue;  // nothing visible: zeros
        double sum = 0;
        for (int64_t j = 0; j < n_kv; ++j) sum += std::exp(s[(size_t)j] - mx);
        for (int64_t j = 0; j < n_kv; ++j) {
          const double p = std::exp(s[(size_t)j] - mx) / sum;
          for (int64_t d = 0; d < Dv; ++d) out[idx(one, d, h, iq, ib)] += p * v[idx(vne, d, j, hk, ib)];
        }
      }
  return out;
}

struct FlashParam {
  FlashCase c;
  DType kv_type;
  int threads;
};
class AttentionFlashTest : public testing::TestWithParam<FlashParam> {};

TEST_P(AttentionFlashTest, MatchesExplicitSoftmaxQKV) {
  const FlashParam& fp = GetParam();
  const FlashCase& c = fp.c;
  OpRunner r;
  Tensor* q = r.input(DType::F32, {c.D, c.n_q, c.h, c.b}, "q");
  Tensor* k = r.input(fp.kv_type, {c.D, c.n_kv, c.h_kv, c.b}, "k");
  Tensor* v = r.input(fp.kv_type, {c.Dv, c.n_kv, c.h_kv, c.b}, "v");
  Tensor* mask = c.mask ? r.input(c.mask_type, {c.n_kv, c.n_q + 3}, "mask") : nullptr;  // padded rows
  Tensor* out = ops::flash_attn_ext(r.ctx, q, k, v, mask, c.scale, c.max_bias, c.softcap);
  ASSERT_TRUE(cpu::supports(out));
  ASSERT_EQ(out->ne[0], c.Dv);
  ASSERT_EQ(out->ne[1], c.h);
  ASSERT_EQ(out->ne[2], c.n_q);
  r.alloc();
  r.fill_normal(q, c.q_sigma);
  r.fill_normal(k);
  r.fill_normal(v);
  std::vector<float> mv;
  const int64_t all_masked = c.n_q > 2 ? 2 : -1;
  if (mask) {
    mv = make_mask(mask->ne, c.n_q, all_masked, r.rng);
    for (int64_t iq = 0; iq < mask->ne[1]; ++iq)
      for (int64_t j = 0; j < c.n_kv; ++j)
        if (j < c.hide_first || j >= c.n_kv - c.hide_last) mv[(size_t)(iq * c.n_kv + j)] = kNegInfF;
    r.set_f32(mask, mv);
    mv = r.get_f32(mask);
  }
  r.compute(out, fp.threads);
  const auto got = r.get_f32(out);
  const auto want = ref_attention(r.get_f32(q), q->ne, r.get_f32(k), k->ne, r.get_f32(v), v->ne, mask ? &mv : nullptr,
                                  mask ? mask->ne : nullptr, c);
  EXPECT_LE(nmse(got, want), 5e-4);
  // same K/V values (a quantized cache's as it holds them), f32 accumulation: far below the limit
  // (BF16 K: q rounded to bf16 for the bf16 GEMM where the CPU has AVX-512 BF16, as llama.cpp
  // rounds it to K's type)
  EXPECT_LE(nmse(got, want), fp.kv_type == DType::BF16 ? 1e-5 : 1e-9);
  for (float g : got) ASSERT_FALSE(std::isnan(g));
  if (mask && all_masked >= 0) {
    for (int64_t ib = 0; ib < c.b; ++ib)
      for (int64_t h = 0; h < c.h; ++h)
        for (int64_t d = 0; d < c.Dv; ++d) EXPECT_EQ(got[idx(out->ne, d, h, all_masked, ib)], 0.0f);
  }
}

std::vector<FlashParam> flash_params() {
  std::vector<FlashParam> v;
  for (const FlashCase& c : kFlashCases) {
    for (DType t : {DType::F32, DType::F16, DType::BF16})
      for (int th : {1, 3}) v.push_back({c, t, th});
    if (c.D % 32 == 0 && c.Dv % 32 == 0)  // quantized caches: rows of whole blocks
      for (DType t : {DType::Q8_0, DType::Q4_0})
        for (int th : {1, 3}) v.push_back({c, t, th});
  }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Cases, AttentionFlashTest, testing::ValuesIn(flash_params()),
                         [](const testing::TestParamInfo<FlashParam>& i) {
                           return std::string(i.param.c.name) + "_" + dtype_name(i.param.kv_type) + "_t" +
                                  std::to_string(i.param.threads);
                         });

// The composition's output {Dv, n_q, H, B} in flash attention's layout {Dv, H, n_q, B}.
std::vector<double> heads_before_tokens(const std::vector<float>& c, const int64_t* cne) {
  const int64_t Dv = cne[0], n_q = cne[1], H = cne[2], B = cne[3];
  const int64_t fne[4] = {Dv, H, n_q, B};
  std::vector<double> out(c.size());
  for (int64_t ib = 0; ib < B; ++ib)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t iq = 0; iq < n_q; ++iq)
        for (int64_t d = 0; d < Dv; ++d) out[idx(fne, d, h, iq, ib)] = c[idx(cne, d, iq, h, ib)];
  return out;
}

// -fa off over a quantized K cache: mul_mat reads the quantized K rows of a strided view directly;
// flash attention over the same K (and an F16 V) must give the same output.
TEST(AttentionFlash, QuantizedKeysAgreeWithMulMatPath) {
  for (DType t : {DType::Q8_0, DType::Q4_0}) {
    OpRunner r;
    const int64_t D = 64, n_q = 3, n_kv = 40, H = 4, Hkv = 2;
    const float scale = 0.125f;
    Tensor* q = r.input(DType::F32, {D, n_q, H}, "q");
    Tensor* cache = r.input(t, {D * Hkv, n_kv}, "cache_k");  // one row per position, heads side by side
    Tensor* k = ops::view_3d(r.ctx, cache, D, n_kv, Hkv, cache->nb[1], row_size(t, D), 0);
    Tensor* v = r.input(DType::F16, {D, n_kv, Hkv}, "v");
    Tensor* mask = r.input(DType::F32, {n_kv, n_q}, "mask");
    Tensor* flash = ops::flash_attn_ext(r.ctx, q, k, v, mask, scale);
    Tensor* p = ops::soft_max(r.ctx, ops::mul_mat(r.ctx, k, q), mask, scale);
    Tensor* kqv = ops::mul_mat(r.ctx, ops::transpose(r.ctx, v), p);  // {D, n_q, H}
    ASSERT_TRUE(cpu::supports(flash));
    r.alloc();
    r.fill_normal(q);
    r.fill_normal(cache);
    r.fill_normal(v);
    r.set_f32(mask, make_mask(mask->ne, n_q, -1, r.rng));
    r.compute(flash, 2);
    r.compute(kqv, 2);
    // the matmul quantizes q to int8 blocks for the quantized rows (as ggml does): close, not equal
    EXPECT_LE(nmse(r.get_f32(flash), heads_before_tokens(r.get_f32(kqv), kqv->ne)), 1e-4) << dtype_name(t);
  }
}

// Without flash attention the model computes softmax(mul_mat(k, q)) and multiplies by a
// transposed view of v: the two paths must agree (this also covers mul_mat with GQA broadcast
// and a strided weight view).
TEST(AttentionFlash, AgreesWithMulMatSoftmaxComposition) {
  for (DType t : {DType::F32, DType::F16}) {
    OpRunner r;
    const int64_t D = 24, Dv = 20, n_q = 4, n_kv = 11, H = 4, Hkv = 2, B = 2;
    const float scale = 0.2f;
    Tensor* q = r.input(DType::F32, {D, n_q, H, B}, "q");
    Tensor* k = r.input(t, {D, n_kv, Hkv, B}, "k");
    Tensor* v = r.input(t, {Dv, n_kv, Hkv, B}, "v");
    Tensor* mask = r.input(DType::F32, {n_kv, n_q}, "mask");
    Tensor* flash = ops::flash_attn_ext(r.ctx, q, k, v, mask, scale);
    Tensor* kq = ops::mul_mat(r.ctx, k, q);  // {n_kv, n_q, H, B}
    Tensor* p = ops::soft_max(r.ctx, kq, mask, scale);
    Tensor* kqv = ops::mul_mat(r.ctx, ops::transpose(r.ctx, v), p);  // {Dv, n_q, H, B}
    r.alloc();
    r.fill_normal(q);
    r.fill_normal(k);
    r.fill_normal(v);
    r.set_f32(mask, make_mask(mask->ne, n_q, -1, r.rng));
    r.compute(flash, 3);
    r.compute(kqv, 3);
    EXPECT_LE(nmse(r.get_f32(flash), heads_before_tokens(r.get_f32(kqv), kqv->ne)), 1e-9) << dtype_name(t);
  }
}

}  // namespace
}  // namespace loom::test
