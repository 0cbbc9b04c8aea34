// Copy-family ops on the CPU (CPY DUP CONT CONCAT REPEAT REPEAT_BACK GET_ROWS GET_ROWS_BACK
// SET_ROWS) against references written here. Conversions into a quantized type are compared
// with the dtype's own reference quantization of each logical row (the kernel's job is routing
// rows, not quantizing) and bounded against the unquantized values; pure moves compare exactly.
#include <algorithm>
#include <array>
#include <cstring>
#include <string>

#include "op_harness.h"

namespace loom::test {
namespace {

using Shape = std::array<int64_t, 4>;

enum class Layout { contiguous, transposed, permuted, row_slice };
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::contiguous: return "contiguous";
    case Layout::transposed: return "transposed";
    case Layout::permuted: return "permuted";
    case Layout::row_slice: return "row_slice";
  }
  return "?";
}
bool is_quant(DType t) { return dtype_info(t).block_size > 1; }
// Layouts a type can have: quantized blocks cannot be split by a stride in dim 0.
std::vector<Layout> layouts_for(DType t) {
  if (is_quant(t)) return {Layout::contiguous, Layout::row_slice};
  return {Layout::contiguous, Layout::transposed, Layout::permuted, Layout::row_slice};
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
    case Layout::row_slice: {  // rows of a wider tensor, starting one element (block) in
      const int64_t pad = is_quant(type) ? dtype_info(type).block_size : 3;
      Tensor* b = r.input(type, {ne[0] + pad, ne[1], ne[2], ne[3]});
      return {b, ops::view_4d(c, b, ne[0], ne[1], ne[2], ne[3], b->nb[1], b->nb[2], b->nb[3], b->nb[0])};
    }
    case Layout::contiguous: break;
  }
  Tensor* t = r.input(type, {ne[0], ne[1], ne[2], ne[3]});
  return {t, t};
}

void fill(OpRunner& r, Tensor* t) {
  if (t->type == DType::I32) {
    r.fill_ints(t, -1000, 1000);
  } else {
    r.fill_normal(t);
  }
}
// Any tensor's logical values as f32 (I32 converted exactly: |values| < 2^24).
std::vector<float> values(const OpRunner& r, const Tensor* t) {
  if (t->type != DType::I32) return r.get_f32(t);
  std::vector<float> out;
  for (int32_t v : r.get_i32(t)) out.push_back((float)v);
  return out;
}

// Logical values as stored in `type`: each row of ne0 through the dtype's reference conversions.
std::vector<float> stored_as(DType type, const std::vector<float>& v, int64_t ne0) {
  if (type == DType::I32 || type == DType::F32) return v;
  const DTypeInfo& info = dtype_info(type);
  std::vector<float> out(v.size());
  std::vector<uint8_t> bytes(row_size(type, ne0));
  for (size_t r = 0; r < v.size() / (size_t)ne0; ++r) {
    info.from_float(v.data() + r * ne0, bytes.data(), ne0);
    info.to_float(bytes.data(), out.data() + r * ne0, ne0);
  }
  return out;
}

// A loose bound on a type's quantization error, in NMSE against the unquantized values.
double quant_nmse_bound(DType t) {
  switch (t) {
    case DType::F32: return 0;
    case DType::F16: return 1e-6;
    case DType::BF16: return 1e-4;
    case DType::Q8_0: return 1e-4;
    case DType::Q6_K: return 1e-3;
    default: return 2e-2;  // 4-bit types
  }
}
int64_t row_len_for(DType a, DType b) {
  const int64_t bs = std::max(dtype_info(a).block_size, dtype_info(b).block_size);
  return bs == 1 ? 37 : bs * 2;
}

constexpr DType kFloatTypes[] = {DType::F32, DType::F16, DType::BF16};
constexpr DType kQuantTypes[] = {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K};
constexpr DType kAllTypes[] = {DType::F32,  DType::F16,  DType::BF16, DType::Q8_0,
                               DType::Q4_0, DType::Q4_K, DType::Q6_K, DType::I32};
constexpr int kThreads[] = {1, 3};

std::string trace(const char* what, DType a, DType b, Layout l, int nth) {
  return std::string(what) + " " + dtype_name(a) + "->" + dtype_name(b) + " " + layout_name(l) +
         " threads=" + std::to_string(nth);
}

// ---- CPY / DUP / CONT --------------------------------------------------------------------------

