// loom-bench-ops as a library call: modes test / perf / grad / support over the catalog on the
// selected devices, --list-ops, --show-coverage and --limits, printed as console text (the shape
// of test-backend-ops, see docs/CLI.md), JSON, CSV or SQL. The tool's main only parses flags.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "loom/backend/device.h"

namespace loom::testing {

struct BenchOpsOptions {
  std::string mode = "test";          // test, perf, grad or support
  std::vector<std::string> ops;       // -o: case op names (MUL_MAT, TOPK_MOE, ...); empty = all
  std::vector<std::string> backends;  // -b: device names; empty = all (test mode skips the CPU)
  std::string params_regex;           // -p: ECMAScript regex searched in "OP(params)"
  std::string output = "console";     // console, json, csv or sql
  bool list_ops = false;
  bool show_coverage = false;
  bool limits = false;                // measure this machine instead of running cases
  std::string sim_devices;            // --sim-devices (empty: env LOOM_SIM_DEVICES)
  int n_threads = 0;                  // 0: all hardware threads
  double perf_seconds = 1.0;          // perf: time per case
  std::vector<Device*> extra_devices; // (tests) offered after SIM0.. and before the CPU
};

// Runs and prints to out; returns the exit code: 0 all passed, 1 a case failed. Throws
// loom::Error(usage) for bad options (unknown mode, op, device, output format, regex).
int run_bench_ops(const BenchOpsOptions& o, std::FILE* out = stdout);

}  // namespace loom::testing
