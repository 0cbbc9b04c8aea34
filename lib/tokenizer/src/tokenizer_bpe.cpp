// Byte-level BPE ("gpt2") as llama.cpp does it: the pre-tokenizer regexes named by
// tokenizer.ggml.pre split the text into words, each word's bytes are spelled in GPT-2's byte
// alphabet, and adjacent symbols are merged by merge rank (lowest first, leftmost on ties).
#include <algorithm>
#include <functional>

#include "tokenizer_impl.h"

namespace loom::tok {

namespace {

// Regex notes: patterns are PCRE2 with UTF but without UCP, so \s is ASCII whitespace: the
// splitter hands non-ASCII whitespace to the regexes as U+000B, which is what llama.cpp's
// matchers see too. Non-ASCII literals are written as \x{...} so the source stays ASCII.
#define LOOM_CONTRACTIONS R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]))"

// GPT-2's regex plus a final \s+, which is what llama.cpp's hand-written matcher does with a
// lone whitespace before a non-space (the plain regex leaves it as a gap of its own: same split).
constexpr const char* kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr const char* kLlama3 = LOOM_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen2 = LOOM_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kQwen35 = LOOM_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kSeedCoder = LOOM_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kBailing =
    R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE]))"
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)";
constexpr const char* kJais2 = LOOM_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S))"
    R"(|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})";
constexpr const char* kExaoneMoe = LOOM_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)";
// Upper-then-lower letter runs (tekken, gpt-4o) in llama.cpp's lookahead formulation.
#define LOOM_UPPER_LOWER(M)                                                                               \
  R"([^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))*((?=[\p{L}])([^A-Z]))+)" M                                  \
  R"(|[^\r\n\p{L}\p{N}]?((?=[\p{L}])([^a-z]))+((?=[\p{L}])([^A-Z]))*)" M
constexpr const char* kTekken = LOOM_UPPER_LOWER("")
    R"(|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kGpt4o = LOOM_UPPER_LOWER(LOOM_CONTRACTIONS "?")
    R"(|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
#define LOOM_ASCII_PUNCT_WORD R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+)"
constexpr const char* kDeepseek3 = LOOM_ASCII_PUNCT_WORD
    R"(|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kSpark25 = LOOM_ASCII_PUNCT_WORD
    R"(|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)";
constexpr const char* kMiniCpm5 = LOOM_CONTRACTIONS
    R"(|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";
constexpr const char* kCjkJapanese = R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)";
constexpr const char* kCjkKorean = R"([\x{4E00}-\x{9FA5}\x{0800}-\x{4E00}\x{AC00}-\x{D7FF}]+)";
// The cased letters of deepseek-llm's tokenizer.json, range by range.
constexpr const char* kDeepseekLetters =
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF})"
    R"(\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1})"
    R"(\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5})"
    R"(\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A})"
    R"(\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B})"
    R"(\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC})"
    R"(\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107})"
    R"(\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134})"
    R"(\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4})"
    R"(\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787})"
    R"(\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A})"
    R"(\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2})"
    R"(\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)";
constexpr const char* kDeepseekPunct =
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)";
constexpr const char* kPoro = R"( ?[^(\s|.,!?\x{2026}\x{3002}\x{FF0C}\x{3001}\x{0964}\x{06D4}\x{060C})]+)";

#undef LOOM_ASCII_PUNCT_WORD
#undef LOOM_UPPER_LOWER
#undef LOOM_CONTRACTIONS

bool one_of(std::string_view name, std::initializer_list<std::string_view> names) {
  for (auto n : names) {
    if (n == name) return true;
  }
  return false;
}

}  // namespace

