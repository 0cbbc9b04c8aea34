// LoRA adapters as llama.cpp reads them: a GGUF with general.type "adapter", adapter.type "lora",
// the base model's general.architecture and adapter.lora.alpha, holding for each adapted matrix W
// (ne {n_in, n_out}) the pair "<W's name>.lora_a" {n_in, r} and "<W's name>.lora_b" {r, n_out}.
// A product with W becomes W x + s B (A x), s = scale * alpha / r (scale alone when alpha is 0).
#pragma once

#include <span>
#include <string>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/graph/ops.h"

namespace loom {

// One --lora / --lora-scaled: the adapter file and its user scale.
struct LoraAdapterSpec {
  std::string path;
  float scale = 1.0f;
};

// One adapter's pair for the matrix `base`, with its final factor s.
struct LoraLink {
  const Tensor* base = nullptr;
  Tensor* a = nullptr;  // {n_in, r}
  Tensor* b = nullptr;  // {r, n_out}
  float scale = 1.0f;
};

// `loom-gguf new-lora`: a random adapter for a base model's matrices of the given roles ("attn_q",
// "attn_k", "attn_v", "attn_qkv", "attn_output", "ffn_gate", "ffn_up", "ffn_down", "output"),
// A and B drawn N(0, sigma^2) (both nonzero, so the adapter changes the model's outputs).
struct NewLoraOptions {
  std::string base;    // the model file: its architecture and matrix shapes
  std::string output;  // written through a temporary file and a rename
  std::vector<std::string> targets = {"attn_q", "attn_v"};
  int64_t rank = 8;
  float alpha = 16.0f;      // adapter.lora.alpha (0: the user scale alone)
  DType type = DType::F32;  // f32, f16 or bf16
  float sigma = 0.02f;
  uint64_t seed = 42;
};
struct NewLoraResult {
  int64_t n_pairs = 0;
  size_t file_size = 0;
};
// Throws usage for bad options (an unknown role, a role the model lacks, rank out of 1..n_in),
// invalid_input for an unreadable base, io when the output cannot be written.
NewLoraResult make_random_lora(const NewLoraOptions& opts);

// y (= w x) plus the delta of every link of w, in the order the adapters were given.
Tensor* add_lora(Context& c, std::span<const LoraLink> links, const Tensor* w, Tensor* x, Tensor* y);
// w x with its links' deltas.
inline Tensor* lora_mm(Context& c, std::span<const LoraLink> links, Tensor* w, Tensor* x) {
  return add_lora(c, links, w, x, ops::mul_mat(c, w, x));
}

}  // namespace loom
