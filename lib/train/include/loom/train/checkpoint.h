// Checkpoints: one GGUF file holding the model (its metadata and tokenizer, trained tensors in
// F32 so a resume is bit-exact, frozen tensors as they were), the optimizer state (tensors
// opt.m.NAME / opt.v.NAME) and the training state (train.* keys: step, data position, seed,
// epoch statistics, the batch geometry). Written through AtomicFile: a reader sees the old
// checkpoint or the new one, never a partial file.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "loom/gguf/gguf.h"
#include "loom/train/optimizer.h"
#include "loom/train/progress.h"
#include "loom/train/train_model.h"

namespace loom::train {

struct TrainState {
  int64_t step = 0;       // optimizer steps done
  int64_t epoch = 0;      // current epoch (0-based)
  int64_t epoch_pos = 0;  // training windows of this epoch already used
  uint64_t seed = 42;     // fixes the initialization and every epoch's shuffle
  int64_t n_ctx = 0, n_batch = 0, n_ubatch = 0, stride = 0;
  double val_split = 0;
  std::string optimizer;  // "adamw" / "sgd"
  EpochStats stats;       // of the current epoch so far
  double elapsed_s = 0;   // training time of the current epoch so far
  std::vector<std::pair<std::string, DType>> trainable;  // trained tensors and their base types
  // What the run was started from, so a resume with other inputs is refused: the text's
  // checksum and the base ("model HEX" for -m, "init ARCH:PRESET" for --init).
  uint64_t text_hash = 0;
  std::string base;
};

void save_checkpoint(const std::string& path, const TrainModel& model, const std::vector<ParamState>& params,
                     const TrainState& state);
// 2: train.checksum over the whole file, train.text_hash and train.base.
inline constexpr uint32_t kCheckpointVersion = 2;
inline constexpr const char* kCheckpointChecksumKey = "train.checksum";

// invalid_input (exit 3) when the checksum is missing or does not match the file's bytes.
void verify_checkpoint_checksum(const gguf::File& file);
// The train.* keys without the checksum check (the fuzzer reaches past it with this).
TrainState parse_train_state(const gguf::File& file);
// Reads the train.* keys; throws invalid_input when the file is not a loom-train checkpoint or
// its checksum (train.checksum, over every byte of the file) does not match: a corrupt file.
TrainState read_train_state(const gguf::File& file);
// Copies opt.m / opt.v of every parameter from the checkpoint into params (AdamW).
void load_optimizer_state(const gguf::File& file, std::vector<ParamState>& params);

}  // namespace loom::train
