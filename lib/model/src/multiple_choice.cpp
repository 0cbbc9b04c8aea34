// Multiple-choice scoring (multiple_choice.h): each task through score_continuations (hellaswag.h)
// with llama-perplexity's float sums; the file is read in task_files.cpp.
#include "loom/model/multiple_choice.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "loom/core/error.h"
#include "loom/model/hellaswag.h"

namespace loom {

MultipleChoiceResult multiple_choice(Session& session, const std::vector<MultipleChoiceTask>& tasks,
                                     const std::function<void(size_t, double)>& on_task) {
  MultipleChoiceResult r;
  for (size_t t = 0; t < tasks.size(); ++t) {
    const MultipleChoiceTask& task = tasks[t];
    const std::vector<double> score =
        score_continuations(session, task.question, task.answers, true, fmt::format("multiple-choice task {}", t + 1));
    const size_t best = (size_t)(std::max_element(score.begin(), score.end()) - score.begin());  // the first on ties
    r.n_correct += task.labels[best] == 1;
    r.n_answers += task.answers.size();
    r.n_tasks = t + 1;
    r.score = 100.0 * (double)r.n_correct / (double)r.n_tasks;
    if (on_task) on_task(t, r.score);
  }
  if (r.n_tasks > 1) {  // llama-perplexity's float arithmetic
    float p = (float)r.n_correct / (float)r.n_tasks;
    r.score = 100.0f * p;
    r.score_stderr = 100.0f * std::sqrt(p * (1 - p) / (float)(r.n_tasks - 1));
    p = (float)r.n_tasks / (float)r.n_answers;
    r.chance = 100.0f * p;
    r.chance_stderr = 100.0f * std::sqrt(p * (1 - p) / (float)(r.n_tasks - 1));
  }
  return r;
}

}  // namespace loom
