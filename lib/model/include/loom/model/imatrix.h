// Importance matrices (`loom-gguf quantize --imatrix FILE`): per weight matrix, the mean square of
// the activations each of its columns met over a calibration text, as llama-imatrix writes them.
// Both of its formats are read: the GGUF one (`<tensor>.in_sum2` and `<tensor>.counts` tensors,
// `imatrix.*` keys) and the older binary `.dat` one. docs/QUANTS.md has the details.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

struct ImportanceMatrix {
  // Tensor name -> its columns' importance (>= 0, finite); an expert stack [n_embd, n_ff, n_expert]
  // has n_expert runs of ne0 values, one per expert.
  std::map<std::string, std::vector<float>> entries;
  std::vector<std::string> datasets;  // the calibration texts' names, where the file has them
  int64_t chunks = 0;                 // chunks it was computed on (0: not recorded)
  std::string path;                   // the file read
};

// Reads either format (told apart by the GGUF magic). Throws loom::Error: io when the file cannot
// be read, invalid_input (naming the file and the entry) for a malformed or hostile one: counts
// that overrun the file, negative or non-finite values, a sum without its counts, no entries.
ImportanceMatrix read_importance_matrix(const std::string& path);
// The same for a file's bytes held in memory (fuzzing); name stands for the path in errors.
ImportanceMatrix parse_importance_matrix(std::string_view bytes, const std::string& name);

// llama-quantize's --include-weights / --exclude-weights: keeps the entries whose name contains
// one of `include` (when given), then drops those containing one of `exclude`.
void filter_importance_matrix(ImportanceMatrix& m, const std::vector<std::string>& include,
                              const std::vector<std::string>& exclude);

}  // namespace loom
