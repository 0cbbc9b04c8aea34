// loom-bench-ops: every op case on every device against the CPU reference (test), speed (perf),
// gradients (grad), support; --list-ops, --show-coverage, and --limits (this machine's peaks).
#include <CLI/CLI.hpp>

#include "loom/testing/bench_ops.h"
#include "loom/tools/main.h"

int main(int argc, char** argv) {
  CLI::App app{"loom-bench-ops: op conformance and speed on every device (test-backend-ops' shape)"};
  loom::testing::BenchOpsOptions o;
  bool json = false;
  app.add_option("mode", o.mode, "test, perf, grad or support (default test)");
  app.add_option("-o,--op", o.ops, "ops to run, comma separated (see --list-ops)");
  app.add_option("-b,--backend", o.backends, "devices to run on, comma separated (test mode skips the CPU unless named)");
  app.add_option("-p,--params", o.params_regex, "regex searched in each case's OP(params)");
  app.add_option("--output", o.output, "console, json, csv or sql");
  app.add_flag("--list-ops", o.list_ops, "print the ops that have cases and exit");
  app.add_flag("--show-coverage", o.show_coverage, "cases per op and mode; exit 1 if an op has none");
  app.add_flag("--limits", o.limits, "measure FP32 FMA peak, int8 dot peak and read bandwidth");
  app.add_flag("--json", json, "same as --output json");
  app.add_option("--sim-devices", o.sim_devices, "simulated devices, e.g. 2GiB,2GiB or 1x2GiB");
  app.add_option("-t,--threads", o.n_threads, "threads per device (default: all cores)");
  app.add_option("--perf-seconds", o.perf_seconds, "perf: seconds per case (default 1)");
  return loom::tools::run_main("bench-ops", argc, argv, app, [&] {
    if (json) o.output = "json";
    return loom::testing::run_bench_ops(o, stdout);
  });
}
