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

std::vector<HellaswagTask> parse_hellaswag(std::string_view text, std::string_view what) {
  std::vector<std::string_view> lines;
  for (size_t pos = 0; pos < text.size();) {  // getline: a last line without '\n' counts, no empty one after it
    const size_t end = std::min(text.find('\n', pos), text.size());
    lines.push_back(text.substr(pos, end - pos));
    pos = end + 1;
  }
  LOOM_CHECK(!lines.empty() && lines.size() % 6 == 0, invalid_input,
             "{}: {} lines, not a multiple of 6 (HellaSwag: context, gold index, four endings per task)", what,
             lines.size());
  std::vector<HellaswagTask> tasks(lines.size() / 6);
  for (size_t t = 0; t < tasks.size(); ++t) {
    HellaswagTask& h = tasks[t];
    h.context = lines[6 * t];
    const std::string_view g = lines[6 * t + 1];
    const auto [end, ec] = std::from_chars(g.data(), g.data() + g.size(), h.gold);
    LOOM_CHECK(ec == std::errc() && end == g.data() + g.size() && h.gold >= 0 && h.gold < 4, invalid_input,
               "{}: line {}: the gold ending's index must be 0, 1, 2 or 3, not '{}'", what, 6 * t + 2, g);
    for (size_t j = 0; j < 4; ++j) h.endings[j] = lines[6 * t + 2 + j];
  }
  return tasks;
}

std::vector<HellaswagTask> select_hellaswag(std::vector<HellaswagTask> tasks, size_t n) {
  std::mt19937 rng(1);
  std::vector<HellaswagTask> out;
  n = std::min(n, tasks.size());
  for (size_t i = 0; i < n; ++i) {
    std::uniform_int_distribution<size_t> dist(0, tasks.size() - 1);
    const size_t idx = dist(rng);
    out.push_back(std::move(tasks[idx]));
    tasks.erase(tasks.begin() + (std::ptrdiff_t)idx);
  }
  return out;
}

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

HellaswagResult hellaswag(Session& session, const std::vector<HellaswagTask>& tasks,
                          const std::function<void(size_t task, double acc_norm)>& on_task) {
  const Tokenizer& tok = session.model().tokenizer();
  HellaswagResult r;
  for (size_t t = 0; t < tasks.size(); ++t) {
    const HellaswagTask& h = tasks[t];
    std::array<std::vector<int32_t>, 4> seq;
    size_t shortest = SIZE_MAX, longest = 0;
    for (size_t s = 0; s < 4; ++s) {
      seq[s] = tok.tokenize(h.context + " " + h.endings[s], /*add_special=*/true, /*parse_special=*/false);
      shortest = std::min(shortest, seq[s].size());
      longest = std::max(longest, seq[s].size());
    }
    LOOM_CHECK((int64_t)longest <= session.n_ctx(), invalid_input,
               "HellaSwag task {} takes {} tokens, more than the context of {} (-c)", t + 1, longest, session.n_ctx());
    // The tokens all four share; at least one of each sequence's is left to score.
    size_t prefix = 0;
    while (prefix + 1 < shortest && seq[0][prefix] == seq[1][prefix] && seq[0][prefix] == seq[2][prefix] &&
           seq[0][prefix] == seq[3][prefix])
      ++prefix;
    LOOM_CHECK(prefix > 0, invalid_input, "HellaSwag task {}: the endings share no first token (an empty context?)",
               t + 1);
    session.clear();
    session.decode(std::span<const int32_t>(seq[0].data(), prefix));
    const std::vector<float> last(session.logits(0).begin(), session.logits(0).end());
    std::array<double, 4> score{};
    for (size_t s = 0; s < 4; ++s) {
      double sum = first_logprob(last, seq[s][prefix]);
      size_t count = 1;
      if (seq[s].size() - 1 > prefix) {  // the ending's tokens but its last, each predicting the next
        session.keep_first((int64_t)prefix);
        session.decode(std::span<const int32_t>(seq[s].data() + prefix, seq[s].size() - 1 - prefix), true);
        for (size_t j = prefix; j + 1 < seq[s].size(); ++j, ++count)
          sum += token_logprob_f32(session.logits((int64_t)(j - prefix)), seq[s][j + 1]);
      }
      score[s] = sum / (double)count;
    }
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
