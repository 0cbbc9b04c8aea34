// Winogrande (loom-run --winogrande): llama-perplexity's CSV reading (quoted sentences, skipped
// rows, its last line left out), its task order, and the scores against each sentence evaluated
// on its own from scratch, llama-perplexity's first-logits quirk included.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "loom/core/error.h"
#include "loom/model/model.h"
#include "loom/model/model_file.h"
#include "loom/model/winogrande.h"
#include "task_test_util.h"

namespace loom {
namespace {

TEST(Winogrande, ReadsTheCsvAsLlamaPerplexityDoes) {
  const WinograndeFile f = parse_winogrande(
      "index,sentence,option1,option2,answer\n"  // no '_': skipped (a header)
      "0,Sarah was a better surgeon than Maria so _ got the easy cases.,Sarah,Maria,2\n"
      "1,\"Quoted, with a comma: _ wins.\",Tom,Ann,1\n"
      "2,too,few,commas\n"                        // skipped
      "3,The _ is here.,cat,dog,3\n"              // answer out of range: skipped
      "4,The last _ is never read.,line,row,1");  // no newline after it: not read
  EXPECT_EQ(f.skipped, 3u);
  ASSERT_EQ(f.tasks.size(), 2u);
  EXPECT_EQ(f.tasks[0].first, "Sarah was a better surgeon than Maria so ");
  EXPECT_EQ(f.tasks[0].second, " got the easy cases.");
  EXPECT_EQ(f.tasks[0].choices[1], "Maria");
  EXPECT_EQ(f.tasks[0].answer, 2);
  EXPECT_EQ(f.tasks[1].first, "Quoted, with a comma: ");
  EXPECT_EQ(f.tasks[1].choices[0], "Tom");
  EXPECT_EQ(f.tasks[1].answer, 1);
}

std::vector<WinograndeTask> make_tasks(int n) {
  std::vector<WinograndeTask> t((size_t)n);
  for (int i = 0; i < n; ++i) {
    t[(size_t)i].first = "Task " + std::to_string(i) + ": the trophy did not fit in the case because the ";
    // even tasks: a long tail (the choice word is not scored); odd ones: a one-letter choice ends the
    // sentence (the choice is scored, from the shared prefix on)
    t[(size_t)i].second = i % 2 == 0 ? " was far too big for it, they said." : ".";
    t[(size_t)i].choices =
        i % 2 == 0 ? std::array<std::string, 2>{"trophy", "suitcase"} : std::array<std::string, 2>{"x", "y"};
    t[(size_t)i].answer = 1 + i % 2;
  }
  return t;
}

TEST(Winogrande, SelectsAllInOrderOrDistinctOnes) {
  const std::vector<WinograndeTask> all = make_tasks(12);
  const std::vector<WinograndeTask> same = select_winogrande(all, 0);
  ASSERT_EQ(same.size(), 12u);
  EXPECT_EQ(same[5].first, all[5].first);
  const std::vector<WinograndeTask> some = select_winogrande(all, 5);
  ASSERT_EQ(some.size(), 5u);
  std::set<std::string> seen;
  for (const WinograndeTask& t : some) seen.insert(t.first);
  EXPECT_EQ(seen.size(), 5u);
  EXPECT_EQ(select_winogrande(all, 5)[3].first, some[3].first);
}

TEST(Winogrande, ScoresEqualEachSentenceEvaluatedAlone) {
  test::ScratchDir dir("winogrande");
  std::unique_ptr<Model> m = test::tiny_llama(dir);
  SessionParams sp;
  sp.n_ctx = 256;
  Session s(*m, sp);
  const std::vector<WinograndeTask> tasks = make_tasks(4);
  std::vector<std::array<float, 2>> got;
  std::vector<int> picks;
  const WinograndeResult r = winogrande(s, tasks, [&](size_t, double, float s1, float s2, int pick, int) {
    got.push_back({s1, s2});
    picks.push_back(pick);
  });
  ASSERT_EQ(got.size(), 4u);
  const Tokenizer& tok = m->tokenizer();
  size_t correct = 0;
  for (size_t t = 0; t < tasks.size(); ++t) {
    std::array<std::vector<int32_t>, 2> seq;
    std::array<std::vector<float>, 2> rows;  // every position's logits, from scratch
    for (size_t k = 0; k < 2; ++k) {
      seq[k] = tok.tokenize(tasks[t].first + tasks[t].choices[k] + tasks[t].second, true, false);
      s.clear();
      s.decode(seq[k], true);
      for (size_t p = 0; p < seq[k].size(); ++p)
        rows[k].insert(rows[k].end(), s.logits((int64_t)p).begin(), s.logits((int64_t)p).end());
    }
    size_t prefix = 0;
    while (seq[0][prefix] == seq[1][prefix]) ++prefix;
    const bool skip = seq[0].size() - prefix > 3 && seq[1].size() - prefix > 3;
    EXPECT_EQ(skip, t % 2 == 0) << "the tasks should exercise both ways";
    const size_t nv = (size_t)m->hparams().n_vocab;
    for (size_t k = 0; k < 2; ++k) {
      const size_t from = skip ? tok.tokenize(tasks[t].first + tasks[t].choices[k], true, false).size() : prefix;
      const size_t last = seq[k].size() - from > 1 ? 1 : 0;
      double sum = 0;
      for (size_t j = from - 1; j + 1 + last < seq[k].size(); ++j) {
        // llama-perplexity's quirk: the second sentence's first logits are the first's last
        const bool quirk = k == 1 && j + 1 == prefix;
        const std::span<const float> row = quirk ? std::span<const float>(rows[0]).subspan((seq[0].size() - 1) * nv, nv)
                                                 : std::span<const float>(rows[k]).subspan(j * nv, nv);
        sum += test::logprob(row, seq[k][j + 1]);
      }
      EXPECT_NEAR(got[t][k], sum / (double)(seq[k].size() - from - last), 1e-4) << t << " " << k;
    }
    correct += picks[t] == tasks[t].answer;
  }
  EXPECT_EQ(r.n_correct, correct);
  EXPECT_EQ(r.n_tasks, 4u);
}

}  // namespace
}  // namespace loom
