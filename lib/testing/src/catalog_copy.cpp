// Catalog, data movement: CPY (every type pair the CPU converts, strided sources and
// destinations), DUP, CONT (permuted views), CONCAT (each dim), REPEAT, REPEAT_BACK, GET_ROWS
// (every weight type, batched ids), GET_ROWS_BACK and SET_ROWS (every weight type, broadcast ids),
// ALL_REDUCE (the identity on one device; all_gather_rows places the rows among zeros).
#include <fmt/format.h>

#include "catalog_families.h"

namespace loom::testing::detail {

namespace {

constexpr DType kFloat[] = {DType::F32, DType::F16, DType::BF16};
constexpr DType kQuant[] = {DType::Q8_0,   DType::Q4_0,    DType::Q4_K,  DType::Q6_K,    DType::Q4_1,
                            DType::Q5_0,   DType::Q5_1,    DType::Q2_K,  DType::Q3_K,    DType::Q5_K,
                            DType::IQ4_NL, DType::IQ4_XS,  DType::MXFP4, DType::IQ2_XXS, DType::IQ2_XS,
                            DType::IQ2_S,  DType::IQ3_XXS, DType::IQ3_S, DType::IQ1_S,   DType::IQ1_M};
constexpr uint32_t kTG = kModeTest | kModeGrad;

int64_t row_for(DType t) { return dtype_info(t).block_size >= 256 ? 256 : dtype_info(t).block_size > 1 ? 64 : 33; }

void add_cpy(std::vector<OpCase>& out) {
  // plain <-> plain, odd sizes
  for (DType s : kFloat)
    for (DType d : kFloat) {
      const uint32_t modes = s == DType::F32 && d == DType::F32 ? kTG : kModeTest;
      add_case(out, "CPY", fmt::format("type_src={},type_dst={},ne=[33,5,3,2]", tn(s), tn(d)), modes, [=](CaseBuilder& b) {
        Tensor* a = s == DType::F32 ? b.param({33, 5, 3, 2}) : b.input(s, {33, 5, 3, 2});
        ops::cpy(b.ctx(), a, b.input(d, {33, 5, 3, 2}));
      });
    }
  // f32 -> quantized and back
  for (DType q : kQuant) {
    const int64_t n0 = row_for(q);
    add_case(out, "CPY", fmt::format("type_src=f32,type_dst={},ne=[{},4,3,1]", tn(q), n0), kModeTest, [=](CaseBuilder& b) {
      ops::cpy(b.ctx(), b.input(DType::F32, {n0, 4, 3}), b.input(q, {n0, 4, 3}));
    });
    add_case(out, "CPY", fmt::format("type_src={},type_dst=f32,ne=[{},4,3,1]", tn(q), n0), kModeTest, [=](CaseBuilder& b) {
      ops::cpy(b.ctx(), b.input(q, {n0, 4, 3}), b.input(DType::F32, {n0, 4, 3}));
    });
  }
  // a copy between differently shaped tensors of equal element count (a flattening copy)
  add_case(out, "CPY", "type_src=f32,type_dst=f16,ne=[12,5,2,1],ne_dst=[30,4,1,1]", kModeTest, [](CaseBuilder& b) {
    ops::cpy(b.ctx(), b.input(DType::F32, {12, 5, 2}), b.input(DType::F16, {30, 4}));
  });
  // strided source (transposed) into contiguous, and contiguous into a transposed destination
  for (DType d : kFloat) {
    add_case(out, "CPY", fmt::format("type_src=f32,type_dst={},ne=[13,7,3,1],src=transposed", tn(d)), kModeTest,
             [=](CaseBuilder& b) {
               ops::cpy(b.ctx(), transposed_input(b, DType::F32, 13, 7, 3), b.input(d, {13, 7, 3}));
             });
    add_case(out, "CPY", fmt::format("type_src=f32,type_dst={},ne=[13,7,3,1],dst=transposed", tn(d)), kModeTest,
             [=](CaseBuilder& b) {
               ops::cpy(b.ctx(), b.input(DType::F32, {13, 7, 3}), transposed_input(b, d, 13, 7, 3));
             });
  }
  add_case(out, "CPY", "type_src=f32,type_dst=q8_0,ne=[64,5,2,1],src=strided_rows", kModeTest, [](CaseBuilder& b) {
    ops::cpy(b.ctx(), strided_rows_input(b, DType::F32, 64, 5, 2), b.input(DType::Q8_0, {64, 5, 2}));
  });
}

void add_dup_cont(std::vector<OpCase>& out) {
  for (DType t : kFloat) {
    add_case(out, "DUP", fmt::format("type={},ne=[17,5,3,2]", tn(t)), t == DType::F32 ? kTG : kModeTest,
             [=](CaseBuilder& b) { ops::dup(b.ctx(), t == DType::F32 ? b.param({17, 5, 3, 2}) : b.input(t, {17, 5, 3, 2})); });
    add_case(out, "DUP", fmt::format("type={},ne=[9,11,2,1],src=transposed", tn(t)), kModeTest,
             [=](CaseBuilder& b) { ops::dup(b.ctx(), transposed_input(b, t, 9, 11, 2)); });
  }
  add_case(out, "DUP", "type=i32,ne=[7,5,3,1]", kModeTest, [](CaseBuilder& b) { ops::dup(b.ctx(), b.ids({7, 5, 3}, -100, 100)); });
  add_case(out, "DUP", "type=q4_0,ne=[64,6,1,1]", kModeTest, [](CaseBuilder& b) { ops::dup(b.ctx(), b.input(DType::Q4_0, {64, 6})); });
  // one device is a group of one: the sum over the group is the value itself
  add_case(out, "ALL_REDUCE", "type=f32,ne=[17,5,3,2]", kTG,
           [](CaseBuilder& b) { ops::all_reduce(b.ctx(), b.param({17, 5, 3, 2})); });
  // tensor parallelism's gather: a member's rows among zeros (the sum adds the others')
  add_case(out, "ALL_REDUCE", "type=f32,ne=[17,5,3,2],begin=6,total=40", kModeTest,
           [](CaseBuilder& b) { ops::all_gather_rows(b.ctx(), b.input(DType::F32, {17, 5, 3, 2}), 6, 40); });

  const int perms[][4] = {{1, 0, 2, 3}, {0, 2, 1, 3}, {2, 1, 0, 3}, {1, 2, 0, 3}, {0, 1, 3, 2}, {3, 2, 1, 0}};
  for (const auto& p : perms)
    for (DType t : {DType::F32, DType::F16}) {
      const uint32_t modes = t == DType::F32 && p[0] == 1 && p[1] == 0 ? kTG : kModeTest;
      add_case(out, "CONT", fmt::format("type={},ne=[5,7,3,2],permute=[{},{},{},{}]", tn(t), p[0], p[1], p[2], p[3]), modes,
               [=](CaseBuilder& b) {
                 Tensor* a = t == DType::F32 ? b.param({5, 7, 3, 2}) : b.input(t, {5, 7, 3, 2});
                 ops::cont(b.ctx(), ops::permute(b.ctx(), a, p[0], p[1], p[2], p[3]));
               });
    }
  add_case(out, "CONT", "type=bf16,ne=[9,6,1,1],src=transposed", kModeTest,
           [](CaseBuilder& b) { ops::cont(b.ctx(), transposed_input(b, DType::BF16, 9, 6)); });
  for (DType q : {DType::Q8_0, DType::Q4_K})
    add_case(out, "CONT", fmt::format("type={},ne=[{},5,2,1],src=strided_rows", tn(q), row_for(q)), kModeTest,
             [=](CaseBuilder& b) { ops::cont(b.ctx(), strided_rows_input(b, q, row_for(q), 5, 2)); });
}

void add_concat(std::vector<OpCase>& out) {
  for (int dim = 0; dim < 4; ++dim)
    for (DType t : {DType::F32, DType::F16, DType::I32}) {
      int64_t nb[4] = {11, 7, 5, 3};
      nb[dim] = 4;
      add_case(out, "CONCAT", fmt::format("type={},ne_a=[11,7,5,3],ne_b={},dim={}", tn(t), ne_str(nb), dim), kModeTest,
               [=](CaseBuilder& b) {
                 auto make = [&](std::initializer_list<int64_t> ne) {
                   return t == DType::I32 ? b.ids(ne, -50, 50) : b.input(t, ne);
                 };
                 ops::concat(b.ctx(), make({11, 7, 5, 3}), make({nb[0], nb[1], nb[2], nb[3]}), dim);
               });
    }
  for (int dim = 0; dim < 4; ++dim) {
    int64_t nb[4] = {4, 3, 2, 2};
    nb[dim] = 3;
    add_case(out, "CONCAT", fmt::format("type=f32,ne_a=[4,3,2,2],ne_b={},dim={}", ne_str(nb), dim), kModeGrad,
             [=](CaseBuilder& b) { ops::concat(b.ctx(), b.param({4, 3, 2, 2}), b.param({nb[0], nb[1], nb[2], nb[3]}), dim); });
  }
  add_case(out, "CONCAT", "type=f32,ne_a=[9,6,2,1],ne_b=[9,6,3,1],dim=2,a=transposed", kModeTest, [](CaseBuilder& b) {
    ops::concat(b.ctx(), transposed_input(b, DType::F32, 9, 6, 2), b.input(DType::F32, {9, 6, 3}), 2);
  });
  add_case(out, "CONCAT", "type=q8_0,ne_a=[64,3,1,1],ne_b=[64,5,1,1],dim=1", kModeTest, [](CaseBuilder& b) {
    ops::concat(b.ctx(), b.input(DType::Q8_0, {64, 3}), b.input(DType::Q8_0, {64, 5}), 1);
  });
}

void add_repeat(std::vector<OpCase>& out) {
  struct R {
    int64_t a[4], like[4];
  };
  const R shapes[] = {{{5, 1, 3, 1}, {10, 4, 3, 2}}, {{1, 1, 1, 1}, {7, 3, 1, 1}}, {{4, 3, 2, 1}, {8, 6, 4, 2}},
                      {{7, 2, 1, 1}, {7, 6, 5, 1}}, {{3, 5, 1, 2}, {9, 5, 2, 4}}};
  for (const R& r : shapes) {
    add_case(out, "REPEAT", fmt::format("type=f32,ne={},like={}", ne_str(r.a), ne_str(r.like)), kTG, [=](CaseBuilder& b) {
      Tensor* like = b.input(DType::F32, {r.like[0], r.like[1], r.like[2], r.like[3]});
      ops::repeat(b.ctx(), b.param({r.a[0], r.a[1], r.a[2], r.a[3]}), like);
    });
    add_case(out, "REPEAT_BACK", fmt::format("type=f32,ne={},like={}", ne_str(r.like), ne_str(r.a)), kTG,
             [=](CaseBuilder& b) {
               Tensor* like = b.input(DType::F32, {r.a[0], r.a[1], r.a[2], r.a[3]});
               ops::repeat_back(b.ctx(), b.param({r.like[0], r.like[1], r.like[2], r.like[3]}), like);
             });
  }
  add_case(out, "REPEAT", "type=f16,ne=[6,1,2,1],like=[12,3,2,2]", kModeTest, [](CaseBuilder& b) {
    ops::repeat(b.ctx(), b.input(DType::F16, {6, 1, 2}), b.input(DType::F32, {12, 3, 2, 2}));
  });
  add_case(out, "REPEAT", "type=q8_0,ne=[32,1,1,1],like=[64,3,1,1]", kModeTest, [](CaseBuilder& b) {
    ops::repeat(b.ctx(), b.input(DType::Q8_0, {32}), b.input(DType::F32, {64, 3}));
  });
  add_case(out, "REPEAT_BACK", "type=bf16,ne=[12,3,2,2],like=[6,1,2,1]", kModeTest, [](CaseBuilder& b) {
    ops::repeat_back(b.ctx(), b.input(DType::BF16, {12, 3, 2, 2}), b.input(DType::F32, {6, 1, 2}));
  });
}

void add_rows(std::vector<OpCase>& out) {
  for (DType t : kWeightTypes) {
    const int64_t n0 = row_for(t);
    const uint32_t modes = t == DType::F32 ? kTG : kModeTest;
    add_case(out, "GET_ROWS", fmt::format("type={},n0={},rows=10,n=5", tn(t), n0), modes, [=](CaseBuilder& b) {
      Tensor* a = t == DType::F32 ? b.param({n0, 10}) : b.input(t, {n0, 10});
      ops::get_rows(b.ctx(), a, b.ids({5}, 0, 10));
    });
    add_case(out, "GET_ROWS", fmt::format("type={},n0={},rows=7,n=4,batch=[3,2]", tn(t), n0), kModeTest, [=](CaseBuilder& b) {
      ops::get_rows(b.ctx(), b.input(t, {n0, 7, 3, 2}), b.ids({4, 3, 2}, 0, 7));
    });
  }
  add_case(out, "GET_ROWS", "type=f32,n0=9,rows=6,n=3,src=strided_rows", kModeTest, [](CaseBuilder& b) {
    ops::get_rows(b.ctx(), strided_rows_input(b, DType::F32, 9, 6), b.ids({3}, 0, 6));
  });
  for (int64_t rows : {5, 16})
    for (int64_t n : {3, 12})
      add_case(out, "GET_ROWS_BACK", fmt::format("type=f32,n0=13,rows={},n={}", rows, n), kTG, [=](CaseBuilder& b) {
        Tensor* like = b.input(DType::F32, {13, rows});
        ops::get_rows_back(b.ctx(), b.param({13, n}), b.ids({n}, 0, rows), like);
      });
  add_case(out, "GET_ROWS_BACK", "type=f16,n0=8,rows=6,n=9", kModeTest, [](CaseBuilder& b) {
    ops::get_rows_back(b.ctx(), b.input(DType::F16, {8, 9}), b.ids({9}, 0, 6), b.input(DType::F32, {8, 6}));
  });

  for (DType t : kWeightTypes) {
    const int64_t n0 = row_for(t);
    add_case(out, "SET_ROWS", fmt::format("type_dst={},n0={},rows=12,n=5", tn(t), n0), kModeTest, [=](CaseBuilder& b) {
      Tensor* dst = b.input(t, {n0, 12});
      ops::set_rows(b.ctx(), dst, b.input(DType::F32, {n0, 5}), b.distinct_ids({5}, 12));
    });
    add_case(out, "SET_ROWS", fmt::format("type_dst={},n0={},rows=9,n=4,batch=[4,2],ids_batch=[2,1]", tn(t), n0), kModeTest,
             [=](CaseBuilder& b) {
               Tensor* dst = b.input(t, {n0, 9, 4, 2});
               ops::set_rows(b.ctx(), dst, b.input(DType::F32, {n0, 4, 4, 2}), b.distinct_ids({4, 2, 1}, 9));
             });
  }
}

// The KV cache's writes (-ctk/-ctv): a prompt's and a token's rows, each the width of every kv
// head, into a cache of each quantized type this build has (the same types the session offers).
void add_kv_cache_writes(std::vector<OpCase>& out) {
  for (const char* name : {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1"}) {
    const std::optional<DType> t = dtype_from_name(name);
    if (!t) continue;
    for (int64_t n : {1, 7})
      add_case(out, "SET_ROWS", fmt::format("type_dst={},n0=256,rows=64,n={},kv_cache=1", name, n), kModeTest,
               [=](CaseBuilder& b) {
                 ops::set_rows(b.ctx(), b.input(*t, {256, 64}), b.input(DType::F32, {256, n}), b.distinct_ids({n}, 64));
               });
  }
}

}  // namespace

void add_copy_cases(std::vector<OpCase>& out) {
  add_cpy(out);
  add_dup_cont(out);
  add_concat(out);
  add_repeat(out);
  add_rows(out);
  // perf: activation conversions, embedding lookups and KV-cache writes of a 4096-wide model
  for (DType d : {DType::F16, DType::Q8_0})
    add_case(out, "CPY", fmt::format("type_src=f32,type_dst={},ne=[4096,512,1,1]", tn(d)), kModePerf, [=](CaseBuilder& b) {
      ops::cpy(b.ctx(), b.input(DType::F32, {4096, 512}), b.input(d, {4096, 512}));
    });
  add_case(out, "CONT", "type=f32,ne=[128,512,32,1],permute=[0,2,1,3]", kModePerf, [](CaseBuilder& b) {
    ops::cont(b.ctx(), ops::permute(b.ctx(), b.input(DType::F32, {128, 512, 32}), 0, 2, 1, 3));
  });
  for (DType t : {DType::F16, DType::Q4_0})
    add_case(out, "GET_ROWS", fmt::format("type={},n0=4096,rows=8192,n=512", tn(t)), kModePerf,
             [=](CaseBuilder& b) { ops::get_rows(b.ctx(), b.input(t, {4096, 8192}), b.ids({512}, 0, 8192)); });
  for (DType t : {DType::F16, DType::Q8_0, DType::Q4_0})
    add_case(out, "SET_ROWS", fmt::format("type_dst={},n0=1024,rows=4096,n=512", tn(t)), kModePerf, [=](CaseBuilder& b) {
      ops::set_rows(b.ctx(), b.input(t, {1024, 4096}), b.input(DType::F32, {1024, 512}), b.distinct_ids({512}, 4096));
    });
  add_kv_cache_writes(out);
}

}  // namespace loom::testing::detail
