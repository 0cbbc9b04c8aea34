// Trainer: builds the physical-batch graph (forward, backward from the autograd rule table,
// accumulation into per-parameter gradient sums), the optimizer graph and evaluation graphs,
// plans each once on the model's devices (lib/sched) and runs them through one executor, which
// binds a graph's memory again whenever the graph it runs changes. Gradient sums and optimizer
// state (m, v) live in buffers of each parameter's device.
#include "loom/train/trainer.h"

#include <fmt/format.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "loom/alloc/alloc.h"
#include "loom/core/error.h"
#include "loom/graph/autograd.h"
#include "loom/graph/ops.h"
#include "loom/sched/executor.h"
#include "loom/train/train_forward.h"

namespace loom::train {

namespace {

// A graph planned on the model's devices.
struct Pass {
  Context ctx;
  Graph graph;
  sched::ExecutionPlan plan;
};

struct ForwardPass : Pass {
  ForwardGraph fg;
  BatchShape shape;
};

template <class T>
T read_scalar(const Tensor* t) {
  T v{};
  if (t->buffer && !t->buffer->type().is_host())
    t->buffer->get(t, &v, 0, sizeof(T));
  else
    std::memcpy(&v, t->data, sizeof(T));
  return v;
}

BatchResult read_result(const ForwardGraph& fg, const BatchShape& s) {
  BatchResult r;
  r.loss = read_scalar<float>(fg.loss);
  r.n_correct = read_scalar<int32_t>(fg.n_correct);
  r.n_tokens = s.n_tokens();
  return r;
}

}  // namespace

struct Trainer::Impl {
  TrainModel& model;
  TrainerConfig cfg;
  std::vector<Device*> devices;  // the model's, the CPU last
  Context state_ctx;             // gradient sums, m, v
  std::vector<std::unique_ptr<Buffer>> acc_bufs, state_bufs;
  std::vector<ParamState> params;

  ForwardPass micro;
  Gradients grads;
  Pass opt;
  OptimizerGraph og;
  std::map<int64_t, std::unique_ptr<ForwardPass>> evals;  // by windows per batch
  std::unique_ptr<sched::Executor> exec;

  Impl(TrainModel& m, const TrainerConfig& c) : model(m), cfg(c), devices(m.model().devices()) {}

  // Allocates tensors (one list per device of devices) on their devices.
  void alloc_on_devices(const std::vector<std::vector<Tensor*>>& per_device,
                        std::vector<std::unique_ptr<Buffer>>& out, const char* what) {
    for (size_t d = 0; d < devices.size(); ++d) {
      if (per_device[d].empty()) continue;
      const BufferType& bt = devices[d]->buffer_type();
      Status st = alloc::alloc_tensors(per_device[d], bt, out);
      LOOM_CHECK(st.is_ok(), out_of_memory, "{}: cannot allocate {:.2f} MiB on {}: {}", what,
                 (double)alloc::tensors_size(per_device[d], bt) / (1 << 20), devices[d]->name(), st.message());
    }
  }

  void plan_pass(Pass& p) {
    p.plan = sched::plan(p.graph, devices);
    Status st = exec->reserve(p.graph, p.plan);
    LOOM_CHECK(st.is_ok(), out_of_memory, "training compute buffers: {}", st.message());
  }

