// Generation and perplexity loops over a Session.
#include "loom/model/generate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "loom/core/error.h"
#include "loom/core/files.h"
#include "loom/model/kl_divergence.h"

namespace loom {

namespace {
double ms_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
}
}  // namespace

GenerateResult generate(Session& session, std::string_view prompt, int64_t n_predict, Sampler& sampler,
                        const std::function<void(std::string_view)>& on_piece, const PromptCache* cache) {
  const Tokenizer& tok = session.model().tokenizer();
  GenerateResult r;
  r.tokens = tok.tokenize(prompt, /*add_special=*/true, /*parse_special=*/true);
  LOOM_CHECK(!r.tokens.empty(), invalid_input, "the prompt is empty (no tokens)");
  const int64_t n_tokens = (int64_t)r.tokens.size();
  LOOM_CHECK(session.n_past() + n_tokens <= session.n_ctx(), invalid_input,
             "prompt of {} tokens does not fit the context size {} (raise -c)", n_tokens, session.n_ctx());
  for (int32_t t : r.tokens) sampler.accept(t);

  auto t0 = std::chrono::steady_clock::now();
  const PromptCacheLoad hit = cache ? load_prompt_cache(session, cache->path, r.tokens) : PromptCacheLoad{};
  r.n_cached = hit.kept;
  r.n_prompt = n_tokens - r.n_cached;
  const int64_t n_batch = session.params().n_batch;
  for (int64_t i = r.n_cached; i < n_tokens; i += n_batch) {
    const int64_t n = std::min(n_batch, n_tokens - i);
    session.decode(std::span<const int32_t>(r.tokens.data() + i, (size_t)n));
  }
  r.prompt_ms = ms_since(t0);
  if (cache && !cache->read_only && !hit.same_tokens) save_prompt_cache(session, cache->path, r.tokens);

  t0 = std::chrono::steady_clock::now();
  for (int64_t i = 0; i < n_predict; ++i) {
    const int32_t next = sampler.sample(session.logits(0));
    if (tok.is_eog(next)) break;
    r.tokens.push_back(next);
    ++r.n_gen;
    const std::string piece = tok.token_to_piece(next);
    r.text += piece;
    if (on_piece) on_piece(piece);
    if (i + 1 == n_predict || session.n_past() >= session.n_ctx()) break;
    session.decode(std::span<const int32_t>(&next, 1));
  }
  r.eval_ms = ms_since(t0);
  if (cache && cache->all && !cache->read_only) save_prompt_cache(session, cache->path, r.tokens);
  return r;
}

float token_logprob_f32(std::span<const float> logits, int32_t token) {
  const float max = *std::max_element(logits.begin(), logits.end());
  float sum = 0.0f;
  for (float v : logits) sum += std::exp(v - max);
  return logits[(size_t)token] - max - std::log(sum);
}

void score_chunk(Session& session, std::span<const int32_t> tokens, int64_t c,
                 const std::function<void(int64_t, std::span<const float>, int32_t)>& score) {
  const Tokenizer& tok = session.model().tokenizer();
  const int64_t n_ctx = session.n_ctx(), first = n_ctx / 2;
  std::vector<int32_t> chunk(tokens.begin() + c * n_ctx, tokens.begin() + (c + 1) * n_ctx);
  if (tok.add_bos() && tok.bos() >= 0) chunk[0] = tok.bos();
  session.clear();
  for (int64_t i = 0; i < n_ctx; i += session.params().n_batch) {
    const int64_t n = std::min(session.params().n_batch, n_ctx - i);
    session.decode(std::span<const int32_t>(chunk.data() + i, (size_t)n), /*all_logits=*/true);
    for (int64_t j = std::max(i, first); j < i + n && j < n_ctx - 1; ++j)  // this batch's second-half positions
      score(j, session.logits(j - i), tokens[(size_t)(c * n_ctx + j + 1)]);
  }
}

namespace {
// The estimate and its error from the sums of the scored tokens' negative log-likelihoods.
void finish(PerplexityResult& r, double nll, double nll2, int64_t count) {
  r.n_scored = count;
  const double mean = nll / (double)count;
  r.ppl = std::exp(mean);
  const double var = nll2 / (double)count - mean * mean;
  r.ppl_err = count > 1 ? std::sqrt(std::max(0.0, var) / (double)(count - 1)) * r.ppl : 0.0;
}
}  // namespace

