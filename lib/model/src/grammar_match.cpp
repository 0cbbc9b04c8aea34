// GrammarMatcher: which tokens a GBNF grammar allows next (grammar.h), as a set of pushdown stacks.
#include <algorithm>
#include <limits>

#include "loom/core/error.h"
#include "loom/model/grammar.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom {

namespace {

using Element = Grammar::Element;
using Stack = std::vector<const Element*>;

// Bounds on what one position of the text may hold: a grammar whose expansions pass them (a
// long chain of optional nothings, a wildly ambiguous one) is refused instead of eating memory.
constexpr size_t kMaxStacks = 4096;
constexpr int kMaxDepth = 2048;

[[noreturn]] void too_ambiguous() {
  throw Error(ErrorKind::usage,
              fmt::format("grammar: too ambiguous (over {} readings of the text at once, or rules nested {} deep "
                          "without a character between)",
                          kMaxStacks, kMaxDepth));
}

// Pushes onto out every stack s can become with a character set, or nothing, on top.
void expand(const Grammar& g, Stack s, std::vector<Stack>& out, int depth = 0) {
  if (depth > kMaxDepth) too_ambiguous();
  if (s.empty() || s.back()->kind == Element::Kind::chars) {
    if (out.size() >= kMaxStacks) too_ambiguous();
    out.push_back(std::move(s));
    return;
  }
  const Element* top = s.back();  // a rule reference: what follows it, then one of its alternatives
  s.pop_back();
  if ((top + 1)->kind != Element::Kind::end) s.push_back(top + 1);
  for (const Grammar::Alternative& alt : g.rules[top->rule]) {
    Stack t = s;
    if (alt[0].kind != Element::Kind::end) t.push_back(&alt[0]);
    expand(g, std::move(t), out, depth + 1);
  }
}

void dedupe(std::vector<Stack>& stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
}

// The stacks after one code point: those whose top accepts it, moved past it.
std::vector<Stack> step(const Grammar& g, const std::vector<Stack>& in, uint32_t cp) {
  std::vector<Stack> out;
  for (const Stack& s : in) {
    if (s.empty() || !s.back()->matches(cp)) continue;
    Stack t(s.begin(), s.end() - 1);
    const Element* next = s.back() + 1;
    if (next->kind != Element::Kind::end) t.push_back(next);
    expand(g, std::move(t), out);
  }
  dedupe(out);
  return out;
}

// The length of the UTF-8 sequence a lead byte starts; 0 for a byte that cannot start one.
int utf8_length(unsigned char c) {
  return c < 0x80 ? 1 : c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF5 ? 4 : 0;
}

// The first code point of bytes when they hold it whole, else -1 (also for bytes that are not UTF-8).
int64_t first_code_point(std::string_view b) {
  if (b.empty()) return -1;
  const int n = utf8_length((unsigned char)b[0]);
  if (n == 0 || (size_t)n > b.size()) return -1;
  uint32_t cp = n == 1 ? (unsigned char)b[0] : (unsigned char)b[0] & (0x7F >> n);
  for (int i = 1; i < n; ++i) {
    if (((unsigned char)b[i] & 0xC0) != 0x80) return -1;
    cp = (cp << 6) | ((unsigned char)b[i] & 0x3F);
  }
  return cp;
}

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const Grammar> grammar, const Tokenizer& tok) : g_(std::move(grammar)) {
  LOOM_CHECK(g_ != nullptr && g_->root < g_->rules.size(), internal, "a grammar matcher without a grammar");
  const int32_t n = tok.n_vocab();
  pieces_.resize((size_t)n);
  eog_.resize((size_t)n);
  for (int32_t id = 0; id < n; ++id) {
    eog_[(size_t)id] = tok.is_eog(id);
    if (!eog_[(size_t)id]) pieces_[(size_t)id] = tok.token_to_piece(id);
  }
  reset();
}

void GrammarMatcher::reset() {
  stacks_.clear();
  pending_.clear();
  for (const Grammar::Alternative& alt : g_->rules[g_->root]) {
    Stack s;
    if (alt[0].kind != Element::Kind::end) s.push_back(&alt[0]);
    expand(*g_, std::move(s), stacks_);
  }
  dedupe(stacks_);
}

