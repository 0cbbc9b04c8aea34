// libFuzzer entry point: arbitrary bytes (invalid UTF-8 included) through the gpt-2 (BPE) and
// llama-spm (SPM) tokenizers, loaded once from shared/data/vocab (or $LOOM_VOCAB_DIR), with and
// without special-token parsing, then back through detokenize. Any crash or bad id is a bug.
// Without shared/ (a clone on its own) it fuzzes the BPE vocabulary of the bundled default
// model, which loom-train learned, and says so.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/gguf/gguf.h"
#include "loom/tokenizer/tokenizer.h"

#ifndef LOOM_SHARED_DIR
#define LOOM_SHARED_DIR "../shared"
#endif
#ifndef LOOM_SOURCE_DIR
#define LOOM_SOURCE_DIR "."
#endif

namespace {

struct Vocabs {
  std::vector<std::unique_ptr<loom::Tokenizer>> tokenizers;
  Vocabs() {
    const char* env = std::getenv("LOOM_VOCAB_DIR");
    const std::string dir = env ? env : LOOM_SHARED_DIR "/data/vocab";
    std::vector<std::string> paths;
    for (const char* name : {"gpt-2", "llama-spm"}) paths.push_back(dir + "/ggml-vocab-" + name + ".gguf");
    if (!env && !std::filesystem::exists(paths[0]) && !std::filesystem::exists(paths[1])) {
      paths = {LOOM_SOURCE_DIR "/models/loom-default.gguf"};
      std::fprintf(stderr, "tokenizer_fuzz: no %s (set LOOM_VOCAB_DIR); fuzzing the BPE vocabulary of %s\n",
                   dir.c_str(), paths[0].c_str());
    }
    for (const std::string& path : paths) {
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
