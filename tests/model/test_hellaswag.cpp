// HellaSwag (loom-run --hellaswag): the task file's layout and its errors, llama-perplexity's task
// order, and the shared-prefix scoring against each ending evaluated on its own from scratch.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "loom/core/error.h"
#include "loom/model/hellaswag.h"
#include "loom/model/model.h"
#include "loom/model/model_file.h"
#include "task_test_util.h"

namespace loom {
namespace {

std::string task_text(int n) {
  std::string t;
  for (int i = 0; i < n; ++i) {
    t += "Context " + std::to_string(i) + ": a person opens the door and\n" + std::to_string(i % 4) + "\n";
    for (int j = 0; j < 4; ++j)
      t += "ending " + std::to_string(j) + (j == i % 4 ? " walks in." : " sings to the window, " + std::to_string(i)) +
           "\n";
  }
  return t;
}

TEST(Hellaswag, ParsesSixLinesPerTask) {
  const std::vector<HellaswagTask> t = parse_hellaswag(task_text(3), "t.txt");
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[1].context, "Context 1: a person opens the door and");
  EXPECT_EQ(t[1].gold, 1);
  EXPECT_EQ(t[1].endings[1], "ending 1 walks in.");
  EXPECT_EQ(parse_hellaswag(task_text(2).substr(0, task_text(2).size() - 1), "t.txt").size(), 2u);  // no last newline
}

TEST(Hellaswag, RefusesBadFilesNamingTheLine) {
  std::string bad_gold = task_text(2);
  bad_gold.replace(bad_gold.find("\n1\n"), 3, "\n4\n");
  for (const auto& [text, needle] : std::vector<std::pair<std::string, std::string>>{
           {"", "0 lines"},
           {task_text(2) + "extra\n", "13 lines"},
           {bad_gold, "line 8: the gold ending's index must be 0, 1, 2 or 3, not '4'"}}) {
    try {
      parse_hellaswag(text, "t.txt");
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_input);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

TEST(Hellaswag, SelectsDistinctTasksInARepeatableOrder) {
  const std::vector<HellaswagTask> all = parse_hellaswag(task_text(20), "t.txt");
  const std::vector<HellaswagTask> a = select_hellaswag(all, 7), b = select_hellaswag(all, 7);
  ASSERT_EQ(a.size(), 7u);
  std::set<std::string> seen;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].context, b[i].context);
    seen.insert(a[i].context);
  }
  EXPECT_EQ(seen.size(), 7u);
  // more than there are: every task once, drawn in the same order as the first 7
  const std::vector<HellaswagTask> every = select_hellaswag(all, 1000);
  ASSERT_EQ(every.size(), 20u);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(every[i].context, a[i].context);
}

// Each ending's mean log-probability, its whole sequence evaluated from an empty cache.
std::array<double, 4> scores_alone(Session& s, const HellaswagTask& h) {
  const Tokenizer& tok = s.model().tokenizer();
  std::array<std::vector<int32_t>, 4> seq;
  for (int j = 0; j < 4; ++j) seq[j] = tok.tokenize(h.context + " " + h.endings[j], true, false);
  size_t prefix = 0;
  while (seq[0][prefix] == seq[1][prefix] && seq[0][prefix] == seq[2][prefix] && seq[0][prefix] == seq[3][prefix])
    ++prefix;
  std::array<double, 4> out{};
  for (int j = 0; j < 4; ++j) {
    s.clear();
    s.decode(seq[j], true);
    double sum = 0;
    for (size_t k = prefix; k < seq[j].size(); ++k) {
      sum += test::logprob(s.logits((int64_t)k - 1), seq[j][k]);
    }
    out[j] = sum / (double)(seq[j].size() - prefix);
  }
  return out;
}

TEST(Hellaswag, SharedPrefixScoresEqualEachEndingEvaluatedAlone) {
  test::ScratchDir dir("hellaswag");
  std::unique_ptr<Model> m = test::tiny_llama(dir);
  SessionParams sp;
  sp.n_ctx = 256;
  Session s(*m, sp);
  const std::vector<HellaswagTask> tasks = select_hellaswag(parse_hellaswag(task_text(6), "t.txt"), 6);
  std::vector<double> running;
  const HellaswagResult r = hellaswag(s, tasks, [&](size_t, double acc) { running.push_back(acc); });
  ASSERT_EQ(r.n_tasks, 6u);
  ASSERT_EQ(running.size(), 6u);
  size_t correct = 0;
  for (size_t t = 0; t < tasks.size(); ++t) {
    const std::array<double, 4> alone = scores_alone(s, tasks[t]);
    for (int j = 0; j < 4; ++j) EXPECT_NEAR(r.scores[t][(size_t)j], alone[(size_t)j], 1e-4) << t << " " << j;
    correct += std::max_element(r.scores[t].begin(), r.scores[t].end()) - r.scores[t].begin() == tasks[t].gold;
  }
  EXPECT_EQ(r.n_correct, correct);
  EXPECT_DOUBLE_EQ(r.acc_norm, 100.0 * (double)correct / 6.0);
  EXPECT_DOUBLE_EQ(running.back(), r.acc_norm);
  // a task longer than the context is refused
  sp.n_ctx = 16;
  Session small(*m, sp);
  EXPECT_THROW(hellaswag(small, tasks, {}), Error);
}

}  // namespace
}  // namespace loom
