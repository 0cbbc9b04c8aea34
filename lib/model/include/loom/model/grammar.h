// GBNF grammars (llama.cpp's --grammar syntax, docs/GRAMMAR.md) and the matcher that limits
// sampling to the tokens a grammar allows next.
//   The matcher is a pushdown recognizer over Unicode code points: each stack holds the elements
// still to match, its top always a character set; a stack left empty means the text so far is a
// whole match. A code point advances every stack whose top accepts it (the rest are dropped), and
// rule references on top expand into one stack per alternative.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "loom/model/sampler.h"

namespace loom {

class Tokenizer;

// A parsed grammar: rules of alternatives of elements, each alternative ending with an `end`.
// Groups and repetitions are lowered to generated rules as they are parsed.
struct Grammar {
  struct Element {
    enum class Kind : uint8_t { end, chars, rule };
    Kind kind = Kind::end;
    bool negated = false;                               // chars: matches what the ranges do not
    std::vector<std::pair<uint32_t, uint32_t>> ranges;  // chars: inclusive code point ranges
    uint32_t rule = 0;                                  // rule: its index in rules
    bool matches(uint32_t cp) const;
    bool matches_some(uint32_t lo, uint32_t hi) const;  // some code point in [lo, hi]
  };
  using Alternative = std::vector<Element>;
  std::vector<std::vector<Alternative>> rules;
  std::vector<std::string> names;  // per rule; generated ones are the defining rule's name and _N
  uint32_t root = 0;
};

// Parses GBNF text whose start rule is `root`. Throws Error(usage) "grammar: line L, column C:
// ..." for a syntax error, an undefined or twice-defined rule, a left-recursive rule, or a
// grammar over kMaxGrammarElements elements once repetitions are expanded.
Grammar parse_grammar(std::string_view text);
inline constexpr size_t kMaxGrammarElements = size_t(1) << 20;

// The GBNF text of a JSON Schema (llama-cli's --json-schema; docs/GRAMMAR.md lists the keywords
// it takes). Throws Error(usage) naming the place in the schema for what it cannot express.
std::string json_schema_to_grammar(std::string_view schema_json);

// The sampler's constraint (sampler.h) for one grammar over one vocabulary. A token is allowed
// when its text continues a match (control tokens as their text, as llama.cpp); an
// end-of-generation token when the text so far is a whole match. A token may end inside a
// UTF-8 sequence: its bytes wait for the next token's.
class GrammarMatcher final : public TokenConstraint {
 public:
  GrammarMatcher(std::shared_ptr<const Grammar> grammar, const Tokenizer& tok);
  bool allows(int32_t token) const override;
  void accept(int32_t token) override;
  void reset() override;
  // Every token's allows() at once; the masks of the last states seen are kept, since generation
  // comes back to the same state often (inside a string, between digits).
  void allowed_tokens(size_t n, std::vector<bool>& mask) const override;
  bool complete() const;  // the text accepted so far is a whole match

 private:
  using Stack = std::vector<const Grammar::Element*>;
  // Stacks after text: false when none survives or the bytes are not UTF-8.
  bool advance(std::vector<Stack>& stacks, std::string& pending, std::string_view bytes) const;

  std::shared_ptr<const Grammar> g_;
  std::vector<std::string> pieces_;  // per token its text
  std::vector<bool> eog_;
  std::vector<Stack> stacks_;
  std::string pending_;  // the bytes of an unfinished UTF-8 sequence
  mutable std::unordered_map<std::string, std::vector<bool>> masks_;  // by state (stacks_, pending_)
};

}  // namespace loom
