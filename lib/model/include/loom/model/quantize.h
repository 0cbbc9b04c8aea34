// `loom-gguf quantize`: rewrite a GGUF model with its weights in another type, as llama-quantize
// does: the same file-type names (Q4_K_M, Q3_K_S, IQ4_XS, ...), the same choice of type per
// tensor for each mix (llama.cpp's llama_tensor_get_type: output and some attn_v / ffn_down
// rows get more bits), the same fallbacks for rows the type's block does not divide, and the
// quantizers of lib/core: the reference ones, or with an importance matrix (imatrix.h) the
// searches weighted by it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/gguf/gguf.h"
#include "loom/model/imatrix.h"

namespace loom {

// A llama.cpp file type (llama_ftype): its name, the id written as general.file_type and the
// type most tensors get.
struct FileType {
  const char* name;
  int id;
  DType base;
};
const std::vector<FileType>& file_types();
// Case-insensitive; also llama-quantize's aliases (Q3_K = Q3_K_M, Q4_K = Q4_K_M, Q5_K = Q5_K_M).
std::optional<FileType> file_type_from_name(std::string_view name);

struct QuantizeOptions {
  std::string input;
  std::string output;
  std::string type;  // a file type name
  int n_threads = 0;  // 0: all hardware threads
  bool pure = false;  // every quantizable tensor in the base type (no mix), fallbacks still apply
  bool allow_requantize = false;  // convert tensors that are already quantized (quality loss)
  std::optional<DType> output_tensor_type;
  std::optional<DType> token_embedding_type;
  // llama-quantize --imatrix (already filtered by --include-weights / --exclude-weights): a tensor
  // with an entry quantizes weighted by it, and the mix takes llama.cpp's choices for a run with
  // an importance matrix. nullptr or no entries: none.
  const ImportanceMatrix* imatrix = nullptr;
  std::FILE* log = stdout;  // one progress line per tensor and a summary; nullptr: quiet
};

// What the per-tensor choice needs to know of the model (from its metadata).
struct MixModel {
  std::string arch;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t n_head_kv = 0;
  int64_t n_expert = 0;
};
MixModel mix_model_of(const gguf::File& f);

// The order llama.cpp visits (and writes) a model's tensors: the ones outside blocks first, then
// block by block, by name within each.
std::vector<const gguf::TensorInfo*> quantize_order(const std::vector<gguf::TensorInfo>& tensors);

// The type of each tensor (in `ordered`'s order); n_fallback counts rows the chosen type's
// block did not divide. Throws usage / invalid_input for impossible choices.
std::vector<DType> choose_tensor_types(const FileType& ft, const MixModel& m, const QuantizeOptions& o,
                                       const std::vector<const gguf::TensorInfo*>& ordered, int* n_fallback = nullptr);

struct QuantizeResult {
  int64_t n_tensors = 0;
  int64_t n_converted = 0;  // tensors whose type changed
  int n_fallback = 0;
  size_t bytes_in = 0;   // tensor bytes
  size_t bytes_out = 0;
  double seconds = 0;
  int exit_code = 0;     // 0, or 130 / 143 when SIGINT / SIGTERM stopped it (no output left)
};

// Writes o.output through a temporary file in the same folder renamed at the end, so a failure or
// an interrupt leaves no partial file. Throws loom::Error (usage, invalid_input, io).
QuantizeResult quantize_model(const QuantizeOptions& o);

}  // namespace loom
