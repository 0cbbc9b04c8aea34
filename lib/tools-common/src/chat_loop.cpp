// loom-run's conversation on stdin/stdout: the template chosen (forced, detected or chatml when
// the model has none), turns read from a terminal or a pipe, replies streamed, Ctrl-C handled.
#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>

#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/model/conversation.h"
#include "loom/tools/common.h"
#include "loom/tools/run.h"

namespace loom::tools {

namespace {

std::atomic<int> g_interrupts{0};

// First Ctrl-C: the reply ends; a second before the next input: exit 130 at once.
void on_sigint(int) {
  if (g_interrupts.fetch_add(1) >= 1) _exit(130);
}

// While reading input, no SA_RESTART: a Ctrl-C ends the read. While a reply is written, SA_RESTART:
// a Ctrl-C must not fail the write in progress (stdio would keep the error and the exit would be 1).
void install_sigint(bool restart) {
  struct sigaction sa {};
  sa.sa_handler = on_sigint;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = restart ? SA_RESTART : 0;
  sigaction(SIGINT, &sa, nullptr);
}

enum class Input { line, eof, interrupted };

// One user message: a line, or several joined while a line ends with '\'.
Input read_message(std::string& out) {
  out.clear();
  std::string line;
  for (;;) {
    char c;
    const ssize_t n = read(STDIN_FILENO, &c, 1);
    if (n < 0 && errno == EINTR) return Input::interrupted;
    if (n <= 0) return out.empty() && line.empty() ? Input::eof : (out += line, Input::line);
    if (c != '\n') {
      line += c;
      continue;
    }
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty() && line.back() == '\\') {
      line.back() = '\n';
      out += line;
      line.clear();
      continue;
    }
    out += line;
    return Input::line;
  }
}

std::optional<ChatTemplate> choose_template(const RunOptions& o, const Model& model) {
  if (o.interactive && !o.conversation) return std::nullopt;  // -i alone: plain text
  if (!o.chat_template.empty()) {
    auto t = chat_template_from_name(o.chat_template);
    LOOM_CHECK(t.has_value(), usage, "--chat-template '{}': unknown (known: {})", o.chat_template,
               chat_template_names());
    return t;
  }
  const std::string text = model.file().find_string("tokenizer.chat_template").value_or("");
  if (text.empty()) {
    logger().warn("the model has no tokenizer.chat_template: using chatml (--chat-template NAME to choose)");
    return ChatTemplate::chatml;
  }
  auto t = detect_chat_template(text);
  LOOM_CHECK(t.has_value(), unsupported,
             "the model's chat template is not one of the families loom renders; pass --chat-template NAME ({})",
             chat_template_names());
  return t;
}


}  // namespace

void print_perf(double load_ms, double prompt_ms, int64_t n_prompt, double eval_ms, int64_t n_gen) {
  auto per = [](double ms, int64_t n) { return n > 0 ? ms / (double)n : 0.0; };
  auto tps = [](double ms, int64_t n) { return ms > 0 ? 1000.0 * (double)n / ms : 0.0; };
  fmt::print(stderr, "loom_perf: load time = {:.2f} ms\n", load_ms);
  fmt::print(stderr,
             "loom_perf: prompt eval time = {:.2f} ms / {} tokens ({:8.2f} ms per token, {:8.2f} tokens per second)\n",
             prompt_ms, n_prompt, per(prompt_ms, n_prompt), tps(prompt_ms, n_prompt));
  fmt::print(stderr, "loom_perf: eval time = {:.2f} ms / {} runs ({:8.2f} ms per token, {:8.2f} tokens per second)\n",
             eval_ms, n_gen, per(eval_ms, n_gen), tps(eval_ms, n_gen));
  fmt::print(stderr, "loom_perf: total time = {:.2f} ms / {} tokens\n", load_ms + prompt_ms + eval_ms, n_prompt + n_gen);
}

