// loom-bench's flags and its sweep (llama-bench's shape): the shared model flags, with -t -b -ub
// -ngl -fa -ctk -ctv -dev taking value lists, and -p -n -pg -d -r -o; every combination of the
// settings runs every test and prints one row (loom/model/bench_sweep.h).
#pragma once

#include <string>

#include "loom/tools/common.h"

namespace CLI {
class App;
}

namespace loom::tools {

struct BenchOptions {
  std::string n_prompt = "512", n_gen = "128", prompt_gen, n_depth = "0";
  std::string threads, n_batch, n_ubatch, n_gpu_layers, no_kv_offload, use_mmap, flash_attn, type_k, type_v, devices;
  int reps = 5;
  std::string output = "md";
  std::string output_err;  // -oe FMT: the rows on stderr too, in that format
  int delay = 0;           // --delay N: seconds of rest before each test
  bool progress = false;   // --progress: llama-bench's progress lines on stderr
  bool bandwidth = false;  // tg tests: a read of memory after each token (ReadProbe)
  // With --bandwidth: each token replaced by a plain read of as many bytes as its weights (the
  // score of a decode that only read), to calibrate the per-token method (docs/DECODE-SPEED.md).
  bool bandwidth_control = false;
};

// add_common_flags, then the list forms of the swept flags in place of their single-value ones.
void add_bench_flags(CLI::App& app, CommonOptions& common, BenchOptions& bench);
// Runs the sweep and prints its rows on stdout; returns the exit code.
int run_bench(const CommonOptions& common, const BenchOptions& bench);

}  // namespace loom::tools
