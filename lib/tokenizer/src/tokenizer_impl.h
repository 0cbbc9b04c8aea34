// Private state of loom::Tokenizer, shared by tokenizer.cpp (loading, special tokens,
// detokenizing), tokenizer_spm.cpp (SentencePiece merging) and tokenizer_bpe.cpp (byte-level BPE
// and its pre-tokenizer table). Token attributes mirror llama.cpp's llama_token_attr bits.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "loom/tokenizer/tokenizer.h"
#include "unicode.h"

namespace loom::tok {

enum Attr : uint32_t {
  kAttrUndefined = 0,
  kAttrUnknown = 1u << 0,
  kAttrUnused = 1u << 1,
  kAttrNormal = 1u << 2,
  kAttrControl = 1u << 3,
  kAttrUserDefined = 1u << 4,
  kAttrByte = 1u << 5,
  kAttrLstrip = 1u << 7,
  kAttrRstrip = 1u << 8,
};

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};
using StringMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

struct TokenData {
  std::string text;
  float score = 0;
  Tokenizer::TokenType type = Tokenizer::TokenType::normal;
  uint32_t attr = kAttrNormal;
};

// What tokenizer.ggml.pre selects for byte-level BPE.
struct BpePre {
  std::vector<std::string> regexes;
  bool ignore_merges = false;  // a word that is itself a token skips merging (llama3 family)
  bool clean_spaces = true;    // detokenize drops " ?", " !", " ." ... (clean_up_tokenization_spaces)
  bool add_bos = false;        // default for tokenizer.ggml.add_bos_token
  bool no_bos = false;         // the family has no BOS token at all (chatglm)
};
// Fills pre for a tokenizer.ggml.pre name; false when the name is unknown.
bool bpe_pre_for(std::string_view name, BpePre& pre);

// The best mergeable adjacent pair, for the SPM and BPE merge loops: leaf i holds the key of
// the pair (symbol i, the symbol after it), and a tournament tree keeps the best leaf at the
// root, the lower index winning ties. The same picks as llama.cpp's queue of bigrams with stale
// entries skipped, in O(log n) per merge without the stale entries.
template <typename Key, typename Better>
class PairQueue {
 public:
  void reset(int32_t n) {
    size_ = 1;
    while (size_ < n) size_ <<= 1;
    best_.assign(2 * static_cast<size_t>(size_), -1);
    keys_.resize(static_cast<size_t>(n));
  }
  void init(int32_t i, Key key) { keys_[i] = key, best_[size_ + i] = i; }  // before build()
  void build() {
    for (int32_t p = size_ - 1; p >= 1; --p) best_[p] = pick(best_[2 * p], best_[2 * p + 1]);
  }
  void set(int32_t i, Key key) { init(i, key), fix(i); }
  void clear(int32_t i) { best_[size_ + i] = -1, fix(i); }
  int32_t top() const { return best_[1]; }  // -1 when no pair can merge
  const Key& key(int32_t i) const { return keys_[i]; }

 private:
  void fix(int32_t i) {
    for (int32_t p = (size_ + i) >> 1; p >= 1; p >>= 1) best_[p] = pick(best_[2 * p], best_[2 * p + 1]);
  }
  int32_t pick(int32_t a, int32_t b) const {  // a's leaves all precede b's
    if (a < 0) return b;
    if (b < 0) return a;
    return Better{}(keys_[b], keys_[a]) ? b : a;
  }
  int32_t size_ = 1;
  std::vector<int32_t> best_;
  std::vector<Key> keys_;
};

// Byte trie over special-token texts, to learn which ones occur in a text in one pass.
class SpecialTrie {
 public:
  void insert(std::string_view text, int32_t slot);
  // Calls found(slot) for every special text occurring anywhere in text (maybe repeatedly).
  void scan(std::string_view text, const std::function<void(int32_t)>& found) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> kids;  // sorted by byte
    int32_t slot = -1;
  };
  int32_t child(int32_t node, uint8_t byte) const;
  std::vector<Node> nodes_{1};
};

}  // namespace loom::tok

namespace loom {

struct Tokenizer::Impl {
  Kind kind = Kind::spm;
  std::string pre_name;
  std::vector<tok::TokenData> vocab;
  tok::StringMap token_to_id;
  tok::StringMap bpe_ranks;  // "left right" -> merge rank
  int32_t bos = -1, eos = -1, eot = -1, eom = -1, unk = -1, pad = -1;
  bool add_bos = false, add_eos = false, add_space_prefix = false;
  bool ignore_merges = false, clean_spaces = false;
  bool spm_word_split = false;              // SPM: no token has U+2581 after another character
  std::vector<bool> eog;                    // per id
  std::vector<int32_t> special;             // control / user-defined / unknown ids, longest text first
  tok::SpecialTrie special_trie;            // slots index `special`
  std::unique_ptr<unicode::RegexSplitter> splitter;  // BPE only
  std::vector<std::string> pieces;          // token_to_piece with specials rendered
  std::vector<int32_t> byte_tokens;         // SPM byte fallback per byte (-1: none)

  int32_t find(std::string_view text) const {
    auto it = token_to_id.find(text);
    return it == token_to_id.end() ? -1 : it->second;
  }
  bool has_attr(int32_t id, uint32_t a) const { return (vocab[id].attr & a) != 0; }

  // One raw-text fragment (no special tokens inside) to ids, appended to out.
  void tokenize_spm(std::string_view text, std::vector<int32_t>& out) const;  // tokenizer_spm.cpp
  void tokenize_bpe(std::string_view text, std::vector<int32_t>& out) const;  // tokenizer_bpe.cpp
  // The rendering of one token (special: control/unknown tokens render as their text).
  std::string render_piece(int32_t id, bool special) const;
};

}  // namespace loom
