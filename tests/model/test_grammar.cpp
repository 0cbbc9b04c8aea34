// GBNF grammars: the parser's syntax and errors, the matcher over a byte vocabulary (which texts
// a grammar accepts, UTF-8 split across tokens, end-of-generation), and the sampler under one.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/model/grammar.h"
#include "loom/model/sampler.h"
#include "loom/tokenizer/tokenizer.h"

namespace {

using loom::Grammar;
using loom::GrammarMatcher;
using loom::Tokenizer;

// <unk> <s> </s>, then one token per byte (SPM byte fallback), then a few longer pieces.
std::unique_ptr<Tokenizer> byte_vocab() {
  Tokenizer::Spec spec;
  spec.kind = Tokenizer::Kind::spm;
  auto add = [&](std::string text, Tokenizer::TokenType type) {
    spec.tokens.push_back(std::move(text));
    spec.types.push_back(type);
  };
  add("<unk>", Tokenizer::TokenType::unknown);
  add("<s>", Tokenizer::TokenType::control);
  add("</s>", Tokenizer::TokenType::control);
  for (int b = 0; b < 256; ++b) add(fmt::format("<0x{:02X}>", b), Tokenizer::TokenType::byte);
  for (const char* piece : {"yes", "no", "ye", "s!",
                            "\xE2\x96\x81"
                            "a"})
    add(piece, Tokenizer::TokenType::normal);
  return Tokenizer::from_spec(std::move(spec));
}
constexpr int32_t kEos = 2;
int32_t byte_token(unsigned char b) { return 3 + b; }
constexpr int32_t kYes = 259, kNo = 260, kYe = 261, kSBang = 262, kSpaceA = 263;

const Tokenizer& vocab() {
  static const std::unique_ptr<Tokenizer> tok = byte_vocab();
  return *tok;
}

std::shared_ptr<const Grammar> grammar(const std::string& text) {
  return std::make_shared<const Grammar>(loom::parse_grammar(text));
}

// Whether the grammar accepts text as a whole match, fed one byte token at a time.
bool accepts(const std::string& g, const std::string& text) {
  GrammarMatcher m(grammar(g), vocab());
  for (unsigned char b : text) {
    if (!m.allows(byte_token(b))) return false;
    m.accept(byte_token(b));
  }
  return m.complete() && m.allows(kEos);
}

// The message of the usage error f throws ("" and a failure when it throws none).
template <class F>
std::string usage_error(F f) {
  try {
    f();
  } catch (const loom::Error& e) {
    EXPECT_EQ(e.kind(), loom::ErrorKind::usage) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(Grammar, LiteralsAndAlternatives) {
  const std::string g = R"(root ::= "yes" | "no" | "")";
  EXPECT_TRUE(accepts(g, "yes"));
  EXPECT_TRUE(accepts(g, "no"));
  EXPECT_TRUE(accepts(g, ""));
  EXPECT_FALSE(accepts(g, "ye"));
  EXPECT_FALSE(accepts(g, "yes!"));
  EXPECT_FALSE(accepts(g, "No"));
}

TEST(Grammar, ClassesRangesAnyAndEscapes) {
  EXPECT_TRUE(accepts(R"(root ::= [a-c0-9_] [^a-z] . "\n\t\x41\u00e9")", "b#\x7f\n\tA\xC3\xA9"));
  EXPECT_FALSE(accepts(R"(root ::= [a-c0-9_])", "d"));
  EXPECT_FALSE(accepts(R"(root ::= [^a-z])", "q"));
  EXPECT_TRUE(accepts(R"(root ::= [\]\-\\]+)", "]-\\"));
  EXPECT_TRUE(
      accepts("root ::= \"\xC3\xA9t\xC3\xA9\" [\xC3\xA0-\xC3\xBF]", "\xC3\xA9t\xC3\xA9\xC3\xBC"));  // UTF-8 in the text
  EXPECT_TRUE(accepts(R"(root ::= [\U0001F600-\U0001F64F])", "\xF0\x9F\x98\x80"));
  EXPECT_FALSE(accepts(R"(root ::= [\U0001F600-\U0001F64F])", "\xF0\x9F\x99\x90"));
}

TEST(Grammar, Repetitions) {
  auto n_of = [](const std::string& g, int n) { return accepts(g, std::string((size_t)n, 'a')); };
  for (int n = 0; n < 6; ++n) {
    EXPECT_EQ(n_of(R"(root ::= "a"*)", n), true) << n;
    EXPECT_EQ(n_of(R"(root ::= "a"+)", n), n >= 1) << n;
    EXPECT_EQ(n_of(R"(root ::= "a"?)", n), n <= 1) << n;
    EXPECT_EQ(n_of(R"(root ::= "a"{2})", n), n == 2) << n;
    EXPECT_EQ(n_of(R"(root ::= "a"{2,})", n), n >= 2) << n;
    EXPECT_EQ(n_of(R"(root ::= "a"{1,3})", n), n >= 1 && n <= 3) << n;
    EXPECT_EQ(n_of(R"(root ::= "a"{,2})", n), n <= 2) << n;
    EXPECT_EQ(n_of(R"(root ::= "a" { 1 , 2 })", n), n >= 1 && n <= 2) << n;
  }
  // a repetition applies to the whole last literal, group or class
  EXPECT_TRUE(accepts(R"(root ::= "ab"{2} ("c" | "d")+ [x-y]*)", "ababcdcxy"));
  EXPECT_FALSE(accepts(R"(root ::= "ab"{2})", "abb"));
}

TEST(Grammar, RulesGroupsCommentsAndLines) {
  const std::string json = R"(# a JSON subset
root   ::= value
value  ::= object | array | string | number | ("true" | "false" | "null")
object ::= "{" ws ( string ws ":" ws value ws ( "," ws string ws ":" ws value ws )* )? "}"
array  ::= "[" ws ( value ws ("," ws value ws)* )? "]"   # nested rules recurse
string ::= "\"" ( [^"\\] | "\\" ["\\/bfnrt] )* "\""
number ::= "-"? [0-9]+ ("." [0-9]+)?
ws ::= [ \t\n]*
)";
  EXPECT_TRUE(accepts(json, R"({"a": [1, -2.5, {"b": "c\"d"}, [], true], "e" : null})"));
  EXPECT_TRUE(accepts(json, "[\n 1,\n 2\n]"));
  EXPECT_FALSE(accepts(json, R"({"a": [1, 2})"));
  EXPECT_FALSE(accepts(json, R"({a: 1})"));
  // an alternative goes on past a line end after '|' and inside parentheses
  EXPECT_TRUE(accepts("root ::= \"x\" |\n  \"y\"\nother ::= (\n \"z\"\n)", "y"));
}

