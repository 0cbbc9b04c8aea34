// Gradients of whole training graphs: finite differences of the mean cross-entropy of a small
// model of every architecture, and the gradient the Trainer applies (through the graph
// allocator's memory reuse and the accumulation / optimizer graphs) equal to the one computed
// with every tensor in its own memory.
#include <gtest/gtest.h>

#include "grad_check.h"
#include "loom/train/dataset.h"
#include "loom/train/train_forward.h"
#include "loom/train/trainer.h"
#include "train_test_util.h"

namespace loom::test {
namespace {

using namespace loom::train;

std::vector<int32_t> some_tokens(int64_t n) {
  std::vector<int32_t> t((size_t)n);
  for (int64_t i = 0; i < n; ++i) t[(size_t)i] = (int32_t)((i * 7919 + i / 3) % 250);
  return t;
}

// y = the logits of a batch of 2 windows; every parameter of the model checked.
TEST(ModelGrad, WholeModelMatchesFiniteDifferences) {
  const fs::path dir = scratch_dir();
  for (Arch arch : kTrainedArchs) {
    SCOPED_TRACE(arch_name(arch));
    HParams hp = small_hparams(arch, 1);
    hp.rope_freqs = arch_reads_rope_freqs(arch);    // Llama 3's RoPE divisors (llama, mistral3, exaone4)
    if (arch == Arch::mistral3) hp.n_ctx_orig = 2;  // the attention temperature inside the windows
    hp.n_embd = 32;
    hp.head_dim = 8;
    if (arch == Arch::phi3) hp.n_rot = 6;  // 3/4 of each head, as Phi-4-mini
    if (arch == Arch::glm4moe || arch == Arch::glm4) hp.n_rot = 4;  // half, as GLM
    hp.n_ff = 48;
    if (arch_is_moe(arch)) hp.n_ff_exp = arch_experts_n_ff_wide(arch) ? hp.n_ff : 16;
    // gpt-oss: every expert used. At 2 of 4 a step of 1e-3 moves some of its (biased) router
    // logits across top_k's choice, a jump finite differences cannot follow, and a smaller step
    // is lost in float noise; the gathered softmax, add_id biases and SWIGLU_OAI are the same ops.
    // glm4moe likewise: its selection bias picks among sigmoid gates that a step moves as well.
    if (arch == Arch::gpt_oss || arch == Arch::glm4moe) hp.n_expert_used = hp.n_expert;
    if (arch == Arch::granitemoe || arch == Arch::ernie4_5_moe) hp.n_ff_shared = 24;
    if (arch == Arch::ernie4_5_moe) hp.n_expert_used = hp.n_expert;  // the selection bias: as glm4moe's
    if (arch == Arch::olmoe) hp.n_expert_used = hp.n_expert;  // no top-k jumps under the finite steps
    if (arch == Arch::llama4) {                               // the same; its shared expert as wide as a routed one
      hp.n_expert_used = hp.n_expert;
      hp.n_ff_shared = hp.n_ff_exp;
    }
    const std::string path = write_model(dir, hp, 21);
    auto tm = TrainModel::open(path, {});
    GradCase gc;
    gc.params = tm->params();
    const BatchShape shape{8, 2};
    const std::vector<int32_t> toks = some_tokens(2 * 9);
    ForwardGraph fg = build_train_forward(gc.ctx, tm->model(), shape);
    gc.fills.emplace_back(fg.in.tokens, [&](Tensor*, std::mt19937&) {
      fill_inputs(fg, shape, {toks.data(), toks.data() + 9}, {toks.data() + 1, toks.data() + 10});
    });
    // y = the logits (the harness's loss is a fixed random combination of them, summed in
    // double); cross-entropy's own rule is checked in test_autograd. Weights are N(0, 0.02).
    // Steps: large enough for float logits, small enough that top_k keeps its experts (MoE).
    const double eps = arch == Arch::qwen3moe ? 1e-3 : 3e-3;
    check_gradients(gc, fg.logits, {.eps = eps, .max_rel_err = 2e-2, .max_elems = 16});
  }
}

// SGD with lr 1 and nothing else: w_before - w_after is the gradient the Trainer used.
TEST(ModelGrad, TrainerAppliesTheSameGradientAsAPlainGraph) {
  const fs::path dir = scratch_dir();
  for (Arch arch : {Arch::llama, Arch::qwen3moe}) {
    SCOPED_TRACE(arch_name(arch));
    const std::string path = write_model(dir, small_hparams(arch, 2), 12);
    const std::vector<int32_t> toks = some_tokens(64);
    const BatchShape shape{16, 2};
    const std::vector<const int32_t*> in = {toks.data(), toks.data() + 20}, tg = {toks.data() + 1, toks.data() + 21};

    auto a = TrainModel::open(path, {});
    const auto before = snapshot(*a);
    TrainerConfig cfg;
    cfg.n_ctx = 16;
    cfg.n_batch = 2;
    cfg.n_ubatch = 1;  // accumulation of two physical batches
    cfg.opt.kind = OptimizerKind::sgd;
    cfg.opt.lr = 1.0f;
    cfg.opt.grad_clip = 0;
    Trainer tr(*a, cfg);
    tr.step(in, tg, 1.0f, 1);
    const auto after = snapshot(*a);

    auto b = TrainModel::open(path, {});
    Context ctx;
    ForwardGraph fg = build_train_forward(ctx, b->model(), shape);
    Graph fwd;
    fwd.build_forward(fg.loss);
    Gradients grads = build_backward(ctx, fwd, fg.loss);
    Graph g;
    g.build_forward(fg.loss);
    for (Tensor* p : b->params()) g.build_forward(grads.of(p));
    cpu::CpuDevice dev(2);
    auto buf = cpu::alloc_all(ctx, dev.buffer_type());
    for (const GradConstant& k : grads.constants) std::memcpy(k.tensor->data, k.values.data(), k.values.size() * 4);
    fill_inputs(fg, shape, in, tg);
    cpu::compute_graph(g, dev.pool());
    const auto params = b->params();
    for (size_t i = 0; i < params.size(); ++i) {
      const auto* gp = static_cast<const float*>(grads.of(params[i])->data);
      double num = 0, den = 0;
      for (size_t j = 0; j < before[i].size(); ++j) {
        const double applied = (double)before[i][j] - after[i][j];
        num += (applied - gp[j]) * (applied - gp[j]);
        den += (double)gp[j] * gp[j];
      }
      EXPECT_LE(std::sqrt(num / std::max(den, 1e-30)), 1e-3) << params[i]->name;  // w - w' rounding
    }
  }
}

}  // namespace
}  // namespace loom::test