bool bpe_pre_for(std::string_view name, BpePre& pre) {
  pre = BpePre{};
  auto set = [&](std::vector<std::string> regexes, bool clean_spaces = true) {
    pre.regexes = std::move(regexes);
    pre.clean_spaces = clean_spaces;
    return true;
  };
  if (name.empty() || name == "default") {
    return set({R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", "[0-9][0-9][0-9]"});
  }
  if (one_of(name, {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
                    "jina-v5-nano"})) {
    pre.ignore_merges = pre.add_bos = true;
    pre.regexes = {kLlama3};
    return true;
  }
  if (one_of(name, {"dbrx", "smaug-bpe"})) return set({kLlama3});
  if (one_of(name, {"glm4", "chatglm-bpe"})) {
    pre.no_bos = true;
    return set({kLlama3});
  }
  if (name == "deepseek-llm") {
    return set({"[\r\n]", kDeepseekLetters, kDeepseekPunct, R"(\s+$)", kCjkKorean, R"(\p{N}+)"}, false);
  }
  if (name == "deepseek-coder") {
    return set({"[\r\n]", R"(\s?\p{L}+)", R"(\s?\p{P}+)", kCjkKorean, R"(\p{N})"}, false);
  }
  if (one_of(name, {"deepseek-v3", "hunyuan-dense", "joyai-llm", "hy_v4"})) {
    return set({R"(\p{N}{1,3})", kCjkJapanese, kDeepseek3}, false);
  }
  if (name == "spark2_5") {
    return set({R"(\p{N}{1,3})", kCjkJapanese, kSpark25, R"(\p{N})"}, false);
  }
  if (name == "falcon") return set({R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, "[0-9][0-9][0-9]"});
  if (one_of(name, {"starcoder", "refact", "codeshell", "exaone", "minerva-7b", "mellum2"})) {
    return set({R"(\p{N})", kGpt2});
  }
  if (one_of(name, {"command-r", "smollm"})) return set({R"(\p{N})", kGpt2}, false);
  if (one_of(name, {"gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v2-es", "jina-v2-de", "a.x-4.0",
                    "mellum", "modern-bert", "exaone4", "mpt", "olmo", "jais", "jina-v1-en", "jina-v2-code",
                    "roberta-bpe"})) {
    return set({kGpt2});
  }
  if (one_of(name, {"trillion", "granite-docling"})) return set({kGpt2}, false);
  if (one_of(name, {"qwen2", "deepseek-r1-qwen", "kormo", "f2llmv2", "hunyuan", "solar-open"})) {
    return set({kQwen2}, false);
  }
  if (one_of(name, {"stablelm2", "megrez"})) return set({kQwen2});
  if (name == "qwen35") return set({kQwen35}, false);
  if (name == "grok-2") return set({kQwen2}, false);
  if (name == "ufakzeka") {
    return set({R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)"}, false);
  }
  if (name == "minicpm5") {
    pre.ignore_merges = true;
    pre.regexes = {R"(\p{N}{1,3})", kMiniCpm5};
    return true;
  }
  if (name == "laguna") return set({R"([^\n]+|[\n]+)", kQwen2}, false);
  if (name == "poro-chat") return set({kPoro}, false);
  if (one_of(name, {"bloom", "gpt3-finnish"})) return set({kPoro});
  if (name == "viking") return set({kPoro, R"(\p{N})"}, false);
  if (name == "tekken") {
    pre.ignore_merges = pre.add_bos = true;
    return set({kTekken}, false);
  }
  if (one_of(name, {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"})) return set({kGpt4o}, false);
  if (name == "chameleon") {
    pre.add_bos = true;
    return set({"<sentinel:[0-9]+>", "(IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z", "([\\t\\n]|    |  )", R"(\p{N})",
                R"([\p{P}!-/:-@\[-`{-~])", kGpt2},
               false);
  }
  if (one_of(name, {"bailingmoe", "bailingmoe2", "llada-moe"})) return set({kBailing}, false);
  if (name == "seed-coder") return set({kSeedCoder}, false);
  if (name == "jais-2") return set({kJais2});
  if (name == "exaone-moe") return set({kExaoneMoe});
  return false;
}

}  // namespace loom::tok

namespace loom {

namespace {

struct Symbol {
  int32_t prev, next;
  uint32_t off, n;  // bytes of the encoded word; n == 0 once merged away
};

}  // namespace

void Tokenizer::Impl::tokenize_bpe(std::string_view text, std::vector<int32_t>& out) const {
  const std::vector<uint32_t> cpts = unicode::decode_utf8(text);
  const std::vector<size_t> lengths = splitter->split(cpts);

  std::string raw, word, key;
  std::vector<Symbol> symbols;
  tok::PairQueue<int32_t, std::less<int32_t>> pairs;  // leaf i: symbols i and its next, by merge rank
  constexpr size_t kMaxCachedWords = 1 << 16;
  std::unordered_map<std::string, std::pair<size_t, uint32_t>, tok::StringHash, std::equal_to<>> seen;
  size_t start = 0;
  for (size_t len : lengths) {
    // The word's bytes (llama.cpp re-encodes the decoded codepoints) in GPT-2's alphabet.
    raw.clear();
    for (size_t i = start; i < start + len; ++i) unicode::append_utf8(raw, cpts[i]);
    start += len;
    word.clear();
    for (char c : raw) word += unicode::byte_to_unicode(static_cast<uint8_t>(c));
    if (word.empty()) continue;

    // A word's tokens depend on the word alone: repeated words are copied from their first spelling.
    if (auto hit = seen.find(word); hit != seen.end()) {
      const auto [at, n] = hit->second;
      for (uint32_t k = 0; k < n; ++k) out.push_back(out[at + k]);
      continue;
    }
    const size_t first_out = out.size();
    symbols.clear();
    if (ignore_merges) {
      const int32_t id = find(word);
      if (id >= 0) {
        out.push_back(id);
        continue;  // not worth caching: one lookup
      }
    }
    for (size_t off = 0; off < word.size();) {
      const size_t n = std::min(unicode::utf8_len(static_cast<uint8_t>(word[off])), word.size() - off);
      const auto index = static_cast<int32_t>(symbols.size());
      symbols.push_back({index - 1, off + n == word.size() ? -1 : index + 1, static_cast<uint32_t>(off),
                         static_cast<uint32_t>(n)});
      off += n;
    }

    auto rank_of = [&](int32_t left, int32_t right) {
      const Symbol& l = symbols[left];
      const Symbol& r = symbols[right];
      key.assign(word, l.off, l.n);
      key += ' ';
      key.append(word, r.off, r.n);
      auto it = bpe_ranks.find(key);
      return it == bpe_ranks.end() ? -1 : it->second;
    };
    auto update = [&](int32_t left) {  // re-key the pair starting at symbol `left`
      if (left < 0) return;
      const int32_t rank = symbols[left].next >= 0 ? rank_of(left, symbols[left].next) : -1;
      if (rank >= 0) {
        pairs.set(left, rank);
      } else {
        pairs.clear(left);
      }
    };
    const auto count = static_cast<int32_t>(symbols.size());
    pairs.reset(count);
    for (int32_t i = 0; i + 1 < count; ++i) {
      if (const int32_t rank = rank_of(i, i + 1); rank >= 0) pairs.init(i, rank);
    }
    pairs.build();
    for (int32_t left = pairs.top(); left >= 0; left = pairs.top()) {
      Symbol& l = symbols[left];
      const int32_t right = l.next;
      Symbol& r = symbols[right];
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) symbols[r.next].prev = left;
      pairs.clear(right);
      update(l.prev);
      update(left);
    }

    for (int32_t i = 0; i != -1; i = symbols[i].next) {
      const Symbol& s = symbols[i];
      const std::string_view piece = std::string_view(word).substr(s.off, s.n);
      const int32_t id = find(piece);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      // llama.cpp looks each byte of the spelled symbol up alone and drops what is missing.
      for (char c : piece) {
        const int32_t byte_id = find(std::string_view(&c, 1));
        if (byte_id >= 0) out.push_back(byte_id);
      }
    }
    if (seen.size() < kMaxCachedWords) {
      seen.emplace(word, std::pair<size_t, uint32_t>{first_out, static_cast<uint32_t>(out.size() - first_out)});
    }
  }
}

}  // namespace loom
