// Normalization ops on the CPU (RMS_NORM, NORM, RMS_NORM_BACK) against double-precision
// references: F32/F16/BF16 inputs, strided views, long rows, 1 and 3 threads, in place.
// RMS_NORM_BACK is checked against central differences of a double rms_norm, so the test does
// not share the kernel's derivation of the gradient.
#include <array>
#include <cmath>
#include <string>

#include "op_harness.h"

namespace loom::test {
namespace {

using Shape = std::array<int64_t, 4>;

enum class Layout { contiguous, transposed, permuted, row_slice };
constexpr Layout kLayouts[] = {Layout::contiguous, Layout::transposed, Layout::permuted, Layout::row_slice};
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contiguous";
    case Layout::transposed: return "transposed";
    case Layout::permuted: return "permuted";
    case Layout::row_slice: return "row_slice";
  }
  return "?";
}

// A logical {ne0..ne3} input in the given memory layout; `base` is the contiguous tensor to fill.
struct Input {
  Tensor* base;
  Tensor* t;
};
Input make_input(OpRunner& r, DType type, Shape ne, Layout layout) {
  Context& c = r.ctx;
  switch (layout) {
    case Layout::transposed: {
      Tensor* b = r.input(type, {ne[1], ne[0], ne[2], ne[3]});
      return {b, ops::transpose(c, b)};
    }
    case Layout::permuted: {
      Tensor* b = r.input(type, {ne[2], ne[0], ne[1], ne[3]});
      return {b, ops::permute(c, b, 2, 0, 1, 3)};
    }
    case Layout::row_slice: {
      Tensor* b = r.input(type, {ne[0] + 3, ne[1], ne[2], ne[3]});
      return {b, ops::view_4d(c, b, ne[0], ne[1], ne[2], ne[3], b->nb[1], b->nb[2], b->nb[3], b->nb[0])};
    }
    case Layout::contiguous: break;
  }
  Tensor* t = r.input(type, {ne[0], ne[1], ne[2], ne[3]});
  return {t, t};
}

constexpr DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};
constexpr int kThreads[] = {1, 3};
constexpr double kNmse = 1e-7;

// ---- double references over rows of n ----------------------------------------------------------

void rms_norm_ref(const double* x, double* y, int64_t n, double eps) {
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
  const double r = 1 / std::sqrt(ss / n + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * r;
}

void norm_ref(const double* x, double* y, int64_t n, double eps) {
  double mean = 0, var = 0;
  for (int64_t i = 0; i < n; ++i) mean += x[i];
  mean /= n;
  for (int64_t i = 0; i < n; ++i) var += (x[i] - mean) * (x[i] - mean);
  var /= n;
  for (int64_t i = 0; i < n; ++i) y[i] = (x[i] - mean) / std::sqrt(var + eps);
}

// dL/dx for L = sum_i g_i rms_norm(x)_i, by central differences in double.
void rms_norm_back_ref(const double* g, const double* x, double* dx, int64_t n, double eps) {
  std::vector<double> xs(x, x + n), y((size_t)n);
  auto loss = [&] {
    rms_norm_ref(xs.data(), y.data(), n, eps);
    double l = 0;
    for (int64_t i = 0; i < n; ++i) l += g[i] * y[(size_t)i];
    return l;
  };
  for (int64_t j = 0; j < n; ++j) {
    const double h = 1e-4 * std::max(1.0, std::fabs(x[j]));
    xs[(size_t)j] = x[j] + h;
    const double lp = loss();
    xs[(size_t)j] = x[j] - h;
    const double lm = loss();
    xs[(size_t)j] = x[j];
    dx[j] = (lp - lm) / (2 * h);
  }
}

// Applies a row reference to logical-order inputs of shape ne.
template <typename F>
std::vector<double> per_row(const std::vector<float>& a, const std::vector<float>* b, Shape ne, F f) {
  const int64_t n = ne[0];
  std::vector<double> out(a.size()), xa((size_t)n), xb((size_t)n);
  for (size_t r = 0; r < a.size() / (size_t)n; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      xa[(size_t)i] = a[r * n + i];
      if (b) xb[(size_t)i] = (*b)[r * n + i];
    }
    f(xa.data(), xb.data(), out.data() + r * n, n);
  }
  return out;
}

// ---- RMS_NORM / NORM ---------------------------------------------------------------------------

class NormTest : public ::testing::TestWithParam<std::tuple<bool, DType>> {};

TEST_P(NormTest, MatchesReference) {
  const bool rms = std::get<0>(GetParam());
  const DType type = std::get<1>(GetParam());
  for (float eps : {1e-5f, 1e-6f})
    for (int nth : kThreads)
      for (Layout layout : kLayouts)
        for (Shape ne : {Shape{37, 5, 3, 2}, Shape{4099, 3, 1, 1}, Shape{1, 4, 1, 1}}) {
          if (layout != Layout::contiguous && ne[0] > 1000) continue;
          SCOPED_TRACE(std::string(rms ? "rms_norm " : "norm ") + layout_name(layout) + " ne0=" +
                       std::to_string(ne[0]) + " threads=" + std::to_string(nth) + " eps=" + std::to_string(eps));
          OpRunner r;
          Input a = make_input(r, type, ne, layout);
          Tensor* out = rms ? ops::rms_norm(r.ctx, a.t, eps) : ops::norm(r.ctx, a.t, eps);
          r.alloc();
          r.fill_normal(a.base, 2.0f);
          const auto av = r.get_f32(a.t);
          r.compute(out, nth);
          const auto want = per_row(av, nullptr, ne, [&](const double* x, const double*, double* y, int64_t n) {
            rms ? rms_norm_ref(x, y, n, eps) : norm_ref(x, y, n, eps);
          });
          EXPECT_LE(nmse(r.get_f32(out), want), kNmse);
        }
}

