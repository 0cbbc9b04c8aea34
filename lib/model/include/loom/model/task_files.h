// The task files of llama-perplexity's HellaSwag, Winogrande and multiple-choice scores, read as
// it reads them (and the tasks drawn as it draws them), with every bound checked: files people
// download. Scoring is in hellaswag.h, winogrande.h and multiple_choice.h.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

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

struct WinograndeTask {
  std::string first, second;  // the sentence before and after the '_'
  std::array<std::string, 2> choices;
  int answer = 1;  // 1 or 2
};

struct WinograndeFile {
  std::vector<WinograndeTask> tasks;
  size_t skipped = 0;  // rows without 4 separating commas, a '_' or an answer of 1 or 2
};
WinograndeFile parse_winogrande(std::string_view text);

// n tasks drawn as llama-perplexity draws them (std::mt19937(1)); all of them, in order, when n
// is 0 or at least their number.
std::vector<WinograndeTask> select_winogrande(std::vector<WinograndeTask> tasks, size_t n);

struct MultipleChoiceTask {
  std::string question;
  std::vector<std::string> answers;  // the file's mc1 answers (its mc2, several right, is read and left)
  std::vector<int32_t> labels;       // 1: right
};

// The file: u32 n_tasks, u32 offsets[n_tasks], then each task as a string (u32 length, bytes) and
// two answer sets (u32 n <= 100, n strings, n i32 labels). n_tasks 0 or at least the file's: every
// task in order; fewer: drawn as llama-perplexity draws them (std::mt19937(1)). Throws
// invalid_input naming `what` and the task for a truncated or malformed file, or an empty question
// or answer.
std::vector<MultipleChoiceTask> read_multiple_choice(std::string_view bytes, size_t n_tasks, std::string_view what);

}  // namespace loom