PerplexityResult perplexity(Session& session, std::string_view text, int64_t n_chunks,
                            const std::function<void(int64_t, double)>& on_chunk, const std::string& logits_path) {
  const Tokenizer& tok = session.model().tokenizer();
  std::vector<int32_t> tokens = tok.tokenize(text, /*add_special=*/true, /*parse_special=*/false);
  const int64_t n_ctx = session.n_ctx();
  // The second half of each chunk is scored, the last token has no successor: -c 2 scores none.
  LOOM_CHECK(n_ctx >= 3, usage, "--perplexity needs a context of at least 3 tokens (-c {} scores no token)", n_ctx);
  PerplexityResult r;
  r.n_tokens = (int64_t)tokens.size();
  LOOM_CHECK(r.n_tokens >= 2 * n_ctx, invalid_input,
             "perplexity needs at least 2 * n_ctx = {} tokens, the text has {} (lower -c or give more text)",
             2 * n_ctx, r.n_tokens);
  int64_t max_chunks = r.n_tokens / n_ctx;
  if (n_chunks > 0) max_chunks = std::min(max_chunks, n_chunks);
  // the base file for --kl-divergence (kl_divergence.h): header and tokens now, a row per scored position
  std::unique_ptr<AtomicFile> out;
  const LogitsFileHeader h{n_ctx, tok.n_vocab(), max_chunks};
  std::vector<uint16_t> row((size_t)h.row_values());
  if (!logits_path.empty()) {
    out = std::make_unique<AtomicFile>(logits_path);
    write_logits_header(*out, h, tokens);
  }
  double nll = 0, nll2 = 0;
  int64_t count = 0;
  for (int64_t c = 0; c < max_chunks; ++c) {
    score_chunk(session, tokens, c, [&](int64_t, std::span<const float> l, int32_t next) {
      if (out) {
        LOOM_CHECK((int64_t)l.size() == h.n_vocab, unsupported,
                   "--kl-divergence-base: the model gives {} logits per token for a vocabulary of {}", l.size(),
                   h.n_vocab);
        encode_log_probs(l, next, row);
        out->write(row.data(), row.size() * sizeof(uint16_t));
      }
      float mx = l[0];
      for (float x : l) mx = std::max(mx, x);
      double sum = 0;
      for (float x : l) sum += std::exp((double)x - mx);
      const double v = std::log(sum) + mx - l[(size_t)next];
      nll += v;
      nll2 += v * v;
      ++count;
    });
    const double ppl = std::exp(nll / (double)count);
    r.running_ppl.push_back(ppl);
    if (on_chunk) on_chunk(c + 1, ppl);
  }
  if (out) out->commit();
  finish(r, nll, nll2, count);
  return r;
}

int64_t strided_perplexity_ctx(int64_t n_ctx, int64_t n_batch, int64_t stride, bool flash_attn) {
  const int64_t pad = flash_attn ? 256 : 32;
  return (std::max<int64_t>(1, n_batch / n_ctx) * n_ctx + stride / 2 + pad - 1) / pad * pad;
}

PerplexityResult strided_perplexity(Session& session, std::string_view text, int64_t stride, int64_t n_chunks,
                                    const std::function<void(int64_t, int64_t, double)>& on_chunk) {
  const Tokenizer& tok = session.model().tokenizer();
  const std::vector<int32_t> tokens = tok.tokenize(text, /*add_special=*/true, /*parse_special=*/false);
  const int64_t n_ctx = session.n_ctx(), n_vocab = tok.n_vocab();
  LOOM_CHECK(stride > 0 && stride < n_ctx, usage, "--ppl-stride {}: must be 1 to {} (one less than the window of {})",
             stride, n_ctx - 1, n_ctx);
  PerplexityResult r;
  r.n_tokens = (int64_t)tokens.size();
  LOOM_CHECK(r.n_tokens >= 2 * n_ctx, invalid_input,
             "perplexity needs at least 2 * n_ctx = {} tokens, the text has {} (lower -c or give more text)", 2 * n_ctx,
             r.n_tokens);
  int64_t max_chunks = (r.n_tokens - n_ctx + stride - 1) / stride;
  if (n_chunks > 0) max_chunks = std::min(max_chunks, n_chunks);
  double nll = 0, nll2 = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < max_chunks; ++i) {
    const int64_t start = i * stride;
    session.clear();
    for (int64_t b = 0; b < n_ctx; b += session.params().n_batch) {
      const int64_t n = std::min(session.params().n_batch, n_ctx - b);
      session.decode(std::span<const int32_t>(tokens.data() + start + b, (size_t)n), /*all_logits=*/true);
      // this batch's scored positions: the window's last `stride` predictions
      for (int64_t j = std::max(b, n_ctx - stride - 1); j < b + n && j < n_ctx - 1; ++j) {
        // llama-perplexity's softmax: float exponentials summed in double, the probability a float
        const std::span<const float> l = session.logits(j - b);
        const float mx = *std::max_element(l.begin(), l.end());
        double sum = 0;
        for (int64_t v = 0; v < n_vocab; ++v) sum += std::exp(l[(size_t)v] - mx);
        const int32_t next = tokens[(size_t)(start + j + 1)];
        const float prob = (float)(std::exp(l[(size_t)next] - mx) / sum);
        const double v = -std::log(prob);
        nll += v;
        nll2 += v * v;
        ++count;
      }
    }
    const double ppl = std::exp(nll / (double)count);
    r.running_ppl.push_back(ppl);
    if (on_chunk) on_chunk(i + 1, start, ppl);
  }
  finish(r, nll, nll2, count);
  return r;
}

}  // namespace loom
