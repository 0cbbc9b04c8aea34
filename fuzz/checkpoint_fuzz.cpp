// libFuzzer entry point for loom-train checkpoint files: arbitrary bytes through
// File::open_memory, the checksum check, then the training state parsed whether or not the
// checksum matched (so the fuzzer reaches past it). Only loom::Error may come out.
#include <cstddef>
#include <cstdint>

#include "loom/core/error.h"
#include "loom/gguf/gguf.h"
#include "loom/train/checkpoint.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<loom::gguf::File> file;
  try {
    file = loom::gguf::File::open_memory(data, size, "fuzz.ckpt");
  } catch (const loom::Error&) {
    return 0;
  }
  try {
    loom::train::verify_checkpoint_checksum(*file);
  } catch (const loom::Error&) {
  }
  try {
    const loom::train::TrainState s = loom::train::parse_train_state(*file);
    volatile size_t keep = s.trainable.size() + s.base.size() + (size_t)s.step;
    (void)keep;
  } catch (const loom::Error&) {
  }
  return 0;
}
