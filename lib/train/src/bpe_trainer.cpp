// Byte-level BPE training: GPT-2 pre-tokenization through PCRE2, word counts, then merges of
// the most frequent pair with incremental pair counts (only words holding the merged pair are
// revisited) and a max-heap of pair counts with lazy deletion (an entry whose count is no longer
// the pair's current count is skipped), so a merge costs what it changes, not the pair table. Token strings use GPT-2's byte-to-unicode alphabet, as llama.cpp's vocabs do.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <algorithm>
#include <map>
#include <queue>
#include <unordered_map>

#include "loom/core/error.h"
#include "loom/gguf/gguf.h"
#include "loom/model/model_file.h"
#include "loom/train/bpe.h"

namespace loom::train {

namespace {

// GPT-2's pre-tokenizer (as lib/model's "gpt-2" vocabs use it), PCRE2 with UTF and without UCP.
constexpr const char* kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Strictly valid UTF-8: each byte that does not start a valid sequence becomes U+FFFD, as the
// tokenizer sees it (llama.cpp's lenient decoder), so PCRE2 can skip its per-call UTF check.
std::string sanitize_utf8(std::string_view in) {
  std::string out;
  out.reserve(in.size());
  const auto* p = reinterpret_cast<const uint8_t*>(in.data());
  const size_t n = in.size();
  for (size_t i = 0; i < n;) {
    const uint8_t c = p[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xe ? 3 : (c >> 3) == 0x1e ? 4 : 0;
    bool ok = len > 0 && i + len <= n;
    for (size_t k = 1; ok && k < len; ++k) ok = (p[i + k] & 0xc0) == 0x80;
    if (ok && len > 1) {  // no overlong forms, surrogates or code points past U+10FFFF
      uint32_t cp = c & (0x7f >> len);
      for (size_t k = 1; k < len; ++k) cp = (cp << 6) | (p[i + k] & 0x3f);
      const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
      ok = cp >= min[len] && cp <= 0x10ffff && !(cp >= 0xd800 && cp <= 0xdfff);
    }
    if (!ok) {
      out += "\xef\xbf\xbd";
      ++i;
      continue;
    }
    out.append(in.substr(i, len));
    i += len;
  }
  return out;
}

// Words of the text (matches and the unmatched gaps between them) with their counts. The order
// does not matter: merges depend on the counts alone (ties broken by pair ids).
std::vector<std::pair<std::string, int64_t>> count_words(std::string_view raw) {
  const std::string text = sanitize_utf8(raw);
  int err = 0;
  PCRE2_SIZE err_off = 0;
  pcre2_code* re =
      pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kGpt2Regex), PCRE2_ZERO_TERMINATED, PCRE2_UTF, &err, &err_off, nullptr);
  LOOM_ASSERT(re, "BPE pre-tokenizer regex does not compile (error {})", err);
  pcre2_jit_compile(re, PCRE2_JIT_COMPLETE);  // optional: the interpreter is the fallback
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(re, nullptr);
  std::unordered_map<std::string_view, int64_t> words;  // views into text
  const std::string_view tv(text);
  const auto* s = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    const int rc = pcre2_match(re, s, text.size(), pos, PCRE2_NO_UTF_CHECK, md, nullptr);
    if (rc < 0) {
      ++words[tv.substr(pos)];
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[0] > pos) ++words[tv.substr(pos, ov[0] - pos)];  // a gap
    if (ov[1] == ov[0]) {  // empty match: step one code point to make progress
      size_t len = 1;
      while (ov[0] + len < text.size() && (static_cast<uint8_t>(text[ov[0] + len]) & 0xc0) == 0x80) ++len;
      ++words[tv.substr(ov[0], len)];
      pos = ov[0] + len;
      continue;
    }
    ++words[tv.substr(ov[0], ov[1] - ov[0])];
    pos = ov[1];
  }
  pcre2_match_data_free(md);
  pcre2_code_free(re);
  std::vector<std::pair<std::string, int64_t>> out;
  out.reserve(words.size());
  for (const auto& [w, n] : words) out.emplace_back(std::string(w), n);
  return out;
}

using Pair = uint64_t;
Pair make_pair_key(int32_t a, int32_t b) { return ((uint64_t)(uint32_t)a << 32) | (uint32_t)b; }

// Heap entry: the most frequent pair first, ties to the smaller pair key (smaller ids).
struct Candidate {
  int64_t n;
  Pair pair;
  bool operator<(const Candidate& o) const { return n != o.n ? n < o.n : pair > o.pair; }
};

struct Word {
  std::vector<int32_t> syms;
  int64_t count = 0;
  int64_t seen = -1;  // last merge that visited this word
};

}  // namespace