bool GrammarMatcher::complete() const {
  return pending_.empty() && std::any_of(stacks_.begin(), stacks_.end(), [](const Stack& s) { return s.empty(); });
}

bool GrammarMatcher::advance(std::vector<Stack>& stacks, std::string& pending, std::string_view bytes) const {
  const std::string text = pending + std::string(bytes);
  size_t i = 0;
  while (i < text.size()) {
    const int n = utf8_length((unsigned char)text[i]);
    if (n == 0) return false;
    const size_t have = std::min(text.size() - i, (size_t)n);
    // the code points the sequence can still become: [lo, hi], less overlong forms and past U+10FFFF
    uint32_t lo = n == 1 ? (unsigned char)text[i] : (unsigned char)text[i] & (0x7F >> n), hi = lo;
    for (size_t k = 1; k < (size_t)n; ++k) {
      const auto c = k < have ? (unsigned char)text[i + k] : 0x80;
      if ((c & 0xC0) != 0x80) return false;
      lo = (lo << 6) | (c & 0x3F);
      hi = (hi << 6) | (k < have ? (c & 0x3F) : 0x3F);
    }
    constexpr uint32_t kLeast[5] = {0, 0, 0x80, 0x800, 0x10000};
    lo = std::max(lo, kLeast[n]);
    hi = std::min<uint32_t>(hi, 0x10FFFF);
    if (lo >= 0xD800 && lo <= 0xDFFF) lo = 0xE000;  // surrogates are no characters
    if (hi >= 0xD800 && hi <= 0xDFFF) hi = 0xD7FF;
    if (lo > hi) return false;
    if (have < (size_t)n) {  // the sequence goes on in a later token: some stack must take what it can become
      pending = text.substr(i);
      return std::any_of(stacks.begin(), stacks.end(),
                         [&](const Stack& s) { return !s.empty() && s.back()->matches_some(lo, hi); });
    }
    stacks = step(*g_, stacks, lo);
    if (stacks.empty()) return false;
    i += (size_t)n;
  }
  pending.clear();
  return true;
}

bool GrammarMatcher::allows(int32_t token) const {
  if (token < 0 || (size_t)token >= pieces_.size()) return false;
  if (eog_[(size_t)token]) return complete();
  const std::string& piece = pieces_[(size_t)token];
  if (piece.empty()) return false;
  if (pending_.empty()) {  // most tokens fail on their first character: no copy of the stacks for them
    const int64_t cp = first_code_point(piece);
    if (cp >= 0 && std::none_of(stacks_.begin(), stacks_.end(),
                                [&](const Stack& s) { return !s.empty() && s.back()->matches((uint32_t)cp); }))
      return false;
  }
  std::vector<Stack> stacks = stacks_;
  std::string pending = pending_;
  return advance(stacks, pending, piece);
}

void GrammarMatcher::allowed_tokens(size_t n, std::vector<bool>& mask) const {
  // the state as bytes: the pending bytes, then each stack's length and element addresses
  std::string key = pending_;
  key += '\0';
  for (const Stack& st : stacks_) {
    const size_t len = st.size();
    key.append(reinterpret_cast<const char*>(&len), sizeof len);
    key.append(reinterpret_cast<const char*>(st.data()), len * sizeof(st[0]));
  }
  const auto hit = masks_.find(key);
  if (hit != masks_.end() && hit->second.size() == n) {
    mask = hit->second;
    return;
  }
  TokenConstraint::allowed_tokens(n, mask);
  constexpr size_t kMaxMasks = 64;  // n bits each: 1 MiB at most for Llama 3's vocabulary
  if (masks_.size() >= kMaxMasks) masks_.clear();
  masks_[key] = mask;
}

void GrammarMatcher::accept(int32_t token) {
  LOOM_CHECK(allows(token), internal, "the grammar does not allow token {}", token);
  if (eog_[(size_t)token]) return;
  advance(stacks_, pending_, pieces_[(size_t)token]);
}

}  // namespace loom
