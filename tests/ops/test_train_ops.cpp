// Training ops on the CPU (CROSS_ENTROPY_LOSS, CROSS_ENTROPY_LOSS_BACK, OPT_STEP_ADAMW,
// OPT_STEP_SGD) against double-precision references written here: log-softmax cross entropy
// with soft and one-hot labels, its gradient (also by central differences of the loss), and
// one and several optimizer steps against REFERENCE.md's AdamW formula. 1 and 3 threads.
#include <cmath>
#include <string>

#include "op_harness.h"

namespace loom::test {
namespace {

// mean over rows of -sum(labels * log_softmax(logits))
double ref_cross_entropy(const std::vector<float>& x, const std::vector<float>& p, int64_t V) {
  const int64_t rows = (int64_t)x.size() / V;
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -INFINITY;
    for (int64_t i = 0; i < V; ++i) mx = std::max(mx, (double)x[(size_t)(r * V + i)]);
    double s = 0;
    for (int64_t i = 0; i < V; ++i) s += std::exp((double)x[(size_t)(r * V + i)] - mx);
    const double lse = mx + std::log(s);
    for (int64_t i = 0; i < V; ++i) total -= (double)p[(size_t)(r * V + i)] * ((double)x[(size_t)(r * V + i)] - lse);
  }
  return total / (double)rows;
}

// Rows of labels that are probability distributions (soft) or one-hot.
std::vector<float> make_labels(int64_t V, int64_t rows, bool one_hot, std::mt19937& rng) {
  std::vector<float> p((size_t)(V * rows), 0.0f);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> pick(0, V - 1);
  for (int64_t r = 0; r < rows; ++r) {
    if (one_hot) {
      p[(size_t)(r * V + pick(rng))] = 1.0f;
      continue;
    }
    double s = 0;
    for (int64_t i = 0; i < V; ++i) s += p[(size_t)(r * V + i)] = u(rng);
    for (int64_t i = 0; i < V; ++i) p[(size_t)(r * V + i)] = (float)(p[(size_t)(r * V + i)] / s);
  }
  return p;
}

TEST(TrainCrossEntropy, LossMatchesLogSoftmaxReference) {
  for (bool one_hot : {false, true})
    for (int64_t rows : {1, 7})
      for (int th : {1, 3}) {
        OpRunner r;
        const int64_t V = 33;
        Tensor* logits = r.input(DType::F32, {V, rows}, "logits");
        Tensor* labels = r.input(DType::F32, {V, rows}, "labels");
        Tensor* loss = ops::cross_entropy_loss(r.ctx, logits, labels);
        ASSERT_TRUE(cpu::supports(loss));
        r.alloc();
        r.fill_normal(logits, 3.0f);
        const auto pv = make_labels(V, rows, one_hot, r.rng);
        r.set_f32(labels, pv);
        r.compute(loss, th);
        const double want = ref_cross_entropy(r.get_f32(logits), pv, V);
        const auto got = r.get_f32(loss);
        ASSERT_EQ(got.size(), 1u);
        EXPECT_LE(nmse(got, {want}), 1e-7) << "one_hot " << one_hot << " rows " << rows << " threads " << th;
      }
}

// Large logits must not overflow, and a -inf logit with zero label mass costs nothing.
TEST(TrainCrossEntropy, StableForLargeAndMinusInfLogits) {
  OpRunner r;
  Tensor* logits = r.input(DType::F32, {4, 2}, "logits");
  Tensor* labels = r.input(DType::F32, {4, 2}, "labels");
  Tensor* loss = ops::cross_entropy_loss(r.ctx, logits, labels);
  r.alloc();
  const float ninf = -INFINITY;
  r.set_f32(logits, {1000.0f, 1001.0f, 999.0f, ninf, 0.0f, 0.0f, 0.0f, 0.0f});
  r.set_f32(labels, {0.0f, 1.0f, 0.0f, 0.0f, 0.25f, 0.25f, 0.25f, 0.25f});
  r.compute(loss, 1);
  // row 0: -log softmax(1001 | 1000, 1001, 999) = log(e^-1 + 1 + e^-2); row 1: log 4
  const double want = (std::log(std::exp(-1.0) + 1.0 + std::exp(-2.0)) + std::log(4.0)) / 2.0;
  EXPECT_NEAR(r.get_f32(loss)[0], want, 1e-6);
}

TEST(TrainCrossEntropy, BackMatchesSoftmaxMinusLabels) {
  for (int th : {1, 3}) {
    OpRunner r;
    const int64_t V = 29, rows = 5;
    Tensor* grad = r.input(DType::F32, {1}, "grad");
    Tensor* logits = r.input(DType::F32, {V, rows}, "logits");
    Tensor* labels = r.input(DType::F32, {V, rows}, "labels");
    Tensor* out = ops::cross_entropy_loss_back(r.ctx, grad, logits, labels);
    ASSERT_TRUE(cpu::supports(out));
    r.alloc();
    r.set_f32(grad, {0.7f});
    r.fill_normal(logits, 2.0f);
    const auto pv = make_labels(V, rows, false, r.rng);
    r.set_f32(labels, pv);
    r.compute(out, th);
    const auto x = r.get_f32(logits);
    std::vector<double> want(x.size());
    for (int64_t row = 0; row < rows; ++row) {
      double mx = -INFINITY, s = 0;
      for (int64_t i = 0; i < V; ++i) mx = std::max(mx, (double)x[(size_t)(row * V + i)]);
      for (int64_t i = 0; i < V; ++i) s += std::exp((double)x[(size_t)(row * V + i)] - mx);
      for (int64_t i = 0; i < V; ++i) {
        const size_t k = (size_t)(row * V + i);
        want[k] = (std::exp((double)x[k] - mx) / s - (double)pv[k]) * 0.7 / (double)rows;
      }
    }
    const auto got = r.get_f32(out);
    EXPECT_LE(nmse(got, want), 1e-7) << th;
    // independent check: central differences of the double loss, times grad
    for (size_t k : {(size_t)0, (size_t)40, (size_t)(V * rows - 1)}) {
      std::vector<float> xp = x, xm = x;
      const float h = 1e-2f;
      xp[k] += h;
      xm[k] -= h;
      const double fd = (ref_cross_entropy(xp, pv, V) - ref_cross_entropy(xm, pv, V)) / (2.0 * h) * 0.7;
      EXPECT_NEAR(got[k], fd, 1e-5) << "element " << k;
    }
  }
}

// ---- optimizers ----------------------------------------------------------------------------

struct AdamW {
  double alpha, beta1, beta2, eps, wd;
};

// REFERENCE.md: m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// w = w (1 - a wd) - a (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps)
void ref_adamw_step(const AdamW& h, int t, const std::vector<float>& g, std::vector<double>& w, std::vector<double>& m,
                    std::vector<double>& v) {
  for (size_t i = 0; i < w.size(); ++i) {
    m[i] = h.beta1 * m[i] + (1 - h.beta1) * g[i];
    v[i] = h.beta2 * v[i] + (1 - h.beta2) * (double)g[i] * g[i];
    const double mh = m[i] / (1 - std::pow(h.beta1, t)), vh = v[i] / (1 - std::pow(h.beta2, t));
    w[i] = w[i] * (1 - h.alpha * h.wd) - h.alpha * mh / (std::sqrt(vh) + h.eps);
  }
}

TEST(TrainOptimizer, AdamWOneAndSeveralStepsMatchFormula) {
  for (const AdamW& h : {AdamW{1e-3, 0.9, 0.999, 1e-8, 0.0}, AdamW{0.05, 0.8, 0.99, 1e-6, 0.1}})
    for (int th : {1, 3}) {
      OpRunner r;
      const int64_t ne0 = 37, ne1 = 5;
      Tensor* w = r.input(DType::F32, {ne0, ne1}, "w");
      w->flags |= kFlagParam;
      Tensor* g = r.input(DType::F32, {ne0, ne1}, "g");
      Tensor* m = r.input(DType::F32, {ne0, ne1}, "m");
      Tensor* v = r.input(DType::F32, {ne0, ne1}, "v");
      Tensor* hp = r.input(DType::F32, {7}, "hp");
      Tensor* step = ops::opt_step_adamw(r.ctx, w, g, m, v, hp);
      ASSERT_TRUE(cpu::supports(step));
      r.alloc();
      ASSERT_EQ(step->data, w->data);  // the result is param, updated in place
      r.fill_normal(w);
      r.set_f32(m, std::vector<float>((size_t)(ne0 * ne1), 0.0f));
      r.set_f32(v, std::vector<float>((size_t)(ne0 * ne1), 0.0f));
      const auto w0 = r.get_f32(w);
      std::vector<double> rw(w0.begin(), w0.end()), rm(w0.size(), 0.0), rv(w0.size(), 0.0);
      for (int t = 1; t <= 4; ++t) {
        r.fill_normal(g, 0.5f);
        const auto gv = r.get_f32(g);
        r.set_f32(hp, {(float)h.alpha, (float)h.beta1, (float)h.beta2, (float)h.eps, (float)h.wd,
                       (float)(1 / (1 - std::pow(h.beta1, t))), (float)(1 / (1 - std::pow(h.beta2, t)))});
        r.compute(step, th);
        ref_adamw_step(h, t, gv, rw, rm, rv);
        const auto got = r.get_f32(w);
        // the update itself (w - w0) must match, not just w, which moves little per step
        std::vector<float> dgot(got.size());
        std::vector<double> dwant(got.size());
        for (size_t i = 0; i < got.size(); ++i) {
          dgot[i] = got[i] - w0[i];
          dwant[i] = rw[i] - w0[i];
        }
        EXPECT_LE(nmse(got, rw), 1e-7) << "step " << t;
        EXPECT_LE(nmse(dgot, dwant), 1e-6) << "step " << t << " alpha " << h.alpha;
        EXPECT_LE(nmse(r.get_f32(m), rm), 1e-7) << "step " << t;
        EXPECT_LE(nmse(r.get_f32(v), rv), 1e-7) << "step " << t;
      }
    }
}

TEST(TrainOptimizer, SgdOneAndSeveralStepsMatchFormula) {
  for (double wd : {0.0, 0.2})
    for (int th : {1, 3}) {
      OpRunner r;
      const int64_t n = 101;
      Tensor* w = r.input(DType::F32, {n}, "w");
      Tensor* g = r.input(DType::F32, {n}, "g");
      Tensor* hp = r.input(DType::F32, {2}, "hp");
      Tensor* step = ops::opt_step_sgd(r.ctx, w, g, hp);
      ASSERT_TRUE(cpu::supports(step));
      r.alloc();
      ASSERT_EQ(step->data, w->data);
      r.fill_normal(w);
      const auto w0 = r.get_f32(w);
      std::vector<double> rw(w0.begin(), w0.end());
      const double alpha = 0.1;
      r.set_f32(hp, {(float)alpha, (float)wd});
      for (int t = 1; t <= 3; ++t) {
        r.fill_normal(g);
        const auto gv = r.get_f32(g);
        r.compute(step, th);
        for (size_t i = 0; i < rw.size(); ++i) rw[i] = rw[i] * (1 - alpha * wd) - alpha * gv[i];
        EXPECT_LE(nmse(r.get_f32(w), rw), 1e-7) << "step " << t << " wd " << wd;
      }
    }
}

}  // namespace
}  // namespace loom::test
