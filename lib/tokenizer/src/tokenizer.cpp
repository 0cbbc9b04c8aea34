// loom::Tokenizer's public face: special-token partitioning (llama.cpp's
// tokenizer_st_partition), dispatch to SPM or BPE per raw fragment, BOS/EOS rules,
// token_to_piece and detokenize (with SPM's prefix-space strip and BPE's space clean-up).
#include "loom/tokenizer/tokenizer.h"

#include <algorithm>
#include <cctype>

#include "loom/core/error.h"
#include "tokenizer_impl.h"

namespace loom {

// ---- SpecialTrie ----

namespace tok {

int32_t SpecialTrie::child(int32_t node, uint8_t byte) const {
  const auto& kids = nodes_[node].kids;
  auto it = std::lower_bound(kids.begin(), kids.end(), byte,
                             [](const std::pair<uint8_t, int32_t>& k, uint8_t b) { return k.first < b; });
  return it != kids.end() && it->first == byte ? it->second : -1;
}

void SpecialTrie::insert(std::string_view text, int32_t slot) {
  int32_t node = 0;
  for (char c : text) {
    const auto b = static_cast<uint8_t>(c);
    int32_t next = child(node, b);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.emplace_back();
      auto& kids = nodes_[node].kids;
      auto it = std::lower_bound(kids.begin(), kids.end(), b,
                                 [](const std::pair<uint8_t, int32_t>& k, uint8_t x) { return k.first < x; });
      kids.insert(it, {b, next});
    }
    node = next;
  }
  if (nodes_[node].slot < 0) nodes_[node].slot = slot;
}

void SpecialTrie::scan(std::string_view text, const std::function<void(int32_t)>& found) const {
  if (nodes_[0].kids.empty()) return;
  for (size_t i = 0; i < text.size(); ++i) {
    int32_t node = 0;
    for (size_t j = i; j < text.size(); ++j) {
      node = child(node, static_cast<uint8_t>(text[j]));
      if (node < 0) break;
      if (nodes_[node].slot >= 0) found(nodes_[node].slot);
    }
  }
}

}  // namespace tok

// ---- partitioning ----

