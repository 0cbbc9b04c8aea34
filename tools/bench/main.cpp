// loom-bench: prompt-processing and generation throughput per model, in llama-bench's shape.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/core/thread_pool.h"
#include "loom/model/bench.h"
#include "loom/tools/common.h"
#include "loom/tools/main.h"

using namespace loom;

namespace {
std::string human_size(double bytes) {
  return bytes >= 1024.0 * 1024 * 1024 ? fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024 * 1024))
                                       : fmt::format("{:.2f} MiB", bytes / (1024.0 * 1024));
}
std::string human_params(double n) { return n >= 1e9 ? fmt::format("{:.2f} B", n / 1e9) : fmt::format("{:.2f} M", n / 1e6); }

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      if (i > start) out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"loom-bench: model throughput (pp/tg tokens per second)"};
  tools::CommonOptions common;
  tools::add_common_flags(app, common);
  int64_t n_prompt = 512, n_gen = 128, n_depth = 0;
  int reps = 5;
  std::string output = "md";
  app.add_option("-p,--n-prompt", n_prompt, "prompt tokens (0 = skip)");
  app.add_option("-n,--n-gen", n_gen, "generated tokens (0 = skip)");
  app.add_option("-d,--n-depth", n_depth, "tokens already in the context before each test (not timed)");
  app.add_option("-r,--repetitions", reps, "repetitions of each test");
  app.add_option("-o,--output", output, "md, json or csv");

  return tools::run_main("bench", argc, argv, app, [&]() -> int {
    LOOM_CHECK(!common.model.empty(), usage, "no model given (-m FILE[,FILE])");
    LOOM_CHECK(n_prompt >= 0 && n_gen >= 0 && n_prompt + n_gen > 0, usage, "-p/-n must be >= 0, not both 0");
    LOOM_CHECK(n_depth >= 0, usage, "-d {}: must be >= 0", n_depth);
    LOOM_CHECK(reps >= 1 && reps <= 1000, usage, "-r {}: must be between 1 and 1000", reps);
    LOOM_CHECK(output == "md" || output == "json" || output == "csv", usage, "-o '{}': md, json or csv", output);
    const int64_t n_ctx = tools::session_params(common).n_ctx;  // 0: as the tests need
    LOOM_CHECK(n_ctx == 0 || n_ctx >= n_depth + std::max(n_prompt, n_gen), usage,
               "-c {} holds fewer than -d {} + the test's {} tokens", n_ctx, n_depth, std::max(n_prompt, n_gen));
    const int threads = common.n_threads > 0 ? common.n_threads : ThreadPool::default_threads();
    nlohmann::json all = nlohmann::json::array();
    if (output == "md") {
      fmt::print("| model | size | params | backend | threads | test | t/s |\n");
      fmt::print("| --- | ---: | ---: | --- | ---: | ---: | ---: |\n");
    } else if (output == "csv") {
      fmt::print(
          "model_type,model_size,model_n_params,backend,n_threads,n_prompt,n_gen,n_depth,avg_ns,stddev_ns,avg_ts,"
          "stddev_ts\n");
    }
    for (const std::string& path : split(common.model, ',')) {
      tools::CommonOptions o = common;
      o.model = path;
      SessionParams sp = tools::session_params(o);
      if (sp.n_ctx == 0) sp.n_ctx = n_depth + n_prompt + n_gen;
      tools::RunDevices devices = tools::make_run_devices(o);
      std::unique_ptr<Model> model = tools::load_model(o, devices);
      Session session(*model, sp);
      std::vector<BenchTest> tests;
      if (n_prompt > 0) tests.push_back(bench_run(session, n_prompt, 0, reps, n_depth));
      if (n_gen > 0) tests.push_back(bench_run(session, 0, n_gen, reps, n_depth));
      for (const BenchTest& t : tests) {
        if (output == "md") {
          fmt::print("| {} | {} | {} | CPU | {} | {} | {:.2f} ± {:.2f} |\n", model->type_name(),
                     human_size((double)model->n_bytes()), human_params((double)model->n_params()), threads, t.name,
                     t.avg_ts(), t.stddev_ts());
        } else if (output == "csv") {
          fmt::print("\"{}\",{},{},CPU,{},{},{},{},{:.0f},{:.0f},{:.6f},{:.6f}\n", model->type_name(), model->n_bytes(),
                     model->n_params(), threads, t.n_prompt, t.n_gen, t.n_depth, t.avg_ns(), t.stddev_ns(), t.avg_ts(),
                     t.stddev_ts());
        } else {
          all.push_back({{"model_filename", path},
                         {"model_type", model->type_name()},
                         {"model_size", model->n_bytes()},
                         {"model_n_params", model->n_params()},
                         {"backend", "CPU"},
                         {"n_threads", threads},
                         {"n_prompt", t.n_prompt},
                         {"n_gen", t.n_gen},
                         {"n_depth", t.n_depth},
                         {"avg_ns", t.avg_ns()},
                         {"stddev_ns", t.stddev_ns()},
                         {"avg_ts", t.avg_ts()},
                         {"stddev_ts", t.stddev_ts()},
                         {"samples_ns", t.samples_ns},
                         {"samples_ts", t.samples_ts}});
        }
        std::fflush(stdout);
      }
    }
    if (output == "json") fmt::print("{}\n", all.dump(2));
    return 0;
  });
}
