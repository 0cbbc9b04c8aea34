// `loom-train` as a library call: model (base file, --init from scratch with an optional learned
// BPE vocabulary, or a checkpoint to resume), dataset, the training loop with its progress
// lines, checkpoints every N steps and on SIGINT/SIGTERM, and the output model (atomically).
#pragma once

#include <cstdint>
#include <string>

#include "loom/model/placement.h"
#include "loom/train/optimizer.h"

namespace loom::train {

struct RunOptions {
  std::string text_file;   // -f
  std::string base_model;  // -m
  std::string init;        // --init ARCH[:PRESET] (preset default: tiny)
  int64_t vocab_size = 0;  // --vocab-size: learn a BPE vocabulary of this size (--init only)
  // --init shape overrides (0: the preset's value)
  int64_t n_layer = 0, n_embd = 0, n_head = 0, n_head_kv = 0, n_ff = 0;
  std::string output;      // -o
  std::string out_type;    // --out-type: type of trained matrices in the output (default: as loaded)
  OptimizerParams opt;
  int64_t epochs = 2;
  int64_t steps = 0;       // optimizer steps in all; 0: epochs * steps per epoch
  int64_t n_ctx = 256;     // -c: tokens per window
  int64_t n_batch = 8;     // -b: windows per optimizer step
  int64_t n_ubatch = 0;    // -ub: windows per physical batch (0: n_batch)
  int64_t stride = 0;      // tokens between window starts (0: n_ctx)
  double val_split = 0.05;
  std::string train_tensors;
  std::string checkpoint;  // default: OUTPUT.ckpt (written every N steps and on a signal)
  int64_t checkpoint_every = 0;
  std::string resume;
  uint64_t seed = 42;
  // Devices and layer placement (-dev, -ngl, ...; devices empty: the CPU alone). Weights, their
  // gradients and optimizer state live on the device of their layer; the threads are the devices'.
  PlacementParams placement;
  bool json = false;        // one JSON object per step on stdout, then a summary object
  int progress = -1;       // -1: in place on a terminal, one line per epoch otherwise; 0/1 force
  bool allow_nan = false;  // --allow-nan: keep training when the loss is NaN/Inf (default: exit 3)
  // --log-csv: one row per step `step,epoch,loss,accuracy,lr,grad_norm,val_loss` (val_loss on the
  // steps that end an epoch), flushed as it goes; appended to on --resume
  std::string log_csv;
};

// Returns the exit code: 0 done, 130/143 interrupted by SIGINT/SIGTERM (checkpoint written).
// Throws loom::Error for bad flags (usage), bad files or text (invalid_input, io).
int run(const RunOptions& opts);

}  // namespace loom::train
