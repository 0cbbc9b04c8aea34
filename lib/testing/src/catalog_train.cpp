// Catalog, training ops: CROSS_ENTROPY_LOSS and its backward, and the optimizer steps (AdamW,
// SGD) that update parameter and moments in place (all of them compared).
#include <fmt/format.h>

#include "catalog_families.h"

namespace loom::testing::detail {

namespace {

constexpr uint32_t kTG = kModeTest | kModeGrad;

void add_cross_entropy(std::vector<OpCase>& out) {
  const LeafInit labels = LeafInit::row_probs();
  for (auto ne : {std::array<int64_t, 2>{10, 5}, {1000, 3}, {7, 1}, {33, 17}}) {
    const bool grad = ne[0] * ne[1] <= 50;
    add_case(out, "CROSS_ENTROPY_LOSS", fmt::format("type=f32,ne=[{},{},1,1]", ne[0], ne[1]), grad ? kTG : kModeTest,
             [=](CaseBuilder& b) {
               Tensor* logits = grad ? b.param({ne[0], ne[1]}) : b.input(DType::F32, {ne[0], ne[1]});
               ops::cross_entropy_loss(b.ctx(), logits, b.input(DType::F32, {ne[0], ne[1]}, labels));
             });
    add_case(out, "CROSS_ENTROPY_LOSS_BACK", fmt::format("type=f32,ne=[{},{},1,1]", ne[0], ne[1]), grad ? kTG : kModeTest,
             [=](CaseBuilder& b) {
               // differentiable only in the upstream gradient (the backward pass is linear in it)
               const LeafInit d_init = LeafInit::uniform(0.5, 2.0);
               Tensor* d = grad ? b.param({1}, d_init) : b.input(DType::F32, {1}, d_init);
               ops::cross_entropy_loss_back(b.ctx(), d, b.input(DType::F32, {ne[0], ne[1]}),
                                            b.input(DType::F32, {ne[0], ne[1]}, labels));
             });
  }
}

void add_optimizers(std::vector<OpCase>& out) {
  for (auto ne : {std::array<int64_t, 2>{33, 5}, {256, 3}}) {
    for (float wd : {0.0f, 0.1f}) {
      add_case(out, "OPT_STEP_ADAMW", fmt::format("type=f32,ne=[{},{},1,1],wd={:g}", ne[0], ne[1], wd), kModeTest,
               [=](CaseBuilder& b) {
                 Tensor* w = b.input(DType::F32, {ne[0], ne[1]});
                 Tensor* g = b.input(DType::F32, {ne[0], ne[1]});
                 Tensor* m = b.input(DType::F32, {ne[0], ne[1]}, LeafInit::normal(0.0, 0.1));
                 Tensor* v = b.input(DType::F32, {ne[0], ne[1]}, LeafInit::uniform(0.0, 0.5));
                 // alpha, beta1, beta2, eps, wd, 1/(1-beta1^t), 1/(1-beta2^t) at step t = 3
                 Tensor* hp = b.input(DType::F32, {7}, LeafInit::values({1e-3f, 0.9f, 0.999f, 1e-8f, wd, 1.0f / 0.271f, 1.0f / 0.002997001f}));
                 b.output(ops::opt_step_adamw(b.ctx(), w, g, m, v, hp));
                 b.output(m);
                 b.output(v);
               });
      add_case(out, "OPT_STEP_SGD", fmt::format("type=f32,ne=[{},{},1,1],wd={:g}", ne[0], ne[1], wd), kModeTest,
               [=](CaseBuilder& b) {
                 Tensor* w = b.input(DType::F32, {ne[0], ne[1]});
                 Tensor* hp = b.input(DType::F32, {2}, LeafInit::values({0.05f, wd}));
                 ops::opt_step_sgd(b.ctx(), w, b.input(DType::F32, {ne[0], ne[1]}), hp);
               });
    }
  }
}

}  // namespace

void add_train_cases(std::vector<OpCase>& out) {
  add_cross_entropy(out);
  add_optimizers(out);
}

}  // namespace loom::testing::detail
