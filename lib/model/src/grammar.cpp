// The GBNF parser: rules `name ::= alternatives`, literals, character classes, `.`, groups, and
// the repetitions * + ? {m} {m,} {m,n} {,n}, lowered to plain rules as they are read.
#include "loom/model/grammar.h"

#include <fmt/format.h>

#include <string>
#include <unordered_map>

#include "loom/core/error.h"

namespace loom {

bool Grammar::Element::matches(uint32_t cp) const {
  bool in = false;
  for (const auto& [lo, hi] : ranges) in = in || (cp >= lo && cp <= hi);
  return in != negated;
}

bool Grammar::Element::matches_some(uint32_t lo, uint32_t hi) const {
  if (!negated) {
    for (const auto& [a, b] : ranges)
      if (a <= hi && b >= lo) return true;
    return false;
  }
  // negated: some point of [lo, hi] lies outside every range; walk up from lo past the ranges covering it
  for (uint32_t at = lo;;) {
    bool moved = false;
    for (const auto& [a, b] : ranges)
      if (a <= at && b >= at) {
        if (b >= hi) return false;
        at = b + 1;
        moved = true;
      }
    if (!moved) return true;
  }
}

namespace {

using Element = Grammar::Element;
using Alternative = Grammar::Alternative;
constexpr uint32_t kMaxRepeat = 100000;  // {m,n} bounds beyond this are refused

Element chars(uint32_t lo, uint32_t hi) {
  Element e;
  e.kind = Element::Kind::chars;
  e.ranges.push_back({lo, hi});
  return e;
}
Element ref(uint32_t rule) {
  Element e;
  e.kind = Element::Kind::rule;
  e.rule = rule;
  return e;
}

bool is_name_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class Parser {
 public:
  explicit Parser(std::string_view text) : s_(text) {}

  Grammar parse() {
    skip_space(true);
    while (pos_ < s_.size()) {
      const size_t at = pos_;
      const std::string name = parse_name();
      skip_space(false);
      if (s_.substr(pos_, 3) != "::=") fail(pos_, "expected '::=' after the rule name");
      pos_ += 3;
      skip_space(true);
      const uint32_t id = rule_id(name, at);
      if (defined_[id]) fail(at, fmt::format("rule '{}' is defined twice", name));
      defined_[id] = true;
      parse_alternatives(id, false);
      if (pos_ < s_.size() && s_[pos_] != '\n' && s_[pos_] != '\r')
        fail(pos_, fmt::format("unexpected '{}'", s_[pos_]));
      skip_space(true);
    }
    if (g_.rules.empty()) fail(0, "the grammar has no rules");
    for (uint32_t r = 0; r < g_.rules.size(); ++r)
      if (!defined_[r]) fail(first_use_[r], fmt::format("rule '{}' is not defined", g_.names[r]));
    const auto root = ids_.find("root");
    if (root == ids_.end()) fail(0, "no rule named 'root' (the start rule)");
    g_.root = root->second;
    check_left_recursion();
    return std::move(g_);
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < at && i < s_.size(); ++i) {
      if (s_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw Error(ErrorKind::usage, fmt::format("grammar: line {}, column {}: {}", line, col, what));
  }

  // Spaces, tabs and # comments; newlines too where a rule may continue (after |, inside groups).
  void skip_space(bool newlines) {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == '#') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r'))) {
        ++pos_;
      } else {
        break;
      }
    }
  }

  std::string parse_name() {
    const size_t begin = pos_;
    while (pos_ < s_.size() && is_name_char(s_[pos_])) ++pos_;
    if (pos_ == begin) fail(begin, "expected a rule name");
    return std::string(s_.substr(begin, pos_ - begin));
  }

  uint32_t add_rule(std::string name, size_t at) {
    g_.rules.emplace_back();
    g_.names.push_back(std::move(name));
    defined_.push_back(false);
    first_use_.push_back(at);
    return (uint32_t)(g_.rules.size() - 1);
  }
  uint32_t rule_id(const std::string& name, size_t at) {
    const auto it = ids_.find(name);
    if (it != ids_.end()) return it->second;
    const uint32_t id = add_rule(name, at);
    ids_.emplace(name, id);
    return id;
  }
  // A rule made for a group or a repetition inside rule `parent`.
  uint32_t generated_rule(uint32_t parent) {
    const uint32_t id = add_rule(fmt::format("{}_{}", g_.names[parent], g_.rules.size()), pos_);
    defined_[id] = true;
    return id;
  }

  void count(size_t n) {
    n_elements_ += n;
    if (n_elements_ > kMaxGrammarElements)
      fail(pos_, fmt::format("the grammar is too large (over {} elements once repetitions are expanded)",
                             kMaxGrammarElements));
  }

