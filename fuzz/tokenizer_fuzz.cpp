// libFuzzer entry point: arbitrary bytes (invalid UTF-8 included) through the gpt-2 (BPE) and
// llama-spm (SPM) tokenizers, loaded once from shared/data/vocab (or $LOOM_VOCAB_DIR), with and
// without special-token parsing, then back through detokenize. Any crash or bad id is a bug.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/model/gguf.h"
#include "loom/model/tokenizer.h"

#ifndef LOOM_SHARED_DIR
#define LOOM_SHARED_DIR "../shared"
#endif

namespace {

struct Vocabs {
  std::vector<std::unique_ptr<loom::Tokenizer>> tokenizers;
  Vocabs() {
    const char* env = std::getenv("LOOM_VOCAB_DIR");
    const std::string dir = env ? env : LOOM_SHARED_DIR "/data/vocab";
    for (const char* name : {"gpt-2", "llama-spm"}) {
      const std::string path = dir + "/ggml-vocab-" + name + ".gguf";
      try {
        auto file = loom::gguf::File::open(path);
        tokenizers.push_back(loom::Tokenizer::from_gguf(*file));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "tokenizer_fuzz: cannot load %s: %s (set LOOM_VOCAB_DIR)\n", path.c_str(), e.what());
        std::abort();
      }
    }
  }
};

const Vocabs& vocabs() {
  static const Vocabs v;
  return v;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (const auto& tok : vocabs().tokenizers) {
    for (bool parse_special : {false, true}) {
      const std::vector<int32_t> ids = tok->tokenize(text, /*add_special=*/true, parse_special);
      for (int32_t id : ids) {
        if (id < 0 || id >= tok->n_vocab()) std::abort();
      }
      (void)tok->detokenize(ids, /*remove_special=*/false);
      (void)tok->detokenize(ids, /*remove_special=*/true);
    }
    // SPM spells what it lacks as byte tokens, so any bytes come back exactly, except that a
    // space inside a broken UTF-8 sequence comes back as U+2581 (as in llama.cpp).
    if (tok->kind() == loom::Tokenizer::Kind::spm && text.find(' ') == std::string_view::npos &&
        text.find("\xE2\x96\x81") == std::string_view::npos) {
      if (tok->detokenize(tok->tokenize(text, false, false)) != text) std::abort();
    }
  }
  return 0;
}
