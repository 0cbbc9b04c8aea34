// HellaSwag as llama-perplexity --hellaswag scores it: a text of 6 lines per task (the context,
// the index of the gold ending, four endings), tasks drawn in its random order, each ending
// scored by the mean log-probability of its tokens after the context, and acc_norm the share of
// tasks whose gold ending scores highest.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/model/session.h"
#include "loom/model/task_files.h"

namespace loom {

struct HellaswagResult {
  size_t n_tasks = 0;
  size_t n_correct = 0;
  double acc_norm = 0;                        // percent
  std::vector<std::array<double, 4>> scores;  // per task, each ending's mean log-probability
};

// The mean log-probability of each answer's tokens after context + " " as llama-perplexity's
// HellaSwag and multiple-choice scores take it: the shared prefix evaluated once, the first
// answer token's from a softmax, the rest in float; summed in double (HellaSwag) or in float
// (sum_in_float: multiple choice). Throws invalid_input naming `what` when an answer does not fit
// the context or the answers share no first token.
std::vector<double> score_continuations(Session& session, const std::string& context,
                                        std::span<const std::string> answers, bool sum_in_float, std::string_view what);

// Scores the tasks in order; on_task(i, running acc_norm in percent) after each. Throws
// invalid_input when a task's longest ending does not fit the session's context.
HellaswagResult hellaswag(Session& session, const std::vector<HellaswagTask>& tasks,
                          const std::function<void(size_t task, double acc_norm)>& on_task);

}  // namespace loom
