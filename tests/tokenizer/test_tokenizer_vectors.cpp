// llama.cpp's tokenizer test vectors (shared/data/vocab/*.gguf + .inp/.out): every string must
// tokenize to exactly the expected ids (no BOS/EOS, specials not parsed), detokenize back where
// that is lossless, survive arbitrary bytes, and tokenize ~1 MB well under a second.
#include <gtest/gtest.h>

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "loom/gguf/gguf.h"
#include "loom/tokenizer/tokenizer.h"

namespace {

const std::string kVocabDir = LOOM_SHARED_DIR "/data/vocab";

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Vectors {
  std::vector<std::string> texts;
  std::vector<std::vector<int32_t>> ids;
};

// Same reading as the acceptance script: split on the separator, drop a trailing empty text.
Vectors load_vectors(const std::string& base) {
  Vectors v;
  const std::string inp = read_file(base + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  size_t pos = 0;
  while (true) {
    const size_t at = inp.find(sep, pos);
    if (at == std::string::npos) {
      v.texts.push_back(inp.substr(pos));
      break;
    }
    v.texts.push_back(inp.substr(pos, at - pos));
    pos = at + sep.size();
  }
  if (!v.texts.empty() && v.texts.back().empty()) v.texts.pop_back();
  std::istringstream out(read_file(base + ".out"));
  std::string line;
  while (v.ids.size() < v.texts.size() && std::getline(out, line)) {
    std::istringstream ls(line);
    std::vector<int32_t> ids;
    int32_t id;
    while (ls >> id) ids.push_back(id);
    v.ids.push_back(std::move(ids));
  }
  return v;
}

const loom::Tokenizer& tokenizer_for(const std::string& name) {
  static std::map<std::string, std::unique_ptr<loom::Tokenizer>> cache;
  auto& slot = cache[name];
  if (!slot) {
    auto file = loom::gguf::File::open(kVocabDir + "/ggml-vocab-" + name + ".gguf");
    slot = loom::Tokenizer::from_gguf(*file);
  }
  return *slot;
}

std::string show(const std::vector<int32_t>& ids) {
  std::string s;
  for (int32_t id : ids) {  // appended piecewise: "" + to_string() trips GCC 12's -Wrestrict false positive
    s += ' ';
    s += std::to_string(id);
  }
  return s;
}

class VocabTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    base_ = kVocabDir + "/ggml-vocab-" + GetParam() + ".gguf";
    if (!std::filesystem::exists(base_) || !std::filesystem::exists(base_ + ".inp")) {
      GTEST_SKIP() << "no test vocabulary at " << base_ << " (shared/data/vocab is absent)";
    }
  }
  std::string base_;
};

TEST_P(VocabTest, MatchesLlamaCppVectorsExactly) {
  const auto& tok = tokenizer_for(GetParam());
  const Vectors v = load_vectors(base_);
  ASSERT_EQ(v.texts.size(), v.ids.size());
  ASSERT_GT(v.texts.size(), 0u);
  size_t pass = 0;
  for (size_t i = 0; i < v.texts.size(); ++i) {
    const auto got = tok.tokenize(v.texts[i], /*add_special=*/false, /*parse_special=*/false);
    if (got == v.ids[i]) {
      ++pass;
    } else {
      ADD_FAILURE() << GetParam() << " vector " << i << " '" << v.texts[i] << "'\n  want" << show(v.ids[i])
                    << "\n  got " << show(got);
    }
  }
  std::printf("[ %s ] %zu/%zu vectors exact\n", GetParam().c_str(), pass, v.texts.size());
}

// detokenize(tokenize(s)) == s, except where llama.cpp's BPE space clean-up changes s on purpose.
TEST_P(VocabTest, DetokenizeRoundTrips) {
  const auto& tok = tokenizer_for(GetParam());
  const Vectors v = load_vectors(base_);
  for (const auto& s : v.texts) {
    if (GetParam() == "gpt-2") {
      bool cleaned = false;
      for (const char* p : {" ?", " !", " .", " ,", " '"}) cleaned |= s.find(p) != std::string::npos;
      if (cleaned) continue;
    }
    const auto ids = tok.tokenize(s, false, false);
    EXPECT_EQ(tok.detokenize(ids), s) << GetParam() << ":" << show(ids);
    // With BOS and remove_special, llama.cpp drops the BOS but then keeps SPM's prefix space.
    const auto with_bos = tok.tokenize(s, true, false);
    const bool spm = tok.kind() == loom::Tokenizer::Kind::spm;
    EXPECT_EQ(tok.detokenize(with_bos, /*remove_special=*/true), spm && !s.empty() ? " " + s : s)
        << GetParam() << ":" << show(with_bos);
  }
}

