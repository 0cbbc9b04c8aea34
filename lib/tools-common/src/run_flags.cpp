// loom-run's flags in llama-cli's spellings, and their resolution into SamplerParams.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <random>

#include "loom/core/error.h"
#include "loom/core/files.h"
#include "loom/model/model.h"
#include "loom/tools/run.h"

namespace loom::tools {

void add_run_flags(CLI::App& app, RunOptions& o) {
  SamplerParams& s = o.sampling;
  app.add_option("-p,--prompt", o.prompt, "prompt text (in a conversation: the first user message)");
  app.add_option("-f,--file", o.prompt_file, "read the prompt (or the perplexity text) from a file");
  app.add_option("-n,--n-predict,--predict", o.n_predict,
                 "tokens to generate (per reply; -1 or -2 = until the context is full)");
  app.add_option("--threads-batch", o.n_threads_batch,
                 "CPU threads for prompts and perplexity batches (-tb; default: as -t; 0 or less: all cores)");
  app.add_flag("--no-echo", o.no_echo, "print only the generated text");
  app.add_flag("--perplexity", o.perplexity, "measure perplexity over -f TEXT");
  app.add_option("--chunks", o.n_chunks, "perplexity: at most N chunks");
  app.add_option(
      "--ppl-stride", o.ppl_stride,
      "perplexity over windows of -c + N/2 tokens every N tokens, each's last N scored (llama-perplexity's)");
  app.add_option("--ppl-output-type", o.ppl_output_type,
                 "--ppl-stride's lines: 0 \"[i]ppl,\" (default), 1 \"start ppl\"");
  app.add_option("--kl-divergence-base,--save-all-logits", o.kl_base,
                 "--perplexity: also write every scored distribution to FILE (llama-perplexity's format); "
                 "--kl-divergence: read it");
  app.add_option("--imatrix-out", o.imatrix_out,
                 "--perplexity: also compute an importance matrix over -f TEXT and write it to FILE "
                 "(llama-imatrix's GGUF, for loom-gguf quantize --imatrix)");
  app.add_flag("--process-output", o.process_output, "--imatrix-out: include output.weight (llama-imatrix's flag)");
  app.add_flag("--hellaswag", o.hellaswag,
               "HellaSwag acc_norm over -f TASKS (llama-perplexity's file layout and order)");
  app.add_option("--hellaswag-tasks", o.hellaswag_tasks, "--hellaswag: tasks to score (default 400)");
  app.add_flag("--winogrande", o.winogrande,
               "Winogrande score over -f TASKS.csv (llama-perplexity's reading and order)");
  app.add_option("--winogrande-tasks", o.winogrande_tasks, "--winogrande: tasks to score (default 0: all)");
  app.add_flag("--multiple-choice", o.multiple_choice,
               "multiple-choice score over -f TASKS.bin (llama.cpp's ARC, MMLU, TruthfulQA files)");
  app.add_option("--multiple-choice-tasks", o.multiple_choice_tasks,
                 "--multiple-choice: tasks to score (default 0: all)");
  app.add_flag("--kl-divergence", o.kl_divergence,
               "KL divergence and token statistics against the --kl-divergence-base file (its text and -c)");

  app.add_option("-s,--seed", o.seed, "random seed (-1 = random, printed on stderr)");
  app.add_option("--temp", s.temp, "temperature (0 = greedy)");
  app.add_option("--top-k", s.top_k, "top-k sampling (0 = off)");
  app.add_option("--top-p", s.top_p, "top-p sampling (1 = off)");
  app.add_option("--min-p", s.min_p, "min-p sampling (0 = off)");
  app.add_option("--typical", s.typical_p, "locally typical sampling, p (1 = off)");
  app.add_option("--top-nsigma", s.top_n_sigma,
                 "top-n-sigma: keep logits within N standard deviations of the top (-1 = off)");
  app.add_option("--dynatemp-range", s.dynatemp_range, "dynamic temperature: temp -/+ this with the entropy (0 = off)");
  app.add_option("--dynatemp-exp", s.dynatemp_exponent, "dynamic temperature exponent");
  app.add_option("--repeat-penalty", s.repeat_penalty, "penalty for repeated tokens (1 = off)");
  app.add_option("--repeat-last-n", s.repeat_last_n, "tokens the penalties look at (0 = off, -1 = all)");
  app.add_option("--presence-penalty", s.presence_penalty, "subtracted once from a token seen (0 = off)");
  app.add_option("--frequency-penalty", s.frequency_penalty, "subtracted per occurrence of a token (0 = off)");
  app.add_option("--xtc-probability", s.xtc_probability, "XTC: chance of removing the top tokens (0 = off)");
  app.add_option("--xtc-threshold", s.xtc_threshold, "XTC: tokens at least this likely are removed (> 0.5 = off)");
  app.add_option("--dry-multiplier", s.dry_multiplier, "DRY repetition penalty multiplier (0 = off)");
  app.add_option("--dry-base", s.dry_base, "DRY base");
  app.add_option("--dry-allowed-length", s.dry_allowed_length, "DRY: repeats up to this length are free");
  app.add_option("--dry-penalty-last-n", s.dry_last_n, "DRY: tokens looked at (-1 = all)");
  app.add_option("--dry-sequence-breaker", o.dry_breakers,
                 "DRY: comma-separated strings that end a repeat (default: newline, colon, quote, asterisk; none = no breakers)");
  app.add_option("--mirostat", s.mirostat, "Mirostat: 0 off, 1 Mirostat, 2 Mirostat 2.0 (replaces the other steps)");
  app.add_option("--mirostat-ent", s.mirostat_tau, "Mirostat target entropy (tau)");
  app.add_option("--mirostat-lr", s.mirostat_eta, "Mirostat learning rate (eta)");
  app.add_option(
      "--samplers", o.samplers,
      "sampler order, ';'-separated: penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature (default)");
  app.add_option("--sampling-seq", o.sampling_seq, "sampler order as letters (edskypmxt)");
  app.add_option("-l,--logit-bias", o.logit_bias, "TOKEN_ID(+|-)BIAS added to a token's logit, e.g. 15043+1 or 2-inf");
  app.add_flag("--ignore-eos", o.ignore_eos, "never stop at end-of-generation tokens (their logits are -inf)");

  app.add_flag("--conversation", o.conversation, "conversation mode with the model's chat template (-cnv)");
  app.add_flag("--no-conversation", o.no_conversation, "plain completion even without -p (-no-cnv)");
  app.add_flag("-i,--interactive", o.interactive, "interactive: read more input after each reply");
  app.add_flag("--single-turn", o.single_turn, "one user message and its reply, then exit (-st)");
  app.add_option("--system-prompt", o.system_prompt, "system message of the conversation (-sys)");
  app.add_option("--system-prompt-file", o.system_prompt_file, "read the system message from a file (-sysf)");
  app.add_option("-r,--reverse-prompt", o.reverse_prompts, "stop the reply at this text (repeatable)");
  app.add_option("--in-prefix", o.in_prefix, "text before each user message");
  app.add_option("--in-suffix", o.in_suffix, "text after each user message");
  app.add_flag("--in-prefix-bos", o.in_prefix_bos, "a BOS token before each user message after the first");
  app.add_option(
      "--chat-template", o.chat_template,
      "chat template family (chatml, llama2, llama3, gemma, phi3, mistral-v7, deepseek3, gpt-oss, granite, ...)");
  app.add_flag("--jinja", o.jinja, "Jinja chat templates (not supported: refused)");
  app.add_flag("--color", o.color, "color the prompt and input markers (a terminal only)");
  app.add_flag("--no-perf", o.no_perf, "do not print the loom_perf timing lines");
  app.add_flag("--verbose-prompt", o.verbose_prompt,
               "print the prompt's tokens (id -> piece) on stderr before generating");
  app.add_option(
      "--prompt-cache", o.prompt_cache,
      "keep the prompt's KV state in this file: a later run whose prompt starts the same evaluates only the rest");
  app.add_flag("--prompt-cache-all", o.prompt_cache_all, "--prompt-cache also saves the generated tokens (at the end)");
  app.add_flag("--prompt-cache-ro", o.prompt_cache_ro, "use the --prompt-cache file but do not update it");
  const auto not_empty = [](const std::string& v) {
    return v.empty() ? std::string("the value is empty") : std::string();
  };
  app.add_option("--grammar", o.grammar, "GBNF grammar the generated text must match (docs/GRAMMAR.md)")
      ->check(not_empty);
  app.add_option("--grammar-file", o.grammar_file, "read the --grammar from a file");
  app.add_option("-j,--json-schema", o.json_schema, "JSON Schema the generated text must match (as a grammar)")
      ->check(not_empty);
  app.add_option("--json-schema-file", o.json_schema_file, "read the --json-schema from a file (-jf)");
  app.add_flag("--no-warmup", o.no_warmup,
               "accepted as in llama.cpp (loom runs no warmup pass: timings include the first step)");
  app.add_flag("-e,--escape,!--no-escape", o.escape,
               "process escapes (\\n, \\t, \\xHH, ...) in -p, -f, -r, --in-prefix, --in-suffix and typed input "
               "(default; --no-escape: take them literally)");
}

std::string process_escapes(std::string_view text) {
  auto hex = [](char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
  };
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '\\' || i + 1 == text.size()) {
      out += text[i];
      continue;
    }
    const char c = text[++i];
    const size_t simple = std::string_view("nrt'\"\\").find(c);
    if (simple != std::string_view::npos) {
      out += "\n\r\t'\"\\"[simple];
    } else if (c == 'x' && i + 2 < text.size() && hex(text[i + 1]) >= 0 && hex(text[i + 2]) >= 0) {
      out += (char)(hex(text[i + 1]) * 16 + hex(text[i + 2]));
      i += 2;
    } else {
      out += '\\';
      out += c;
    }
  }
  return out;
}

