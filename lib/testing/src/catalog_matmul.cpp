// Catalog, matrix products (NMSE limit 5e-4): MUL_MAT for every weight type over GEMV and GEMM
// shapes, sizes not divisible by the kernels' tiles, batch broadcasting and strided operands;
// MUL_MAT_ID (experts) and OUT_PROD; perf shapes m=4096,k=4096 with n=1 (decode) and n=512 (prompt).
#include <fmt/format.h>

#include "catalog_families.h"

namespace loom::testing::detail {

namespace {

constexpr double kMatNmse = 5e-4;

// mul_mat of a {k, m, a2, a3} (type ta) and b {k, n, b2, b3} (type tb).
OpCase& add_mul_mat(std::vector<OpCase>& out, DType ta, DType tb, int64_t m, int64_t n, int64_t k, int64_t a2 = 1,
                    int64_t a3 = 1, int64_t b2 = 1, int64_t b3 = 1, uint32_t modes = kModeTest, const char* extra = "") {
  std::string params = fmt::format("type_a={},type_b={},m={},n={},k={}", tn(ta), tn(tb), m, n, k);
  if (a2 * a3 * b2 * b3 > 1) params += fmt::format(",batch_a=[{},{}],batch_b=[{},{}]", a2, a3, b2, b3);
  params += extra;
  const bool grad = modes & kModeGrad;
  OpCase& c = add_case(out, "MUL_MAT", params, modes, [=](CaseBuilder& b) {
    Tensor* a = grad ? b.param({k, m, a2, a3}) : b.input(ta, {k, m, a2, a3});
    Tensor* x = grad ? b.param({k, n, b2, b3}) : b.input(tb, {k, n, b2, b3});
    ops::mul_mat(b.ctx(), a, x);
  });
  c.max_nmse = kMatNmse;
  return c;
}

void add_mul_mats(std::vector<OpCase>& out) {
  for (DType t : kWeightTypes) {
    add_mul_mat(out, t, DType::F32, 16, 1, 256);
    add_mul_mat(out, t, DType::F32, 33, 9, 256);
    add_mul_mat(out, t, DType::F32, 8, 17, 256, 2, 1, 6, 3);
    add_mul_mat(out, t, DType::F32, 128, 64, 512);
    if (dtype_info(t).block_size < 256) add_mul_mat(out, t, DType::F32, 7, 5, 96);
  }
  add_mul_mat(out, DType::F16, DType::F16, 16, 7, 64);
  add_mul_mat(out, DType::F32, DType::BF16, 16, 7, 64);
  add_mul_mat(out, DType::Q8_0, DType::F16, 16, 3, 64);
  // strided operands
  for (DType t : {DType::F32, DType::Q4_0, DType::Q4_K})
    add_case(out, "MUL_MAT", fmt::format("type_a={},type_b=f32,m=12,n=7,k=256,b=transposed", tn(t)), kModeTest,
             [=](CaseBuilder& b) { ops::mul_mat(b.ctx(), b.input(t, {256, 12}), transposed_input(b, DType::F32, 256, 7)); })
        .max_nmse = kMatNmse;
  for (DType t : {DType::F32, DType::F16})
    add_case(out, "MUL_MAT", fmt::format("type_a={},type_b=f32,m=12,n=5,k=40,a=transposed", tn(t)), kModeTest,
             [=](CaseBuilder& b) { ops::mul_mat(b.ctx(), transposed_input(b, t, 40, 12), b.input(DType::F32, {40, 5})); })
        .max_nmse = kMatNmse;
  add_case(out, "MUL_MAT", "type_a=q8_0,type_b=f32,m=6,n=4,k=64,a=strided_rows", kModeTest, [](CaseBuilder& b) {
    ops::mul_mat(b.ctx(), strided_rows_input(b, DType::Q8_0, 64, 6), b.input(DType::F32, {64, 4}));
  }).max_nmse = kMatNmse;
  // gradients
  add_mul_mat(out, DType::F32, DType::F32, 5, 3, 8, 1, 1, 1, 1, kModeGrad);
  add_mul_mat(out, DType::F32, DType::F32, 3, 2, 6, 1, 1, 2, 1, kModeGrad);
  // perf: decode (n = 1) and prompt (n = 512) shapes of a 4096-wide model
  for (DType t : kWeightTypes)
    for (int64_t n : {1, 512}) add_mul_mat(out, t, DType::F32, 4096, n, 4096, 1, 1, 1, 1, kModePerf);
  // perf: the square F32 GEMM that PERFORMANCE.md compares with the FMA peak
  add_mul_mat(out, DType::F32, DType::F32, 1024, 1024, 1024, 1, 1, 1, 1, kModePerf);
}

void add_mul_mat_ids(std::vector<OpCase>& out) {
  struct S {
    int64_t k, m, n_expert, n_used, bn, tokens;
  };
  auto add = [&](DType t, S s, uint32_t modes) {
    add_case(out, "MUL_MAT_ID",
             fmt::format("type_a={},type_b=f32,n_expert={},n_used={},b_rows={},m={},n={},k={}", tn(t), s.n_expert, s.n_used,
                         s.bn, s.m, s.tokens, s.k),
             modes, [=](CaseBuilder& b) {
               ops::mul_mat_id(b.ctx(), b.input(t, {s.k, s.m, s.n_expert}), b.input(DType::F32, {s.k, s.bn, s.tokens}),
                               b.distinct_ids({s.n_used, s.tokens}, s.n_expert));
             })
        .max_nmse = kMatNmse;
  };
  for (DType t : kWeightTypes) {
    add(t, {256, 16, 4, 2, 2, 3}, kModeTest);
    add(t, {256, 9, 8, 4, 1, 5}, kModeTest);
    if (dtype_info(t).block_size < 256) add(t, {64, 12, 6, 6, 6, 2}, kModeTest);
  }
  for (DType t : {DType::F16, DType::Q8_0, DType::Q4_0})
    for (int64_t tokens : {1, 64}) add(t, {2048, 768, 16, 4, 1, tokens}, kModePerf);
}

void add_out_prods(std::vector<OpCase>& out) {
  struct S {
    int64_t m, n, k, a2, a3, b2, b3;
  };
  for (const S& s : {S{7, 9, 5, 1, 1, 1, 1}, S{32, 16, 33, 1, 1, 1, 1}, S{6, 5, 4, 2, 1, 4, 3}})
    for (DType ta : {DType::F32, DType::F16}) {
      const bool grad = ta == DType::F32 && s.a2 == 1 && s.m < 10;
      add_case(out, "OUT_PROD",
               fmt::format("type_a={},type_b=f32,m={},n={},k={},batch_a=[{},{}],batch_b=[{},{}]", tn(ta), s.m, s.n, s.k,
                           s.a2, s.a3, s.b2, s.b3),
               grad ? kModeTest | kModeGrad : kModeTest, [=](CaseBuilder& b) {
                 Tensor* a = grad ? b.param({s.m, s.k}) : b.input(ta, {s.m, s.k, s.a2, s.a3});
                 Tensor* x = grad ? b.param({s.n, s.k}) : b.input(DType::F32, {s.n, s.k, s.b2, s.b3});
                 ops::out_prod(b.ctx(), a, x);
               })
          .max_nmse = kMatNmse;
    }
  add_case(out, "OUT_PROD", "type_a=f32,type_b=f32,m=8,n=6,k=5,b=transposed", kModeTest, [](CaseBuilder& b) {
    ops::out_prod(b.ctx(), b.input(DType::F32, {8, 5}), transposed_input(b, DType::F32, 6, 5));
  }).max_nmse = kMatNmse;
  add_case(out, "OUT_PROD", "type_a=f32,type_b=f32,m=256,n=64,k=128", kModePerf, [](CaseBuilder& b) {
    ops::out_prod(b.ctx(), b.input(DType::F32, {256, 128}), b.input(DType::F32, {64, 128}));
  }).max_nmse = kMatNmse;
}

}  // namespace

void add_matmul_cases(std::vector<OpCase>& out) {
  add_mul_mats(out);
  add_mul_mat_ids(out);
  add_out_prods(out);
}

}  // namespace loom::testing::detail
