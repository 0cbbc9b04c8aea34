// libFuzzer entry point: arbitrary bytes as an importance matrix (loom-gguf quantize --imatrix), in
// either of llama-imatrix's formats. Only loom::Error may come out of a bad file; a crash, a hang,
// a huge allocation or another exception is a bug.
#include <cstdint>
#include <string_view>

#include "loom/core/error.h"
#include "loom/model/imatrix.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const loom::ImportanceMatrix m =
        loom::parse_importance_matrix(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz");
    loom::ImportanceMatrix f = m;
    loom::filter_importance_matrix(f, {"attn"}, {"blk.1."});
  } catch (const loom::Error&) {
  }
  return 0;
}
