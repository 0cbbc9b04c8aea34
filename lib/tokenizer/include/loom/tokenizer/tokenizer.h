// Tokenizers read from GGUF metadata, matching llama.cpp id for id: SentencePiece-style (SPM,
// "llama": score-driven bigram merging with byte fallback) and byte-level BPE ("gpt2": merge
// ranks over GPT-2's byte-to-unicode alphabet, pre-split by the regexes tokenizer.ggml.pre picks).
// Special (control / user-defined) tokens are split out first when asked to.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace loom::gguf {
class File;
}

namespace loom {

class Tokenizer {
 public:
  enum class Kind { spm, bpe };
  // tokenizer.ggml.token_type values.
  enum class TokenType : int32_t {
    undefined = 0, normal = 1, unknown = 2, control = 3, user_defined = 4, unused = 5, byte = 6
  };

  // Everything a tokenizer is built from (what GGUF holds, or a hand-made vocabulary in tests).
  // Unset optionals take llama.cpp's defaults for the kind (SPM: BOS 1, EOS 2, UNK 0, add BOS).
  struct Spec {
    Kind kind = Kind::spm;
    std::vector<std::string> tokens;
    std::vector<float> scores;          // SPM merge priorities (empty: all 0)
    std::vector<TokenType> types;       // empty: all normal
    std::vector<std::string> merges;    // BPE merges "a b", highest priority first
    std::string pre = "default";        // BPE pre-tokenizer name (tokenizer.ggml.pre)
    std::string name;                   // general.name (a few vocabs get per-model token rules)
    std::optional<int32_t> bos_id, eos_id, eot_id, eom_id, unk_id, pad_id;
    std::optional<bool> add_bos, add_eos, add_space_prefix;
  };

  // Reads tokenizer.ggml.* keys; throws loom::Error(invalid_input) naming what is missing or wrong.
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::File& file);
  // Builds from an explicit spec (validated the same way).
  static std::unique_ptr<Tokenizer> from_spec(Spec spec);
  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Text (any bytes; invalid UTF-8 is tolerated) to ids. add_special: BOS/EOS per the vocab's
  // rules; parse_special: control token strings in the text become their ids (user-defined
  // tokens always do, as in llama.cpp and HF tokenizers).
  std::vector<int32_t> tokenize(std::string_view text, bool add_special, bool parse_special) const;
  // The bytes one token stands for (special tokens render as their text).
  std::string token_to_piece(int32_t id) const;
  // Ids back to text as llama.cpp's llama_detokenize: the first piece loses one leading space
  // when the vocab adds a space prefix (SPM), and BPE vocabs with clean-up drop the space in
  // " ," " ." " 's" and the like. remove_special: control tokens are left out, and so are a
  // leading BOS (then the prefix space stays) and a trailing EOS when the vocab adds them;
  // otherwise control tokens render as their text.
  std::string detokenize(std::span<const int32_t> ids, bool remove_special = false) const;

  Kind kind() const;
  const std::string& pre() const;  // BPE pre-tokenizer name in use
  int32_t n_vocab() const;
  int32_t bos() const;  // -1 when absent
  int32_t eos() const;
  int32_t eot() const;
  int32_t unk() const;
  int32_t pad() const;
  bool add_bos() const;
  bool add_eos() const;
  bool is_eog(int32_t id) const;      // end of generation: EOS, EOT, EOM and the like
  bool is_control(int32_t id) const;  // control tokens (BOS, EOS, <|im_start|>, ...)
  TokenType token_type(int32_t id) const;
  const std::string& token_text(int32_t id) const;  // the vocab string, unmapped
  int32_t find_token(std::string_view text) const;  // id of an exact vocab string, -1 if none

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom
