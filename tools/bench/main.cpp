// loom-bench: prompt-processing and generation throughput per model, in llama-bench's shape
// (value lists and ranges for the swept flags; the sweep lives in loom/tools/bench.h).
#include <CLI/CLI.hpp>

#include "loom/tools/bench.h"
#include "loom/tools/main.h"

int main(int argc, char** argv) {
  CLI::App app{"loom-bench: model throughput (pp/tg tokens per second)"};
  loom::tools::CommonOptions common;
  loom::tools::BenchOptions bench;
  loom::tools::add_bench_flags(app, common, bench);
  return loom::tools::run_main("bench", argc, argv, app, [&]() { return loom::tools::run_bench(common, bench); });
}
