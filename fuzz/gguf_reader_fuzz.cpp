// libFuzzer entry point for the GGUF reader: arbitrary bytes through File::open_memory, then
// every accessor a tool would use on an accepted file (metadata text, hyper-parameters, the
// first and last byte of each tensor). Only loom::Error may come out; ASan checks the bounds.
#include <cstddef>
#include <cstdint>
#include <string>

#include "loom/core/error.h"
#include "loom/model/arch.h"
#include "loom/gguf/gguf.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<loom::gguf::File> file;
  try {
    file = loom::gguf::File::open_memory(data, size, "fuzz.gguf");
  } catch (const loom::Error&) {
    return 0;
  }
  size_t sink = 0;
  for (const auto& [key, value] : file->metadata()) sink += loom::gguf::format_value(value).size() + key.size();
  for (const loom::gguf::TensorInfo& t : file->tensors()) {
    if (t.nbytes == 0) continue;
    const uint8_t* p = file->tensor_data(t);
    sink += p[0] + p[t.nbytes - 1];
  }
  try {
    const loom::HParams hp = loom::read_hparams(*file);
    sink += (size_t)loom::count_params(hp);
  } catch (const loom::Error&) {
  }
  volatile size_t keep = sink;
  (void)keep;
  return 0;
}