int run_conversation(Session& session, RunOptions& o, const SamplerParams& sp, std::shared_ptr<const Grammar> grammar,
                     bool json, double load_ms) {
  LOOM_CHECK(!o.jinja, usage,
             "--jinja: Jinja templates are not supported; loom renders the built-in families (--chat-template NAME)");
  ConversationParams cp;
  cp.tmpl = choose_template(o, session.model());
  LOOM_CHECK(o.system_prompt.empty() || o.system_prompt_file.empty(), usage, "give -sys or -sysf, not both");
  cp.system_prompt = o.system_prompt_file.empty() ? o.system_prompt : read_prompt_file(o.system_prompt_file, "-sysf");
  cp.n_predict = o.n_predict;
  auto text = [&](const std::string& s) { return o.escape ? process_escapes(s) : s; };
  for (const std::string& r : o.reverse_prompts) cp.reverse_prompts.push_back(text(r));
  cp.in_prefix = text(o.in_prefix);
  cp.in_suffix = text(o.in_suffix);
  cp.in_prefix_bos = o.in_prefix_bos;
  Sampler sampler(sp);
  if (grammar)
    sampler.set_constraint(std::make_shared<GrammarMatcher>(std::move(grammar), session.model().tokenizer()));
  Conversation conv(session, sampler, cp);
  logger().info("conversation: template {}, context {} tokens", cp.tmpl ? chat_template_name(*cp.tmpl) : "none (plain text)",
                session.n_ctx());

  const bool tty_in = isatty(STDIN_FILENO), tty_out = isatty(STDOUT_FILENO);
  const bool color = o.color && tty_out;
  install_sigint(true);
  std::string first = prompt_text(o);
  nlohmann::json turns = nlohmann::json::array();
  double prompt_ms = 0, eval_ms = 0;
  int64_t n_prompt = 0, n_gen = 0;
  for (int turn = 0;; ++turn) {
    std::string message;
    if (turn == 0 && !first.empty()) {
      message = first;
    } else {
      if (turn > 0 && o.single_turn) break;
      if (tty_in && !json) {
        fmt::print("{}> {}", color ? "\033[32m" : "", color ? "\033[0m" : "");
        std::fflush(stdout);
      }
      g_interrupts = 0;
      install_sigint(false);
      const Input in = g_interrupts ? Input::interrupted : read_message(message);
      install_sigint(true);
      if (in == Input::interrupted) return 130;
      if (in == Input::eof) break;
      if (message.empty()) {
        --turn;
        continue;
      }
      message = text(message);
    }
    g_interrupts = 0;
    TurnResult r = conv.turn(message, [&](std::string_view piece) {
      if (json) return;
      fmt::print("{}", piece);
      std::fflush(stdout);
    }, &g_interrupts);
    if (!json) fmt::print("\n");
    std::fflush(stdout);
    logger().info("turn {}: {} tokens kept in the KV cache, {} prompt tokens evaluated, {} generated ({})", turn + 1,
                  r.n_past_before, r.n_prompt, r.n_gen, r.stop);
    if (r.stop == "context_full") logger().warn("the context ({} tokens) is full: the reply stopped", session.n_ctx());
    prompt_ms += r.prompt_ms;
    eval_ms += r.eval_ms;
    n_prompt += r.n_prompt;
    n_gen += r.n_gen;
    turns.push_back({{"user", message},      {"prompt", r.prompt}, {"reply", r.reply},
                     {"n_past_before", r.n_past_before}, {"n_prompt", r.n_prompt}, {"n_gen", r.n_gen},
                     {"prompt_ms", r.prompt_ms}, {"eval_ms", r.eval_ms}, {"stop", r.stop},
                     {"context_shifted", r.context_shifted}});
    if (o.single_turn) break;
  }
  if (json) {
    nlohmann::json j;
    j["template"] = cp.tmpl ? chat_template_name(*cp.tmpl) : "none";
    j["seed"] = o.seed;
    j["turns"] = turns;
    j["rendered"] = conv.rendered();
    j["n_prompt"] = n_prompt;
    j["n_gen"] = n_gen;
    j["timings"] = {{"load_ms", load_ms}, {"prompt_ms", prompt_ms}, {"eval_ms", eval_ms}};
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
  }
  std::fflush(stdout);
  if (!o.no_perf) print_perf(load_ms, prompt_ms, n_prompt, eval_ms, n_gen);
  return 0;
}

}  // namespace loom::tools
