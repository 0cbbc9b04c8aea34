// loom-run: generate text from a GGUF model, or measure perplexity over a text file.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>

#include "loom/core/error.h"
#include "loom/core/files.h"
#include "loom/model/generate.h"
#include "loom/tools/common.h"
#include "loom/tools/main.h"

using namespace loom;

namespace {

// A directory, FIFO or device is refused (it would read as an empty prompt, or block).
std::string read_text_file(const std::string& path) { return read_regular_file(path, "-f"); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"loom-run: text generation and perplexity with GGUF models"};
  tools::CommonOptions common;
  tools::add_common_flags(app, common);
  std::string prompt, prompt_file;
  int64_t n_predict = 128, n_chunks = -1;
  bool no_echo = false, ppl_mode = false;
  SamplerParams sp;
  sp.seed = 0xdecafbad;
  app.add_option("-p,--prompt", prompt, "prompt text");
  app.add_option("-f,--file", prompt_file, "read the prompt (or the perplexity text) from a file");
  app.add_option("-n,--n-predict", n_predict, "tokens to generate (-1 = until the context is full)");
  app.add_option("--temp", sp.temp, "temperature (0 = greedy)");
  app.add_option("--top-k", sp.top_k, "top-k sampling (0 = off)");
  app.add_option("--top-p", sp.top_p, "top-p sampling (1 = off)");
  app.add_option("--min-p", sp.min_p, "min-p sampling (0 = off)");
  app.add_option("--repeat-penalty", sp.repeat_penalty, "penalty for repeated tokens (1 = off)");
  app.add_option("--repeat-last-n", sp.repeat_last_n, "tokens considered for the penalty");
  app.add_option("--seed", sp.seed, "random seed");
  app.add_flag("--no-echo", no_echo, "print only the generated text");
  app.add_flag("--perplexity", ppl_mode, "measure perplexity over -f TEXT");
  app.add_option("--chunks", n_chunks, "perplexity: at most N chunks");

  return tools::run_main("run", argc, argv, app, [&]() -> int {
    if (common.list_devices) {
      tools::print_devices(common);
      return 0;
    }
    LOOM_CHECK(!common.model.empty(), usage, "no model given (-m FILE)");
    LOOM_CHECK(n_predict >= -1, usage, "-n {}: must be -1 (until the context is full) or more", n_predict);
    LOOM_CHECK(!(prompt.empty() && prompt_file.empty()), usage, "no prompt given (-p TEXT or -f FILE)");
    LOOM_CHECK(prompt.empty() || prompt_file.empty(), usage, "give -p or -f, not both");
    SessionParams params = tools::session_params(common);
    if (!tools::is_output_rank(common)) std::freopen("/dev/null", "w", stdout);  // MPI: rank 0 prints
    Sampler sampler(sp);
    if (!prompt_file.empty()) prompt = read_text_file(prompt_file);
    const int disagree = tools::check_ranks_agree(
        "run", common,
        {{"the mode", ppl_mode ? "--perplexity" : "generate"}, {"the prompt", tools::text_fingerprint(prompt)},
         {"-n", std::to_string(n_predict)}, {"--chunks", std::to_string(n_chunks)},
         {"--temp", fmt::format("{}", sp.temp)}, {"--top-k", std::to_string(sp.top_k)},
         {"--top-p", fmt::format("{}", sp.top_p)}, {"--min-p", fmt::format("{}", sp.min_p)},
         {"--repeat-penalty", fmt::format("{}", sp.repeat_penalty)},
         {"--repeat-last-n", std::to_string(sp.repeat_last_n)}, {"--seed", std::to_string(sp.seed)}});
    if (disagree) return disagree;

    const auto t0 = std::chrono::steady_clock::now();
    tools::RunDevices devices = tools::make_run_devices(common);
    std::unique_ptr<Model> model = tools::load_model(common, devices);
    Session session(*model, params);
    const double load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();

    if (ppl_mode) {
      LOOM_CHECK(!prompt_file.empty(), usage, "--perplexity needs -f TEXT");
      PerplexityResult r = perplexity(session, prompt, n_chunks, [](int64_t i, double ppl) {
        fmt::print("[{}]{:.4f},", i, ppl);
        std::fflush(stdout);
      });
      fmt::print("\nFinal estimate: PPL = {:.4f} +/- {:.5f}\n", r.ppl, r.ppl_err);
      return 0;
    }

    const bool stream = !common.json;
    if (stream && !no_echo) {
      fmt::print("{}", prompt);
      std::fflush(stdout);
    }
    if (n_predict < 0) n_predict = session.n_ctx();
    GenerateResult r = generate(session, prompt, n_predict, sampler, [&](std::string_view piece) {
      if (stream) {
        fmt::print("{}", piece);
        std::fflush(stdout);
      }
    });
    const double total_ms = load_ms + r.prompt_ms + r.eval_ms;
    auto per = [](double ms, int64_t n) { return n > 0 ? ms / (double)n : 0.0; };
    auto tps = [](double ms, int64_t n) { return ms > 0 ? 1000.0 * (double)n / ms : 0.0; };
    if (common.json) {
      nlohmann::json j;
      j["text"] = r.text;
      j["tokens"] = r.tokens;
      j["n_prompt"] = r.n_prompt;
      j["n_gen"] = r.n_gen;
      j["timings"] = {{"load_ms", load_ms},
                      {"prompt_ms", r.prompt_ms},
                      {"eval_ms", r.eval_ms},
                      {"prompt_tps", tps(r.prompt_ms, r.n_prompt)},
                      {"eval_tps", tps(r.eval_ms, r.n_gen)}};
      nlohmann::json devs = nlohmann::json::array();
      for (const MemoryBreakdown& m : session.memory_breakdown())
        devs.push_back({{"name", m.device},
                        {"model_bytes", m.model_bytes},
                        {"context_bytes", m.context_bytes},
                        {"compute_bytes", m.compute_bytes}});
      j["devices"] = devs;
      fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    } else {
      fmt::print("\n");
    }
    std::fflush(stdout);
    fmt::print(stderr, "loom_perf: load time = {:.2f} ms\n", load_ms);
    fmt::print(stderr,
               "loom_perf: prompt eval time = {:.2f} ms / {} tokens ({:8.2f} ms per token, {:8.2f} tokens per "
               "second)\n",
               r.prompt_ms, r.n_prompt, per(r.prompt_ms, r.n_prompt), tps(r.prompt_ms, r.n_prompt));
    fmt::print(stderr,
               "loom_perf: eval time = {:.2f} ms / {} runs ({:8.2f} ms per token, {:8.2f} tokens per second)\n",
               r.eval_ms, r.n_gen, per(r.eval_ms, r.n_gen), tps(r.eval_ms, r.n_gen));
    fmt::print(stderr, "loom_perf: total time = {:.2f} ms / {} tokens\n", total_ms, r.n_prompt + r.n_gen);
    return 0;
  });
}
