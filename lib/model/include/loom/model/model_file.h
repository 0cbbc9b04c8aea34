// Making model files from scratch: random-init weights (N(0, 0.02) from a seeded, portable
// RNG), the per-tensor type rule for a requested --type, a built-in byte-level vocabulary or
// one grafted from another GGUF, and header-only files for planning. Backs `loom-gguf new`.
#pragma once

#include <cstdint>
#include <random>
#include <string>

#include "loom/core/dtype.h"
#include "loom/model/arch.h"

namespace loom::gguf {
class File;
class Writer;
}  // namespace loom::gguf

namespace loom {

struct NewModelOptions {
  HParams hparams;           // n_vocab is replaced by the vocab file's token count when vocab_path is set
  DType type = DType::F32;   // weight matrices; norms, biases and the MoE router stay F32
  std::string vocab_path;    // graft every tokenizer.* key from this GGUF (empty: byte-level vocab)
  bool header_only = false;  // metadata + tensor infos; data section a sparse hole
  uint64_t seed = 42;
  float norm_jitter = 0.0f;  // norm weights 1 + norm_jitter N(0, 1) instead of 1 (tests that tell rows apart)
  std::string name;          // general.name (empty: "<arch>")
  std::string output;        // the file to write (through AtomicFile)
};

struct NewModelResult {
  HParams hparams;
  int64_t n_params = 0;
  int64_t n_tensors = 0;
  size_t tensor_bytes = 0;  // without padding
  size_t file_size = 0;
};

// Builds and writes the model described by opts. Throws usage for a --type that cannot be used,
// invalid_input for bad hyper-parameters or vocab file, io when the output cannot be written.
NewModelResult make_random_model(const NewModelOptions& opts);

// The type a tensor gets when `requested` is asked for. Vectors (norms, biases) and
// ffn_gate_inp stay F32. q4_k follows llama.cpp's Q4_K_M mix: output.weight (and a tied
// token_embd), and attn_v / ffn_down(_exps) in the layers use_more_bits picks, get q6_k. A
// matrix whose rows do not fit the block size falls back: q4_k -> q4_0, q6_k -> q8_0, then f16.
DType tensor_type_for(const TensorSpec& t, const HParams& hp, DType requested);
// general.file_type for a requested type (0 F32, 1 F16, 2 Q4_0, 7 Q8_0, 15 Q4_K_M, 18 Q6_K, 32 BF16).
uint32_t file_type_for(DType requested);

// Byte-level BPE vocabulary of n_vocab tokens (tokenizer.ggml.model "gpt2", no merges):
// id b < 256 is byte b in GPT-2's byte-to-unicode alphabet, 256 is <|endoftext|> (BOS and EOS),
// the rest are <|extra_N|> fillers of type unused. Needs n_vocab >= 257.
void write_byte_vocab(gguf::Writer& w, int64_t n_vocab);
// Copies every tokenizer.* key of vocab into w; returns the number of tokens.
int64_t graft_vocab(gguf::Writer& w, const gguf::File& vocab);
// GPT-2's byte-to-unicode mapping: the UTF-8 text standing for byte b in byte-level BPE vocabs.
std::string byte_to_unicode(uint8_t b);

// Deterministic N(0, 1) samples: mt19937_64 + Box-Muller (identical on every platform/libstdc++).
class NormalRng {
 public:
  explicit NormalRng(uint64_t seed);
  float next();

 private:
  std::mt19937_64 rng_;  // its output sequence is fixed by the C++ standard
  bool have_spare_ = false;
  float spare_ = 0;
};

}  // namespace loom
