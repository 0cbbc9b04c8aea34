// Optimizers as graph ops: AdamW (decoupled weight decay, bias correction) and SGD steps built
// next to each parameter, fed a gradient scaled in-graph by 1/n_micro and the global-norm clip
// factor; the learning-rate schedule (linear warmup, then constant, cosine or exponential decay
// to lr_min) evaluated on the host per step and passed in a small hyper-parameter tensor.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "loom/graph/context.h"

namespace loom::train {

enum class OptimizerKind { adamw, sgd };
enum class LrSchedule { constant, cosine, exponential };

struct OptimizerParams {
  OptimizerKind kind = OptimizerKind::adamw;
  float lr = 1e-4f;
  float lr_min = -1.0f;  // < 0: not given (constant schedule unless one is named)
  LrSchedule schedule = LrSchedule::constant;
  int64_t warmup = 0;    // steps of linear warmup from 0
  float beta1 = 0.9f, beta2 = 0.999f, eps = 1e-8f;
  float wd = 0.0f;       // decoupled weight decay
  float grad_clip = 1.0f;  // max global gradient norm; 0 = no clipping
};

OptimizerKind optimizer_from_name(const std::string& name);  // throws usage
LrSchedule schedule_from_name(const std::string& name);      // throws usage

// Learning rate for optimizer step `step` (0-based) of `total` steps.
float lr_at(const OptimizerParams& p, int64_t step, int64_t total);

// The hyper-parameter vector opt_step_adamw reads for the t-th step (t >= 1).
std::array<float, 7> adamw_hparams(const OptimizerParams& p, float lr, int64_t t);
std::array<float, 2> sgd_hparams(const OptimizerParams& p, float lr);

// One trainable parameter with its optimizer state and gradient accumulator (all F32 like param).
struct ParamState {
  Tensor* param = nullptr;
  Tensor* grad_acc = nullptr;  // summed gradients of the micro-batches of this step
  Tensor* m = nullptr;         // AdamW moments (nullptr for SGD)
  Tensor* v = nullptr;
};

// The step graph's inputs/outputs.
struct OptimizerGraph {
  Tensor* hp = nullptr;          // F32 {7} (AdamW) or {2} (SGD): filled per step
  Tensor* clip = nullptr;        // F32 {2}: max norm (inf: no clipping), 1 / n_micro
  Tensor* grad_norm = nullptr;   // F32 {1}: global norm of the averaged gradient (before clipping)
  std::vector<Tensor*> steps;    // one update node per parameter (views of the parameters)
};

// Builds: norm = sqrt(sum over params of sum(g^2)) with g = acc / n_micro (a fixed reduction
// order, independent of the thread count), factor = min(1, max_norm / norm), and an update of
// every parameter with factor * g.
OptimizerGraph build_optimizer_graph(Context& ctx, const std::vector<ParamState>& params, OptimizerKind kind);

}  // namespace loom::train
