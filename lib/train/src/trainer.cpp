// Trainer: builds the physical-batch graph (forward, backward from the autograd rule table,
// accumulation into per-parameter gradient sums), the optimizer graph and evaluation graphs,
// and runs them on the CPU device. Optimizer state (m, v) and the gradient sums live in their
// own buffers next to the parameters.
#include "loom/train/trainer.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "loom/alloc/alloc.h"
#include "loom/core/error.h"
#include "loom/cpu/cpu.h"
#include "loom/graph/autograd.h"
#include "loom/graph/ops.h"

namespace loom::train {

namespace {

struct ForwardPass {
  Context ctx;
  ForwardGraph fg;
  Graph graph;
  BatchShape shape;
};

BatchResult read_result(const ForwardGraph& fg, const BatchShape& s) {
  BatchResult r;
  r.loss = *static_cast<const float*>(fg.loss->data);
  r.n_correct = *static_cast<const int32_t*>(fg.n_correct->data);
  r.n_tokens = s.n_tokens();
  return r;
}

}  // namespace

struct Trainer::Impl {
  TrainModel& model;
  TrainerConfig cfg;
  cpu::CpuDevice device;
  Context state_ctx;  // m, v
  Context acc_ctx;    // gradient sums
  std::unique_ptr<Buffer> state_buf, acc_buf;
  std::vector<ParamState> params;

  ForwardPass micro;
  Gradients grads;
  alloc::GraphAllocator micro_alloc;

  Context opt_ctx;
  OptimizerGraph og;
  Graph opt_graph;
  alloc::GraphAllocator opt_alloc;

  std::map<int64_t, std::unique_ptr<ForwardPass>> evals;  // by windows per batch
  alloc::GraphAllocator eval_alloc;
  int64_t eval_bound = -1;  // which eval graph the allocator holds

  Impl(TrainModel& m, const TrainerConfig& c)
      : model(m),
        cfg(c),
        device(c.n_threads > 0 ? c.n_threads : ThreadPool::default_threads()),
        micro_alloc(device.buffer_type()),
        opt_alloc(device.buffer_type()),
        eval_alloc(device.buffer_type()) {}

  void build() {
    LOOM_CHECK(cfg.n_ctx >= 1 && cfg.n_batch >= 1 && cfg.n_ubatch >= 1 && cfg.n_batch % cfg.n_ubatch == 0, usage,
               "-b {} must be a multiple of -ub {} (both at least 1)", cfg.n_batch, cfg.n_ubatch);
    const bool adamw = cfg.opt.kind == OptimizerKind::adamw;
    for (Tensor* p : model.params()) {
      ParamState s;
      s.param = p;
      s.grad_acc = acc_ctx.new_like(p, "grad." + p->name);
      if (adamw) {
        s.m = state_ctx.new_like(p, "opt.m." + p->name);
        s.v = state_ctx.new_like(p, "opt.v." + p->name);
      }
      params.push_back(s);
    }
    LOOM_CHECK(!params.empty(), usage, "no tensor to train (--train-tensors matches no float tensor)");
    acc_buf = cpu::alloc_all(acc_ctx, device.buffer_type());
    if (adamw) {
      state_buf = cpu::alloc_all(state_ctx, device.buffer_type());
      state_buf->clear(0);
    }

    // Physical batch: forward, backward, gradient sums.
    micro.shape = {cfg.n_ctx, cfg.n_ubatch};
    micro.fg = build_train_forward(micro.ctx, model.weights(), micro.shape);
    Graph fwd;
    fwd.build_forward(micro.fg.loss);
    grads = build_backward(micro.ctx, fwd, micro.fg.loss);
    micro.graph.build_forward(micro.fg.loss);
    micro.graph.build_forward(micro.fg.n_correct);
    for (ParamState& s : params) {
      Tensor* g = grads.of(s.param);
      if (!g) continue;  // not on the loss's path: its gradient stays 0
      micro.graph.build_forward(ops::cpy(micro.ctx, ops::add(micro.ctx, s.grad_acc, g), s.grad_acc));
    }
    micro_alloc.alloc_graph(micro.graph).throw_if_error();
    for (const GradConstant& k : grads.constants)
      std::memcpy(k.tensor->data, k.values.data(), k.values.size() * sizeof(float));

    og = build_optimizer_graph(opt_ctx, params, cfg.opt.kind);
    opt_graph.build_forward(og.grad_norm);
    for (Tensor* t : og.steps) opt_graph.build_forward(t);
    opt_alloc.alloc_graph(opt_graph).throw_if_error();
  }

