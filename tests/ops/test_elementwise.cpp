// Element-wise ops on the CPU (ADD SUB MUL DIV ADD_ID, the unary ops, SWIGLU, SILU_BACK) against
// double-precision references written here: every input type (F32/F16/BF16), broadcasting,
// strided views (transposed, permuted, row slices), 1 and 3 threads, in-place results.
#include <array>
#include <cmath>
#include <functional>
#include <numbers>
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
    case Layout::row_slice: {  // rows of a wider tensor, starting one element in
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

std::string trace(const char* what, DType t, Layout l, int nth) {
  return std::string(what) + " " + dtype_name(t) + " " + layout_name(l) + " threads=" + std::to_string(nth);
}

// ---- binary ops with broadcasting ---------------------------------------------------------------

struct BinaryOp {
  const char* name;
  Tensor* (*build)(Context&, Tensor*, Tensor*);
  double (*ref)(double, double);
};
const BinaryOp kBinary[] = {
    {"add", ops::add, [](double x, double y) { return x + y; }},
    {"sub", ops::sub, [](double x, double y) { return x - y; }},
    {"mul", ops::mul, [](double x, double y) { return x * y; }},
    {"div", ops::div, [](double x, double y) { return x / y; }},
};

void run_binary(const BinaryOp& op, DType ta, DType tb, Shape na, Shape nb, Layout la, Layout lb, int nth) {
  SCOPED_TRACE(trace(op.name, ta, la, nth) + " b " + dtype_name(tb) + " " + layout_name(lb) + " b.ne=" +
               std::to_string(nb[0]) + "," + std::to_string(nb[1]) + "," + std::to_string(nb[2]) + "," +
               std::to_string(nb[3]));
  OpRunner r;
  Input a = make_input(r, ta, na, la);
  Input b = make_input(r, tb, nb, lb);
  Tensor* out = op.build(r.ctx, a.t, b.t);
  r.alloc();
  r.fill_normal(a.base);
  r.fill_uniform(b.base, 0.5f, 2.0f);  // away from 0 so DIV stays well conditioned
  const auto av = r.get_f32(a.t), bv = r.get_f32(b.t);
  r.compute(out, nth);
  std::vector<double> want(av.size());
  for (int64_t i3 = 0; i3 < na[3]; ++i3)
    for (int64_t i2 = 0; i2 < na[2]; ++i2)
      for (int64_t i1 = 0; i1 < na[1]; ++i1)
        for (int64_t i0 = 0; i0 < na[0]; ++i0)
          want[idx(na.data(), i0, i1, i2, i3)] =
              op.ref(av[idx(na.data(), i0, i1, i2, i3)],
                     bv[idx(nb.data(), i0 % nb[0], i1 % nb[1], i2 % nb[2], i3 % nb[3])]);
  EXPECT_LE(nmse(r.get_f32(out), want), kNmse);
}

class BinaryTest : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(BinaryTest, BroadcastShapesTypesAndLayouts) {
  const BinaryOp& op = kBinary[std::get<0>(GetParam())];
  const DType ta = std::get<1>(GetParam());
  const Shape na = {37, 5, 3, 2};
  const Shape broadcasts[] = {{37, 5, 3, 2}, {37, 1, 3, 1}, {1, 5, 1, 2}, {37, 1, 1, 1}, {1, 1, 1, 1}};
  for (int nth : kThreads) {
    for (const Shape& nb : broadcasts)
      for (DType tb : kFloatTypes) run_binary(op, ta, tb, na, nb, Layout::contiguous, Layout::contiguous, nth);
    for (Layout la : kLayouts)
      for (Layout lb : {Layout::contiguous, Layout::transposed}) {
        run_binary(op, ta, DType::F32, na, na, la, lb, nth);
        run_binary(op, ta, DType::F16, na, {37, 5, 1, 2}, la, lb, nth);
      }
    // b tiles along dim 0 (ne0 of b divides ne0 of a)
    run_binary(op, ta, DType::F32, {36, 5, 3, 2}, {12, 5, 1, 2}, Layout::contiguous, Layout::contiguous, nth);
    run_binary(op, ta, DType::BF16, {36, 5, 3, 2}, {12, 1, 3, 1}, Layout::transposed, Layout::transposed, nth);
  }
}

INSTANTIATE_TEST_SUITE_P(Ops, BinaryTest,
                         ::testing::Combine(::testing::Range(0, 4),
                                            ::testing::Values(DType::F32, DType::F16, DType::BF16)),
                         [](const auto& info) {
                           return std::string(kBinary[std::get<0>(info.param)].name) + "_" +
                                  dtype_name(std::get<1>(info.param));
                         });

TEST(Elementwise, BinaryLargeRowsManyThreads) {
  for (int nth : {1, 3, 4}) run_binary(kBinary[2], DType::F32, DType::F32, {4099, 7, 1, 1}, {4099, 1, 1, 1},
                                       Layout::contiguous, Layout::contiguous, nth);
  for (int nth : {1, 3, 4}) run_binary(kBinary[0], DType::F32, DType::F32, {4099, 7, 1, 1}, {4099, 7, 1, 1},
                                       Layout::contiguous, Layout::contiguous, nth);
}

// The allocator may give the result a's memory: the kernel must read element i before writing it.
TEST(Elementwise, InPlaceResultAliasingA) {
  for (int nth : kThreads) {
    for (const Shape nb : {Shape{37, 5, 3, 1}, Shape{37, 1, 1, 1}}) {
      OpRunner r;
      Tensor* a = r.input(DType::F32, {37, 5, 3});
      Tensor* b = r.input(DType::F32, {nb[0], nb[1], nb[2]});
      Tensor* out = ops::mul(r.ctx, a, b);
      r.alloc();
      r.fill_normal(a);
      r.fill_normal(b);
      const auto av = r.get_f32(a), bv = r.get_f32(b);
      out->data = a->data;  // in place
      r.compute(out, nth);
      const int64_t ne[4] = {37, 5, 3, 1};
      std::vector<double> want(av.size());
      for (int64_t i2 = 0; i2 < 3; ++i2)
        for (int64_t i1 = 0; i1 < 5; ++i1)
          for (int64_t i0 = 0; i0 < 37; ++i0)
            want[idx(ne, i0, i1, i2)] = (double)av[idx(ne, i0, i1, i2)] * bv[idx(nb.data(), i0, i1 % nb[1], i2 % nb[2])];
      EXPECT_LE(nmse(r.get_f32(out), want), kNmse);
    }
    OpRunner r;
    Tensor* a = r.input(DType::F32, {37, 5, 3});
    Tensor* out = ops::gelu(r.ctx, a);
    r.alloc();
    r.fill_normal(a);
    const auto av = r.get_f32(a);
    out->data = a->data;
    r.compute(out, nth);
    std::vector<double> want;
    for (double x : av) want.push_back(0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x))));
    EXPECT_LE(nmse(r.get_f32(out), want), kNmse);
  }
}

