// loom-bench: prompt-processing and generation throughput per model, in llama-bench's shape.
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "loom/core/error.h"
#include "loom/core/thread_pool.h"
#include "loom/model/bench.h"
#include "loom/model/report.h"
#include "loom/tools/common.h"
#include "loom/tools/main.h"

using namespace loom;

namespace {
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
    const BenchOutput out = parse_bench_output(output);
    const int64_t n_ctx = tools::session_params(common).n_ctx;  // 0: as the tests need
    LOOM_CHECK(n_ctx == 0 || n_ctx >= n_depth + std::max(n_prompt, n_gen), usage,
               "-c {} holds fewer than -d {} + the test's {} tokens", n_ctx, n_depth, std::max(n_prompt, n_gen));
    const int threads = common.n_threads > 0 ? common.n_threads : ThreadPool::default_threads();
    nlohmann::json all = nlohmann::json::array();
    fmt::print("{}", bench_header(out));
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
      const BenchModelInfo info{path, model->type_name(), model->n_bytes(), model->n_params(), "CPU", threads};
      for (const BenchTest& t : tests) {
        if (out == BenchOutput::json)
          all.push_back(bench_json(info, t));
        else
          fmt::print("{}", bench_row(out, info, t));
        std::fflush(stdout);
      }
    }
    if (out == BenchOutput::json) fmt::print("{}\n", all.dump(2));
    return 0;
  });
}
