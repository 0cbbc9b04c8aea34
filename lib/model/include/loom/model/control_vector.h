// Control vectors as llama.cpp reads them: a GGUF of F32 1-D tensors "direction.N" (N >= 1, n_embd
// values each) added to the output of layer N. Several files add up, each times its scale, and
// only the layers in [layer_start, layer_end] (inclusive; 0 = 1 and n_layer) take theirs.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace loom {

struct ControlVectorSpec {
  std::string path;
  float scale = 1.0f;
};

struct ControlVectorOptions {
  std::vector<ControlVectorSpec> files;
  int64_t layer_start = 0;  // 0: 1
  int64_t layer_end = 0;    // 0: n_layer
};

// The summed directions: data[(N - 1) * n_embd, N * n_embd) for layer N (zeros where no file has
// one); has[N] whether any file had direction.N. Throws invalid_input naming the file and tensor.
struct ControlVectorData {
  int64_t n_embd = 0;
  std::vector<float> data;
  std::vector<bool> has;
};
ControlVectorData load_control_vectors(const std::vector<ControlVectorSpec>& files, int64_t n_embd);

// `loom-gguf new-control-vector`: random directions N(0, sigma^2) for layers 1 .. n_layer - 1 of
// the model at base. Throws usage for bad options, io when the output cannot be written.
void make_random_control_vector(const std::string& base, const std::string& output, float sigma, uint64_t seed);

}  // namespace loom