// ---- ADD_ID -------------------------------------------------------------------------------------

TEST(Elementwise, AddIdSelectsBiasRowPerExpert) {
  for (int nth : kThreads)
    for (DType ta : kFloatTypes)
      for (Layout la : {Layout::contiguous, Layout::transposed}) {
        SCOPED_TRACE(trace("add_id", ta, la, nth));
        OpRunner r;
        const Shape na = {37, 4, 6, 1};
        Input a = make_input(r, ta, na, la);
        Tensor* b = r.input(DType::F32, {37, 8});
        Tensor* ids = r.input(DType::I32, {4, 6});
        Tensor* out = ops::add_id(r.ctx, a.t, b, ids);
        r.alloc();
        r.fill_normal(a.base);
        r.fill_normal(b);
        r.fill_ints(ids, 0, 8);
        const auto av = r.get_f32(a.t), bv = r.get_f32(b);
        const auto iv = r.get_i32(ids);
        r.compute(out, nth);
        std::vector<double> want(av.size());
        for (int64_t j = 0; j < 6; ++j)
          for (int64_t i = 0; i < 4; ++i)
            for (int64_t e = 0; e < 37; ++e)
              want[idx(na.data(), e, i, j)] = (double)av[idx(na.data(), e, i, j)] + bv[(size_t)(iv[j * 4 + i] * 37 + e)];
        EXPECT_LE(nmse(r.get_f32(out), want), kNmse);
      }
}

// ---- unary ops ----------------------------------------------------------------------------------

double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }

struct UnaryOp {
  const char* name;
  std::function<Tensor*(Context&, Tensor*)> build;
  std::function<double(double)> ref;
  float lo, hi;  // input range (uniform)
};
const UnaryOp kUnary[] = {
    {"scale", [](Context& c, Tensor* a) { return ops::scale(c, a, 1.7f, -0.3f); },
     [](double x) { return x * (double)1.7f + (double)-0.3f; }, -3, 3},
    {"clamp", [](Context& c, Tensor* a) { return ops::clamp(c, a, -0.5f, 0.8f); },
     [](double x) { return std::min(std::max(x, -0.5), (double)0.8f); }, -2, 2},
    {"silu", ops::silu, [](double x) { return x * sigmoid_ref(x); }, -8, 8},
    {"gelu", ops::gelu,
     [](double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (x + 0.044715 * x * x * x))); }, -6, 6},
    {"sigmoid", ops::sigmoid, sigmoid_ref, -10, 10},
    {"softplus", ops::softplus, [](double x) { return std::log1p(std::exp(x)); }, -20, 20},
    {"exp", ops::exp, [](double x) { return std::exp(x); }, -5, 5},
    {"log", ops::log, [](double x) { return std::log(x); }, 0.05f, 20},
    {"sqr", ops::sqr, [](double x) { return x * x; }, -4, 4},
    {"sqrt", ops::sqrt, [](double x) { return std::sqrt(x); }, 0, 30},
};

class UnaryTest : public ::testing::TestWithParam<std::tuple<int, DType>> {};

TEST_P(UnaryTest, MatchesReferenceInEveryLayout) {
  const UnaryOp& op = kUnary[std::get<0>(GetParam())];
  const DType type = std::get<1>(GetParam());
  for (int nth : kThreads)
    for (Layout layout : kLayouts) {
      SCOPED_TRACE(trace(op.name, type, layout, nth));
      OpRunner r;
      const Shape ne = {37, 5, 3, 2};
      Input a = make_input(r, type, ne, layout);
      Tensor* out = op.build(r.ctx, a.t);
      r.alloc();
      r.fill_uniform(a.base, op.lo, op.hi);
      const auto av = r.get_f32(a.t);
      r.compute(out, nth);
      std::vector<double> want;
      for (float x : av) want.push_back(op.ref(x));
      EXPECT_LE(nmse(r.get_f32(out), want), kNmse);
    }
}

INSTANTIATE_TEST_SUITE_P(Ops, UnaryTest,
                         ::testing::Combine(::testing::Range(0, (int)std::size(kUnary)),
                                            ::testing::Values(DType::F32, DType::F16, DType::BF16)),
                         [](const auto& info) {
                           return std::string(kUnary[std::get<0>(info.param)].name) + "_" +
                                  dtype_name(std::get<1>(info.param));
                         });

// NMSE hides errors in tiny outputs; these values are checked one by one.
TEST(Elementwise, SoftplusIsStableForLargeMagnitudes) {
  OpRunner r;
  Tensor* a = r.input(DType::F32, {8});
  Tensor* out = ops::softplus(r.ctx, a);
  r.alloc();
  const std::vector<float> x = {100.0f, 89.0f, 1000.0f, 30.0f, -100.0f, -30.0f, 0.0f, 3e38f};
  r.set_f32(a, x);
  r.compute(out, 1);
  const auto y = r.get_f32(out);
  for (size_t i = 0; i < x.size(); ++i) {
    const double want = x[i] > 0 ? x[i] + std::log1p(std::exp(-(double)x[i])) : std::log1p(std::exp((double)x[i]));
    ASSERT_TRUE(std::isfinite(y[i])) << "x = " << x[i];
    EXPECT_NEAR(y[i], want, std::max(std::fabs(want) * 1e-6, 1e-37)) << "x = " << x[i];
  }
}

TEST(Elementwise, SiluAndSigmoidSaturateWithoutNaN) {
  OpRunner r;
  Tensor* a = r.input(DType::F32, {4});
  Tensor* s = ops::silu(r.ctx, a);
  Tensor* g = ops::sigmoid(r.ctx, a);
  r.alloc();
  r.set_f32(a, {-200.0f, 200.0f, -90.0f, 90.0f});
  r.compute(s, 1);
  r.compute(g, 1);
  const auto sv = r.get_f32(s), gv = r.get_f32(g);
  EXPECT_EQ(sv[0], 0.0f);
  EXPECT_EQ(sv[1], 200.0f);
  EXPECT_EQ(gv[0], 0.0f);
  EXPECT_EQ(gv[1], 1.0f);
  EXPECT_NEAR(sv[2], 0.0f, 1e-30);
  EXPECT_EQ(sv[3], 90.0f);
}