TEST(Grammar, ErrorsNameTheLineAndColumn) {
  const std::pair<const char*, const char*> cases[] = {
      {"root ::= \"a", "line 1, column 10: unterminated string"},
      {"root ::= [a-", "unterminated character class"},
      {"root = \"a\"", "expected '::='"},
      {"root ::= foo", "line 1, column 10: rule 'foo' is not defined"},
      {"root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1: rule 'root' is defined twice"},
      {"a ::= \"x\"", "no rule named 'root'"},
      {"", "the grammar has no rules"},
      {"  # only a comment\n", "the grammar has no rules"},
      {"root ::= root \"a\"", "rule 'root' is left-recursive"},
      {"root ::= x \"a\"\nx ::= \"b\"? root", "left-recursive"},
      {"root ::= *", "needs something before it"},
      {"root ::= \"a\"{3,1}", "below its minimum"},
      {"root ::= \"a\"{1000000}", "count over"},
      {"root ::= \"a\"{2", "without its '}'"},
      {"root ::= \"abcdefghijk\"{100000}", "too large"},
      {"root ::= \"\\q\"", "unknown escape"},
      {"root ::= \"\\x4\"", "expected 2 hex digits"},
      {"root ::= \"\\U00110000\"", "beyond U+10FFFF"},
      {"root ::= [z-a]", "runs backwards"},
      {"root ::= \"\xff\"", "not UTF-8"},
      {"root ::= (\"a\"", "without its ')'"},
      {"root ::= \"a\" )", "unexpected ')'"},
      {"::= \"a\"", "expected a rule name"},
  };
  for (const auto& [text, want] : cases) {
    const std::string error = usage_error([&] { loom::parse_grammar(text); });
    EXPECT_NE(error.find(want), std::string::npos) << text << " -> " << error;
    EXPECT_EQ(error.rfind("grammar: ", 0), 0u) << error;
  }
}

TEST(Grammar, AnAmbiguousGrammarIsRefusedNotExpandedForever) {
  // a chain of 5000 optional nothings: every position could be any of them
  const auto g = grammar(R"(root ::= ("a"?){0,5000} "b")");
  try {
    GrammarMatcher m(g, vocab());
    ADD_FAILURE() << "expanded";
  } catch (const loom::Error& e) {
    EXPECT_NE(std::string(e.what()).find("too ambiguous"), std::string::npos) << e.what();
  }
}

