// HellaSwag as llama-perplexity --hellaswag scores it: a text of 6 lines per task (the context,
// the index of the gold ending, four endings), tasks drawn in its random order, each ending
// scored by the mean log-probability of its tokens after the context, and acc_norm the share of
// tasks whose gold ending scores highest.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/model/session.h"

namespace loom {

struct HellaswagTask {
  std::string context;
  int gold = 0;  // 0..3
  std::array<std::string, 4> endings;
};

// The tasks of llama.cpp's hellaswag_val_full.txt layout; throws invalid_input naming the line
// (a line count not a multiple of 6, a gold index other than 0..3). `what` names the text.
std::vector<HellaswagTask> parse_hellaswag(std::string_view text, std::string_view what);

// The first n tasks in llama-perplexity's order: drawn one by one from those left with
// std::mt19937(1) (all of them, reordered, when n >= the count).
std::vector<HellaswagTask> select_hellaswag(std::vector<HellaswagTask> tasks, size_t n);

struct HellaswagResult {
  size_t n_tasks = 0;
  size_t n_correct = 0;
  double acc_norm = 0;                        // percent
  std::vector<std::array<double, 4>> scores;  // per task, each ending's mean log-probability
};

// Scores the tasks in order; on_task(i, running acc_norm in percent) after each. Throws
// invalid_input when a task's longest ending does not fit the session's context.
HellaswagResult hellaswag(Session& session, const std::vector<HellaswagTask>& tasks,
                          const std::function<void(size_t task, double acc_norm)>& on_task);

}  // namespace loom