// ---- SWIGLU / SILU_BACK ---------------------------------------------------------------------

struct PairOp {
  const char* name;
  Tensor* (*build)(Context&, Tensor*, Tensor*);
  double (*ref)(double, double);
};
const PairOp kPairs[] = {
    {"swiglu", ops::swiglu, [](double a, double b) { return a * sigmoid_ref(a) * b; }},
    {"silu_back", ops::silu_back,
     [](double g, double x) {
       const double s = sigmoid_ref(x);
       return g * (s + x * s * (1 - s));  // d/dx x s(x) = s + x s (1 - s)
     }},
};

TEST(Elementwise, SwigluAndSiluBack) {
  for (const PairOp& op : kPairs)
    for (int nth : kThreads)
      for (DType type : kFloatTypes)
        for (Layout la : kLayouts) {
          const Layout lb = la == Layout::contiguous ? Layout::transposed : Layout::contiguous;
          SCOPED_TRACE(trace(op.name, type, la, nth));
          OpRunner r;
          const Shape ne = {37, 5, 3, 2};
          Input a = make_input(r, type, ne, la);
          Input b = make_input(r, DType::F32, ne, lb);
          Tensor* out = op.build(r.ctx, a.t, b.t);
          r.alloc();
          r.fill_uniform(a.base, -6, 6);
          r.fill_normal(b.base);
          const auto av = r.get_f32(a.t), bv = r.get_f32(b.t);
          r.compute(out, nth);
          std::vector<double> want;
          for (size_t i = 0; i < av.size(); ++i) want.push_back(op.ref(av[i], bv[i]));
          EXPECT_LE(nmse(r.get_f32(out), want), kNmse);
        }
}

// SILU_BACK is the derivative of SILU: check it against central differences of the kernel's silu.
TEST(Elementwise, SiluBackMatchesFiniteDifferences) {
  OpRunner r;
  const int n = 64;
  Tensor* x = r.input(DType::F32, {n});
  Tensor* xp = r.input(DType::F32, {n});
  Tensor* xm = r.input(DType::F32, {n});
  Tensor* g = r.input(DType::F32, {n});
  Tensor* back = ops::silu_back(r.ctx, g, x);
  Tensor* yp = ops::silu(r.ctx, xp);
  Tensor* ym = ops::silu(r.ctx, xm);
  r.alloc();
  std::vector<float> xv(n), xpv(n), xmv(n), ones(n, 1.0f);
  const float h = 1e-2f;
  for (int i = 0; i < n; ++i) {
    xv[i] = -6.0f + 12.0f * (float)i / n;
    xpv[i] = xv[i] + h;
    xmv[i] = xv[i] - h;
  }
  r.set_f32(x, xv);
  r.set_f32(xp, xpv);
  r.set_f32(xm, xmv);
  r.set_f32(g, ones);
  r.compute(back, 1);
  r.compute(yp, 1);
  r.compute(ym, 1);
  const auto d = r.get_f32(back), p = r.get_f32(yp), m = r.get_f32(ym);
  for (int i = 0; i < n; ++i) EXPECT_NEAR(d[i], (p[i] - m[i]) / (xpv[i] - xmv[i]), 2e-3) << "x = " << xv[i];
}

TEST(Elementwise, SupportsOnlyFloatInputs) {
  OpRunner r;
  Tensor* a = r.input(DType::F32, {32, 2});
  Tensor* q = r.input(DType::Q8_0, {32, 2});
  Tensor* ok = ops::add(r.ctx, a, a);
  EXPECT_TRUE(cpu::supports(ok));
  ok->src[1] = q;  // the builder refuses quantized inputs; the kernel must say no, not crash
  EXPECT_FALSE(cpu::supports(ok));
  Tensor* s = ops::silu(r.ctx, a);
  s->src[0] = q;
  EXPECT_FALSE(cpu::supports(s));
}

}  // namespace
}  // namespace loom::test