TEST_P(VocabTest, ArbitraryBytesNeverBreak) {
  const auto& tok = tokenizer_for(GetParam());
  std::mt19937 rng(1234);
  for (int round = 0; round < 300; ++round) {
    std::string s(rng() % 64, '\0');
    for (char& c : s) c = static_cast<char>(rng() % 256);
    for (bool parse : {false, true}) {
      const auto ids = tok.tokenize(s, true, parse);
      for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok.n_vocab());
      (void)tok.detokenize(ids, false);
      (void)tok.detokenize(ids, true);
    }
    // SPM's byte fallback makes any byte string round-trip, unless a space (U+2581 once escaped)
    // lands inside a broken UTF-8 sequence, which llama.cpp then spells as the bytes of U+2581.
    if (tok.kind() == loom::Tokenizer::Kind::spm && s.find(' ') == std::string::npos &&
        s.find("\xE2\x96\x81") == std::string::npos) {
      EXPECT_EQ(tok.detokenize(tok.tokenize(s, false, false)), s);
    }
  }
}

// ~1 MB of text, twice: the vector strings repeated, and pseudo-random words (few repeats, so
// BPE's per-call word cache does not help) with punctuation, digits and multi-byte letters.
TEST_P(VocabTest, OneMegabyteTokenizesFast) {
  const auto& tok = tokenizer_for(GetParam());
  const std::string corpus = read_file(base_ + ".inp");
  std::string repeated;
  while (repeated.size() < (1u << 20)) repeated += corpus;
  std::string words;
  std::mt19937 rng(42);
  const char* syllables[] = {"ka", "lo", "mi", "tre", "sto", "an", "ver", "qu", "\xC3\xA9", "\xD0\xBD\xD0\xB0",
                             "\xE6\x88\x91", "ing", "ph", "zz", "o", "e"};
  const char* separators[] = {" ", " ", " ", ", ", ". ", "\n", " (", ") ", " 42 ", "'s "};
  while (words.size() < (1u << 20)) {
    for (int n = 1 + rng() % 4; n > 0; --n) words += syllables[rng() % 16];
    words += separators[rng() % 10];
  }
  for (const std::string* text : {&repeated, &words}) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::clock_t c0 = std::clock();
    const auto ids = tok.tokenize(*text, false, false);
    const double cpu = static_cast<double>(std::clock() - c0) / CLOCKS_PER_SEC;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("[ %s ] %zu bytes (%s) -> %zu tokens in %.3f s (cpu %.3f s, %.1f MB/s)\n", GetParam().c_str(),
                text->size(), text == &words ? "random words" : "vectors repeated", ids.size(), s, cpu,
                text->size() / s / 1e6);
#if defined(NDEBUG) && !defined(__SANITIZE_ADDRESS__)
    EXPECT_LT(cpu, 1.0);  // CPU time, so a busy machine does not fail it; optimized builds only
#endif
  }
}

INSTANTIATE_TEST_SUITE_P(Vocab, VocabTest, ::testing::Values("llama-spm", "gpt-2", "deepseek-llm", "phi-3"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n) c = std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
                           return n;
                         });

TEST(VocabFacts, SpecialIdsAndFlags) {
  if (!std::filesystem::exists(kVocabDir + "/ggml-vocab-phi-3.gguf")) GTEST_SKIP() << "no test vocabularies";
  const auto& spm = tokenizer_for("llama-spm");
  EXPECT_EQ(spm.kind(), loom::Tokenizer::Kind::spm);
  EXPECT_EQ(spm.bos(), 1);
  EXPECT_EQ(spm.eos(), 2);
  EXPECT_TRUE(spm.add_bos());
  EXPECT_FALSE(spm.add_eos());
  EXPECT_TRUE(spm.is_eog(2));
  EXPECT_EQ(spm.tokenize("Hello", true, false).front(), 1);

  const auto& phi = tokenizer_for("phi-3");
  EXPECT_TRUE(phi.is_eog(32000));  // <|endoftext|> (eos)
  EXPECT_TRUE(phi.is_eog(32007));  // <|end|>
  // Control tokens are parsed only on request; <|end|> strips the whitespace after it (phi-3 rule).
  const auto parsed = phi.tokenize("<|user|>\nhi<|end|>\n", false, true);
  ASSERT_GE(parsed.size(), 3u);
  EXPECT_EQ(parsed.front(), 32010);
  EXPECT_EQ(parsed.back(), 32007);
  const auto literal = phi.tokenize("<|user|>", false, false);
  EXPECT_GT(literal.size(), 1u);

  const auto& gpt2 = tokenizer_for("gpt-2");
  EXPECT_EQ(gpt2.kind(), loom::Tokenizer::Kind::bpe);
  EXPECT_EQ(gpt2.pre(), "gpt-2");
  EXPECT_FALSE(gpt2.add_bos());
  EXPECT_TRUE(gpt2.is_eog(50256));
  EXPECT_EQ(gpt2.tokenize("a<|endoftext|>", false, true), (std::vector<int32_t>{64, 50256}));
  EXPECT_EQ(gpt2.detokenize(std::vector<int32_t>{64, 50256}), "a<|endoftext|>");
  EXPECT_EQ(gpt2.detokenize(std::vector<int32_t>{64, 50256}, true), "a");

  const auto& ds = tokenizer_for("deepseek-llm");
  EXPECT_TRUE(ds.add_bos());
  EXPECT_EQ(ds.bos(), 100000);
  // User-defined tokens ('ö' is one) are split out even when specials are not parsed.
  const auto ids = ds.tokenize("\xC3\xB6", false, false);
  EXPECT_EQ(ids, (std::vector<int32_t>{100003}));
}

}  // namespace
