// Multiple-choice scores (loom-run --multiple-choice): llama.cpp's binary task file read with every
// bound checked, its random draw, and the picks against each answer evaluated on its own.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "loom/core/error.h"
#include "loom/model/model.h"
#include "loom/model/model_file.h"
#include "loom/model/multiple_choice.h"
#include "task_test_util.h"

namespace loom {
namespace {

void put32(std::string& b, uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); }
void put_str(std::string& b, const std::string& s) {
  put32(b, (uint32_t)s.size());
  b += s;
}

// A file of tasks (question, answers, the right one), mc2 empty.
std::string task_file(const std::vector<std::tuple<std::string, std::vector<std::string>, int>>& tasks) {
  std::vector<std::string> bodies;
  for (const auto& [q, answers, right] : tasks) {
    std::string b;
    put_str(b, q);
    put32(b, (uint32_t)answers.size());
    for (const std::string& a : answers) put_str(b, a);
    for (size_t i = 0; i < answers.size(); ++i) put32(b, (int)i == right ? 1u : 0u);
    put32(b, 0);
    bodies.push_back(b);
  }
  std::string out;
  put32(out, (uint32_t)tasks.size());
  uint32_t pos = 4 + 4 * (uint32_t)tasks.size();
  for (const std::string& b : bodies) {
    put32(out, pos);
    pos += (uint32_t)b.size();
  }
  for (const std::string& b : bodies) out += b;
  return out;
}

std::vector<std::tuple<std::string, std::vector<std::string>, int>> some_tasks(int n) {
  std::vector<std::tuple<std::string, std::vector<std::string>, int>> t;
  for (int i = 0; i < n; ++i)
    t.push_back({"Question " + std::to_string(i) + ": which colour is the sky on a clear day?",
                 {"blue, mostly", "green as grass " + std::to_string(i), "red like fire"},
                 i % 3});
  return t;
}

TEST(MultipleChoice, ReadsTheBinaryFile) {
  const std::vector<MultipleChoiceTask> t = read_multiple_choice(task_file(some_tasks(3)), 0, "mc.bin");
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[1].question, "Question 1: which colour is the sky on a clear day?");
  ASSERT_EQ(t[1].answers.size(), 3u);
  EXPECT_EQ(t[1].answers[1], "green as grass 1");
  EXPECT_EQ(t[1].labels, (std::vector<int32_t>{0, 1, 0}));
  // fewer than there are: distinct tasks, the same draw every time
  const std::vector<MultipleChoiceTask> a = read_multiple_choice(task_file(some_tasks(9)), 4, "mc.bin");
  const std::vector<MultipleChoiceTask> b = read_multiple_choice(task_file(some_tasks(9)), 4, "mc.bin");
  ASSERT_EQ(a.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(a[i].question, b[i].question);
    for (size_t j = 0; j < i; ++j) EXPECT_NE(a[i].question, a[j].question);
  }
}

TEST(MultipleChoice, RefusesMalformedFiles) {
  const std::string good = task_file(some_tasks(2));
  std::string many = good;
  std::memcpy(many.data(), "\xff\xff\xff\x0f", 4);  // more tasks than bytes
  std::string far = good;
  const uint32_t past = 1u << 30;
  std::memcpy(far.data() + 4, &past, 4);  // both tasks' offsets
  std::memcpy(far.data() + 8, &past, 4);
  for (const auto& [bytes, n, needle] : std::vector<std::tuple<std::string, size_t, std::string>>{
           {"", 0, "truncated in the task count"},
           {std::string(4, '\0'), 0, "no tasks"},
           {good.substr(0, good.size() - 3), 0, "truncated in task 2"},
           {many, 0, "cannot fit"},
           {far, 1, "past the end"},
           {task_file({{"", {"a", "b"}, 0}}), 0, "task 1 has an empty question or no answers"},
           {task_file({{"q", {"a", ""}, 0}}), 0, "task 1 has an empty answer"},
           {task_file({{"q", std::vector<std::string>(101, "a"), 0}}), 0, "task 1 has 101 answers"}}) {
    try {
      read_multiple_choice(bytes, n, "mc.bin");
      ADD_FAILURE() << "accepted: " << needle;
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_input);
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  }
}

TEST(MultipleChoice, PicksTheAnswerWhoseTokensScoreBest) {
  test::ScratchDir dir("mc");
  std::unique_ptr<Model> m = test::tiny_llama(dir);
  SessionParams sp;
  sp.n_ctx = 256;
  Session s(*m, sp);
  const std::vector<MultipleChoiceTask> tasks = read_multiple_choice(task_file(some_tasks(6)), 0, "mc.bin");
  const MultipleChoiceResult r = multiple_choice(s, tasks, {});
  size_t correct = 0;
  for (const MultipleChoiceTask& t : tasks) {  // each answer from scratch, in double
    std::vector<double> score;
    std::vector<std::vector<int32_t>> seq;
    for (const std::string& a : t.answers) seq.push_back(m->tokenizer().tokenize(t.question + " " + a, true, false));
    size_t prefix = 0;
    while (std::all_of(seq.begin(), seq.end(), [&](const auto& q) { return q[prefix] == seq[0][prefix]; })) ++prefix;
    for (const std::vector<int32_t>& q : seq) {
      s.clear();
      s.decode(q, true);
      double sum = 0;
      for (size_t k = prefix; k < q.size(); ++k) {
        sum += test::logprob(s.logits((int64_t)k - 1), q[k]);
      }
      score.push_back(sum / (double)(q.size() - prefix));
    }
    correct += t.labels[(size_t)(std::max_element(score.begin(), score.end()) - score.begin())] == 1;
  }
  EXPECT_EQ(r.n_correct, correct);
  EXPECT_EQ(r.n_tasks, 6u);
  EXPECT_EQ(r.n_answers, 18u);
  EXPECT_NEAR(r.chance, 100.0 / 3.0, 1e-4);
}

}  // namespace
}  // namespace loom