namespace {

struct Fragment {
  int32_t token;  // >= 0: a special token; -1: raw text [off, off + len)
  size_t off, len;
};

bool is_space(char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; }

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::~Tokenizer() = default;

std::vector<int32_t> Tokenizer::tokenize(std::string_view text, bool add_special, bool parse_special) const {
  const Impl& t = *impl_;

  // 1. Split special tokens out, each in turn (longest first) over the remaining raw text.
  //    Control and unknown tokens only when parse_special; user-defined ones always.
  std::vector<Fragment> frags;
  if (!text.empty()) frags.push_back({-1, 0, text.size()});
  std::vector<bool> occurs(t.special.size(), false);
  bool any = false;
  t.special_trie.scan(text, [&](int32_t slot) { occurs[slot] = true, any = true; });
  for (size_t slot = 0; any && slot < t.special.size(); ++slot) {
    if (!occurs[slot]) continue;
    const int32_t id = t.special[slot];
    const tok::TokenData& d = t.vocab[id];
    if (!parse_special && (d.attr & (tok::kAttrControl | tok::kAttrUnknown))) continue;
    const std::string_view needle = d.text;
    std::vector<Fragment> next;
    next.reserve(frags.size() + 2);
    for (const Fragment& f : frags) {
      if (f.token >= 0) {
        next.push_back(f);
        continue;
      }
      size_t off = f.off, len = f.len;
      while (len > 0) {
        const size_t match = text.substr(0, off + len).find(needle, off);
        if (match == std::string_view::npos) break;
        size_t left_len = match - off;
        if (d.attr & tok::kAttrLstrip) {
          while (left_len > 0 && is_space(text[off + left_len - 1])) --left_len;
        }
        if (left_len > 0) next.push_back({-1, off, left_len});
        next.push_back({id, 0, 0});
        size_t right_off = match + needle.size();
        size_t right_len = off + len - right_off;
        if (d.attr & tok::kAttrRstrip) {
          while (right_len > 0 && is_space(text[right_off])) ++right_off, --right_len;
        }
        off = right_off, len = right_len;
      }
      if (len > 0) next.push_back({-1, off, len});
    }
    frags = std::move(next);
  }

  // 2. Tokenize the raw fragments.
  std::vector<int32_t> out;
  if (add_special && t.add_bos) out.push_back(t.bos);
  bool prev_special = true;  // SPM: a fragment at the start or after a special token gets the prefix space
  std::string escaped;
  for (const Fragment& f : frags) {
    if (f.token >= 0) {
      out.push_back(f.token);
      prev_special = true;
      continue;
    }
    const std::string_view raw = text.substr(f.off, f.len);
    if (t.kind == Kind::spm) {
      escaped.clear();
      if (t.add_space_prefix && prev_special) escaped += "\xE2\x96\x81";
      for (char c : raw) {
        if (c == ' ') {
          escaped += "\xE2\x96\x81";
        } else {
          escaped += c;
        }
      }
      t.tokenize_spm(escaped, out);
    } else {
      t.tokenize_bpe(raw, out);
    }
    prev_special = false;
  }
  if (add_special && t.add_eos) out.push_back(t.eos);
  return out;
}

// ---- pieces and detokenizing ----

std::string Tokenizer::token_to_piece(int32_t id) const {
  LOOM_CHECK(id >= 0 && id < n_vocab(), invalid_input, "[token_to_piece] token id {} is outside the vocabulary (0..{})",
             id, n_vocab() - 1);
  return impl_->pieces[id];
}

namespace {

// llama.cpp's clean_up_tokenization_spaces, byte for byte: " ?" " !" " ." " ," lose the space,
// " ' " loses both, and " 's" " 'm" " 're" " 've" lose theirs.
std::string clean_spaces(std::string s) {
  if (s.empty()) return s;
  std::string out;
  out.reserve(s.size());
  out += s[0];
  for (size_t i = 1; i < s.size(); ++i) {
    const char x = s[i];
    if (s[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) out.pop_back();
    out += x;
  }
  s.swap(out);
  out.clear();
  out += s[0];
  for (size_t i = 1; i < s.size(); ++i) {
    const char x = s[i];
    if (x == '\'' && i + 1 < s.size() && s[i - 1] == ' ' && s[i + 1] == ' ') {
      out.pop_back();
      s[++i] = '\0';
    }
    out += x;
  }
  s.swap(out);
  out.clear();
  out += s[0];
  for (size_t i = 1; i < s.size(); ++i) {
    const char x = s[i];
    if (s[i - 1] == ' ' && x == '\'' && i + 1 < s.size()) {
      const char x1 = s[i + 1];
      if (x1 == 's' || x1 == 'm') {
        out.pop_back();
      } else if (x1 != 't' && x1 != 'd' && i + 2 < s.size()) {
        const char x2 = s[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) out.pop_back();
      }
    }
    out += x;
  }
  return out;
}

}  // namespace

std::string Tokenizer::detokenize(std::span<const int32_t> ids, bool remove_special) const {
  const Impl& t = *impl_;
  for (int32_t id : ids) {
    LOOM_CHECK(id >= 0 && id < n_vocab(), invalid_input, "[detokenize] token id {} is outside the vocabulary (0..{})",
               id, n_vocab() - 1);
  }
  bool remove_space = t.add_space_prefix;
  if (remove_special && t.add_bos && !ids.empty() && ids.front() == t.bos) {
    remove_space = false;
    ids = ids.subspan(1);
  }
  if (remove_special && t.add_eos && !ids.empty() && ids.back() == t.eos) ids = ids.first(ids.size() - 1);
  std::string out;
  for (int32_t id : ids) {
    const bool hidden = remove_special && (t.vocab[id].attr & (tok::kAttrUnknown | tok::kAttrControl));
    const std::string_view piece = hidden ? std::string_view() : std::string_view(t.pieces[id]);
    const size_t skip = remove_space && !piece.empty() && piece[0] == ' ' ? 1 : 0;
    out.append(piece.substr(skip));
    remove_space = false;
  }
  return t.clean_spaces ? clean_spaces(std::move(out)) : out;
}

// ---- accessors ----

Tokenizer::Kind Tokenizer::kind() const { return impl_->kind; }
const std::string& Tokenizer::pre() const { return impl_->pre_name; }
int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->vocab.size()); }
int32_t Tokenizer::bos() const { return impl_->bos; }
int32_t Tokenizer::eos() const { return impl_->eos; }
int32_t Tokenizer::eot() const { return impl_->eot; }
int32_t Tokenizer::unk() const { return impl_->unk; }
int32_t Tokenizer::pad() const { return impl_->pad; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::add_eos() const { return impl_->add_eos; }
bool Tokenizer::is_eog(int32_t id) const { return id >= 0 && id < n_vocab() && impl_->eog[id]; }
bool Tokenizer::is_control(int32_t id) const {
  return id >= 0 && id < n_vocab() && impl_->has_attr(id, tok::kAttrControl);
}
Tokenizer::TokenType Tokenizer::token_type(int32_t id) const {
  LOOM_CHECK(id >= 0 && id < n_vocab(), invalid_input, "[token_type] token id {} is outside the vocabulary", id);
  return impl_->vocab[id].type;
}
const std::string& Tokenizer::token_text(int32_t id) const {
  LOOM_CHECK(id >= 0 && id < n_vocab(), invalid_input, "[token_text] token id {} is outside the vocabulary", id);
  return impl_->vocab[id].text;
}
int32_t Tokenizer::find_token(std::string_view text) const { return impl_->find(text); }

}  // namespace loom