class CpyTest : public ::testing::TestWithParam<std::tuple<DType, DType>> {};

// Every float/quant type into every float/quant type, from every layout the source can have.
TEST_P(CpyTest, ConvertsRowByRow) {
  const auto [ts, td] = GetParam();
  const int64_t n0 = row_len_for(ts, td);
  const Shape ne = {n0, 5, 3, 2};
  for (int nth : kThreads)
    for (Layout layout : layouts_for(ts)) {
      SCOPED_TRACE(trace("cpy", ts, td, layout, nth));
      OpRunner r;
      Input a = make_input(r, ts, ne, layout);
      Tensor* b = r.input(td, {ne[0], ne[1], ne[2], ne[3]}, "dst");
      Tensor* out = ops::cpy(r.ctx, a.t, b);
      r.alloc();
      fill(r, a.base);
      const auto av = values(r, a.t);
      r.compute(out, nth);
      const auto got = r.get_f32(b);
      EXPECT_EQ(got, ts == td ? av : stored_as(td, av, n0));  // same type: bytes unchanged
      std::vector<double> want(av.begin(), av.end());
      EXPECT_LE(nmse(got, want), quant_nmse_bound(td));
    }
}

INSTANTIATE_TEST_SUITE_P(Types, CpyTest,
                         ::testing::Combine(::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0,
                                                              DType::Q4_0, DType::Q4_K, DType::Q6_K),
                                            ::testing::Values(DType::F32, DType::F16, DType::BF16, DType::Q8_0,
                                                              DType::Q4_0, DType::Q4_K, DType::Q6_K)),
                         [](const auto& info) {
                           return std::string(dtype_name(std::get<0>(info.param))) + "_to_" +
                                  dtype_name(std::get<1>(info.param));
                         });

// Same type: bytes move unchanged (quant blocks too), through strides.
TEST(Copy, SameTypeCopiesAreExact) {
  for (DType t : kAllTypes)
    for (int nth : kThreads)
      for (Layout layout : layouts_for(t)) {
        SCOPED_TRACE(trace("cpy", t, t, layout, nth));
        OpRunner r;
        const Shape ne = {row_len_for(t, t), 5, 3, 2};
        Input a = make_input(r, t, ne, layout);
        Tensor* b = r.input(t, {ne[0], ne[1], ne[2], ne[3]});
        Tensor* out = ops::cpy(r.ctx, a.t, b);
        Tensor* d = ops::dup(r.ctx, a.t);
        Tensor* c = ops::cont(r.ctx, a.t);
        r.alloc();
        fill(r, a.base);
        const auto av = values(r, a.t);
        r.compute(out, nth);
        r.compute(d, nth);
        r.compute(c, nth);
        EXPECT_EQ(values(r, b), av);
        EXPECT_EQ(values(r, d), av);
        EXPECT_EQ(values(r, c), av);
        EXPECT_TRUE(c->is_contiguous());
        if (layout == Layout::contiguous) {
          EXPECT_EQ(std::memcmp(b->data, a.t->data, b->nbytes()), 0);
        }
      }
}

// Different shapes, same element count: elements move in logical order (ne0 fastest).
TEST(Copy, CpyReshapesInLogicalOrder) {
  struct Case {
    DType ts, td;
    Shape ns, nd;
    Layout ls;
    bool dst_transposed;
  };
  const Case cases[] = {
      {DType::F32, DType::F16, {37, 6, 1, 1}, {111, 2, 1, 1}, Layout::transposed, false},
      {DType::F16, DType::F32, {37, 6, 1, 1}, {2, 111, 1, 1}, Layout::permuted, true},
      {DType::F32, DType::F32, {37, 6, 1, 1}, {3, 74, 1, 1}, Layout::transposed, true},
      {DType::F32, DType::Q8_0, {64, 3, 1, 1}, {32, 6, 1, 1}, Layout::transposed, false},
      {DType::Q8_0, DType::F32, {64, 3, 1, 1}, {16, 12, 1, 1}, Layout::row_slice, false},
      {DType::Q8_0, DType::Q8_0, {64, 3, 1, 1}, {32, 6, 1, 1}, Layout::row_slice, false},
      {DType::Q4_0, DType::Q4_0, {32, 6, 1, 1}, {64, 3, 1, 1}, Layout::contiguous, false},
      {DType::Q4_0, DType::Q8_0, {32, 6, 2, 1}, {64, 2, 3, 1}, Layout::row_slice, false},
      {DType::I32, DType::I32, {6, 37, 1, 1}, {222, 1, 1, 1}, Layout::transposed, false},
  };
  for (const Case& k : cases)
    for (int nth : kThreads) {
      SCOPED_TRACE(trace("cpy reshape", k.ts, k.td, k.ls, nth) + (k.dst_transposed ? " dst transposed" : ""));
      OpRunner r;
      Input a = make_input(r, k.ts, k.ns, k.ls);
      Input b = make_input(r, k.td, k.nd, k.dst_transposed ? Layout::transposed : Layout::contiguous);
      Tensor* out = ops::cpy(r.ctx, a.t, b.t);
      r.alloc();
      fill(r, a.base);
      const auto av = values(r, a.t);
      r.compute(out, nth);
      EXPECT_EQ(values(r, b.t), stored_as(k.td, av, k.nd[0]));
    }
}

