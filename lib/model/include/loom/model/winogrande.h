// Winogrande as llama-perplexity --winogrande scores it: a CSV of "index,sentence,choice1,
// choice2,answer" rows whose sentence holds one '_', each choice put in its place, and the choice
// whose sentence's words after it score the higher mean log-probability picked. loom reads and
// scores the file exactly as llama-perplexity does, its quirks included (docs/CLI.md): the file's
// last line is not read, rows it cannot use are skipped, and where the two sentences differ within
// their last four tokens the second one's first scored token takes the first sentence's last logits.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "loom/model/session.h"
#include "loom/model/task_files.h"

namespace loom {

struct WinograndeResult {
  size_t n_tasks = 0;
  size_t n_correct = 0;
  double score = 0;    // percent
  double stderr_ = 0;  // percent, as llama-perplexity computes it (0 under 2 tasks)
};
// on_task(i, running score in percent, score of choice 1, of choice 2, the pick, the answer).
WinograndeResult winogrande(Session& session, const std::vector<WinograndeTask>& tasks,
                            const std::function<void(size_t, double, float, float, int, int)>& on_task);

}  // namespace loom
