// Reductions and selections on the CPU (SUM SUM_ROWS MEAN ARGMAX ARGSORT TOP_K COUNT_EQUAL)
// against references written here: double sums, and rank-counting definitions of stable order
// and top-k (O(n^2), so they share nothing with a sorting kernel). Ties are forced with values
// drawn from a few integers; strided views and 1 and 3 threads throughout.
#include <array>
#include <cmath>
#include <limits>
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

std::string trace(const char* what, DType t, Layout l, int nth) {
  return std::string(what) + " " + dtype_name(t) + " " + layout_name(l) + " threads=" + std::to_string(nth);
}

// Fills a tensor with integers in [lo, hi) stored as floats: many exact ties.
void fill_tied(OpRunner& r, Tensor* t, int lo, int hi) {
  std::uniform_int_distribution<int> d(lo, hi - 1);
  std::vector<float> v((size_t)t->nelements());
  for (float& x : v) x = (float)d(r.rng);
  r.set_f32(t, v);
}

// ---- SUM / SUM_ROWS / MEAN -----------------------------------------------------------------

TEST(Reduce, SumOfEveryElement) {
  for (int nth : {1, 3, 4})
    for (DType type : kFloatTypes)
      for (Layout layout : kLayouts)
        for (Shape ne : {Shape{37, 5, 3, 2}, Shape{4099, 2, 1, 1}, Shape{1, 1, 1, 1}}) {
          if (layout != Layout::contiguous && ne[0] > 1000) continue;
          SCOPED_TRACE(trace("sum", type, layout, nth) + " ne0=" + std::to_string(ne[0]));
          OpRunner r;
          Input a = make_input(r, type, ne, layout);
          Tensor* out = ops::sum(r.ctx, a.t);
          r.alloc();
          r.fill_uniform(a.base, -0.2f, 1.0f);  // mean away from 0: the sum is not a cancellation
          double want = 0;
          for (float x : r.get_f32(a.t)) want += x;
          r.compute(out, nth);
          EXPECT_LE(nmse(r.get_f32(out), {want}), kNmse);
        }
}

TEST(Reduce, SumRowsAndMean) {
  for (bool mean : {false, true})
    for (int nth : kThreads)
      for (DType type : kFloatTypes)
        for (Layout layout : kLayouts) {
          SCOPED_TRACE(trace(mean ? "mean" : "sum_rows", type, layout, nth));
          OpRunner r;
          const Shape ne = {37, 5, 3, 2};
          Input a = make_input(r, type, ne, layout);
          Tensor* out = mean ? ops::mean(r.ctx, a.t) : ops::sum_rows(r.ctx, a.t);
          r.alloc();
          r.fill_normal(a.base);
          const auto av = r.get_f32(a.t);
          r.compute(out, nth);
          ASSERT_EQ(out->ne[0], 1);
          ASSERT_EQ(out->nelements(), 30);
          std::vector<double> want(30, 0.0);
          for (size_t i = 0; i < av.size(); ++i) want[i / 37] += av[i];
          if (mean)
            for (double& w : want) w /= 37;
          EXPECT_LE(nmse(r.get_f32(out), want), kNmse);
        }
}

// ---- ARGMAX ----------------------------------------------------------------------------------

TEST(Reduce, ArgmaxTakesFirstOfTiedMaxima) {
  for (int nth : kThreads)
    for (Layout layout : {Layout::contiguous, Layout::transposed, Layout::row_slice}) {
      SCOPED_TRACE(trace("argmax", DType::F32, layout, nth));
      OpRunner r;
      const Shape ne = {37, 11, 1, 1};
      Input a = make_input(r, DType::F32, ne, layout);
      Tensor* out = ops::argmax(r.ctx, a.t);
      r.alloc();
      fill_tied(r, a.base, -3, 4);  // 7 values over 37 columns: the maximum repeats in most rows
      const auto av = r.get_f32(a.t);
      r.compute(out, nth);
      const auto got = r.get_i32(out);
      ASSERT_EQ(got.size(), 11u);
      for (int64_t row = 0; row < 11; ++row) {
        int want = 0;
        for (int i = 0; i < 37; ++i)
          if (av[(size_t)(row * 37 + i)] > av[(size_t)(row * 37 + want)]) want = i;
        EXPECT_EQ(got[(size_t)row], want) << "row " << row;
      }
    }
}

TEST(Reduce, ArgmaxHandEncoded) {
  OpRunner r;
  Tensor* a = r.input(DType::F32, {4, 3});
  Tensor* out = ops::argmax(r.ctx, a);
  r.alloc();
  r.set_f32(a, {1, 5, 5, 2, /**/ -1, -2, -3, -1, /**/ 0, 0, 0, 7});
  r.compute(out, 2);
  EXPECT_EQ(r.get_i32(out), (std::vector<int32_t>{1, 0, 3}));
}

// ---- ARGSORT ---------------------------------------------------------------------------------

// Stable sorted position of element i of row x: elements strictly before it, plus equal ones
// with a smaller index.
std::vector<int32_t> stable_order_ref(const float* x, int64_t n, bool descending) {
  std::vector<int32_t> order((size_t)n);
  for (int64_t i = 0; i < n; ++i) {
    int64_t pos = 0;
    for (int64_t j = 0; j < n; ++j) {
      const bool before = descending ? x[j] > x[i] : x[j] < x[i];
      if (before || (x[j] == x[i] && j < i)) ++pos;
    }
    order[(size_t)pos] = (int32_t)i;
  }
  return order;
}

