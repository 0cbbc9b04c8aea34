// Loss and accuracy statistics of an epoch with their uncertainties (as ggml-opt computes them)
// and the progress line: `train: [███▌    ] data=0000140/0000320 loss=2.81234±0.01210
// acc=41.46±0.77% t=00:00:47 ETA=00:01:02` (8 cells of eighth blocks).
#pragma once

#include <cstdint>
#include <string>

namespace loom::train {

struct EpochStats {
  double loss_sum = 0;    // over physical batches
  double loss_sq = 0;
  int64_t n_batches = 0;
  int64_t n_correct = 0;  // over tokens
  int64_t n_tokens = 0;

  void add(double loss, int64_t correct, int64_t tokens);
  double loss() const;      // mean of the batch losses
  double loss_unc() const;  // standard error of that mean (0 with fewer than 2 batches)
  double acc() const;       // fraction of tokens whose argmax is the target
  double acc_unc() const;   // sqrt(acc (1 - acc) / (n - 1))
};

// label "train" or "val"; done/total in windows; times in seconds.
std::string format_progress(const char* label, int64_t done, int64_t total, const EpochStats& s, double elapsed_s,
                            double eta_s);

}  // namespace loom::train