INSTANTIATE_TEST_SUITE_P(Ops, NormTest,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(DType::F32, DType::F16, DType::BF16)),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "rms_norm_" : "norm_") +
                                  dtype_name(std::get<1>(info.param));
                         });

// A row with a large common offset: a one-pass E[x^2] - E[x]^2 variance would lose it.
TEST(Norm, NormIsAccurateWithLargeMean) {
  OpRunner r;
  Tensor* a = r.input(DType::F32, {256, 4});
  Tensor* out = ops::norm(r.ctx, a, 1e-6f);
  r.alloc();
  r.fill_uniform(a, 1000.0f, 1001.0f);
  const auto av = r.get_f32(a);
  r.compute(out, 1);
  const auto want = per_row(av, nullptr, {256, 4, 1, 1},
                            [](const double* x, const double*, double* y, int64_t n) { norm_ref(x, y, n, 1e-6); });
  EXPECT_LE(nmse(r.get_f32(out), want), 1e-6);
}

TEST(Norm, RmsNormOfZeroRowIsZero) {
  OpRunner r;
  Tensor* a = r.input(DType::F32, {64});
  Tensor* out = ops::rms_norm(r.ctx, a, 1e-6f);
  r.alloc();
  r.set_f32(a, std::vector<float>(64, 0.0f));
  r.compute(out, 1);
  for (float y : r.get_f32(out)) EXPECT_EQ(y, 0.0f);
}

TEST(Norm, InPlaceResultAliasingInput) {
  for (bool rms : {true, false})
    for (int nth : kThreads) {
      OpRunner r;
      Tensor* a = r.input(DType::F32, {37, 5, 3});
      Tensor* out = rms ? ops::rms_norm(r.ctx, a, 1e-5f) : ops::norm(r.ctx, a, 1e-5f);
      r.alloc();
      r.fill_normal(a);
      const auto av = r.get_f32(a);
      out->data = a->data;
      r.compute(out, nth);
      const auto want = per_row(av, nullptr, {37, 5, 3, 1}, [&](const double* x, const double*, double* y, int64_t n) {
        rms ? rms_norm_ref(x, y, n, 1e-5) : norm_ref(x, y, n, 1e-5);
      });
      EXPECT_LE(nmse(r.get_f32(out), want), kNmse) << (rms ? "rms_norm" : "norm") << " threads=" << nth;
    }
}

// ---- RMS_NORM_BACK -----------------------------------------------------------------------------

TEST(Norm, RmsNormBackIsTheGradientOfRmsNorm) {
  for (int nth : kThreads)
    for (DType type : kFloatTypes)
      for (Layout lg : kLayouts) {
        const Layout lx = lg == Layout::contiguous ? Layout::transposed : Layout::contiguous;
        SCOPED_TRACE(std::string(dtype_name(type)) + " grad " + layout_name(lg) + " threads=" + std::to_string(nth));
        OpRunner r;
        const Shape ne = {37, 5, 3, 2};
        const float eps = 1e-5f;
        Input g = make_input(r, type, ne, lg);
        Input x = make_input(r, DType::F32, ne, lx);
        Tensor* out = ops::rms_norm_back(r.ctx, g.t, x.t, eps);
        r.alloc();
        r.fill_normal(g.base);
        r.fill_normal(x.base, 1.5f);
        const auto gv = r.get_f32(g.t), xv = r.get_f32(x.t);
        r.compute(out, nth);
        const auto want = per_row(gv, &xv, ne, [&](const double* gr, const double* xr, double* dx, int64_t n) {
          rms_norm_back_ref(gr, xr, dx, n, eps);
        });
        EXPECT_LE(nmse(r.get_f32(out), want), kNmse);
      }
}

TEST(Norm, RmsNormBackLongRowsSmallEps) {
  for (int nth : {1, 3}) {
    OpRunner r;
    const Shape ne = {1024, 3, 1, 1};
    Tensor* g = r.input(DType::F32, {1024, 3});
    Tensor* x = r.input(DType::F32, {1024, 3});
    Tensor* out = ops::rms_norm_back(r.ctx, g, x, 1e-6f);
    r.alloc();
    r.fill_normal(g);
    r.fill_normal(x, 0.05f);  // small rms: eps matters relatively more
    const auto gv = r.get_f32(g), xv = r.get_f32(x);
    r.compute(out, nth);
    const auto want = per_row(gv, &xv, ne, [&](const double* gr, const double* xr, double* dx, int64_t n) {
      rms_norm_back_ref(gr, xr, dx, n, 1e-6);
    });
    EXPECT_LE(nmse(r.get_f32(out), want), kNmse) << "threads=" << nth;
  }
}

TEST(Norm, RejectsQuantizedInput) {
  OpRunner r;
  Tensor* a = r.input(DType::F32, {32, 2});
  Tensor* out = ops::rms_norm(r.ctx, a, 1e-6f);
  EXPECT_TRUE(cpu::supports(out));
  out->src[0] = r.input(DType::Q4_0, {32, 2});
  EXPECT_FALSE(cpu::supports(out));
}

}  // namespace
}  // namespace loom::test