TEST(GrammarMatcher, TokensOfSeveralCharactersAndTheEnd) {
  GrammarMatcher m(grammar(R"(root ::= "yes" | "no" | "ye" "s!")"), vocab());
  EXPECT_TRUE(m.allows(kYes));
  EXPECT_TRUE(m.allows(kNo));
  EXPECT_TRUE(m.allows(kYe));
  EXPECT_FALSE(m.allows(kSBang));
  EXPECT_FALSE(m.allows(kSpaceA));  // " a": a space the grammar does not take
  EXPECT_FALSE(m.allows(kEos));     // nothing matched yet
  EXPECT_FALSE(m.allows(1));        // <s> renders as its text
  m.accept(kYe);
  EXPECT_TRUE(m.allows(kSBang));
  EXPECT_TRUE(m.allows(byte_token('s')));
  EXPECT_FALSE(m.allows(kEos));
  m.accept(byte_token('s'));
  EXPECT_TRUE(m.complete());
  EXPECT_TRUE(m.allows(kEos));             // "yes" is a whole match ...
  EXPECT_TRUE(m.allows(byte_token('!')));  // ... and so is "yes!"
  m.accept(byte_token('!'));
  EXPECT_TRUE(m.allows(kEos));
  for (int32_t t = 0; t < vocab().n_vocab(); ++t) {
    if (t != kEos) {
      EXPECT_FALSE(m.allows(t)) << t;  // only the end is left
    }
  }
  m.reset();
  EXPECT_FALSE(m.allows(kEos));
  EXPECT_TRUE(m.allows(kNo));
}

TEST(GrammarMatcher, CachedMasksEqualEachTokensAnswer) {
  GrammarMatcher m(grammar(R"(root ::= "[" ( [0-9]+ ("," [0-9]+)* )? "]" | "\u00e9"+)"), vocab());
  const size_t n = (size_t)vocab().n_vocab();
  std::vector<bool> mask, again;
  for (unsigned char b : std::string("[12,3,45]")) {
    m.allowed_tokens(n, mask);
    m.allowed_tokens(n, again);  // the second from the cache
    ASSERT_EQ(mask, again);
    for (size_t t = 0; t < n; ++t) ASSERT_EQ(mask[t], m.allows((int32_t)t)) << "token " << t << " before " << b;
    m.accept(byte_token(b));
  }
  m.reset();  // a state seen before ("[" at the start) answers as it did
  m.allowed_tokens(n, mask);
  EXPECT_TRUE(mask[byte_token('[')]);
  EXPECT_TRUE(mask[byte_token(0xC3)]);
  EXPECT_FALSE(mask[byte_token(']')]);
  m.accept(byte_token(0xC3));  // pending bytes are part of the state
  m.allowed_tokens(n, mask);
  EXPECT_TRUE(mask[byte_token(0xA9)]);
  EXPECT_FALSE(mask[byte_token('[')]);
}

TEST(GrammarMatcher, Utf8SplitAcrossTokens) {
  GrammarMatcher m(grammar("root ::= [\xC3\xA0-\xC3\xBF]+"), vocab());  // U+00E0..U+00FF
  EXPECT_TRUE(m.allows(byte_token(0xC3)));                              // may become U+00C0..U+00FF
  EXPECT_FALSE(m.allows(byte_token(0xC2)));                             // U+0080..U+00BF: none in the class
  EXPECT_FALSE(m.allows(byte_token(0xC0)));                             // never UTF-8 (overlong)
  EXPECT_FALSE(m.allows(byte_token(0xA9)));                             // a continuation byte first
  m.accept(byte_token(0xC3));
  EXPECT_FALSE(m.complete());
  EXPECT_FALSE(m.allows(kEos));
  EXPECT_FALSE(m.allows(byte_token('a')));
  EXPECT_FALSE(m.allows(byte_token(0x80)));  // U+00C0: outside the class
  EXPECT_TRUE(m.allows(byte_token(0xA9)));   // é
  m.accept(byte_token(0xA9));
  EXPECT_TRUE(m.allows(kEos));
  // overlong and surrogate encodings are not characters, whatever the class
  GrammarMatcher any(grammar("root ::= .+"), vocab());
  any.accept(byte_token(0xE0));
  EXPECT_FALSE(any.allows(byte_token(0x80)));  // E0 80 ..: an overlong ASCII character
  EXPECT_TRUE(any.allows(byte_token(0xA0)));
  GrammarMatcher sur(grammar("root ::= .+"), vocab());
  sur.accept(byte_token(0xED));
  sur.accept(byte_token(0x9F));
  EXPECT_TRUE(sur.allows(byte_token(0xBF)));  // U+D7FF
  GrammarMatcher sur2(grammar("root ::= .+"), vocab());
  sur2.accept(byte_token(0xED));
  EXPECT_FALSE(sur2.allows(byte_token(0xA0)));  // ED A0 ..: a surrogate
}