BpeVocab train_bpe(std::string_view text, int64_t vocab_size) {
  LOOM_CHECK(vocab_size >= 257, usage, "--vocab-size {}: needs at least 257 (256 bytes + <|endoftext|>)",
             vocab_size);
  LOOM_CHECK(vocab_size <= (1 << 20), usage, "--vocab-size {}: at most 1048576", vocab_size);
  BpeVocab v;
  std::vector<std::string> bytes_of;  // raw bytes of each token id
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(byte_to_unicode((uint8_t)b));
    v.types.push_back(1);
    bytes_of.emplace_back(1, (char)b);
  }
  v.tokens.push_back("<|endoftext|>");
  v.types.push_back(3);
  bytes_of.emplace_back();
  std::unordered_map<std::string, int32_t> id_of;
  for (int32_t i = 0; i < 256; ++i) id_of[bytes_of[(size_t)i]] = i;

  std::vector<Word> words;
  for (const auto& [w, n] : count_words(text)) {
    Word word;
    for (unsigned char ch : w) word.syms.push_back(ch);
    word.count = n;
    if (word.syms.size() >= 2) words.push_back(std::move(word));
  }
  struct PairCount {
    int64_t n = 0;
    int64_t marked = -2;  // the merge that last listed it in `changed`
  };
  std::unordered_map<Pair, PairCount> counts;
  std::unordered_map<Pair, std::vector<int32_t>> where;
  std::vector<Pair> changed;  // pairs whose count changed during this merge (each once)
  int64_t merge = -1;         // -1: the initial count
  auto add_pairs = [&](int32_t wi, int64_t sign) {
    const Word& w = words[(size_t)wi];
    for (size_t i = 0; i + 1 < w.syms.size(); ++i) {
      const Pair p = make_pair_key(w.syms[i], w.syms[i + 1]);
      PairCount& c = counts[p];
      c.n += sign * w.count;
      if (sign > 0) where[p].push_back(wi);
      if (c.marked != merge) {
        c.marked = merge;
        changed.push_back(p);
      }
    }
  };
  for (int32_t i = 0; i < (int32_t)words.size(); ++i) add_pairs(i, 1);
  std::priority_queue<Candidate> heap;
  auto push_changed = [&] {
    for (Pair p : changed) {
      auto it = counts.find(p);
      if (it == counts.end()) continue;
      if (it->second.n <= 0) counts.erase(it);
      else if (it->second.n >= 2) heap.push({it->second.n, p});
    }
    changed.clear();
  };
  push_changed();

  for (merge = 0; (int64_t)v.tokens.size() < vocab_size; ++merge) {
    // The first entry that still holds its pair's count; a pair seen once is not worth a token.
    Pair best = 0;
    bool found = false;
    while (!heap.empty() && !found) {
      const Candidate c = heap.top();
      heap.pop();
      auto it = counts.find(c.pair);
      found = it != counts.end() && it->second.n == c.n;
      best = c.pair;
    }
    if (!found) break;
    const int32_t a = (int32_t)(best >> 32), b = (int32_t)(best & 0xffffffffu);
    const std::string merged = bytes_of[(size_t)a] + bytes_of[(size_t)b];
    int32_t id;
    if (auto it = id_of.find(merged); it != id_of.end()) {
      id = it->second;  // the same bytes reached by another merge path: reuse the token
    } else {
      id = (int32_t)v.tokens.size();
      id_of[merged] = id;
      bytes_of.push_back(merged);
      v.tokens.push_back(v.tokens[(size_t)a] + v.tokens[(size_t)b]);
      v.types.push_back(1);
    }
    v.merges.push_back(v.tokens[(size_t)a] + " " + v.tokens[(size_t)b]);
    std::vector<int32_t> visit = std::move(where[best]);
    where.erase(best);
    for (int32_t wi : visit) {
      Word& w = words[(size_t)wi];
      if (w.seen == merge) continue;
      w.seen = merge;
      bool has = false;
      for (size_t i = 0; i + 1 < w.syms.size() && !has; ++i) has = w.syms[i] == a && w.syms[i + 1] == b;
      if (!has) continue;
      add_pairs(wi, -1);
      std::vector<int32_t> out;
      out.reserve(w.syms.size());
      for (size_t i = 0; i < w.syms.size(); ++i) {
        if (i + 1 < w.syms.size() && w.syms[i] == a && w.syms[i + 1] == b) {
          out.push_back(id);
          ++i;
        } else {
          out.push_back(w.syms[i]);
        }
      }
      w.syms = std::move(out);
      add_pairs(wi, 1);
    }
    counts.erase(best);
    push_changed();
  }
  return v;
}

void write_bpe_vocab(gguf::Writer& w, const BpeVocab& v) {
  using gguf::Value;
  std::vector<int64_t> types(v.types.begin(), v.types.end());
  w.set("tokenizer.ggml.model", Value::string("gpt2"));
  w.set("tokenizer.ggml.pre", Value::string("gpt-2"));
  w.set("tokenizer.ggml.tokens", Value::string_array(v.tokens));
  w.set("tokenizer.ggml.token_type", Value::i32_array(std::move(types)));
  w.set("tokenizer.ggml.merges", Value::string_array(v.merges));
  w.set("tokenizer.ggml.bos_token_id", Value::u32((uint32_t)v.eos));
  w.set("tokenizer.ggml.eos_token_id", Value::u32((uint32_t)v.eos));
  w.set("tokenizer.ggml.add_bos_token", Value::boolean(false));
  w.set("tokenizer.ggml.add_eos_token", Value::boolean(false));
}

Tokenizer::Spec bpe_spec(const BpeVocab& v) {
  Tokenizer::Spec s;
  s.kind = Tokenizer::Kind::bpe;
  s.tokens = v.tokens;
  for (int32_t t : v.types) s.types.push_back((Tokenizer::TokenType)t);
  s.merges = v.merges;
  s.pre = "gpt-2";
  s.bos_id = v.eos;
  s.eos_id = v.eos;
  s.add_bos = false;
  s.add_eos = false;
  return s;
}

}  // namespace loom::train
