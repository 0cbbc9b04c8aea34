// Running one catalog case on one device: test (against the CPU reference, with guard bytes
// around every tensor, NaN/inf checks and NMSE), perf (repeat until a time budget; FLOPs or
// bytes per run), grad (finite differences against build_backward) and support.
#pragma once

#include <cstdint>
#include <string>

#include "loom/backend/device.h"
#include "loom/testing/op_case.h"

namespace loom::testing {

enum class CaseStatus : uint8_t { ok, fail, not_supported, skipped };
const char* case_status_name(CaseStatus s);  // "OK", "FAIL", "not supported", "skipped"

struct CaseResult {
  std::string op, params;  // from the case
  std::string mode;        // "test", "perf", "grad", "support"
  std::string backend;     // device name
  CaseStatus status = CaseStatus::ok;
  std::string message;     // why it failed / is not supported ("" when ok)
  // test
  double nmse = 0.0, max_nmse = 0.0;
  // perf: per run
  int64_t runs = 0;
  double us_per_run = 0.0;
  double flops = 0.0;   // > 0 for compute-bound cases (then GFLOP/run and TFLOPS are printed)
  double bytes = 0.0;   // bytes read and written (leaves + outputs) per run
  // grad
  double maa = 0.0, max_maa = 0.0;

  std::string name() const { return op + "(" + params + ")"; }
  bool passed() const { return status == CaseStatus::ok || status == CaseStatus::not_supported || status == CaseStatus::skipped; }
};

struct RunOptions {
  double perf_seconds = 1.0;  // perf: run each case at least this long
  uint64_t seed = 1234;       // leaf values: seeded per case name and leaf
};

// Each case builds its graph twice: on `device` (leaves and nodes in one buffer of its buffer
// type, 64+ guard bytes between tensors) and on a single-threaded CPU reference that runs the
// nodes one at a time (no fusion). Compares every output the case lists.
CaseResult run_test(const OpCase& c, Device& device, const RunOptions& opt = {});
CaseResult run_perf(const OpCase& c, Device& device, const RunOptions& opt = {});
CaseResult run_grad(const OpCase& c, Device& device, const RunOptions& opt = {});
CaseResult run_support(const OpCase& c, Device& device);

// FLOPs of one node (0 for ops measured in bytes): matrix products and attention.
double op_flops(const Tensor* node);

}  // namespace loom::testing
