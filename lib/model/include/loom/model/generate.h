// The two jobs of loom-run: text generation (prompt, then one token at a time, streamed) and
// perplexity over a text file (llama-perplexity's protocol, see docs/REFERENCE.md).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/model/prompt_cache.h"
#include "loom/model/sampler.h"
#include "loom/model/session.h"

namespace loom {

struct GenerateResult {
  std::string text;              // generated text only
  std::vector<int32_t> tokens;   // prompt then generated ids
  int64_t n_prompt = 0;          // prompt tokens evaluated
  int64_t n_cached = 0;          // prompt tokens whose KV came from the prompt cache (not evaluated)
  int64_t n_gen = 0;
  double prompt_ms = 0;
  double eval_ms = 0;
};

// Tokenizes prompt (BOS per the vocab), evaluates it in batches, then samples up to n_predict
// tokens (stopping at end-of-generation), calling on_piece with each piece of text. With a
// prompt cache (prompt_cache.h) the prompt's cached prefix is loaded instead of evaluated, and
// the file is written after the prompt (and at the end with `all`) unless read-only.
GenerateResult generate(Session& session, std::string_view prompt, int64_t n_predict, Sampler& sampler,
                        const std::function<void(std::string_view)>& on_piece, const PromptCache* cache = nullptr);

struct PerplexityResult {
  std::vector<double> running_ppl;  // after each chunk
  double ppl = 0;
  double ppl_err = 0;
  int64_t n_tokens = 0;
  int64_t n_scored = 0;
};

// log p(token) under logits in llama-perplexity's task-score arithmetic (HellaSwag, Winogrande):
// float maximum, float exponentials summed in float, the log of that float sum.
float token_logprob_f32(std::span<const float> logits, int32_t token);

// llama-perplexity's protocol for chunk c of tokens (n_ctx = session.n_ctx() tokens from c * n_ctx,
// BOS first when the vocab adds one): the KV cache cleared, the chunk evaluated in batches, and
// score(j, logits, next) called for each position j of its second half but the last, with the
// token that follows it. Shared by perplexity() and kl_divergence().
void score_chunk(Session& session, std::span<const int32_t> tokens, int64_t c,
                 const std::function<void(int64_t j, std::span<const float> logits, int32_t next)>& score);

// n_chunks <= 0: as many as the text allows. Needs at least 2 * n_ctx tokens. With logits_path,
// also writes every scored position's distribution there (kl_divergence.h's base file, through
// AtomicFile: nothing is left behind by a failed run).
PerplexityResult perplexity(Session& session, std::string_view text, int64_t n_chunks,
                            const std::function<void(int64_t chunk, double running_ppl)>& on_chunk,
                            const std::string& logits_path = {});

// llama-perplexity's --ppl-stride protocol: windows of session.n_ctx() tokens starting every
// `stride` tokens, each evaluated from an empty cache as the text's own tokens (llama-perplexity
// puts BOS in only after the window was evaluated, so it changes nothing), its last `stride`
// predictions scored with a float softmax. Needs stride < n_ctx and 2 * n_ctx tokens;
// on_chunk(i, start, running ppl) after each window.
PerplexityResult strided_perplexity(Session& session, std::string_view text, int64_t stride, int64_t n_chunks,
                                    const std::function<void(int64_t chunk, int64_t start, double ppl)>& on_chunk);

// The window llama-perplexity's --ppl-stride uses: its whole KV cache, which it sizes for
// max(1, n_batch / n_ctx) sequences of n_ctx tokens (as for chunked perplexity), adds half the
// stride to, and pads to 256 tokens with flash attention, else 32.
int64_t strided_perplexity_ctx(int64_t n_ctx, int64_t n_batch, int64_t stride, bool flash_attn);

}  // namespace loom
