// HellaSwag scoring (hellaswag.h). The four endings share the context's tokens: the common prefix
// is evaluated once, then each ending from there (Session::keep_first), one sequence at a time.
#include "loom/model/hellaswag.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <random>

#include "loom/core/error.h"
#include "loom/model/generate.h"

namespace loom {

namespace {

// log p(token) of the first ending token: a float softmax with its sum kept in double.
float first_logprob(std::span<const float> logits, int32_t token) {
  const float max = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float v : logits) sum += std::exp(v - max);
  const float p = (float)(std::exp(logits[(size_t)token] - max) / sum);
  return std::log(p);
}

}  // namespace

std::vector<double> score_continuations(Session& session, const std::string& context,
                                        std::span<const std::string> answers, bool sum_in_float,
                                        std::string_view what) {
  const Tokenizer& tok = session.model().tokenizer();
  const size_t n = answers.size();
  LOOM_CHECK(n > 0, invalid_input, "{}: no answers", what);
  std::vector<std::vector<int32_t>> seq(n);
  size_t shortest = SIZE_MAX, longest = 0;
  for (size_t s = 0; s < n; ++s) {
    seq[s] = tok.tokenize(context + " " + answers[s], /*add_special=*/true, /*parse_special=*/false);
    shortest = std::min(shortest, seq[s].size());
    longest = std::max(longest, seq[s].size());
  }
  LOOM_CHECK((int64_t)longest <= session.n_ctx(), invalid_input, "{} takes {} tokens, more than the context of {} (-c)",
             what, longest, session.n_ctx());
  // The tokens all answers share; at least one of each sequence's is left to score.
  size_t prefix = 0;
  while (prefix + 1 < shortest && std::all_of(seq.begin(), seq.end(), [&](const std::vector<int32_t>& q) {
           return q[prefix] == seq[0][prefix];
         }))
    ++prefix;
  LOOM_CHECK(prefix > 0, invalid_input, "{}: the answers share no first token (an empty context?)", what);
  session.clear();
  session.decode(std::span<const int32_t>(seq[0].data(), prefix));
  const std::vector<float> last(session.logits(0).begin(), session.logits(0).end());
  std::vector<double> score(n);
  for (size_t s = 0; s < n; ++s) {
    // llama-perplexity sums HellaSwag's terms in double, the multiple-choice ones in float
    double sum = first_logprob(last, seq[s][prefix]);
    float sum_f = (float)sum;
    size_t count = 1;
    if (seq[s].size() - 1 > prefix) {  // the answer's tokens but its last, each predicting the next
      session.keep_first((int64_t)prefix);
      session.decode(std::span<const int32_t>(seq[s].data() + prefix, seq[s].size() - 1 - prefix), true);
      for (size_t j = prefix; j + 1 < seq[s].size(); ++j, ++count) {
        const float lp = token_logprob_f32(session.logits((int64_t)(j - prefix)), seq[s][j + 1]);
        sum += lp;
        sum_f += lp;
      }
    }
    score[s] = sum_in_float ? (double)(sum_f / (float)count) : sum / (double)count;
  }
  return score;
}

HellaswagResult hellaswag(Session& session, const std::vector<HellaswagTask>& tasks,
                          const std::function<void(size_t task, double acc_norm)>& on_task) {
  HellaswagResult r;
  for (size_t t = 0; t < tasks.size(); ++t) {
    const HellaswagTask& h = tasks[t];
    const std::vector<double> s =
        score_continuations(session, h.context, h.endings, false, fmt::format("HellaSwag task {}", t + 1));
    const std::array<double, 4> score{s[0], s[1], s[2], s[3]};
    const size_t best = (size_t)(std::max_element(score.begin(), score.end()) - score.begin());  // the first on ties
    r.n_correct += best == (size_t)h.gold;
    r.scores.push_back(score);
    r.n_tasks = t + 1;
    r.acc_norm = 100.0 * (double)r.n_correct / (double)r.n_tasks;
    if (on_task) on_task(t, r.acc_norm);
  }
  return r;
}

}  // namespace loom