// A KV-cache write: cpy into a view of some rows of a quantized cache; other rows untouched.
TEST(Copy, CpyIntoCacheViewLeavesOtherRows) {
  for (DType t : {DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0})
    for (int nth : kThreads) {
      SCOPED_TRACE(trace("cpy view", DType::F32, t, Layout::contiguous, nth));
      OpRunner r;
      Tensor* cache = r.input(t, {64, 10});
      Tensor* src = r.input(DType::F32, {64, 4});
      Tensor* view = ops::view_2d(r.ctx, cache, 64, 4, cache->nb[1], 3 * cache->nb[1]);
      Tensor* out = ops::cpy(r.ctx, src, view);
      r.alloc();
      r.fill_normal(cache);
      r.fill_normal(src);
      std::vector<uint8_t> before(static_cast<uint8_t*>(cache->data), static_cast<uint8_t*>(cache->data) + cache->nbytes());
      const auto sv = r.get_f32(src);
      r.compute(out, nth);
      const auto* after = static_cast<const uint8_t*>(cache->data);
      const size_t row = cache->nb[1];
      EXPECT_EQ(std::memcmp(after, before.data(), 3 * row), 0);
      EXPECT_EQ(std::memcmp(after + 7 * row, before.data() + 7 * row, 3 * row), 0);
      EXPECT_EQ(r.get_f32(view), stored_as(t, sv, 64));
    }
}

TEST(Copy, ContOfPermutedViewsIsContiguousAndExact) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::I32})
    for (int nth : kThreads) {
      OpRunner r;
      Tensor* base = r.input(t, {7, 5, 3, 2});
      Tensor* p = ops::permute(r.ctx, base, 3, 1, 0, 2);  // a 4-D shuffle: logical {3, 5, 2, 7}
      Tensor* out = ops::cont(r.ctx, p);
      r.alloc();
      fill(r, base);
      const auto bv = values(r, base);
      r.compute(out, nth);
      ASSERT_TRUE(out->is_contiguous());
      ASSERT_EQ(out->ne[0], 3);
      ASSERT_EQ(out->ne[1], 5);
      ASSERT_EQ(out->ne[2], 2);
      ASSERT_EQ(out->ne[3], 7);
      const auto got = values(r, out);
      const int64_t nb_[4] = {7, 5, 3, 2}, no[4] = {3, 5, 2, 7};
      // out[i0, i1, i2, i3] = base[j] with base dim d going to out dim axes[d] = {3, 1, 0, 2}.
      for (int64_t j3 = 0; j3 < 2; ++j3)
        for (int64_t j2 = 0; j2 < 3; ++j2)
          for (int64_t j1 = 0; j1 < 5; ++j1)
            for (int64_t j0 = 0; j0 < 7; ++j0)
              ASSERT_EQ(got[idx(no, j2, j1, j3, j0)], bv[idx(nb_, j0, j1, j2, j3)]) << dtype_name(t);
    }
}

// Large enough for several column and row tiles of the transposed-copy path, 3-D so tiles meet
// plane boundaries.
TEST(Copy, ContOfLargeTransposeIsExact) {
  for (DType t : {DType::F32, DType::F16, DType::I32})
    for (int nth : {1, 3}) {
      OpRunner r;
      Tensor* base = r.input(t, {70, 131, 2});
      Tensor* out = ops::cont(r.ctx, ops::transpose(r.ctx, base));  // logical {131, 70, 2}
      r.alloc();
      fill(r, base);
      const auto bv = values(r, base);
      r.compute(out, nth);
      const auto got = values(r, out);
      const int64_t nb_[4] = {70, 131, 2, 1}, no[4] = {131, 70, 2, 1};
      for (int64_t i2 = 0; i2 < 2; ++i2)
        for (int64_t i1 = 0; i1 < 70; ++i1)
          for (int64_t i0 = 0; i0 < 131; ++i0)
            ASSERT_EQ(got[idx(no, i0, i1, i2)], bv[idx(nb_, i1, i0, i2)]) << dtype_name(t) << " threads=" << nth;
    }
}

