// Reading a checkpoint's training state and checking its checksum (apart from the rest of
// checkpoint.cpp so the checkpoint fuzzer links only the GGUF reader).
#include <fmt/format.h>

#include <cmath>

#include "loom/core/error.h"
#include "loom/train/checkpoint.h"

namespace loom::train {

void verify_checkpoint_checksum(const gguf::File& f) {
  const gguf::Value* v = f.find(kCheckpointChecksumKey);
  LOOM_CHECK(v && v->type == gguf::ValueType::U64, invalid_input, "{}: no checksum ({}): not a complete checkpoint",
             f.path(), kCheckpointChecksumKey);
  const uint64_t actual = f.checksum(kCheckpointChecksumKey);
  LOOM_CHECK((uint64_t)v->i == actual, invalid_input,
             "{}: corrupt checkpoint: checksum {:016x}, the file's bytes give {:016x}", f.path(), (uint64_t)v->i,
             actual);
}

TrainState parse_train_state(const gguf::File& f) {
  LOOM_CHECK(f.find("train.version"), invalid_input, "{}: not a loom-train checkpoint (no train.version)", f.path());
  const int64_t version = f.get_int("train.version");
  LOOM_CHECK(version == kCheckpointVersion, invalid_input, "{}: checkpoint version {} (this loom-train reads {})",
             f.path(), version, kCheckpointVersion);
  TrainState s;
  s.step = f.get_int("train.step");
  s.epoch = f.get_int("train.epoch");
  s.epoch_pos = f.get_int("train.epoch_pos");
  s.seed = (uint64_t)f.get_int("train.seed");
  s.n_ctx = f.get_int("train.n_ctx");
  s.n_batch = f.get_int("train.n_batch");
  s.n_ubatch = f.get_int("train.n_ubatch");
  s.stride = f.get_int("train.stride");
  s.val_split = f.get_float("train.val_split");
  s.optimizer = f.get_string("train.optimizer");
  s.text_hash = (uint64_t)f.get_int("train.text_hash");
  s.base = f.get_string("train.base");
  LOOM_CHECK(s.step >= 0 && s.epoch >= 0 && s.epoch_pos >= 0 && s.n_ctx > 0 && s.n_batch > 0 && s.n_ubatch > 0,
             invalid_input, "{}: corrupt training state", f.path());
  const gguf::Value* st = f.find("train.stats");
  LOOM_CHECK(st && st->type == gguf::ValueType::ARRAY && st->floats.size() == 6, invalid_input,
             "{}: train.stats must be 6 f64 values", f.path());
  // The counts are stored as f64; a hostile file may hold any double there, and converting one
  // outside int64's range is undefined, so a count must be a whole number in [0, 2^53].
  auto count = [&](size_t i) {
    const double c = st->floats[i];
    LOOM_CHECK(c >= 0 && c <= 0x1p53 && c == std::floor(c), invalid_input,
               "{}: train.stats[{}] = {} is not a count", f.path(), i, c);
    return (int64_t)c;
  };
  s.stats.loss_sum = st->floats[0];
  s.stats.loss_sq = st->floats[1];
  s.stats.n_batches = count(2);
  s.stats.n_correct = count(3);
  s.stats.n_tokens = count(4);
  s.elapsed_s = st->floats[5];
  const gguf::Value* names = f.find("train.tensors");
  const gguf::Value* types = f.find("train.tensor_types");
  LOOM_CHECK(names && types && names->type == gguf::ValueType::ARRAY && types->type == gguf::ValueType::ARRAY &&
                 names->strings.size() == types->ints.size(),
             invalid_input, "{}: train.tensors / train.tensor_types missing or of different lengths", f.path());
  for (size_t i = 0; i < names->strings.size(); ++i) {
    const auto type = dtype_from_id(types->ints[i]);
    LOOM_CHECK(type && dtype_info(*type).is_float, invalid_input, "{}: tensor '{}' has base type id {}", f.path(),
               names->strings[i], types->ints[i]);
    s.trainable.emplace_back(names->strings[i], *type);
  }
  return s;
}

TrainState read_train_state(const gguf::File& f) {
  (void)parse_train_state(f);  // not a checkpoint at all: say that, not "no checksum"
  verify_checkpoint_checksum(f);
  return parse_train_state(f);
}

}  // namespace loom::train
