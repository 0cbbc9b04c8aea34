// A byte-level BPE trainer for models made from scratch: splits the text with GPT-2's
// pre-tokenizer regex, then repeatedly merges the most frequent adjacent pair (ties: the pair
// of smaller ids) until the vocabulary has the requested size. Deterministic. The result is a
// `gpt2` tokenizer (tokens in GPT-2's byte alphabet + ranked merges) that lib/model's BPE
// tokenizer and llama.cpp read.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "loom/tokenizer/tokenizer.h"

namespace loom::gguf {
class Writer;
}

namespace loom::train {

struct BpeVocab {
  std::vector<std::string> tokens;  // 256 bytes, <|endoftext|> (id 256), then merged tokens
  std::vector<int32_t> types;       // tokenizer.ggml.token_type values
  std::vector<std::string> merges;  // "left right", rank order
  int32_t eos = 256;                // <|endoftext|>: BOS and EOS
};

// vocab_size counts every token (>= 257: the bytes and <|endoftext|>). A text with too few
// repeated pairs yields a smaller vocabulary (no merge of pairs seen once).
BpeVocab train_bpe(std::string_view text, int64_t vocab_size);

// tokenizer.* keys (model gpt2, pre gpt-2, no BOS added: training text has none).
void write_bpe_vocab(gguf::Writer& w, const BpeVocab& v);
Tokenizer::Spec bpe_spec(const BpeVocab& v);

}  // namespace loom::train