  void build() {
    LOOM_CHECK(cfg.n_ctx >= 1 && cfg.n_batch >= 1 && cfg.n_ubatch >= 1 && cfg.n_batch % cfg.n_ubatch == 0, usage,
               "-b {} must be a multiple of -ub {} (both at least 1)", cfg.n_batch, cfg.n_ubatch);
    const bool adamw = cfg.opt.kind == OptimizerKind::adamw;
    std::vector<std::vector<Tensor*>> acc_of(devices.size()), state_of(devices.size());
    for (Tensor* p : model.params()) {
      ParamState s;
      s.param = p;
      const size_t d = (size_t)model.model().device_of(p);
      s.grad_acc = state_ctx.new_like(p, "grad." + p->name);
      acc_of[d].push_back(s.grad_acc);
      if (adamw) {
        s.m = state_ctx.new_like(p, "opt.m." + p->name);
        s.v = state_ctx.new_like(p, "opt.v." + p->name);
        state_of[d].push_back(s.m);
        state_of[d].push_back(s.v);
      }
      params.push_back(s);
    }
    LOOM_CHECK(!params.empty(), usage, "no tensor to train (--train-tensors matches no float tensor)");
    alloc_on_devices(acc_of, acc_bufs, "gradient sums");
    alloc_on_devices(state_of, state_bufs, "optimizer state");
    for (auto& b : state_bufs) b->clear(0);
    exec = std::make_unique<sched::Executor>(devices);

    // Physical batch: forward, backward, gradient sums.
    micro.shape = {cfg.n_ctx, cfg.n_ubatch};
    micro.fg = build_train_forward(micro.ctx, model.model(), micro.shape);
    Graph fwd;
    fwd.build_forward(micro.fg.loss);
    grads = build_backward(micro.ctx, fwd, micro.fg.loss);
    build_train_graph(micro.graph, micro.fg);
    for (ParamState& s : params) {
      Tensor* g = grads.of(s.param);
      if (!g) continue;  // not on the loss's path: its gradient stays 0
      micro.graph.build_forward(ops::cpy(micro.ctx, ops::add(micro.ctx, s.grad_acc, g), s.grad_acc));
    }
    plan_pass(micro);

    og = build_optimizer_graph(opt.ctx, params, cfg.opt.kind);
    opt.graph.build_forward(og.grad_norm);
    for (Tensor* t : og.steps) opt.graph.build_forward(t);
    plan_pass(opt);
  }

  // Binds p's memory unless it is bound already; true when it was bound just now (host inputs
  // are then to be filled again).
  bool bind(Pass& p) {
    if (exec->bound_plan() == p.plan.uid) return false;
    exec->alloc(p.graph, p.plan).throw_if_error();
    return true;
  }

  void run(Pass& p) { exec->compute(p.graph, p.plan).throw_if_error(); }

  ForwardPass& eval_pass(int64_t n_seq) {
    auto& p = evals[n_seq];
    if (!p) {
      p = std::make_unique<ForwardPass>();
      p->shape = {cfg.n_ctx, n_seq};
      p->fg = build_train_forward(p->ctx, model.model(), p->shape);
      build_train_graph(p->graph, p->fg);
      plan_pass(*p);
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
  for (auto& b : m.acc_bufs) b->clear(0);
  const int64_t n_micro = c.n_batch / c.n_ubatch;
  for (int64_t u = 0; u < n_micro; ++u) {
    if (m.bind(m.micro))
      for (const GradConstant& k : m.grads.constants)
        std::memcpy(k.tensor->data, k.values.data(), k.values.size() * sizeof(float));
    const auto first = (ptrdiff_t)(u * c.n_ubatch), last = (ptrdiff_t)((u + 1) * c.n_ubatch);
    fill_inputs(m.micro.fg, m.micro.shape, {inputs.begin() + first, inputs.begin() + last},
                {targets.begin() + first, targets.begin() + last});
    m.run(m.micro);
    r.batches.push_back(read_result(m.micro.fg, m.micro.shape));
  }
  m.bind(m.opt);
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
  m.run(m.opt);
  r.grad_norm = read_scalar<float>(m.og.grad_norm);
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
    m.bind(p);
    fill_inputs(p.fg, p.shape, {inputs.begin() + first, inputs.begin() + first + k},
                {targets.begin() + first, targets.begin() + first + k});
    m.run(p);
    out.push_back(read_result(p.fg, p.shape));
  }
  return out;
}

}  // namespace loom::train