std::string read_prompt_file(const std::string& path, std::string_view flag) {
  std::string text = read_regular_file(path, flag);
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

std::string prompt_text(const RunOptions& o) {
  const std::string text = o.prompt_file.empty() ? o.prompt : read_prompt_file(o.prompt_file, "-f");
  return o.escape ? process_escapes(text) : text;
}

namespace {

std::pair<int32_t, float> parse_logit_bias(const std::string& v) {
  const size_t sign = v.find_first_of("+-", 1);
  LOOM_CHECK(sign != std::string::npos && sign > 0, usage, "-l '{}': expected TOKEN_ID+BIAS or TOKEN_ID-BIAS", v);
  int32_t id = 0;
  float bias = 0;
  try {
    size_t pos = 0;
    id = std::stoi(v.substr(0, sign), &pos);
    LOOM_CHECK(pos == sign, usage, "");
    const std::string b = v.substr(sign + 1);
    if (b == "inf") {
      bias = std::numeric_limits<float>::infinity();
    } else {
      bias = std::stof(b, &pos);
      LOOM_CHECK(pos == b.size(), usage, "");
    }
  } catch (const std::exception&) {
    fail(ErrorKind::usage, "-l '{}': expected TOKEN_ID+BIAS or TOKEN_ID-BIAS", v);
  }
  return {id, v[sign] == '-' ? -bias : bias};
}

// Token ids whose text contains one of the breaker strings (DRY ends a repeat there).
std::vector<int32_t> breaker_tokens(const std::string& spec, const Tokenizer& tok) {
  std::vector<std::string> strings;
  if (spec.empty()) {
    strings = {"\n", ":", "\"", "*"};
  } else if (spec != "none") {
    size_t start = 0;
    while (start <= spec.size()) {
      const size_t end = std::min(spec.find(',', start), spec.size());
      if (end > start) strings.push_back(spec.substr(start, end - start));
      start = end + 1;
    }
  }
  std::vector<int32_t> ids;
  if (strings.empty()) return ids;
  for (int32_t id = 0; id < tok.n_vocab(); ++id) {
    const std::string piece = tok.token_to_piece(id);
    for (const std::string& s : strings)
      if (piece.find(s) != std::string::npos) {
        ids.push_back(id);
        break;
      }
  }
  return ids;
}

}  // namespace

SamplerParams sampler_params(RunOptions& o, const Tokenizer& tok) {
  SamplerParams p = o.sampling;
  LOOM_CHECK(o.seed >= -1 && o.seed <= (int64_t)UINT32_MAX, usage, "-s {}: expected -1 (random) or 0..4294967295", o.seed);
  if (o.seed == -1) o.seed = (int64_t)(std::random_device{}() & 0xffffffffu);
  p.seed = (uint64_t)o.seed;
  if (!o.samplers.empty()) p.order = parse_sampler_order(o.samplers);
  if (!o.sampling_seq.empty()) p.order = parse_sampler_order(o.sampling_seq);
  for (const std::string& b : o.logit_bias) {
    auto [id, bias] = parse_logit_bias(b);
    LOOM_CHECK(id >= 0 && id < tok.n_vocab(), usage, "-l {}: token {} is not in the vocabulary (0..{})", b, id,
               tok.n_vocab() - 1);
    p.logit_bias.push_back({id, bias});
  }
  if (o.ignore_eos)
    for (int32_t id = 0; id < tok.n_vocab(); ++id)
      if (tok.is_eog(id)) p.logit_bias.push_back({id, -std::numeric_limits<float>::infinity()});
  if (p.dry_multiplier > 0) p.dry_breakers = breaker_tokens(o.dry_breakers, tok);
  Sampler check(p);  // validates the ranges (--top-p 2 and the like) before the model runs
  return p;
}

namespace {
// f(), its error message between prefix and suffix (the file it read: "--grammar-file 'g.gbnf': grammar: line 2, ...").
template <class F>
auto with_prefix(const std::string& prefix, F f, const char* suffix = "") {
  try {
    return f();
  } catch (const Error& e) {
    throw Error(e.kind(), prefix + e.what() + suffix);
  }
}
}  // namespace

std::shared_ptr<const Grammar> run_grammar(const RunOptions& o) {
  const int given = !o.grammar.empty() + !o.grammar_file.empty() + !o.json_schema.empty() + !o.json_schema_file.empty();
  LOOM_CHECK(given <= 1, usage, "give one of --grammar, --grammar-file, --json-schema and --json-schema-file");
  if (given == 0) return nullptr;
  LOOM_CHECK(!o.perplexity && !o.hellaswag && !o.winogrande, usage,
             "--grammar, --json-schema: for generation and conversation, not --perplexity or a task score");
  const bool schema = !o.json_schema.empty() || !o.json_schema_file.empty();
  const std::string& path = schema ? o.json_schema_file : o.grammar_file;
  const char* flag = schema ? "--json-schema-file" : "--grammar-file";
  const std::string prefix = path.empty() ? "" : fmt::format("{} '{}': ", flag, path);
  const std::string text = path.empty() ? (schema ? o.json_schema : o.grammar) : read_regular_file(path, flag);
  if (!schema) return with_prefix(prefix, [&] { return std::make_shared<const Grammar>(parse_grammar(text)); });
  const std::string gbnf = with_prefix(prefix, [&] { return json_schema_to_grammar(text); });
  // the converter's grammar can still be refused: a $ref that reaches itself before any text
  return with_prefix(
      prefix + "--json-schema: no JSON text can start it (",
      [&] { return std::make_shared<const Grammar>(parse_grammar(gbnf)); }, ")");
}

bool wants_conversation(const RunOptions& o, const Model& model) {
  if (o.no_conversation) return false;
  if (o.conversation || o.interactive) return true;
  const bool has_template = !model.file().find_string("tokenizer.chat_template").value_or("").empty();
  return o.prompt.empty() && o.prompt_file.empty() && has_template && !o.perplexity && !o.hellaswag && !o.winogrande &&
         !o.multiple_choice;
}

}  // namespace loom::tools