// ---- CONCAT ------------------------------------------------------------------------------------

TEST(Copy, ConcatEveryDim) {
  for (DType t : {DType::F32, DType::F16, DType::I32, DType::Q8_0})
    for (int dim = 0; dim < 4; ++dim)
      for (int nth : kThreads) {
        const Layout la = is_quant(t) ? Layout::row_slice : Layout::transposed;
        SCOPED_TRACE(trace("concat", t, t, la, nth) + " dim=" + std::to_string(dim));
        OpRunner r;
        Shape na = {is_quant(t) ? 64 : 7, 5, 3, 2}, nb = na;
        nb[(size_t)dim] = dim == 0 && is_quant(t) ? 32 : 2;
        Input a = make_input(r, t, na, la);
        Input b = make_input(r, t, nb, Layout::contiguous);
        Tensor* out = ops::concat(r.ctx, a.t, b.t, dim);
        r.alloc();
        fill(r, a.base);
        fill(r, b.base);
        const auto av = values(r, a.t), bv = values(r, b.t);
        r.compute(out, nth);
        Shape no = na;
        no[(size_t)dim] += nb[(size_t)dim];
        std::vector<float> want((size_t)(no[0] * no[1] * no[2] * no[3]));
        for (int64_t i3 = 0; i3 < no[3]; ++i3)
          for (int64_t i2 = 0; i2 < no[2]; ++i2)
            for (int64_t i1 = 0; i1 < no[1]; ++i1)
              for (int64_t i0 = 0; i0 < no[0]; ++i0) {
                int64_t i[4] = {i0, i1, i2, i3};
                const bool from_a = i[dim] < na[(size_t)dim];
                if (!from_a) i[dim] -= na[(size_t)dim];
                want[idx(no.data(), i0, i1, i2, i3)] =
                    from_a ? av[idx(na.data(), i[0], i[1], i[2], i[3])] : bv[idx(nb.data(), i[0], i[1], i[2], i[3])];
              }
        EXPECT_EQ(values(r, out), want);
      }
}

// ---- REPEAT / REPEAT_BACK ----------------------------------------------------------------------

TEST(Copy, RepeatTiles) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0})
    for (int nth : kThreads)
      for (Layout layout : layouts_for(t)) {
        SCOPED_TRACE(trace("repeat", t, DType::F32, layout, nth));
        OpRunner r;
        const int64_t n0 = is_quant(t) ? 32 : 37;
        const Shape na = {n0, 1, 3, 1}, nl = {2 * n0, 5, 3, 2};
        Input a = make_input(r, t, na, layout);
        Tensor* like = r.input(DType::F32, {nl[0], nl[1], nl[2], nl[3]});
        Tensor* out = ops::repeat(r.ctx, a.t, like);
        r.alloc();
        fill(r, a.base);
        const auto av = values(r, a.t);
        r.compute(out, nth);
        std::vector<float> want;
        for (int64_t i3 = 0; i3 < nl[3]; ++i3)
          for (int64_t i2 = 0; i2 < nl[2]; ++i2)
            for (int64_t i1 = 0; i1 < nl[1]; ++i1)
              for (int64_t i0 = 0; i0 < nl[0]; ++i0) want.push_back(av[idx(na.data(), i0 % n0, 0, i2 % 3, 0)]);
        EXPECT_EQ(r.get_f32(out), want);
      }
}

