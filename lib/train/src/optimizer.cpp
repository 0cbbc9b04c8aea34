// Learning-rate schedules, optimizer hyper-parameter vectors and the optimizer step graph
// (global-norm clipping and one AdamW/SGD update node per parameter).
#include "loom/train/optimizer.h"

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"
#include "loom/graph/ops.h"

namespace loom::train {

OptimizerKind optimizer_from_name(const std::string& name) {
  if (name == "adamw") return OptimizerKind::adamw;
  if (name == "sgd") return OptimizerKind::sgd;
  fail(ErrorKind::usage, "-opt '{}': expected adamw or sgd", name);
}

LrSchedule schedule_from_name(const std::string& name) {
  if (name == "constant") return LrSchedule::constant;
  if (name == "cosine") return LrSchedule::cosine;
  if (name == "exp" || name == "exponential") return LrSchedule::exponential;
  fail(ErrorKind::usage, "--lr-schedule '{}': expected constant, cosine or exp", name);
}

float lr_at(const OptimizerParams& p, int64_t step, int64_t total) {
  if (p.warmup > 0 && step < p.warmup) return p.lr * (float)(step + 1) / (float)p.warmup;
  const float lr_min = p.lr_min < 0 ? 0.0f : p.lr_min;
  const int64_t span = total - p.warmup;
  if (p.schedule == LrSchedule::constant || span <= 1) return p.lr;
  const double f = std::clamp((double)(step - p.warmup) / (double)(span - 1), 0.0, 1.0);  // 0 .. 1 over the decay
  switch (p.schedule) {
    case LrSchedule::cosine: return (float)(lr_min + 0.5 * (p.lr - lr_min) * (1.0 + std::cos(M_PI * f)));
    case LrSchedule::exponential: {
      const double floor = lr_min > 0 ? lr_min : p.lr * 1e-2;  // decay to lr_min (or 1% without one)
      return (float)(p.lr * std::pow(floor / p.lr, f));
    }
    case LrSchedule::constant: break;
  }
  return p.lr;
}

std::array<float, 7> adamw_hparams(const OptimizerParams& p, float lr, int64_t t) {
  const float b1h = (float)(1.0 / (1.0 - std::pow((double)p.beta1, (double)t)));
  const float b2h = (float)(1.0 / (1.0 - std::pow((double)p.beta2, (double)t)));
  return {lr, p.beta1, p.beta2, p.eps, p.wd, b1h, b2h};
}

std::array<float, 2> sgd_hparams(const OptimizerParams& p, float lr) { return {lr, p.wd}; }

OptimizerGraph build_optimizer_graph(Context& c, const std::vector<ParamState>& params, OptimizerKind kind) {
  using namespace ops;
  OptimizerGraph og;
  og.hp = c.new_tensor(DType::F32, {kind == OptimizerKind::adamw ? 7 : 2}, "opt_hparams");
  og.clip = c.new_tensor(DType::F32, {2}, "opt_clip");
  og.hp->flags |= kFlagInput;
  og.clip->flags |= kFlagInput;
  Tensor* max_norm = view_1d(c, og.clip, 1, 0);
  Tensor* inv_micro = view_1d(c, og.clip, 1, sizeof(float));
  std::vector<Tensor*> grads;
  Tensor* total = nullptr;
  for (const ParamState& p : params) {
    Tensor* g = mul(c, p.grad_acc, inv_micro);
    grads.push_back(g);
    // sum of squares: rows first, then the row sums (each sum on one thread, in order)
    Tensor* rows = sum_rows(c, sqr(c, g));  // {1, ne1, ne2, ne3}
    Tensor* s = sum_rows(c, reshape(c, rows, {rows->nelements()}));
    total = total ? add(c, total, s) : s;
  }
  og.grad_norm = sqrt(c, total);
  og.grad_norm->name = "grad_norm";
  og.grad_norm->flags |= kFlagOutput;
  Tensor* factor = clamp(c, div(c, max_norm, og.grad_norm), 0.0f, 1.0f);
  for (size_t i = 0; i < params.size(); ++i) {
    const ParamState& p = params[i];
    Tensor* g = mul(c, grads[i], factor);
    Tensor* step = kind == OptimizerKind::adamw ? opt_step_adamw(c, p.param, g, p.m, p.v, og.hp)
                                                : opt_step_sgd(c, p.param, g, og.hp);
    step->flags |= kFlagOutput;
    og.steps.push_back(step);
  }
  return og;
}

}  // namespace loom::train
