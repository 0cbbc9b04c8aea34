// libFuzzer entry point: arbitrary bytes as a JSON Schema (loom-run -j) or else a GBNF grammar
// (loom-run --grammar), then, when one
// parses, the bytes after its first NUL fed one byte token at a time through its matcher, with
// every token of a small vocabulary asked at each step. Only loom::Error may come out of a bad
// grammar; a crash, a hang or another exception is a bug.
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include "loom/core/error.h"
#include "loom/model/grammar.h"
#include "loom/tokenizer/tokenizer.h"

namespace {

// <unk> <s> </s>, the 256 byte tokens, and a few pieces of several characters
const loom::Tokenizer& vocab() {
  static const std::unique_ptr<loom::Tokenizer> tok = [] {
    loom::Tokenizer::Spec spec;
    spec.kind = loom::Tokenizer::Kind::spm;
    auto add = [&](std::string text, loom::Tokenizer::TokenType type) {
      spec.tokens.push_back(std::move(text));
      spec.types.push_back(type);
    };
    add("<unk>", loom::Tokenizer::TokenType::unknown);
    add("<s>", loom::Tokenizer::TokenType::control);
    add("</s>", loom::Tokenizer::TokenType::control);
    for (int b = 0; b < 256; ++b) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", b);
      add(name, loom::Tokenizer::TokenType::byte);
    }
    for (const char* piece : {"{\"", "\":", "true", "\xC3\xA9",
                              "\xE2\x96\x81"
                              "a",
                              "\xF0\x9F\x98"})
      add(piece, loom::Tokenizer::TokenType::normal);
    return loom::Tokenizer::from_spec(std::move(spec));
  }();
  return *tok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t nul = in.find('\0');
  const std::string_view text = in.substr(0, nul), feed = nul == std::string_view::npos ? "" : in.substr(nul + 1);
  std::shared_ptr<const loom::Grammar> g;
  try {  // the text as a JSON Schema first (-j), else as GBNF
    g = std::make_shared<const loom::Grammar>(loom::parse_grammar(loom::json_schema_to_grammar(text)));
  } catch (const loom::Error&) {
  }
  if (!g) try {
      g = std::make_shared<const loom::Grammar>(loom::parse_grammar(text));
    } catch (const loom::Error&) {
      return 0;
    }
  const loom::Tokenizer& tok = vocab();
  try {
    loom::GrammarMatcher m(g, tok);
    for (unsigned char b : feed) {
      int allowed = 0;
      for (int32_t t = 0; t < tok.n_vocab(); ++t) allowed += m.allows(t) ? 1 : 0;
      if (m.allows(tok.eos()) != m.complete()) std::abort();  // the end is allowed exactly at a whole match
      const int32_t id = 3 + b;
      if (!m.allows(id)) break;
      m.accept(id);
      (void)allowed;
    }
  } catch (const loom::Error& e) {
    if (e.kind() != loom::ErrorKind::usage) std::abort();  // only "too ambiguous" may stop a matcher
  }
  return 0;
}
