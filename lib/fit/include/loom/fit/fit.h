// loom-fit-params as a library call: a model file, the user's flags and one snapshot of free
// memory in; the flags that make the run fit (or why nothing does), the predicted bytes per
// device, and their renderings (one-line flags, --fit-print table, --json) out.
#pragma once

#include <string>
#include <vector>

#include "loom/fit/planner.h"
#include "loom/model/placement.h"
#include "loom/model/session.h"

namespace loom::fit {

struct FitRequest {
  std::string model_path;
  PlacementParams placement;  // the user's; devices = the run's devices, CPU last
  SessionParams session;      // the user's; n_ctx 0 = the model's training context
  std::vector<KvOverride> kv_overrides;  // --override-kv
  std::vector<LoraAdapterSpec> adapters;  // --lora, --lora-scaled
  ControlVectorOptions control_vectors;   // --control-vector*
  bool fixed_ctx = false;     // flags the user gave: never changed
  bool fixed_ngl = false;
  bool fixed_split = false;
  bool fixed_experts = false;    // -ot or -cmoe
  std::vector<size_t> targets;   // bytes to keep free: one for every non-CPU device, or one each
  std::vector<size_t> reserves;  // bytes others will take: one, one per non-CPU device, or that plus the host
  int64_t fit_ctx = 4096;        // the smallest context the search may choose
};

struct DeviceReport {
  std::string name;
  bool is_cpu = false;
  bool known = true;
  size_t total = 0;
  size_t free = 0;
  size_t target = 0;
  size_t reserve = 0;
  Usage usage;
  int64_t projected_free = 0;  // free - reserve - usage (may be negative when nothing fits)
};

struct FitReport {
  FitStatus status = FitStatus::no_fit;
  std::string args;  // the one-line flags ("" when nothing fits)
  Config config;     // the answer (no_fit: the closest attempt)
  int64_t n_layer = 0;
  int64_t n_gpu_layers = 0;            // units on non-CPU devices (layers, plus 1 for the output)
  std::vector<float> tensor_split;     // as printed or given; empty: proportional to free memory
  std::vector<std::string> overrides;  // the -ot rules of the answer (the user's, or the experts moved)
  std::vector<DeviceReport> devices;   // CPU last
  std::string message;                 // no_fit: which device lacks how many MiB
  int probes = 0;
  double elapsed_ms = 0;
};

// Throws usage for bad targets/reserves and what loading the model throws (-sm tensor: only the
// context is searched; -ts and the members are the user's); the
// a run that cannot fit is a report with status no_fit, not an exception.
FitReport fit_params(const FitRequest& request);

std::string format_json(const FitReport& report);   // CLI.md's --json object
std::string format_table(const FitReport& report);  // --fit-print
// "-c 8192 -ngl 33 -ts 20,13 -ot \"...\"", from the answer and what was given.
std::string format_args(const Config& answer, const Config& given, const std::vector<std::string>& new_overrides);

// "1024" or "1024,512" (MiB, decimals allowed) -> bytes; throws usage naming the flag.
std::vector<size_t> parse_mib_list(const std::string& text, const char* flag);

}  // namespace loom::fit