TEST(GrammarMatcher, SamplerTakesTheBestAllowedToken) {
  loom::SamplerParams p;
  p.temp = 0;  // greedy
  loom::Sampler s(p);
  s.set_constraint(std::make_shared<GrammarMatcher>(grammar(R"(root ::= "no")"), vocab()));
  std::vector<float> logits((size_t)vocab().n_vocab(), 0.0f);
  logits[kYes] = 10;  // the model's favourite is not allowed
  logits[kNo] = 1;
  logits[byte_token('n')] = 2;
  EXPECT_EQ(s.sample(logits), byte_token('n'));
  EXPECT_EQ(s.sample(logits), byte_token('o'));  // the only token left but the end
  logits[kEos] = -5;
  EXPECT_EQ(s.sample(logits), kEos);
  // the next reply starts the grammar over
  s.reset_constraint();
  EXPECT_EQ(s.sample(logits), byte_token('n'));
}

TEST(GrammarMatcher, SampledDistributionHoldsOnlyAllowedTokens) {
  loom::SamplerParams p;
  p.temp = 1;
  p.top_k = 0;
  p.top_p = 1;
  p.min_p = 0;
  loom::Sampler s(p);
  s.set_constraint(std::make_shared<GrammarMatcher>(grammar(R"(root ::= [ab] "c")"), vocab()));
  std::vector<float> logits((size_t)vocab().n_vocab(), 0.0f);
  logits[byte_token('a')] = std::log(3.0f);
  const auto dist = s.distribution(logits);
  double pa = 0, pb = 0, rest = 0;
  for (const auto& c : dist) (c.id == byte_token('a') ? pa : c.id == byte_token('b') ? pb : rest) += c.p;
  EXPECT_NEAR(pa, 0.75, 1e-6);
  EXPECT_NEAR(pb, 0.25, 1e-6);
  EXPECT_NEAR(rest, 0.0, 1e-9);
  // with every allowed token banned there is nothing to sample: one clear error
  p.logit_bias = {{byte_token('a'), -INFINITY}, {byte_token('b'), -INFINITY}};
  loom::Sampler banned(p);
  banned.set_constraint(std::make_shared<GrammarMatcher>(grammar(R"(root ::= [ab] "c")"), vocab()));
  EXPECT_THROW(banned.sample(logits), loom::Error);
}

// A JSON Schema's grammar accepts the instances the schema allows and refuses the rest.
bool schema_accepts(const std::string& schema, const std::string& text) {
  return accepts(loom::json_schema_to_grammar(schema), text);
}

TEST(JsonSchema, ObjectsWithRequiredAndOptionalProperties) {
  const std::string s = R"({"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"},
                            "ok": {"type": "boolean"}, "score": {"type": "number"}}, "required": ["name", "age"]})";
  EXPECT_TRUE(schema_accepts(s, R"({"name": "x", "age": 3})"));
  EXPECT_TRUE(schema_accepts(s, R"({ "name":"a\"b\u00e9", "age":-12, "ok": true, "score": 1.5e3 })"));
  EXPECT_TRUE(schema_accepts(s, "{\n  \"name\": \"x\",\n  \"age\": 0,\n  \"score\": -0.25\n}"));
  EXPECT_FALSE(schema_accepts(s, R"({"age": 3})"));                 // a required one missing
  EXPECT_FALSE(schema_accepts(s, R"({"name": 1, "age": 3})"));      // the wrong type
  EXPECT_FALSE(schema_accepts(s, R"({"name": "x", "age": 3.5})"));  // not an integer
  EXPECT_FALSE(schema_accepts(s, R"({"name": "x", "age": 3, "ok": 1})"));
  EXPECT_FALSE(schema_accepts(s, R"({"name": "x", "age": 3, "ok": true, "ok": false})"));  // twice
  EXPECT_FALSE(schema_accepts(s, R"({"name": "x", "age": 03})"));                          // JSON has no leading zeros
  // none required: any subset in order, and no comma before the first
  const std::string opt = R"({"type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "null"}}})";
  for (const char* ok : {"{}", R"({"a": 1})", R"({"b": null})", R"({"a": 1, "b": null})"})
    EXPECT_TRUE(schema_accepts(opt, ok)) << ok;
  for (const char* bad : {R"({, "b": null})", R"({"a": 1,})", R"({"c": 1})"})
    EXPECT_FALSE(schema_accepts(opt, bad)) << bad;
  // additionalProperties as a schema: a map of that value
  const std::string map = R"({"type": "object", "additionalProperties": {"type": "integer"}})";
  EXPECT_TRUE(schema_accepts(map, R"({"x": 1, "y": 2})"));
  EXPECT_FALSE(schema_accepts(map, R"({"x": "1"})"));
  EXPECT_TRUE(schema_accepts(R"({"type": "object", "additionalProperties": false})", "{}"));
  EXPECT_FALSE(schema_accepts(R"({"type": "object", "additionalProperties": false})", R"({"x": 1})"));
}

