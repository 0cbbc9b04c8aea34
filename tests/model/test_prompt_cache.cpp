// --prompt-cache files: the prefix a cache gives back, and corrupt files (every truncation, bytes
// flipped across the header, tokens and state) ending in an Error, never a crash or a session
// holding more tokens than the file says.
#include <gtest/gtest.h>

#include <fstream>
#include <random>

#include "gguf_test_util.h"
#include "loom/core/error.h"
#include "loom/model/model_file.h"
#include "loom/model/prompt_cache.h"

namespace loom {
namespace {

TEST(PromptCache, GivesBackTheCommonPrefixAndRefusesCorruptFiles) {
  test::ScratchDir dir("prompt-cache");
  NewModelOptions n;
  n.hparams = preset_hparams(Arch::llama, "tiny");
  n.output = dir.file("m.gguf");
  make_random_model(n);
  std::unique_ptr<Model> model = Model::load(n.output);
  SessionParams sp;
  sp.n_ctx = 64;
  sp.n_threads = 1;
  const std::vector<int32_t> tokens = {5, 17, 300, 42, 9, 77};
  const std::string path = dir.file("c.bin");
  {
    Session s(*model, sp);
    s.decode(tokens);
    save_prompt_cache(s, path, tokens);
  }
  Session s(*model, sp);
  const std::vector<int32_t> same_start = {5, 17, 300, 8, 8};
  EXPECT_EQ(load_prompt_cache(s, path, same_start).kept, 3);
  EXPECT_EQ(s.n_past(), 3);
  s.clear();
  EXPECT_EQ(load_prompt_cache(s, path, tokens).kept, 5) << "the whole prompt: its last token runs again";
  s.clear();
  EXPECT_EQ(load_prompt_cache(s, dir.file("absent.bin"), tokens).kept, 0);

  std::ifstream in(path, std::ios::binary);
  const std::string good((std::istreambuf_iterator<char>(in)), {});
  const std::string bad = dir.file("bad.bin");
  auto try_load = [&](const std::string& bytes) {
    std::ofstream(bad, std::ios::binary | std::ios::trunc).write(bytes.data(), (std::streamsize)bytes.size());
    s.clear();
    try {
      const int64_t kept = load_prompt_cache(s, bad, tokens).kept;
      EXPECT_LE(kept, (int64_t)tokens.size());
      EXPECT_EQ(s.n_past(), kept);
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_input) << e.what();
    }
  };
  for (size_t len = 0; len < good.size(); len += len < 96 ? 1 : 97) try_load(good.substr(0, len));
  std::mt19937 rng(3);
  for (int i = 0; i < 300; ++i) {
    std::string bytes = good;
    const size_t at = i < 120 ? (size_t)i : rng() % bytes.size();  // the header and tokens, then anywhere
    bytes[at] = (char)(bytes[at] ^ (1 + rng() % 255));
    try_load(bytes);
  }
}

}  // namespace
}  // namespace loom
