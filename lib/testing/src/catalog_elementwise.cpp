// Catalog, element-wise: ADD SUB MUL DIV over broadcast shapes and type pairs, ADD_ID, the
// unary and scalar ops over F32/F16/BF16 and strided inputs, SWIGLU and SILU_BACK.
#include <fmt/format.h>

#include <span>

#include "catalog_families.h"

namespace loom::testing::detail {

namespace {

constexpr uint32_t kTG = kModeTest | kModeGrad;

using BinaryFn = Tensor* (*)(Context&, Tensor*, Tensor*);

void add_binary(std::vector<OpCase>& out, const char* name, BinaryFn fn, bool divides) {
  // b values away from zero for DIV
  const LeafInit b_init = divides ? LeafInit::uniform(0.5, 2.0) : LeafInit{};
  struct S {
    int64_t a[4], b[4];
  };
  const S shapes[] = {{{10, 5, 4, 3}, {10, 5, 4, 3}}, {{10, 5, 4, 3}, {10, 1, 1, 1}}, {{10, 5, 4, 3}, {10, 5, 1, 1}},
                      {{10, 5, 4, 3}, {1, 1, 1, 1}},  {{10, 5, 4, 3}, {5, 5, 4, 3}},  {{16, 7, 3, 2}, {16, 1, 3, 1}},
                      {{33, 3, 1, 1}, {33, 3, 1, 1}}, {{7, 1, 1, 1}, {7, 1, 1, 1}}};
  // grad mode: the same broadcast patterns, smaller (finite differences run 4 graphs per element)
  const S grad_shapes[] = {{{6, 4, 3, 2}, {6, 4, 3, 2}}, {{6, 4, 3, 2}, {6, 1, 1, 1}}, {{6, 4, 3, 2}, {6, 4, 1, 1}},
                           {{6, 4, 3, 2}, {1, 1, 1, 1}}, {{6, 4, 3, 2}, {3, 4, 3, 2}}, {{5, 3, 2, 2}, {5, 1, 2, 1}}};
  for (bool grad : {false, true})
    for (const S& s : grad ? std::span<const S>(grad_shapes) : std::span<const S>(shapes))
      add_case(out, name, fmt::format("type_a=f32,type_b=f32,ne_a={},ne_b={}", ne_str(s.a), ne_str(s.b)),
               grad ? kModeGrad : kModeTest, [=](CaseBuilder& b) {
                 fn(b.ctx(), b.param({s.a[0], s.a[1], s.a[2], s.a[3]}), b.param({s.b[0], s.b[1], s.b[2], s.b[3]}, b_init));
               });
  const std::pair<DType, DType> types[] = {
      {DType::F16, DType::F32}, {DType::F32, DType::F16}, {DType::BF16, DType::BF16}, {DType::F16, DType::F16}};
  for (auto [ta, tb] : types)
    add_case(out, name, fmt::format("type_a={},type_b={},ne_a=[10,5,4,3],ne_b=[10,5,1,1]", tn(ta), tn(tb)), kModeTest,
             [=](CaseBuilder& b) { fn(b.ctx(), b.input(ta, {10, 5, 4, 3}), b.input(tb, {10, 5, 1, 1}, b_init)); });
  add_case(out, name, "type_a=f32,type_b=f32,ne_a=[9,12,2,1],ne_b=[9,1,1,1],a=transposed", kModeTest,
           [=](CaseBuilder& b) { fn(b.ctx(), transposed_input(b, DType::F32, 9, 12, 2), b.input(DType::F32, {9}, b_init)); });
  add_case(out, name, "type_a=f32,type_b=f32,ne_a=[9,12,2,1],ne_b=[9,12,2,1],b=transposed", kModeTest,
           [=](CaseBuilder& b) {
             fn(b.ctx(), b.input(DType::F32, {9, 12, 2}), transposed_input(b, DType::F32, 9, 12, 2, 1, b_init));
           });
}

struct Unary {
  const char* name;
  Tensor* (*fn)(Context&, Tensor*);
  LeafInit init;
  LeafInit grad_init;
};

Tensor* scale_a(Context& c, Tensor* a) { return ops::scale(c, a, 0.75f, 0.25f); }
Tensor* scale_b(Context& c, Tensor* a) { return ops::scale(c, a, -2.0f); }
Tensor* clamp_a(Context& c, Tensor* a) { return ops::clamp(c, a, -0.5f, 0.5f); }

void add_unary(std::vector<OpCase>& out) {
  const LeafInit positive = LeafInit::uniform(0.5, 3.0);
  // CLAMP's gradient has kinks at +-0.5: integer inputs stay far from them
  const Unary unaries[] = {
      {"SCALE", scale_a, {}, {}},
      {"SCALE", scale_b, {}, {}},
      {"CLAMP", clamp_a, {}, LeafInit::ints(-3, 3)},
      {"SILU", ops::silu, {}, {}},
      {"GELU", ops::gelu, {}, {}},
      {"TANH", ops::tanh, LeafInit::normal(0.0, 2.0), {}},
      {"SIGMOID", ops::sigmoid, {}, {}},
      {"SOFTPLUS", ops::softplus, LeafInit::normal(0.0, 3.0), {}},
      {"EXP", ops::exp, {}, {}},
      {"LOG", ops::log, positive, positive},
      {"SQR", ops::sqr, {}, {}},
      {"SQRT", ops::sqrt, positive, positive},
  };
  for (const Unary& u : unaries) {
    const std::string extra = u.fn == scale_a ? ",s=0.75,bias=0.25" : u.fn == scale_b ? ",s=-2,bias=0"
                              : u.fn == clamp_a ? ",min=-0.5,max=0.5" : "";
    for (DType t : {DType::F32, DType::F16, DType::BF16})
      add_case(out, u.name, fmt::format("type={},ne=[17,7,3,2]{}", tn(t), extra), kModeTest,
               [=](CaseBuilder& b) { u.fn(b.ctx(), b.input(t, {17, 7, 3, 2}, u.init)); });
    add_case(out, u.name, fmt::format("type=f32,ne=[9,13,1,1]{},src=transposed", extra), kModeTest,
             [=](CaseBuilder& b) { u.fn(b.ctx(), transposed_input(b, DType::F32, 9, 13, 1, 1, u.init)); });
    add_case(out, u.name, fmt::format("type=f32,ne=[1031,1,1,1]{}", extra), kModeTest,
             [=](CaseBuilder& b) { u.fn(b.ctx(), b.input(DType::F32, {1031}, u.init)); });
    add_case(out, u.name, fmt::format("type=f32,ne=[7,5,1,1]{},grad=1", extra), kModeGrad,
             [=](CaseBuilder& b) { u.fn(b.ctx(), b.param({7, 5}, u.grad_init)); });
  }
}

void add_gated(std::vector<OpCase>& out) {
  for (DType t : {DType::F32, DType::F16, DType::BF16}) {
    add_case(out, "SWIGLU", fmt::format("type={},ne=[17,5,3,1]", tn(t)), t == DType::F32 ? kTG : kModeTest,
             [=](CaseBuilder& b) {
               if (t == DType::F32) {
                 ops::swiglu(b.ctx(), b.param({17, 5, 3}), b.param({17, 5, 3}));
               } else {
                 ops::swiglu(b.ctx(), b.input(t, {17, 5, 3}), b.input(t, {17, 5, 3}));
               }
             });
    add_case(out, "SILU_BACK", fmt::format("type={},ne=[17,5,3,1]", tn(t)), t == DType::F32 ? kTG : kModeTest,
             [=](CaseBuilder& b) {
               if (t == DType::F32) {
                 ops::silu_back(b.ctx(), b.param({17, 5, 3}), b.param({17, 5, 3}));
               } else {
                 ops::silu_back(b.ctx(), b.input(t, {17, 5, 3}), b.input(t, {17, 5, 3}));
               }
             });
  }
  // gpt-oss's constants; inputs spread past the limit so both clamps act
  for (DType t : {DType::F32, DType::F16})
    add_case(out, "SWIGLU_OAI", fmt::format("type={},ne=[17,5,3,1],alpha=1.702,limit=7", tn(t)), kModeTest,
             [=](CaseBuilder& b) {
               ops::swiglu_oai(b.ctx(), b.input(t, {17, 5, 3}, LeafInit::normal(0.0, 6.0)),
                               b.input(t, {17, 5, 3}, LeafInit::normal(0.0, 6.0)), 1.702f, 7.0f);
             });
  // the gradient jumps at +-limit: integer inputs past it on both sides stay clear of the kinks
  add_case(out, "SWIGLU_OAI", "type=f32,ne=[7,5,1,1],alpha=1.702,limit=6.5,grad=1", kModeGrad, [](CaseBuilder& b) {
    ops::swiglu_oai(b.ctx(), b.param({7, 5}, LeafInit::ints(-9, 9)), b.param({7, 5}, LeafInit::ints(-9, 9)), 1.702f,
                    6.5f);
  });
  add_case(out, "SWIGLU", "type=f32,ne=[8,11,1,1],a=transposed", kModeTest, [](CaseBuilder& b) {
    ops::swiglu(b.ctx(), transposed_input(b, DType::F32, 8, 11), b.input(DType::F32, {8, 11}));
  });
  add_case(out, "SILU_BACK", "type=f32,ne=[8,11,1,1],x=transposed", kModeTest, [](CaseBuilder& b) {
    ops::silu_back(b.ctx(), b.input(DType::F32, {8, 11}), transposed_input(b, DType::F32, 8, 11));
  });

  struct A {
    int64_t n0, n_used, t, n_expert;
    DType tb;
  };
  for (const A& a : {A{16, 2, 5, 4, DType::F32}, A{33, 4, 3, 8, DType::F32}, A{8, 1, 7, 3, DType::F16}, A{32, 8, 2, 8, DType::BF16}}) {
    add_case(out, "ADD_ID",
             fmt::format("type_b={},n0={},n_used={},n_tokens={},n_expert={}", tn(a.tb), a.n0, a.n_used, a.t, a.n_expert),
             a.tb == DType::F32 ? kTG : kModeTest, [=](CaseBuilder& b) {
               Tensor* x = a.tb == DType::F32 ? b.param({a.n0, a.n_used, a.t}) : b.input(DType::F32, {a.n0, a.n_used, a.t});
               Tensor* bias = a.tb == DType::F32 ? b.param({a.n0, a.n_expert}) : b.input(a.tb, {a.n0, a.n_expert});
               ops::add_id(b.ctx(), x, bias, b.ids({a.n_used, a.t}, 0, a.n_expert));
             });
  }
}

// Perf: activations of a 4096-wide model over a 512-token batch.
void add_perf(std::vector<OpCase>& out) {
  const std::pair<const char*, BinaryFn> binaries[] = {{"ADD", ops::add}, {"MUL", ops::mul}};
  for (auto [name, fn] : binaries)
    for (int64_t nb1 : {512, 1})
      add_case(out, name, fmt::format("type_a=f32,type_b=f32,ne_a=[4096,512,1,1],ne_b=[4096,{},1,1]", nb1), kModePerf,
               [=](CaseBuilder& b) { fn(b.ctx(), b.input(DType::F32, {4096, 512}), b.input(DType::F32, {4096, nb1})); });
  const std::pair<const char*, Tensor* (*)(Context&, Tensor*)> unaries[] = {
      {"SCALE", scale_a}, {"SILU", ops::silu}, {"GELU", ops::gelu}, {"EXP", ops::exp}};
  for (auto [name, fn] : unaries)
    add_case(out, name, "type=f32,ne=[4096,512,1,1]", kModePerf,
             [=](CaseBuilder& b) { fn(b.ctx(), b.input(DType::F32, {4096, 512})); });
  add_case(out, "SWIGLU", "type=f32,ne=[11008,512,1,1]", kModePerf, [](CaseBuilder& b) {
    ops::swiglu(b.ctx(), b.input(DType::F32, {11008, 512}), b.input(DType::F32, {11008, 512}));
  });
}

}  // namespace

void add_elementwise_cases(std::vector<OpCase>& out) {
  add_binary(out, "ADD", ops::add, false);
  add_binary(out, "SUB", ops::sub, false);
  add_binary(out, "MUL", ops::mul, false);
  add_binary(out, "DIV", ops::div, true);
  add_unary(out);
  add_gated(out);
  add_perf(out);
}

}  // namespace loom::testing::detail