TEST(Copy, RepeatBackSumsTiles) {
  for (DType t : kFloatTypes)
    for (int nth : kThreads)
      for (Layout layout : layouts_for(t)) {
        SCOPED_TRACE(trace("repeat_back", t, DType::F32, layout, nth));
        OpRunner r;
        const Shape na = {74, 10, 6, 2}, nl = {37, 5, 3, 1};
        Input a = make_input(r, t, na, layout);
        Tensor* like = r.input(DType::F32, {nl[0], nl[1], nl[2], nl[3]});
        Tensor* out = ops::repeat_back(r.ctx, a.t, like);
        r.alloc();
        fill(r, a.base);
        const auto av = values(r, a.t);
        r.compute(out, nth);
        std::vector<double> want((size_t)(37 * 5 * 3), 0.0);
        for (int64_t i3 = 0; i3 < na[3]; ++i3)
          for (int64_t i2 = 0; i2 < na[2]; ++i2)
            for (int64_t i1 = 0; i1 < na[1]; ++i1)
              for (int64_t i0 = 0; i0 < na[0]; ++i0)
                want[idx(nl.data(), i0 % 37, i1 % 5, i2 % 3, 0)] += av[idx(na.data(), i0, i1, i2, i3)];
        EXPECT_LE(nmse(r.get_f32(out), want), 1e-7);
      }
}

// ---- GET_ROWS / GET_ROWS_BACK / SET_ROWS -------------------------------------------------------

TEST(Copy, GetRowsDequantizesSelectedRows) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K})
    for (int dims = 2; dims <= 4; ++dims)
      for (int nth : kThreads)
        for (Layout layout : layouts_for(t)) {
          SCOPED_TRACE(trace("get_rows", t, DType::F32, layout, nth) + " dims=" + std::to_string(dims));
          OpRunner r;
          const int64_t n0 = row_len_for(t, t), rows = 10, n = 7;
          const int64_t a2 = dims >= 3 ? 3 : 1, a3 = dims == 4 ? 2 : 1;
          const Shape na = {n0, rows, a2, a3}, ni = {n, a2, a3, 1};
          Input a = make_input(r, t, na, layout);
          // ids transposed (non-contiguous) in the 3-D case
          Input ids = make_input(r, DType::I32, ni, dims == 3 ? Layout::transposed : Layout::contiguous);
          Tensor* out = ops::get_rows(r.ctx, a.t, ids.t);
          r.alloc();
          fill(r, a.base);
          r.fill_ints(ids.base, 0, (int32_t)rows);
          const auto av = r.get_f32(a.t);
          const auto iv = r.get_i32(ids.t);
          r.compute(out, nth);
          std::vector<float> want;
          for (int64_t k = 0; k < a3; ++k)
            for (int64_t j = 0; j < a2; ++j)
              for (int64_t i = 0; i < n; ++i) {
                const int64_t id = iv[idx(ni.data(), i, j, k)];
                for (int64_t e = 0; e < n0; ++e) want.push_back(av[idx(na.data(), e, id, j, k)]);
              }
          EXPECT_EQ(r.get_f32(out), want);
        }
}

TEST(Copy, GetRowsBackAccumulatesDuplicates) {
  for (DType t : kFloatTypes)
    for (int nth : {1, 3, 4})
      for (Layout layout : layouts_for(t)) {
        SCOPED_TRACE(trace("get_rows_back", t, DType::F32, layout, nth));
        OpRunner r;
        const Shape ng = {37, 9, 1, 1};
        Input g = make_input(r, t, ng, layout);
        Tensor* ids = r.input(DType::I32, {9});
        Tensor* like = r.input(DType::F32, {37, 5});
        Tensor* out = ops::get_rows_back(r.ctx, g.t, ids, like);
        r.alloc();
        fill(r, g.base);
        r.set_i32(ids, {4, 0, 4, 2, 4, 0, 1, 2, 4});  // row 3 never selected: stays 0
        const auto gv = r.get_f32(g.t);
        const auto iv = r.get_i32(ids);
        r.compute(out, nth);
        std::vector<double> want(37 * 5, 0.0);
        for (int i = 0; i < 9; ++i)
          for (int e = 0; e < 37; ++e) want[(size_t)(iv[(size_t)i] * 37 + e)] += gv[(size_t)(i * 37 + e)];
        const auto got = r.get_f32(out);
        EXPECT_LE(nmse(got, want), 1e-7);
        for (int e = 0; e < 37; ++e) EXPECT_EQ(got[(size_t)(3 * 37 + e)], 0.0f);
      }
}

