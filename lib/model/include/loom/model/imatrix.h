// Importance matrices (`loom-gguf quantize --imatrix FILE`): per weight matrix, the mean square of
// the activations each of its columns met over a calibration text, as llama-imatrix writes them.
// Both of its formats are read: the GGUF one (`<tensor>.in_sum2` and `<tensor>.counts` tensors,
// `imatrix.*` keys) and the older binary `.dat` one. ImatrixCollector computes them while a
// session runs (`loom-run --perplexity --imatrix-out FILE`). docs/QUANTS.md has the details.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace loom {

class Context;
class Graph;
struct Tensor;

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

// What a step's graph exposes for one product with a model weight: a dense product's column sums
// of squares (`stat`, F32 {1, K}), or an expert stack's input and expert ids (`x` {K, n, T},
// `ids` I32 {n_used, T}), all marked as graph outputs.
struct ImatrixProbe {
  std::string weight;
  int64_t n_mat = 1;  // experts in the stack
  Tensor* stat = nullptr;
  Tensor* x = nullptr;
  Tensor* ids = nullptr;
};

// llama-imatrix's statistics, gathered while a session runs (SessionParams::imatrix): per weight
// matrix the sums of the squared activations each column met and how many (per expert).
class ImatrixCollector {
 public:
  // process_output: also output.weight (llama-imatrix leaves it out unless asked).
  explicit ImatrixCollector(bool process_output = false) : process_output_(process_output) {}
  // Appends to g, for each product of a layer's weight (a blk.* .weight leaf; output.weight with
  // process_output) with an F32 input, the nodes that reduce the input to sums of squares per
  // column (or keep an expert stack's input and ids for the host), flagged as outputs.
  std::vector<ImatrixProbe> probe(Context& c, Graph& g) const;
  // After a compute of the graph those probes came from: adds its activations.
  void accumulate(const std::vector<ImatrixProbe>& probes);
  size_t n_entries() const { return entries_.size(); }
  // The means (sums / counts; 1 where a matrix saw nothing), as read_importance_matrix gives them.
  ImportanceMatrix result() const;
  // llama-imatrix's GGUF: NAME.in_sum2 / NAME.counts, general.type imatrix, imatrix.datasets,
  // imatrix.chunk_count, imatrix.chunk_size; written atomically.
  void write(const std::string& path, const std::vector<std::string>& datasets, int64_t chunk_count,
             int64_t chunk_size) const;

 private:
  struct Entry {
    int64_t n_col = 0;
    std::vector<double> sums;     // n_col per matrix
    std::vector<int64_t> counts;  // per matrix
  };
  bool process_output_;
  std::map<std::string, Entry> entries_;
};

}  // namespace loom
