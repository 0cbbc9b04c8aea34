// Datasets for causal language modelling: a token stream cut into windows of n_ctx + 1 tokens
// (inputs are the first n_ctx, targets the last n_ctx: labels shifted by one) every `stride`
// tokens; the last val_split of the windows are held out for validation (text the model never
// trains on); the training windows are shuffled per epoch by (seed, epoch) alone, so any
// position in any epoch can be recomputed (resume needs no RNG state beyond the seed).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace loom::train {

struct DatasetOptions {
  int64_t n_ctx = 256;
  int64_t stride = 0;       // 0: n_ctx (windows do not overlap)
  double val_split = 0.05;  // fraction of windows held out (at least one when > 0 and possible)
  uint64_t seed = 42;
};

class Dataset {
 public:
  // Throws invalid_input when the text has fewer than n_ctx + 1 tokens or nothing is left to train on.
  Dataset(std::vector<int32_t> tokens, const DatasetOptions& opts);

  int64_t n_ctx() const { return opts_.n_ctx; }
  int64_t n_train() const { return (int64_t)train_.size(); }
  int64_t n_val() const { return (int64_t)val_.size(); }
  int64_t n_tokens() const { return (int64_t)tokens_.size(); }

  // Training window order of an epoch: a permutation of [0, n_train()), fixed by (seed, epoch).
  std::vector<int64_t> epoch_order(int64_t epoch) const;
  // Window i of the training (or validation) set: n_ctx inputs and the n_ctx next tokens.
  const int32_t* train_inputs(int64_t i) const { return tokens_.data() + train_[(size_t)i]; }
  const int32_t* train_targets(int64_t i) const { return train_inputs(i) + 1; }
  const int32_t* val_inputs(int64_t i) const { return tokens_.data() + val_[(size_t)i]; }
  const int32_t* val_targets(int64_t i) const { return val_inputs(i) + 1; }

 private:
  DatasetOptions opts_;
  std::vector<int32_t> tokens_;
  std::vector<int64_t> train_;  // window starts
  std::vector<int64_t> val_;
};

// A portable seeded RNG step (splitmix64) for shuffles and seeds derived from seeds.
uint64_t mix_seed(uint64_t x);

}  // namespace loom::train
