// Catalog, normalization and reductions: RMS_NORM NORM RMS_NORM_BACK over sizes, eps, types and
// strided inputs; SUM SUM_ROWS MEAN; ARGMAX ARGSORT TOP_K (row sets) and COUNT_EQUAL.
#include <fmt/format.h>

#include "catalog_families.h"

namespace loom::testing::detail {

namespace {

constexpr uint32_t kTG = kModeTest | kModeGrad;

void add_norms(std::vector<OpCase>& out) {
  for (bool rms : {true, false}) {
    const char* name = rms ? "RMS_NORM" : "NORM";
    auto op = [rms](Context& c, Tensor* a, float eps) { return rms ? ops::rms_norm(c, a, eps) : ops::norm(c, a, eps); };
    for (float eps : {1e-6f, 1e-5f})
      for (auto ne : {std::array<int64_t, 4>{64, 5, 4, 3}, {33, 7, 1, 1}, {4096, 2, 1, 1}, {1, 6, 1, 1}})
        add_case(out, name, fmt::format("type=f32,ne={},eps={:g}", ne_str(ne.data()), eps), kModeTest,
                 [=](CaseBuilder& b) { op(b.ctx(), b.input(DType::F32, {ne[0], ne[1], ne[2], ne[3]}), eps); });
    for (DType t : {DType::F16, DType::BF16})
      add_case(out, name, fmt::format("type={},ne=[64,5,4,3],eps=1e-06", tn(t)), kModeTest,
               [=](CaseBuilder& b) { op(b.ctx(), b.input(t, {64, 5, 4, 3}), 1e-6f); });
    add_case(out, name, "type=f32,ne=[12,9,1,1],eps=1e-06,src=transposed", kModeTest,
             [=](CaseBuilder& b) { op(b.ctx(), transposed_input(b, DType::F32, 12, 9), 1e-6f); });
    add_case(out, name, "type=f32,ne=[40,6,2,1],eps=1e-06,src=strided_rows", kModeTest,
             [=](CaseBuilder& b) { op(b.ctx(), strided_rows_input(b, DType::F32, 40, 6, 2), 1e-6f); });
    add_case(out, name, "type=f32,ne=[32,4,1,1],eps=1e-06,grad=1", kModeGrad,
             [=](CaseBuilder& b) { op(b.ctx(), b.param({32, 4}), 1e-6f); });
  }
  for (auto ne : {std::array<int64_t, 4>{33, 7, 2, 1}, {64, 4, 1, 1}})
    add_case(out, "RMS_NORM_BACK", fmt::format("type=f32,ne={},eps=1e-06", ne_str(ne.data())), kModeTest,
             [=](CaseBuilder& b) {
               ops::rms_norm_back(b.ctx(), b.input(DType::F32, {ne[0], ne[1], ne[2], ne[3]}),
                                  b.input(DType::F32, {ne[0], ne[1], ne[2], ne[3]}), 1e-6f);
             });
  add_case(out, "RMS_NORM_BACK", "type=f16,ne=[32,5,1,1],eps=1e-05", kModeTest, [](CaseBuilder& b) {
    ops::rms_norm_back(b.ctx(), b.input(DType::F16, {32, 5}), b.input(DType::F16, {32, 5}), 1e-5f);
  });
  add_case(out, "RMS_NORM_BACK", "type=f32,ne=[8,5,1,1],eps=1e-06,grad=1", kModeGrad, [](CaseBuilder& b) {
    // differentiable only in the upstream gradient dy (the backward pass is linear in it)
    ops::rms_norm_back(b.ctx(), b.param({8, 5}), b.input(DType::F32, {8, 5}), 1e-6f);
  });
}

void add_sums(std::vector<OpCase>& out) {
  using Fn = Tensor* (*)(Context&, Tensor*);
  const std::pair<const char*, Fn> sums[] = {{"SUM", ops::sum}, {"SUM_ROWS", ops::sum_rows}, {"MEAN", ops::mean}};
  for (auto [name, fn] : sums) {
    for (DType t : {DType::F32, DType::F16, DType::BF16})
      add_case(out, name, fmt::format("type={},ne=[17,7,3,2]", tn(t)), t == DType::F32 ? kTG : kModeTest,
               [=](CaseBuilder& b) { fn(b.ctx(), t == DType::F32 ? b.param({17, 7, 3, 2}) : b.input(t, {17, 7, 3, 2})); });
    add_case(out, name, "type=f32,ne=[4099,3,1,1]", kModeTest,
             [=](CaseBuilder& b) { fn(b.ctx(), b.input(DType::F32, {4099, 3})); });
    add_case(out, name, "type=f32,ne=[11,9,2,1],src=transposed", kModeTest,
             [=](CaseBuilder& b) { fn(b.ctx(), transposed_input(b, DType::F32, 11, 9, 2)); });
  }
}

void add_selection(std::vector<OpCase>& out) {
  for (auto ne : {std::array<int64_t, 2>{17, 9}, {1031, 3}, {4, 40}})
    add_case(out, "ARGMAX", fmt::format("type=f32,ne=[{},{},1,1]", ne[0], ne[1]), kModeTest,
             [=](CaseBuilder& b) { ops::argmax(b.ctx(), b.input(DType::F32, {ne[0], ne[1]})); });
  add_case(out, "ARGMAX", "type=f32,ne=[10,7,1,1],src=transposed", kModeTest,
           [](CaseBuilder& b) { ops::argmax(b.ctx(), transposed_input(b, DType::F32, 10, 7)); });

  for (auto order : {ops::SortOrder::ascending, ops::SortOrder::descending})
    for (auto ne : {std::array<int64_t, 4>{16, 10, 1, 1}, {33, 5, 2, 1}, {1000, 2, 1, 1}, {1, 4, 1, 1}}) {
      const char* o = order == ops::SortOrder::ascending ? "asc" : "desc";
      add_case(out, "ARGSORT", fmt::format("type=f32,ne={},order={}", ne_str(ne.data()), o), kModeTest,
               [=](CaseBuilder& b) { ops::argsort(b.ctx(), b.input(DType::F32, {ne[0], ne[1], ne[2], ne[3]}), order); });
    }

  struct K {
    int64_t n0, rows, k;
  };
  for (const K& k : {K{64, 7, 1}, K{64, 7, 4}, K{64, 7, 16}, K{33, 10, 5}, K{8, 3, 8}, K{128, 12, 8}, K{1000, 2, 40}})
    add_case(out, "TOP_K", fmt::format("type=f32,ne=[{},{},1,1],k={}", k.n0, k.rows, k.k), kModeTest,
             [=](CaseBuilder& b) { ops::top_k(b.ctx(), b.input(DType::F32, {k.n0, k.rows}), k.k); })
        .int_compare = IntCompare::row_sets;
  add_case(out, "TOP_K", "type=f32,ne=[20,3,2,1],k=6", kModeTest,
           [](CaseBuilder& b) { ops::top_k(b.ctx(), b.input(DType::F32, {20, 3, 2}), 6); })
      .int_compare = IntCompare::row_sets;

  for (auto ne : {std::array<int64_t, 2>{20, 9}, {1000, 1}, {3, 1}})
    add_case(out, "COUNT_EQUAL", fmt::format("type=i32,ne=[{},{},1,1]", ne[0], ne[1]), kModeTest, [=](CaseBuilder& b) {
      ops::count_equal(b.ctx(), b.ids({ne[0], ne[1]}, 0, 4), b.ids({ne[0], ne[1]}, 0, 4));
    });
}

}  // namespace

void add_norm_reduce_cases(std::vector<OpCase>& out) {
  add_norms(out);
  add_sums(out);
  add_selection(out);
  // perf
  add_case(out, "RMS_NORM", "type=f32,ne=[4096,512,1,1],eps=1e-06", kModePerf,
           [](CaseBuilder& b) { ops::rms_norm(b.ctx(), b.input(DType::F32, {4096, 512}), 1e-6f); });
  add_case(out, "NORM", "type=f32,ne=[4096,512,1,1],eps=1e-05", kModePerf,
           [](CaseBuilder& b) { ops::norm(b.ctx(), b.input(DType::F32, {4096, 512}), 1e-5f); });
  add_case(out, "SUM_ROWS", "type=f32,ne=[4096,512,1,1]", kModePerf,
           [](CaseBuilder& b) { ops::sum_rows(b.ctx(), b.input(DType::F32, {4096, 512})); });
  add_case(out, "ARGMAX", "type=f32,ne=[151936,1,1,1]", kModePerf,
           [](CaseBuilder& b) { ops::argmax(b.ctx(), b.input(DType::F32, {151936, 1})); });
  add_case(out, "TOP_K", "type=f32,ne=[128,512,1,1],k=8", kModePerf,
           [](CaseBuilder& b) { ops::top_k(b.ctx(), b.input(DType::F32, {128, 512}), 8); })
      .int_compare = IntCompare::row_sets;
}

}  // namespace loom::testing::detail
