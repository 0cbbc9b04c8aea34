// --prompt-cache files: "LOOMPC01", the model's identity (u64: the file's, with its adapters), the
// token count (u64), the tokens (int32), then the session state (its own header says which shape and cache types).
#include "loom/model/prompt_cache.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/files.h"
#include "loom/model/model.h"

namespace loom {
namespace {

constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'P', 'C', '0', '1'};
constexpr size_t kHeader = sizeof(kMagic) + 2 * sizeof(uint64_t);

}  // namespace

PromptCacheLoad load_prompt_cache(Session& session, const std::string& path, std::span<const int32_t> prompt) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return {};  // no cache yet: it is written after the prompt
  LOOM_CHECK(session.n_past() == 0, internal, "a prompt cache loads into an empty session");
  const std::string bytes = read_regular_file(path, "--prompt-cache");
  LOOM_CHECK(bytes.size() >= kHeader && std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) == 0, invalid_input,
             "--prompt-cache '{}': not a loom prompt cache (llama.cpp's session files are not read)", path);
  uint64_t identity = 0, n_tokens = 0;
  std::memcpy(&identity, bytes.data() + sizeof(kMagic), sizeof(identity));
  std::memcpy(&n_tokens, bytes.data() + sizeof(kMagic) + sizeof(identity), sizeof(n_tokens));
  LOOM_CHECK(identity == session.model().identity(), invalid_input,
             "--prompt-cache '{}': made with another model file (or other --lora / --control-vector)", path);
  LOOM_CHECK(n_tokens <= (uint64_t)session.n_ctx(), invalid_input,
             "--prompt-cache '{}': holds {} tokens, more than the context size {} (-c)", path, n_tokens,
             session.n_ctx());
  LOOM_CHECK(bytes.size() >= kHeader + n_tokens * sizeof(int32_t), invalid_input, "--prompt-cache '{}': truncated",
             path);
  std::vector<int32_t> tokens(n_tokens);
  std::memcpy(tokens.data(), bytes.data() + kHeader, n_tokens * sizeof(int32_t));
  const size_t state_at = kHeader + n_tokens * sizeof(int32_t);
  try {
    session.load_state(std::span(reinterpret_cast<const uint8_t*>(bytes.data()) + state_at, bytes.size() - state_at));
  } catch (const Error& e) {
    fail(ErrorKind::invalid_input, "--prompt-cache '{}': {}", path, e.what());
  }
  LOOM_CHECK(session.n_past() == (int64_t)n_tokens, invalid_input,
             "--prompt-cache '{}': holds {} tokens but the KV of {}", path, n_tokens, session.n_past());
  const auto diff = std::mismatch(tokens.begin(), tokens.end(), prompt.begin(), prompt.end());
  PromptCacheLoad r{diff.first - tokens.begin(), std::ranges::equal(tokens, prompt)};
  if (r.kept == (int64_t)prompt.size() && r.kept > 0) --r.kept;  // the last prompt token again, for its logits
  session.keep_first(r.kept);
  return r;
}

void save_prompt_cache(const Session& session, const std::string& path, std::span<const int32_t> tokens) {
  const uint64_t n = (uint64_t)session.n_past(), identity = session.model().identity();
  LOOM_CHECK(n <= tokens.size(), internal, "the session holds {} tokens, {} given", n, tokens.size());
  const std::vector<uint8_t> state = session.save_state();
  AtomicFile out(path);
  out.write(kMagic, sizeof(kMagic));
  out.write(&identity, sizeof(identity));
  out.write(&n, sizeof(n));
  out.write(tokens.data(), n * sizeof(int32_t));
  out.write(state.data(), state.size());
  out.commit();
}

}  // namespace loom