TEST(JsonSchema, ArraysEnumsStringsRefsAndUnions) {
  const std::string arr = R"({"type": "array", "items": {"type": "integer"}, "minItems": 1, "maxItems": 2})";
  EXPECT_TRUE(schema_accepts(arr, "[1]"));
  EXPECT_TRUE(schema_accepts(arr, "[1, 2]"));
  EXPECT_FALSE(schema_accepts(arr, "[]"));
  EXPECT_FALSE(schema_accepts(arr, "[1, 2, 3]"));
  EXPECT_TRUE(schema_accepts(R"({"type": "array"})", R"([1, "a", [], {"b": null}])"));
  const std::string e = R"({"enum": ["x", 1, null, {"k": [true]}]})";
  for (const char* ok : {R"("x")", "1", "null", R"({"k":[true]})"}) EXPECT_TRUE(schema_accepts(e, ok)) << ok;
  EXPECT_FALSE(schema_accepts(e, R"("y")"));
  EXPECT_TRUE(schema_accepts(R"({"const": "only"})", R"("only")"));
  const std::string len = R"({"type": "string", "minLength": 2, "maxLength": 3})";
  EXPECT_FALSE(schema_accepts(len, R"("a")"));
  EXPECT_TRUE(schema_accepts(len, R"("ab")"));
  EXPECT_TRUE(schema_accepts(len, R"("a\nc")"));
  EXPECT_FALSE(schema_accepts(len, R"("abcd")"));
  const std::string tree = R"({"$defs": {"node": {"type": "object", "properties": {"v": {"type": "integer"},
      "kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}}, "required": ["v"]}}, "$ref": "#/$defs/node"})";
  EXPECT_TRUE(schema_accepts(tree, R"({"v": 1, "kids": [{"v": 2}, {"v": 3, "kids": [{"v": 4, "kids": []}]}]})"));
  EXPECT_FALSE(schema_accepts(tree, R"({"v": 1, "kids": [{"w": 2}]})"));
  const std::string un = R"({"anyOf": [{"type": "integer"}, {"type": ["string", "null"]}]})";
  for (const char* ok : {"7", R"("s")", "null"}) EXPECT_TRUE(schema_accepts(un, ok)) << ok;
  EXPECT_FALSE(schema_accepts(un, "true"));
  EXPECT_TRUE(schema_accepts("{}", R"({"any": [1, 2.5e-3, "x"]})"));  // {}: any value
}

TEST(JsonSchema, WhatAGrammarCannotHoldIsRefused) {
  const std::pair<const char*, const char*> cases[] = {
      {R"({"type": "string", "pattern": "^a+$"})", "'pattern' is not supported"},
      {R"({"type": "string", "format": "date"})", "'format' is not supported"},
      {R"({"type": "integer", "minimum": 0})", "'minimum' is not supported"},
      {R"({"allOf": [{"type": "integer"}]})", "'allOf' is not supported"},
      {R"({"$ref": "https://example.com/s.json"})", "is not a definition in this schema"},
      {R"({"type": "array", "minItems": 3, "maxItems": 1})", "maxItems is below minItems"},
      {R"({"type": "object", "properties": {"a": {}}, "required": ["b"]})", "not among the properties"},
      {R"({"type": "colour"})", "unknown type 'colour'"},
      {R"({"type": "object", "properties": {"a": {"pattern": "x"}}})", "at /properties/a"},
      {"false", "matches nothing"},
      {"{\"type\": ", "not JSON"},
  };
  for (const auto& [schema, want] : cases) {
    const std::string error = usage_error([&] { loom::json_schema_to_grammar(schema); });
    EXPECT_NE(error.find(want), std::string::npos) << schema << " -> " << error;
  }
}

}  // namespace