TEST(Copy, SetRowsQuantizesOnWriteWithBroadcastIds) {
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K})
    for (int nth : kThreads)
      for (Layout ls : {Layout::contiguous, Layout::transposed})
        for (bool dst_slice : {false, true}) {
          SCOPED_TRACE(trace("set_rows", DType::F32, t, ls, nth) + (dst_slice ? " dst row_slice" : ""));
          OpRunner r;
          const int64_t n0 = row_len_for(t, t), rows = 10, n = 3;
          const Shape nd = {n0, rows, 4, 2}, ns = {n0, n, 4, 2}, ni = {n, 2, 1, 1};
          Input dst = make_input(r, t, nd, dst_slice ? Layout::row_slice : Layout::contiguous);
          Input src = make_input(r, DType::F32, ns, ls);
          Tensor* ids = r.input(DType::I32, {n, 2, 1});
          Tensor* out = ops::set_rows(r.ctx, dst.t, src.t, ids);
          r.alloc();
          r.fill_normal(dst.base);
          r.fill_normal(src.base);
          r.set_i32(ids, {7, 0, 4, /**/ 2, 9, 5});  // distinct within each plane
          const auto before = r.get_f32(dst.t);
          const auto base_before = r.get_f32(dst.base);
          const auto sv = r.get_f32(src.t);
          const auto iv = r.get_i32(ids);
          r.compute(out, nth);
          std::vector<float> want = before;
          const auto stored = stored_as(t, sv, n0);
          for (int64_t k = 0; k < nd[3]; ++k)
            for (int64_t j = 0; j < nd[2]; ++j)
              for (int64_t i = 0; i < n; ++i) {
                const int64_t row = iv[idx(ni.data(), i, j % 2, k % 1)];
                for (int64_t e = 0; e < n0; ++e)
                  want[idx(nd.data(), e, row, j, k)] = stored[idx(ns.data(), e, i, j, k)];
              }
          EXPECT_EQ(r.get_f32(dst.t), want);
          if (dst_slice) {  // the padding in front of each row of the wider base is never written
            const auto base_after = r.get_f32(dst.base);
            const int64_t bn0 = dst.base->ne[0], front = dtype_info(t).block_size;
            for (size_t row = 0; row < base_after.size() / (size_t)bn0; ++row)
              for (int64_t e = 0; e < bn0; ++e)
                if (e < front || e >= front + n0) {
                  ASSERT_EQ(base_after[row * bn0 + e], base_before[row * bn0 + e]) << "base row " << row;
                }
          }
        }
}

TEST(Copy, SetRowsRepeatedIdKeepsLastRow) {
  for (int nth : {1, 3}) {
    OpRunner r;
    Tensor* dst = r.input(DType::F32, {8, 4});
    Tensor* src = r.input(DType::F32, {8, 3});
    Tensor* ids = r.input(DType::I32, {3});
    Tensor* out = ops::set_rows(r.ctx, dst, src, ids);
    r.alloc();
    r.fill_normal(dst);
    r.fill_normal(src);
    r.set_i32(ids, {2, 1, 2});
    const auto sv = r.get_f32(src);
    r.compute(out, nth);
    const auto got = r.get_f32(dst);
    for (int e = 0; e < 8; ++e) {
      EXPECT_EQ(got[(size_t)(2 * 8 + e)], sv[(size_t)(2 * 8 + e)]);
      EXPECT_EQ(got[(size_t)(1 * 8 + e)], sv[(size_t)(1 * 8 + e)]);
    }
  }
}

// ---- unsupported combinations ------------------------------------------------------------------

void expect_unsupported(OpRunner& r, Tensor* out) {
  EXPECT_FALSE(cpu::supports(out));
  r.alloc();
  try {
    r.compute(out, 2);
    ADD_FAILURE() << "compute_graph accepted an unsupported node";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported) << e.what();
  }
}

TEST(Copy, GetRowsOfI32IsUnsupported) {
  OpRunner r;
  Tensor* a = r.input(DType::I32, {8, 4});
  Tensor* ids = r.input(DType::I32, {2});
  expect_unsupported(r, ops::get_rows(r.ctx, a, ids));
}

TEST(Copy, CpyBetweenI32AndFloatIsUnsupported) {
  OpRunner r;
  Tensor* a = r.input(DType::I32, {8, 4});
  Tensor* b = r.input(DType::F32, {8, 4});
  expect_unsupported(r, ops::cpy(r.ctx, a, b));
}

TEST(Copy, ContOfTransposedQuantIsUnsupported) {
  OpRunner r;
  Tensor* a = r.input(DType::Q8_0, {64, 32});
  expect_unsupported(r, ops::cont(r.ctx, ops::transpose(r.ctx, a)));
}

}  // namespace
}  // namespace loom::test
