// libFuzzer entry point: arbitrary bytes as the task files of loom-run --hellaswag, --winogrande and
// --multiple-choice (the first byte picks the reader and the number of tasks to draw). Only
// loom::Error may come out of a bad file; a crash, a hang or another exception is a bug.
#include <cstdint>
#include <string_view>

#include "loom/core/error.h"
#include "loom/model/task_files.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const std::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  const size_t n = data[0] >> 2;  // tasks to draw (0: all)
  try {
    switch (data[0] & 3) {
      case 0: (void)loom::select_hellaswag(loom::parse_hellaswag(text, "fuzz"), n + 1); break;
      case 1: (void)loom::select_winogrande(loom::parse_winogrande(text).tasks, n); break;
      default: (void)loom::read_multiple_choice(text, n, "fuzz"); break;
    }
  } catch (const loom::Error&) {
  }
  return 0;
}
