// loom-run --hellaswag, --winogrande and --multiple-choice: the task file read before the model loads, then the
// scores printed as llama-perplexity prints them (or one JSON object).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/tools/run.h"

namespace loom::tools {

TaskScore read_task_score(const RunOptions& ro) {
  TaskScore t;
  if (ro.hellaswag || ro.winogrande || ro.multiple_choice)
    LOOM_CHECK(!ro.prompt_file.empty(), usage, "--hellaswag, --winogrande, --multiple-choice need -f TASKS");
  if (ro.multiple_choice)
    t.multiple_choice = read_multiple_choice(prompt_text(ro), (size_t)ro.multiple_choice_tasks, ro.prompt_file);
  if (ro.hellaswag)
    t.hellaswag = select_hellaswag(parse_hellaswag(prompt_text(ro), ro.prompt_file), (size_t)ro.hellaswag_tasks);
  if (ro.winogrande) {
    WinograndeFile f = parse_winogrande(prompt_text(ro));
    LOOM_CHECK(!f.tasks.empty(), invalid_input,
               "{}: no Winogrande tasks (rows of index,sentence with _,choice1,choice2,answer 1 or 2)", ro.prompt_file);
    if (f.skipped > 0)
      logger().warn("--winogrande: {} rows of '{}' skipped (not index,sentence with _,choice1,choice2,1 or 2)",
                    f.skipped, ro.prompt_file);
    t.winogrande = select_winogrande(std::move(f.tasks), (size_t)ro.winogrande_tasks);
  }
  return t;
}

namespace {

// Runs score(on_task) between a header and a summary: per task "i\t<running %, 8 decimals>" as
// llama-perplexity prints HellaSwag and multiple-choice runs (Winogrande prints its own line);
// --json: summary(seconds) alone.
template <class Score>
int scored_run(bool json, const char* header, Score score,
               const std::function<nlohmann::ordered_json(double)>& json_summary,
               const std::function<std::string()>& text_summary) {
  const auto t0 = std::chrono::steady_clock::now();
  if (!json && header) fmt::print("{}", header);
  score([&](const std::string& line) {
    if (json) return;
    fmt::print("{}", line);
    std::fflush(stdout);
  });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (json)
    fmt::print("{}\n", json_summary(secs).dump(2));
  else
    fmt::print("{}", text_summary());
  return 0;
}

std::string acc_line(size_t i, double acc) { return fmt::format("{}\t{:.8f}\n", i + 1, acc); }

}  // namespace

int run_task_score(Session& session, const TaskScore& t, bool json) {
  using Json = nlohmann::ordered_json;
  using Line = std::function<void(const std::string&)>;
  if (!t.multiple_choice.empty()) {
    MultipleChoiceResult r;
    return scored_run(
        json, "\ntask\tacc_norm\n",
        [&](const Line& line) {
          r = multiple_choice(session, t.multiple_choice, [&](size_t i, double acc) { line(acc_line(i, acc)); });
        },
        [&](double secs) {
          return Json{{"tasks", r.n_tasks},        {"correct", r.n_correct},
                      {"score", r.score},          {"score_stderr", r.score_stderr},
                      {"random_chance", r.chance}, {"seconds", secs}};
        },
        [&] {
          return fmt::format("\nFinal result: {:.4f} +/- {:.4f}\nRandom chance: {:.4f} +/- {:.4f}\n", r.score,
                             r.score_stderr, r.chance, r.chance_stderr);
        });
  }
  if (!t.hellaswag.empty()) {
    HellaswagResult r;
    return scored_run(
        json, "\ntask\tacc_norm\n",
        [&](const Line& line) {
          r = hellaswag(session, t.hellaswag, [&](size_t i, double acc) { line(acc_line(i, acc)); });
        },
        [&](double secs) {
          return Json{{"tasks", r.n_tasks}, {"correct", r.n_correct}, {"acc_norm", r.acc_norm}, {"seconds", secs}};
        },
        [&] { return fmt::format("\nFinal estimate: acc_norm = {:.8f} over {} tasks\n", r.acc_norm, r.n_tasks); });
  }
  WinograndeResult r;
  return scored_run(
      json, nullptr,
      [&](const Line& line) {
        r = winogrande(session, t.winogrande, [&](size_t i, double acc, float s1, float s2, int pick, int answer) {
          line(fmt::format("{}\t{:.4f}\t{:10.6f}  {:10.6f}  {}  {}\n", i + 1, acc, s1, s2, pick, answer));
        });
      },
      [&](double secs) {
        return Json{{"tasks", r.n_tasks},
                    {"correct", r.n_correct},
                    {"score", r.score},
                    {"score_stderr", r.stderr_},
                    {"seconds", secs}};
      },
      [&] {
        return fmt::format("\nFinal Winogrande score({} tasks): {:.4f} +/- {:.4f}\n", r.n_tasks, r.score, r.stderr_);
      });
}

}  // namespace loom::tools
