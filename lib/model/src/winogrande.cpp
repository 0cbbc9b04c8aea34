// Winogrande scoring (winogrande.h): the shared prefix evaluated once, then each sentence from
// there, one at a time (Session::keep_first).
#include "loom/model/winogrande.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <sstream>

#include "loom/core/error.h"
#include "loom/model/generate.h"

namespace loom {

WinograndeResult winogrande(Session& session, const std::vector<WinograndeTask>& tasks,
                            const std::function<void(size_t, double, float, float, int, int)>& on_task) {
  constexpr size_t kMinTrailing = 3;  // more differing tokens than this: the choice words themselves are not scored
  const Tokenizer& tok = session.model().tokenizer();
  WinograndeResult r;
  const int64_t n_vocab = session.model().hparams().n_vocab;
  for (size_t t = 0; t < tasks.size(); ++t) {
    const WinograndeTask& w = tasks[t];
    std::array<std::vector<int32_t>, 2> seq;
    std::array<size_t, 2> base{};
    for (size_t k = 0; k < 2; ++k) {
      seq[k] = tok.tokenize(w.first + w.choices[k] + w.second, /*add_special=*/true, /*parse_special=*/false);
      base[k] = tok.tokenize(w.first + w.choices[k], true, false).size();
      LOOM_CHECK((int64_t)seq[k].size() <= session.n_ctx(), invalid_input,
                 "Winogrande task {} takes {} tokens, more than the context of {} (-c)", t + 1, seq[k].size(),
                 session.n_ctx());
    }
    size_t prefix = 0;
    while (prefix < std::min(seq[0].size(), seq[1].size()) && seq[0][prefix] == seq[1][prefix]) ++prefix;
    LOOM_CHECK(prefix > 0 && prefix < seq[1].size(), invalid_input,
               "Winogrande task {}: the two sentences share no first token, or the second is the start of the first",
               t + 1);
    // rows[k][p]: the logits at position p of sentence k (p >= prefix - 1)
    session.clear();
    session.decode(std::span<const int32_t>(seq[0].data(), prefix));
    const std::vector<float> at_prefix(session.logits(0).begin(), session.logits(0).end());
    std::array<std::vector<float>, 2> rows;
    for (size_t k = 0; k < 2; ++k) {
      if (seq[k].size() == prefix) continue;
      session.keep_first((int64_t)prefix);
      session.decode(std::span<const int32_t>(seq[k].data() + prefix, seq[k].size() - prefix), true);
      for (int64_t i = 0; i < (int64_t)(seq[k].size() - prefix); ++i)
        rows[k].insert(rows[k].end(), session.logits(i).begin(), session.logits(i).end());
    }
    auto logits_at = [&](size_t k, size_t p) -> std::span<const float> {
      if (p + 1 == prefix) {
        // llama-perplexity's batch layout hands the second sentence, at the prefix's last
        // position, the first sentence's last logits
        if (k == 0 || seq[0].size() == prefix) return at_prefix;
        return std::span<const float>(rows[0]).subspan((seq[0].size() - 1 - prefix) * (size_t)n_vocab, (size_t)n_vocab);
      }
      return std::span<const float>(rows[k]).subspan((p - prefix) * (size_t)n_vocab, (size_t)n_vocab);
    };
    const bool skip_choice = seq[0].size() - prefix > kMinTrailing && seq[1].size() - prefix > kMinTrailing;
    std::array<float, 2> score{};
    for (size_t k = 0; k < 2; ++k) {
      const size_t from = skip_choice ? base[k] : prefix;
      LOOM_CHECK(from >= prefix && from <= seq[k].size(), invalid_input,
                 "Winogrande task {}: its sentence's tokens do not extend the tokens before '_'", t + 1);
      const size_t last = seq[k].size() - from > 1 ? 1 : 0;  // the sentence's last token is not scored
      float sum = 0.0f;
      for (size_t j = from - 1; j + 1 + last < seq[k].size(); ++j)
        sum += token_logprob_f32(logits_at(k, j), seq[k][j + 1]);
      score[k] = sum / (float)(seq[k].size() - from - last);
    }
    const int pick = score[0] > score[1] ? 1 : 2;
    r.n_correct += pick == w.answer;
    r.n_tasks = t + 1;
    r.score = 100.0 * (double)r.n_correct / (double)r.n_tasks;
    if (on_task) on_task(t, r.score, score[0], score[1], pick, w.answer);
  }
  if (r.n_tasks > 1) {
    const float p = (float)r.n_correct / (float)r.n_tasks;
    r.score = 100.0 * p;
    r.stderr_ = 100.0f * std::sqrt(p * (1 - p) / (float)(r.n_tasks - 1));
  }
  return r;
}

}  // namespace loom
