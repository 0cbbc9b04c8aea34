// loom-run's own flags (generation, sampling, conversation) and the conversation loop on
// stdin/stdout. docs/CLI.md lists them against llama-cli's.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/model/grammar.h"
#include "loom/model/hellaswag.h"
#include "loom/model/multiple_choice.h"
#include "loom/model/sampler.h"
#include "loom/model/session.h"
#include "loom/model/winogrande.h"

namespace CLI {
class App;
}

namespace loom::tools {

struct RunOptions {
  std::string prompt, prompt_file;
  int64_t n_predict = 128;
  std::optional<int> n_threads_batch;  // -tb N: threads for prompts and scored texts (N <= 0: all cores)
  bool no_echo = false;
  bool perplexity = false;
  int64_t n_chunks = -1;
  int64_t ppl_stride = 0;      // --ppl-stride N: llama-perplexity's strided windows (0: chunks)
  int ppl_output_type = 0;     // --ppl-output-type 0|1: "[i]ppl," or "start  ppl" lines
  std::string kl_base;         // --kl-divergence-base FILE: written by --perplexity, read by --kl-divergence
  bool kl_divergence = false;  // --kl-divergence: the model's distributions against kl_base's
  std::string imatrix_out;     // --imatrix-out FILE: --perplexity also writes llama-imatrix's matrix
  bool process_output = false;  // --process-output: ... including output.weight's
  bool hellaswag = false;      // --hellaswag: acc_norm over -f's tasks (llama-perplexity's)
  int64_t hellaswag_tasks = 400;
  bool winogrande = false;       // --winogrande: the Winogrande score over -f's CSV (llama-perplexity's)
  int64_t winogrande_tasks = 0;  // 0: all
  bool multiple_choice = false;  // --multiple-choice: llama.cpp's binary task files (ARC, MMLU, ...)
  int64_t multiple_choice_tasks = 0;  // 0: all
  // sampling
  SamplerParams sampling;
  int64_t seed = -1;  // -1: random (printed)
  std::string samplers, sampling_seq, dry_breakers;
  std::vector<std::string> logit_bias;  // TOKEN_ID(+|-)BIAS, e.g. 15043+1 or 2-inf
  bool ignore_eos = false;
  // conversation
  bool conversation = false, no_conversation = false, interactive = false, single_turn = false;
  std::string system_prompt, system_prompt_file, chat_template, in_prefix, in_suffix;
  std::vector<std::string> reverse_prompts;
  bool jinja = false;
  bool color = false;
  bool in_prefix_bos = false;  // --in-prefix-bos
  bool escape = true;  // -e (default) / --no-escape, as llama-cli
  bool no_perf = false;    // --no-perf: no loom_perf lines
  bool verbose_prompt = false;  // --verbose-prompt: the prompt's tokens on stderr
  bool no_warmup = false;  // --no-warmup: accepted; loom runs no warmup pass
  std::string grammar, grammar_file;                       // --grammar GBNF, --grammar-file FILE (docs/GRAMMAR.md)
  std::string json_schema, json_schema_file;               // -j SCHEMA, -jf FILE: a grammar made from a JSON Schema
  std::string prompt_cache;                                // --prompt-cache FILE
  bool prompt_cache_all = false, prompt_cache_ro = false;  // --prompt-cache-all, --prompt-cache-ro
};

void add_run_flags(CLI::App& app, RunOptions& o);

// llama.cpp's escapes: \n, \r, \t, \', \", \\ and \xHH (two hex digits) become the character;
// any other backslash, and a last one, stays as it is.
std::string process_escapes(std::string_view text);
// A file's text as llama.cpp reads -f and -sysf: one trailing newline dropped. `flag` names the
// option in errors.
std::string read_prompt_file(const std::string& path, std::string_view flag);
// The prompt (-p) or the file's text (-f, read_prompt_file), escapes processed unless --no-escape.
std::string prompt_text(const RunOptions& o);

// The sampler settings with the seed drawn (when -1), --samplers, -l, --ignore-eos and the DRY
// breakers resolved against the model's vocabulary. Throws Error(usage) for bad values.
SamplerParams sampler_params(RunOptions& o, const Tokenizer& tok);

// The --grammar, --grammar-file or JSON Schema (-j, -jf) grammar, parsed; null without one.
// Throws Error(usage).
std::shared_ptr<const Grammar> run_grammar(const RunOptions& o);

// --hellaswag / --winogrande / --multiple-choice: the tasks of -f, read and drawn (throws: a usage error without -f,
// invalid_input for a bad file), and their scores printed (--json: one object). Exit code.
struct TaskScore {
  std::vector<HellaswagTask> hellaswag;
  std::vector<WinograndeTask> winogrande;
  std::vector<MultipleChoiceTask> multiple_choice;
};
TaskScore read_task_score(const RunOptions& ro);
int run_task_score(Session& session, const TaskScore& tasks, bool json);

// Whether this run is a conversation (-cnv, -i, or no -p/-f with a model chat template).
bool wants_conversation(const RunOptions& o, const Model& model);

// Reads turns from stdin (a terminal or a pipe) and streams the replies to stdout; --json:
// one object with every turn at the end. Ctrl-C ends a reply, a second one exits 130.
// load_ms is reported in the loom_perf lines. Returns the exit code.
int run_conversation(Session& session, RunOptions& o, const SamplerParams& sp, std::shared_ptr<const Grammar> grammar,
                     bool json, double load_ms);

// The four `loom_perf:` lines of docs/CLI.md on stderr.
void print_perf(double load_ms, double prompt_ms, int64_t n_prompt, double eval_ms, int64_t n_gen);

}  // namespace loom::tools