TEST(Reduce, ArgsortIsStableBothOrders) {
  for (bool descending : {false, true})
    for (int nth : kThreads)
      for (Layout layout : kLayouts)
        for (bool tied : {true, false}) {
          SCOPED_TRACE(trace(descending ? "argsort desc" : "argsort asc", DType::F32, layout, nth) +
                       (tied ? " tied" : " distinct"));
          OpRunner r;
          const Shape ne = {37, 5, 3, 2};
          Input a = make_input(r, DType::F32, ne, layout);
          Tensor* out =
              ops::argsort(r.ctx, a.t, descending ? ops::SortOrder::descending : ops::SortOrder::ascending);
          r.alloc();
          if (tied) {
            fill_tied(r, a.base, 0, 6);
          } else {
            r.fill_normal(a.base);
          }
          const auto av = r.get_f32(a.t);
          r.compute(out, nth);
          const auto got = r.get_i32(out);
          ASSERT_EQ(got.size(), av.size());
          for (size_t row = 0; row < av.size() / 37; ++row) {
            const auto want = stable_order_ref(av.data() + row * 37, 37, descending);
            EXPECT_EQ(std::vector<int32_t>(got.begin() + row * 37, got.begin() + (row + 1) * 37), want)
                << "row " << row;
          }
        }
}

TEST(Reduce, ArgsortPutsNaNLast) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (bool descending : {false, true}) {
    OpRunner r;
    Tensor* a = r.input(DType::F32, {6});
    Tensor* out = ops::argsort(r.ctx, a, descending ? ops::SortOrder::descending : ops::SortOrder::ascending);
    r.alloc();
    r.set_f32(a, {2, nan, -1, 3, nan, 0});
    r.compute(out, 1);
    const std::vector<int32_t> want =
        descending ? std::vector<int32_t>{3, 0, 5, 2, 1, 4} : std::vector<int32_t>{2, 5, 0, 3, 1, 4};
    EXPECT_EQ(r.get_i32(out), want);
  }
}

// ---- TOP_K -----------------------------------------------------------------------------------

TEST(Reduce, TopKLargestFirstTiesByLowerIndex) {
  for (int64_t k : {1, 5, 37})
    for (int nth : kThreads)
      for (Layout layout : kLayouts)
        for (bool tied : {true, false}) {
          SCOPED_TRACE(trace("top_k", DType::F32, layout, nth) + " k=" + std::to_string(k) +
                       (tied ? " tied" : " distinct"));
          OpRunner r;
          const Shape ne = {37, 5, 3, 2};
          Input a = make_input(r, DType::F32, ne, layout);
          Tensor* out = ops::top_k(r.ctx, a.t, k);
          r.alloc();
          if (tied) {
            fill_tied(r, a.base, 0, 6);
          } else {
            r.fill_normal(a.base);
          }
          const auto av = r.get_f32(a.t);
          r.compute(out, nth);
          const auto got = r.get_i32(out);
          ASSERT_EQ(got.size(), av.size() / 37 * (size_t)k);
          for (size_t row = 0; row < av.size() / 37; ++row) {
            auto want = stable_order_ref(av.data() + row * 37, 37, /*descending=*/true);
            want.resize((size_t)k);
            EXPECT_EQ(std::vector<int32_t>(got.begin() + row * k, got.begin() + (row + 1) * k), want)
                << "row " << row;
          }
        }
}

TEST(Reduce, TopKLongRow) {
  OpRunner r;
  Tensor* a = r.input(DType::F32, {5000, 2});
  Tensor* out = ops::top_k(r.ctx, a, 8);
  r.alloc();
  std::vector<float> v(10000);
  for (int i = 0; i < 10000; ++i) v[(size_t)i] = (float)((i * 7919) % 5000);  // a permutation per row
  r.set_f32(a, v);
  r.compute(out, 3);
  const auto got = r.get_i32(out);
  for (int row = 0; row < 2; ++row)
    for (int j = 0; j < 8; ++j) EXPECT_EQ(v[(size_t)(row * 5000 + got[(size_t)(row * 8 + j)])], 4999.0f - j);
}

// ---- COUNT_EQUAL -----------------------------------------------------------------------------

TEST(Reduce, CountEqual) {
  for (int nth : {1, 3, 4})
    for (Layout la : {Layout::contiguous, Layout::transposed, Layout::permuted})
      for (Layout lb : {Layout::contiguous, Layout::row_slice}) {
        SCOPED_TRACE(trace("count_equal", DType::I32, la, nth) + " b " + layout_name(lb));
        OpRunner r;
        const Shape ne = {37, 5, 3, 2};
        Input a = make_input(r, DType::I32, ne, la);
        Input b = make_input(r, DType::I32, ne, lb);
        Tensor* out = ops::count_equal(r.ctx, a.t, b.t);
        r.alloc();
        r.fill_ints(a.base, 0, 3);
        r.fill_ints(b.base, 0, 3);
        const auto av = r.get_i32(a.t), bv = r.get_i32(b.t);
        r.compute(out, nth);
        int32_t want = 0;
        for (size_t i = 0; i < av.size(); ++i) want += av[i] == bv[i];
        ASSERT_GT(want, 0);
        ASSERT_LT(want, (int32_t)av.size());
        EXPECT_EQ(r.get_i32(out), std::vector<int32_t>{want});
      }
}

TEST(Reduce, SupportsRejectsWrongTypes) {
  OpRunner r;
  Tensor* a = r.input(DType::F32, {32, 2});
  Tensor* s = ops::argsort(r.ctx, a, ops::SortOrder::ascending);
  EXPECT_TRUE(cpu::supports(s));
  s->src[0] = r.input(DType::F16, {32, 2});  // the kernels sort F32 only
  EXPECT_FALSE(cpu::supports(s));
  Tensor* sum = ops::sum(r.ctx, a);
  sum->src[0] = r.input(DType::Q8_0, {32, 2});
  EXPECT_FALSE(cpu::supports(sum));
}

}  // namespace
}  // namespace loom::test
