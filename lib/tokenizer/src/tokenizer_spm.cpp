// SentencePiece-style ("llama") tokenization of one raw fragment, as llama.cpp does it: split
// into UTF-8 characters, repeatedly merge the adjacent pair whose concatenation is the
// highest-scoring token (leftmost on ties), then emit tokens, falling back to <0xXX> bytes.
#include <algorithm>
#include <functional>

#include "tokenizer_impl.h"

namespace loom {

namespace {

constexpr std::string_view kSpace = "\xE2\x96\x81";  // U+2581

struct Symbol {
  int32_t prev, next;
  uint32_t off, n;  // bytes of the escaped text; n == 0 once merged away
};

}  // namespace

void Tokenizer::Impl::tokenize_spm(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t off = 0; off < text.size();) {
    const size_t n = std::min(unicode::utf8_len(static_cast<uint8_t>(text[off])), text.size() - off);
    const auto index = static_cast<int32_t>(symbols.size());
    symbols.push_back({index - 1, off + n == text.size() ? -1 : index + 1, static_cast<uint32_t>(off),
                       static_cast<uint32_t>(n)});
    off += n;
  }
  if (symbols.empty()) return;

  // Merging never crosses a space that follows a non-space when no token has U+2581 after a
  // non-U+2581 byte (true of SentencePiece vocabularies): then each word merges on its own, in
  // the same order as one global queue would, and each queue stays small.
  auto is_space = [&](int32_t i) { return symbols[i].n == 3 && text.compare(symbols[i].off, 3, kSpace) == 0; };
  tok::PairQueue<float, std::greater<float>> pairs;  // leaf i: symbols[base + i] and its next, by score
  int32_t base = 0;
  auto pair_of = [&](int32_t left, int32_t right, float& score) {
    const int32_t id = find(text.substr(symbols[left].off, symbols[left].n + symbols[right].n));
    if (id >= 0) score = vocab[id].score;
    return id >= 0;
  };
  auto update = [&](int32_t left) {  // re-key the pair starting at symbol `left`
    if (left < 0) return;
    float score;
    if (symbols[left].next >= 0 && pair_of(left, symbols[left].next, score)) {
      pairs.set(left - base, score);
    } else {
      pairs.clear(left - base);
    }
  };
  // Every merged symbol is a token; an unmerged character that is not one falls back to bytes.
  auto emit = [&](int32_t first) {
    for (int32_t i = first; i != -1; i = symbols[i].next) {
      const std::string_view piece = text.substr(symbols[i].off, symbols[i].n);
      const int32_t id = find(piece);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      for (char c : piece) {
        const int32_t byte_id = byte_tokens[static_cast<uint8_t>(c)];
        if (byte_id >= 0) {
          out.push_back(byte_id);
        } else if (unk >= 0) {
          out.push_back(unk);
        }
      }
    }
  };
  const auto count = static_cast<int32_t>(symbols.size());
  for (int32_t begin = 0; begin < count;) {
    int32_t end = begin + 1;
    if (spm_word_split) {
      while (end < count && !(is_space(end) && !is_space(end - 1))) ++end;
    } else {
      end = count;
    }
    symbols[begin].prev = -1;
    symbols[end - 1].next = -1;
    base = begin;
    pairs.reset(end - begin);
    for (int32_t i = begin; i + 1 < end; ++i) {
      float score;
      if (pair_of(i, i + 1, score)) pairs.init(i - begin, score);
    }
    pairs.build();
    for (int32_t best = pairs.top(); best >= 0; best = pairs.top()) {
      const int32_t left = base + best;
      Symbol& l = symbols[left];
      const int32_t right = l.next;
      Symbol& r = symbols[right];
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) symbols[r.next].prev = left;
      pairs.clear(right - base);
      update(l.prev);
      update(left);
    }
    emit(begin);
    begin = end;
  }
}

}  // namespace loom
