// Catalog, fused patterns: RMS_NORM_MUL and TOPK_MOE graphs exactly as the models build them
// (every output compared; expert ids as row sets with their weights). Twins with `fusable=0`
// make an intermediate an output so no backend may fuse them: perf mode shows the difference.
#include <fmt/format.h>

#include "catalog_families.h"
#include "loom/graph/fusion.h"

namespace loom::testing::detail {

namespace {

void add_rms_norm_mul(std::vector<OpCase>& out) {
  struct S {
    int64_t x[4], w[4];
    DType tx;
  };
  const S shapes[] = {{{64, 5, 4, 3}, {64, 1, 1, 1}, DType::F32},  {{33, 7, 1, 1}, {33, 7, 1, 1}, DType::F32},
                      {{4096, 5, 1, 1}, {4096, 1, 1, 1}, DType::F32}, {{128, 8, 5, 1}, {128, 1, 1, 1}, DType::F32},
                      {{64, 6, 4, 1}, {64, 1, 4, 1}, DType::F32},  {{48, 9, 1, 1}, {48, 1, 1, 1}, DType::F16},
                      {{40, 3, 2, 1}, {8, 1, 1, 1}, DType::BF16}};
  for (const S& s : shapes)
    for (bool fusable : {true, false}) {
      const std::string params = fmt::format("type={},ne={},ne_w={},eps=1e-06{}", tn(s.tx), ne_str(s.x), ne_str(s.w),
                                             fusable ? "" : ",fusable=0");
      add_case(out, fusion_name(FusionKind::rms_norm_mul), params, kModeTest, [=](CaseBuilder& b) {
        Tensor* n = ops::rms_norm(b.ctx(), b.input(s.tx, {s.x[0], s.x[1], s.x[2], s.x[3]}), 1e-6f);
        Tensor* y = ops::mul(b.ctx(), n, b.input(DType::F32, {s.w[0], s.w[1], s.w[2], s.w[3]}));
        b.output(y);
        if (!fusable) b.output(n)->flags |= kFlagOutput;
      });
    }
  // the normalized x read twice: must not fuse, both results compared
  add_case(out, fusion_name(FusionKind::rms_norm_mul), "type=f32,ne=[64,5,1,1],ne_w=[64,1,1,1],eps=1e-06,norm_used_twice=1",
           kModeTest, [](CaseBuilder& b) {
             Tensor* n = ops::rms_norm(b.ctx(), b.input(DType::F32, {64, 5}), 1e-6f);
             b.output(ops::mul(b.ctx(), n, b.input(DType::F32, {64})));
             b.output(ops::scale(b.ctx(), n, 2.0f));
           });
  for (int64_t tokens : {1, 512})
    for (bool fusable : {true, false})
      add_case(out, fusion_name(FusionKind::rms_norm_mul),
               fmt::format("type=f32,ne=[4096,{},1,1],ne_w=[4096,1,1,1],eps=1e-06{}", tokens, fusable ? "" : ",fusable=0"),
               kModePerf, [=](CaseBuilder& b) {
                 Tensor* n = ops::rms_norm(b.ctx(), b.input(DType::F32, {4096, tokens}), 1e-6f);
                 b.output(ops::mul(b.ctx(), n, b.input(DType::F32, {4096})));
                 if (!fusable) n->flags |= kFlagOutput;
               });
}

enum class Norm { none, loom_form, llama_form };

struct Moe {
  int64_t n_expert, k, tokens;
  MoeGating gating;
  bool bias;
  Norm norm;
  float scale;  // 0: no SCALE
  bool fusable;
};

// The router as lib/model builds it: probs = gate(logits); ids = top_k(probs (+ bias), k);
// w = get_rows(reshape(probs, {1, E, T}), ids); renormalized and scaled as asked.
void build_moe(CaseBuilder& b, const Moe& m) {
  Context& c = b.ctx();
  const int64_t E = m.n_expert, k = m.k, T = m.tokens;
  Tensor* logits = b.input(DType::F32, {E, T}, LeafInit::normal(0.0, 2.0));
  Tensor* probs = m.gating == MoeGating::softmax ? ops::soft_max(c, logits, nullptr, 1.0f) : ops::sigmoid(c, logits);
  Tensor* sel = m.bias ? ops::add(c, probs, b.input(DType::F32, {E}, LeafInit::normal(0.0, 0.5))) : probs;
  Tensor* ids = ops::top_k(c, sel, k);
  Tensor* w = ops::get_rows(c, ops::reshape(c, probs, {1, E, T}), ids);
  if (m.norm == Norm::loom_form) {
    Tensor* sum = ops::sum_rows(c, ops::reshape(c, w, {k, T}));
    w = ops::div(c, w, ops::reshape(c, sum, {1, 1, T}));
  } else if (m.norm == Norm::llama_form) {
    Tensor* flat = ops::reshape(c, w, {k, T});
    w = ops::div(c, flat, ops::sum_rows(c, flat));
  }
  if (m.scale != 0.0f) w = ops::scale(c, w, m.scale);
  b.output(ids);
  b.output(w);
  if (!m.fusable) probs->flags |= kFlagOutput;
}

std::string moe_params(const Moe& m) {
  return fmt::format("n_expert={},k={},n_tokens={},gating={},bias={},norm={},scale={:g}{}", m.n_expert, m.k, m.tokens,
                     m.gating == MoeGating::softmax ? "softmax" : "sigmoid", m.bias ? 1 : 0,
                     m.norm == Norm::none ? "none" : m.norm == Norm::loom_form ? "sum_rows" : "sum_rows_2d", m.scale,
                     m.fusable ? "" : ",fusable=0");
}

void add_topk_moe(std::vector<OpCase>& out) {
  using G = MoeGating;
  const Moe cases[] = {
      {8, 2, 5, G::softmax, false, Norm::loom_form, 0.0f, true},
      {128, 8, 33, G::softmax, false, Norm::loom_form, 0.0f, true},
      {60, 4, 1, G::softmax, false, Norm::none, 0.0f, true},
      {32, 4, 7, G::softmax, false, Norm::llama_form, 0.0f, true},
      {16, 4, 3, G::softmax, false, Norm::loom_form, 2.5f, true},
      {64, 6, 9, G::softmax, true, Norm::none, 0.0f, true},
      {256, 8, 4, G::sigmoid, true, Norm::loom_form, 2.5f, true},
      {16, 2, 6, G::sigmoid, true, Norm::none, 0.0f, true},
      {32, 4, 5, G::sigmoid, false, Norm::llama_form, 0.0f, true},
      {24, 3, 11, G::sigmoid, false, Norm::none, 1.5f, true},
      {8, 8, 4, G::softmax, false, Norm::loom_form, 0.0f, true},
      {128, 8, 33, G::softmax, false, Norm::loom_form, 0.0f, false},
      {256, 8, 4, G::sigmoid, true, Norm::loom_form, 2.5f, false},
  };
  for (const Moe& m : cases)
    add_case(out, fusion_name(FusionKind::topk_moe), moe_params(m), kModeTest, [=](CaseBuilder& b) { build_moe(b, m); })
        .int_compare = IntCompare::row_sets;
  for (int64_t tokens : {1, 512})
    for (bool fusable : {true, false}) {
      const Moe m{128, 8, tokens, G::softmax, false, Norm::loom_form, 0.0f, fusable};
      add_case(out, fusion_name(FusionKind::topk_moe), moe_params(m), kModePerf, [=](CaseBuilder& b) { build_moe(b, m); })
          .int_compare = IntCompare::row_sets;
    }
}

}  // namespace

void add_fusion_cases(std::vector<OpCase>& out) {
  add_rms_norm_mul(out);
  add_topk_moe(out);
}

}  // namespace loom::testing::detail
