// --prompt-cache: a prompt's KV state kept in a file with its tokens, so a later run whose prompt
// starts with the same tokens evaluates only the rest (llama-cli's flag). The file is loom's own
// (llama.cpp's session files hold its KV layout): a header with the model's identity, the
// tokens, then Session::save_state's bytes. Written atomically.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "loom/model/session.h"

namespace loom {

struct PromptCache {
  std::string path;
  bool read_only = false;  // --prompt-cache-ro: use the file, never write it
  bool all = false;        // --prompt-cache-all: save the generated tokens too, at the end
};

struct PromptCacheLoad {
  int64_t kept = 0;          // prompt tokens whose KV the session now holds (0: no file)
  bool same_tokens = false;  // the file holds exactly the prompt: writing it again changes nothing
};
// Loads `path` into the (empty) session when the file exists and keeps the KV of the longest
// common prefix of its tokens and `prompt`, less one when that is the whole prompt (its last
// token is evaluated again for the logits). Throws invalid_input naming the file when it is not
// a loom prompt cache, or was made for another model, cache type or a larger context.
PromptCacheLoad load_prompt_cache(Session& session, const std::string& path, std::span<const int32_t> prompt);

// Writes the session's KV state with the tokens it holds (the first session.n_past() of
// `tokens`) to `path`, replacing the file atomically.
void save_prompt_cache(const Session& session, const std::string& path, std::span<const int32_t> tokens);

}  // namespace loom