  ForwardPass& eval_pass(int64_t n_seq) {
    auto& p = evals[n_seq];
    if (!p) {
      p = std::make_unique<ForwardPass>();
      p->shape = {cfg.n_ctx, n_seq};
      p->fg = build_train_forward(p->ctx, model.weights(), p->shape);
      p->graph.build_forward(p->fg.loss);
      p->graph.build_forward(p->fg.n_correct);
    }
    if (eval_bound != n_seq) {
      eval_alloc.alloc_graph(p->graph).throw_if_error();
      eval_bound = n_seq;
    }
    return *p;
  }
};

Trainer::Trainer(TrainModel& model, const TrainerConfig& cfg) : impl_(std::make_unique<Impl>(model, cfg)) {
  impl_->build();
}

Trainer::~Trainer() = default;

std::vector<ParamState>& Trainer::params() { return impl_->params; }
const TrainerConfig& Trainer::config() const { return impl_->cfg; }

StepResult Trainer::step(const std::vector<const int32_t*>& inputs, const std::vector<const int32_t*>& targets,
                         float lr, int64_t t) {
  Impl& m = *impl_;
  const TrainerConfig& c = m.cfg;
  LOOM_ASSERT((int64_t)inputs.size() == c.n_batch && targets.size() == inputs.size(), "step with {} windows",
              inputs.size());
  StepResult r;
  r.lr = lr;
  m.acc_buf->clear(0);
  const int64_t n_micro = c.n_batch / c.n_ubatch;
  for (int64_t u = 0; u < n_micro; ++u) {
    const auto first = (ptrdiff_t)(u * c.n_ubatch), last = (ptrdiff_t)((u + 1) * c.n_ubatch);
    fill_inputs(m.micro.fg, m.micro.shape, {inputs.begin() + first, inputs.begin() + last},
                {targets.begin() + first, targets.begin() + last});
    cpu::compute_graph(m.micro.graph, m.device.pool());
    r.batches.push_back(read_result(m.micro.fg, m.micro.shape));
  }
  auto* hp = static_cast<float*>(m.og.hp->data);
  if (c.opt.kind == OptimizerKind::adamw) {
    const auto h = adamw_hparams(c.opt, lr, t);
    std::memcpy(hp, h.data(), sizeof(h));
  } else {
    const auto h = sgd_hparams(c.opt, lr);
    std::memcpy(hp, h.data(), sizeof(h));
  }
  auto* clip = static_cast<float*>(m.og.clip->data);
  clip[0] = c.opt.grad_clip > 0 ? c.opt.grad_clip : std::numeric_limits<float>::infinity();
  clip[1] = 1.0f / (float)n_micro;
  cpu::compute_graph(m.opt_graph, m.device.pool());
  r.grad_norm = *static_cast<const float*>(m.og.grad_norm->data);
  return r;
}

std::vector<BatchResult> Trainer::evaluate(const std::vector<const int32_t*>& inputs,
                                           const std::vector<const int32_t*>& targets) {
  Impl& m = *impl_;
  std::vector<BatchResult> out;
  const int64_t n = (int64_t)inputs.size();
  for (int64_t first = 0; first < n; first += m.cfg.n_ubatch) {
    const int64_t k = std::min(m.cfg.n_ubatch, n - first);
    ForwardPass& p = m.eval_pass(k);
    fill_inputs(p.fg, p.shape, {inputs.begin() + first, inputs.begin() + first + k},
                {targets.begin() + first, targets.begin() + first + k});
    cpu::compute_graph(p.graph, m.device.pool());
    out.push_back(read_result(p.fg, p.shape));
  }
  return out;
}

}  // namespace loom::train
