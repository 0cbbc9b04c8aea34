// Task files (task_files.h): plain-text HellaSwag, Winogrande's CSV, the binary multiple-choice file.
#include "loom/model/task_files.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <random>
#include <sstream>

#include "loom/core/error.h"

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

WinograndeFile parse_winogrande(std::string_view text) {
  WinograndeFile out;
  // Lines as llama-perplexity's reader sees them: the text after the last '\n' (with -f, whose
  // own last newline is dropped, the file's last line) is not read.
  size_t pos = 0;
  for (size_t end; (end = text.find('\n', pos)) != std::string_view::npos; pos = end + 1) {
    const std::string_view line = text.substr(pos, end - pos);
    std::array<size_t, 4> comma{};
    int n = 0;
    bool quoted = false;
    for (size_t i = 0; i < line.size() && n < 4; ++i) {
      if (line[i] == '"')
        quoted = !quoted;
      else if (line[i] == ',' && !quoted)
        comma[(size_t)n++] = i;
    }
    if (n != 4) {
      ++out.skipped;
      continue;
    }
    const bool q = line[comma[0] + 1] == '"';
    const std::string_view sentence =
        q ? line.substr(comma[0] + 2, comma[1] - comma[0] - 3) : line.substr(comma[0] + 1, comma[1] - comma[0] - 1);
    const size_t where = sentence.find('_');
    std::istringstream answer(std::string(line.substr(comma[3] + 1)));
    int a = 0;
    answer >> a;
    if (where == std::string_view::npos || answer.fail() || a < 1 || a > 2) {
      ++out.skipped;
      continue;
    }
    WinograndeTask t;
    t.first = sentence.substr(0, where);
    t.second = sentence.substr(where + 1);
    t.choices = {std::string(line.substr(comma[1] + 1, comma[2] - comma[1] - 1)),
                 std::string(line.substr(comma[2] + 1, comma[3] - comma[2] - 1))};
    t.answer = a;
    out.tasks.push_back(std::move(t));
  }
  return out;
}

std::vector<WinograndeTask> select_winogrande(std::vector<WinograndeTask> tasks, size_t n) {
  if (n == 0 || n >= tasks.size()) return tasks;
  std::mt19937 rng(1);
  std::vector<size_t> left(tasks.size());
  for (size_t i = 0; i < left.size(); ++i) left[i] = i;
  const float scale = 1.0f / (1.0f + (float)std::mt19937::max());  // its float arithmetic, step by step
  std::vector<WinograndeTask> out;
  for (size_t i = 0; i < n; ++i) {
    const float u = scale * (float)rng();
    const size_t j = (size_t)(int)(u * (float)left.size());
    out.push_back(std::move(tasks[left[j]]));
    left[j] = left.back();
    left.pop_back();
  }
  return out;
}

namespace {

// Reads little-endian fields from bytes, throwing when one would run past the end.
class TaskReader {
 public:
  TaskReader(std::string_view bytes, std::string_view what) : b_(bytes), what_(what) {}
  void seek(size_t pos) {
    LOOM_CHECK(pos <= b_.size(), invalid_input, "{}: a task offset {} past the end ({} bytes)", what_, pos, b_.size());
    pos_ = pos;
  }
  template <class T>
  T read(std::string_view field) {
    T v;
    need(sizeof v, field);
    std::memcpy(&v, b_.data() + pos_, sizeof v);
    pos_ += sizeof v;
    return v;
  }
  std::string string(std::string_view field) {
    const uint32_t n = read<uint32_t>(field);
    need(n, field);
    std::string s(b_.substr(pos_, n));
    pos_ += n;
    return s;
  }

 private:
  void need(size_t n, std::string_view field) const {
    LOOM_CHECK(n <= b_.size() - pos_, invalid_input, "{}: truncated in {} (at byte {})", what_, field, pos_);
  }
  std::string_view b_;
  std::string_view what_;
  size_t pos_ = 0;
};

MultipleChoiceTask read_task(TaskReader& in, size_t index, std::string_view what) {
  const std::string field = fmt::format("task {}", index + 1);
  MultipleChoiceTask t;
  t.question = in.string(field);
  for (int set = 0; set < 2; ++set) {
    const uint32_t n = in.read<uint32_t>(field);
    LOOM_CHECK(n <= 100, invalid_input, "{}: task {} has {} answers (at most 100)", what, index + 1, n);
    std::vector<std::string> answers(n);
    for (std::string& a : answers) a = in.string(field);
    std::vector<int32_t> labels(n);
    for (int32_t& l : labels) l = in.read<int32_t>(field);
    if (set == 0) {
      t.answers = std::move(answers);
      t.labels = std::move(labels);
    }
  }
  LOOM_CHECK(!t.question.empty() && !t.answers.empty(), invalid_input,
             "{}: task {} has an empty question or no answers", what, index + 1);
  for (const std::string& a : t.answers)
    LOOM_CHECK(!a.empty(), invalid_input, "{}: task {} has an empty answer", what, index + 1);
  return t;
}

}  // namespace

std::vector<MultipleChoiceTask> read_multiple_choice(std::string_view bytes, size_t n_tasks, std::string_view what) {
  TaskReader in(bytes, what);
  const uint32_t n = in.read<uint32_t>("the task count");
  LOOM_CHECK(n > 0, invalid_input, "{}: no tasks", what);
  LOOM_CHECK((size_t)n <= bytes.size() / 4, invalid_input, "{}: {} tasks cannot fit {} bytes", what, n, bytes.size());
  std::vector<uint32_t> pos(n);
  for (uint32_t& p : pos) p = in.read<uint32_t>("the task offsets");
  std::vector<MultipleChoiceTask> tasks;
  if (n_tasks == 0 || n_tasks >= n) {
    for (size_t i = 0; i < n; ++i) tasks.push_back(read_task(in, i, what));
    return tasks;
  }
  std::mt19937 rng(1);  // llama-perplexity's draw, in its float arithmetic
  std::vector<uint32_t> left(n);
  for (uint32_t i = 0; i < n; ++i) left[i] = i;
  const float scale = 1.0f / (1.0f + (float)std::mt19937::max());
  for (size_t k = 0; k < n_tasks; ++k) {
    const float u = scale * (float)rng();
    const size_t j = (size_t)(int)(u * (float)left.size());
    const uint32_t idx = left[j];
    left[j] = left.back();
    left.pop_back();
    in.seek(pos[idx]);
    tasks.push_back(read_task(in, idx, what));
  }
  return tasks;
}

}  // namespace loom
