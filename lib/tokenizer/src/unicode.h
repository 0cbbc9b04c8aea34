// UTF-8 and Unicode helpers for the tokenizers, with llama.cpp's exact conventions: its lenient
// UTF-8 decoder (each bad byte becomes U+FFFD), GPT-2's byte-to-unicode alphabet, and a
// PCRE2-backed splitter that applies a list of pre-tokenizer regexes in sequence.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace loom::unicode {

// Bytes in the UTF-8 sequence a lead byte starts (1 for continuation and invalid bytes).
size_t utf8_len(uint8_t lead);
// Decodes like llama.cpp: overlong forms and surrogates pass, any malformed byte becomes U+FFFD.
std::vector<uint32_t> decode_utf8(std::string_view text);
// Appends cpt as UTF-8 (surrogates encoded as is; values past U+10FFFF become U+FFFD).
void append_utf8(std::string& out, uint32_t cpt);
// The White_Space property (what llama.cpp calls whitespace).
bool is_whitespace(uint32_t cpt);

// GPT-2 byte-level alphabet: every byte is one printable codepoint ('Ġ' for space).
const std::string& byte_to_unicode(uint8_t byte);
// The byte a GPT-2 alphabet codepoint stands for, or -1.
int unicode_to_byte(uint32_t cpt);

// Splits text into pre-tokenizer words: each regex in turn splits every current piece into
// its matches and the unmatched gaps between them (llama.cpp's unicode_regex_split). The
// regexes see non-ASCII whitespace as U+000B, as llama.cpp's matchers do; \s is ASCII-only.
class RegexSplitter {
 public:
  explicit RegexSplitter(const std::vector<std::string>& patterns);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Piece lengths in codepoints of cpts, summing to cpts.size().
  std::vector<size_t> split(const std::vector<uint32_t>& cpts) const;

 private:
  struct Compiled;
  std::vector<std::unique_ptr<Compiled>> regexes_;
};

}  // namespace loom::unicode
