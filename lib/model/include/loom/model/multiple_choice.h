// Multiple-choice scores as llama-perplexity --multiple-choice computes them (ARC, MMLU,
// TruthfulQA in llama.cpp's binary task files): each answer scored by the mean log-probability of
// its tokens after question + " ", the task right when the best-scoring answer is labelled 1.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/model/session.h"
#include "loom/model/task_files.h"

namespace loom {

struct MultipleChoiceResult {
  size_t n_tasks = 0, n_correct = 0, n_answers = 0;
  double score = 0, score_stderr = 0;    // percent
  double chance = 0, chance_stderr = 0;  // the score of a random pick
};
// on_task(i, running score in percent) after each task.
MultipleChoiceResult multiple_choice(Session& session, const std::vector<MultipleChoiceTask>& tasks,
                                     const std::function<void(size_t, double)>& on_task);

}  // namespace loom