  uint32_t hex(size_t digits) {
    uint32_t v = 0;
    for (size_t i = 0; i < digits; ++i, ++pos_) {
      const char c = pos_ < s_.size() ? s_[pos_] : '\0';
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) fail(pos_, fmt::format("expected {} hex digits", digits));
      v = v * 16 + (uint32_t)d;
    }
    if (v > 0x10FFFF) fail(pos_, "the code point is beyond U+10FFFF");
    return v;
  }

  // One character of a literal or class: an escape or one UTF-8 encoded code point.
  uint32_t parse_char() {
    const size_t at = pos_;
    if (pos_ >= s_.size()) fail(at, "unexpected end of the grammar");
    const auto c = (unsigned char)s_[pos_++];
    if (c == '\\') {
      if (pos_ >= s_.size()) fail(at, "unexpected end of the grammar after '\\'");
      const char e = s_[pos_++];
      switch (e) {
        case 'n':
          return '\n';
        case 'r':
          return '\r';
        case 't':
          return '\t';
        case 'x':
          return hex(2);
        case 'u':
          return hex(4);
        case 'U':
          return hex(8);
        case '\\':
        case '"':
        case '[':
        case ']':
        case '-':
        case '^':
          return (uint32_t)e;
        default:
          fail(at, fmt::format("unknown escape '\\{}'", e));
      }
    }
    if (c < 0x80) return c;
    const int n = c >= 0xF0 && c < 0xF8 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : -1;
    if (n < 0) fail(at, "the grammar text is not UTF-8");
    uint32_t cp = c & (0x3F >> n);
    for (int i = 0; i < n; ++i) {
      if (pos_ >= s_.size() || ((unsigned char)s_[pos_] & 0xC0) != 0x80) fail(at, "the grammar text is not UTF-8");
      cp = (cp << 6) | ((unsigned char)s_[pos_++] & 0x3F);
    }
    return cp;
  }

  void parse_alternatives(uint32_t rule, bool nested) {
    std::vector<Alternative> alts;
    alts.push_back(parse_sequence(rule, nested));
    while (pos_ < s_.size() && s_[pos_] == '|') {
      ++pos_;
      skip_space(true);
      alts.push_back(parse_sequence(rule, nested));
    }
    g_.rules[rule] = std::move(alts);
  }

  // Elements up to '|', ')' or (at the top level) the end of the line; then an `end`.
  Alternative parse_sequence(uint32_t rule, bool nested) {
    Alternative seq;
    size_t last = 0;  // where the last symbol starts (a repetition applies to it)
    bool have_last = false;
    while (pos_ < s_.size()) {
      const size_t at = pos_;
      const char c = s_[pos_];
      if (c == '"') {
        ++pos_;
        last = seq.size();
        have_last = true;
        while (pos_ < s_.size() && s_[pos_] != '"') {
          const uint32_t cp = parse_char();
          seq.push_back(chars(cp, cp));
          count(1);
        }
        if (pos_ >= s_.size()) fail(at, "unterminated string");
        ++pos_;
      } else if (c == '[') {
        ++pos_;
        Element e = chars(0, 0);
        e.ranges.clear();
        if (pos_ < s_.size() && s_[pos_] == '^') {
          e.negated = true;
          ++pos_;
        }
        while (pos_ < s_.size() && s_[pos_] != ']') {
          const uint32_t lo = parse_char();
          uint32_t hi = lo;
          if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
            ++pos_;
            hi = parse_char();
            if (hi < lo) fail(at, "a character range runs backwards");
          }
          e.ranges.push_back({lo, hi});
        }
        if (pos_ >= s_.size()) fail(at, "unterminated character class");
        ++pos_;
        last = seq.size();
        have_last = true;
        seq.push_back(std::move(e));
        count(1);
      } else if (c == '.') {
        ++pos_;
        last = seq.size();
        have_last = true;
        Element any = chars(0, 0);
        any.ranges.clear();
        any.negated = true;
        seq.push_back(std::move(any));
        count(1);
      } else if (is_name_char(c)) {
        last = seq.size();
        have_last = true;
        seq.push_back(ref(rule_id(parse_name(), at)));
        count(1);
      } else if (c == '(') {
        ++pos_;
        skip_space(true);
        const uint32_t sub = generated_rule(rule);
        parse_alternatives(sub, true);
        if (pos_ >= s_.size() || s_[pos_] != ')') fail(at, "'(' without its ')'");
        ++pos_;
        last = seq.size();
        have_last = true;
        seq.push_back(ref(sub));
        count(1);
      } else if (c == '*' || c == '+' || c == '?' || c == '{') {
        if (!have_last) fail(at, fmt::format("'{}' needs something before it to repeat", c));
        repeat(rule, seq, last);
        have_last = false;
      } else {
        break;
      }
      skip_space(nested);
    }
    seq.push_back(Element{});
    return seq;
  }

  uint32_t parse_count() {
    const size_t at = pos_;
    uint64_t v = 0;
    while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') {
      v = v * 10 + (uint64_t)(s_[pos_++] - '0');
      if (v > kMaxRepeat) fail(at, fmt::format("a repetition count over {}", kMaxRepeat));
    }
    if (pos_ == at) fail(at, "expected a number");
    return (uint32_t)v;
  }

  // The symbol seq[last..] repeated: min copies, then up to max - min optional ones (max < 0: any number).
  void repeat(uint32_t rule, Alternative& seq, size_t last) {
    const size_t at = pos_;
    const char c = s_[pos_++];
    int64_t min = 0, max = -1;
    if (c == '+') {
      min = 1;
    } else if (c == '?') {
      max = 1;
    } else if (c == '{') {
      skip_space(true);
      if (pos_ < s_.size() && s_[pos_] != ',') min = parse_count();
      skip_space(true);
      if (pos_ < s_.size() && s_[pos_] == ',') {
        ++pos_;
        skip_space(true);
        if (pos_ < s_.size() && s_[pos_] != '}') max = parse_count();
      } else {
        max = min;
      }
      skip_space(true);
      if (pos_ >= s_.size() || s_[pos_] != '}') fail(at, "'{' without its '}'");
      ++pos_;
      if (max >= 0 && max < min) fail(at, "a repetition's maximum is below its minimum");
    }
    const Alternative sym(seq.begin() + (ptrdiff_t)last, seq.end());
    seq.resize(last);
    for (int64_t i = 0; i < min; ++i) {
      count(sym.size());
      seq.insert(seq.end(), sym.begin(), sym.end());
    }
    auto with_end = [](Alternative a) {
      a.push_back(Element{});
      return a;
    };
    if (max < 0) {  // R ::= sym R | (nothing)
      const uint32_t r = generated_rule(rule);
      Alternative more = sym;
      more.push_back(ref(r));
      count(more.size() + 2);
      g_.rules[r] = {with_end(std::move(more)), with_end({})};
      seq.push_back(ref(r));
    } else if (max > min) {  // (sym (sym (...)?)?)?: each optional rule holds the next
      int64_t inner = -1;
      for (int64_t i = min; i < max; ++i) {
        const uint32_t r = generated_rule(rule);
        Alternative one = sym;
        if (inner >= 0) one.push_back(ref((uint32_t)inner));
        count(one.size() + 2);
        g_.rules[r] = {with_end(std::move(one)), with_end({})};
        inner = r;
      }
      seq.push_back(ref((uint32_t)inner));
    }
  }

  // A rule reachable from itself without consuming a character would expand forever.
  void check_left_recursion() const {
    const size_t n = g_.rules.size();
    std::vector<bool> nullable(n, false);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        for (const Alternative& alt : g_.rules[r]) {
          bool all = true;
          for (const Element& e : alt)
            if (e.kind == Element::Kind::chars || (e.kind == Element::Kind::rule && !nullable[e.rule])) all = false;
          if (all) {
            nullable[r] = true;
            changed = true;
            break;
          }
        }
      }
    }
    // the rules each rule may begin with
    std::vector<std::vector<uint32_t>> first(n);
    for (size_t r = 0; r < n; ++r)
      for (const Alternative& alt : g_.rules[r])
        for (const Element& e : alt) {
          if (e.kind != Element::Kind::rule) break;
          first[r].push_back(e.rule);
          if (!nullable[e.rule]) break;
        }
    // depth-first search for a cycle, iteratively (a long chain of rules must not overflow the stack)
    std::vector<uint8_t> state(n, 0);  // 0 new, 1 on the path, 2 done
    for (size_t start = 0; start < n; ++start) {
      if (state[start] != 0) continue;
      std::vector<std::pair<uint32_t, size_t>> path{{(uint32_t)start, 0}};
      state[start] = 1;
      while (!path.empty()) {
        auto& [r, next] = path.back();
        if (next == first[r].size()) {
          state[r] = 2;
          path.pop_back();
          continue;
        }
        const uint32_t to = first[r][next++];
        if (state[to] == 1) {
          // name the user's rule: a generated one carries its defining rule's name
          fail(0, fmt::format("rule '{}' is left-recursive (it can reach itself before matching a character)",
                              g_.names[to]));
        }
        if (state[to] == 0) {
          state[to] = 1;
          path.push_back({to, 0});
        }
      }
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
  Grammar g_;
  std::unordered_map<std::string, uint32_t> ids_;
  std::vector<bool> defined_;
  std::vector<size_t> first_use_;
  size_t n_elements_ = 0;
};

}  // namespace

Grammar parse_grammar(std::string_view text) { return Parser(text).parse(); }

}  // namespace loom
