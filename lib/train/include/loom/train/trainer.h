// The training engine: graphs for one physical batch (forward + backward + gradient
// accumulation), for the optimizer step and for evaluation, each planned once by the scheduler
// on the model's devices and run by one executor, as inference runs; gradient sums and optimizer
// state live next to each parameter, on its device. A step runs n_batch / n_ubatch physical
// batches and one optimizer update.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "loom/train/optimizer.h"
#include "loom/train/train_model.h"

namespace loom::train {

struct TrainerConfig {
  int64_t n_ctx = 256;
  int64_t n_batch = 8;   // windows per optimizer step
  int64_t n_ubatch = 8;  // windows per physical batch (divides n_batch)
  OptimizerParams opt;
};

struct BatchResult {
  double loss = 0;  // mean over the batch's tokens
  int64_t n_correct = 0;
  int64_t n_tokens = 0;
};

struct StepResult {
  std::vector<BatchResult> batches;  // one per physical batch
  float grad_norm = 0;               // before clipping
  float lr = 0;
};

class Trainer {
 public:
  Trainer(TrainModel& model, const TrainerConfig& cfg);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // One optimizer step (the t-th, t >= 1) over n_batch windows: inputs[w] and targets[w] hold
  // n_ctx tokens each.
  StepResult step(const std::vector<const int32_t*>& inputs, const std::vector<const int32_t*>& targets, float lr,
                  int64_t t);
  // Forward only, in physical batches (the last may be smaller).
  std::vector<BatchResult> evaluate(const std::vector<const int32_t*>& inputs,
                                    const std::vector<const int32_t*>& targets);

  std::vector<ParamState>& params();
  const TrainerConfig& config() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom::train
