// The fit-params search, written against an abstract probe ("plan this run, return the bytes
// per device") so that it can be tested against brute force with synthetic cost functions.
// Order: keep the user's run; shrink the context; place whole layers from the last device
// backwards; for MoE models move experts to the CPU and bring back what fits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace loom::fit {

// Where one layer's MoE experts (ffn_{gate,up,down}_exps) live.
enum class ExpertMode : uint8_t {
  with_layer,    // on the layer's device
  keep_up_gate,  // ffn_down_exps on the CPU
  keep_up,       // ffn_gate_exps and ffn_down_exps on the CPU
  cpu,           // all three on the CPU
};

// One candidate run as the probe sees it. The user's other settings (-ub, -ctk, -ot, ...) are
// part of the probe itself and never change.
struct Config {
  int64_t n_ctx = 0;                // > 0
  int64_t n_gpu_layers = -1;        // -1: every layer and the output (as -ngl)
  std::vector<float> tensor_split;  // per non-CPU device (as -ts)
  std::vector<ExpertMode> experts;  // per layer; empty: every expert with its layer
  bool operator==(const Config&) const = default;
};

// Bytes one device holds for a run (what allocation would take, exactly).
struct Usage {
  size_t model = 0;
  size_t context = 0;
  size_t compute = 0;
  size_t total() const { return model + context + compute; }
};

struct ProbeResult {
  std::vector<Usage> usage;       // per device, CPU last
  std::vector<int> layer_device;  // per layer: index into the devices
};
using Probe = std::function<ProbeResult(const Config&)>;

// Memory of one device, from one snapshot.
struct DeviceBudget {
  std::string name;
  bool is_cpu = false;
  bool known = true;  // false: the device reports no memory, so it gets nothing
  size_t total = 0;
  size_t free = 0;
  size_t target = 0;   // keep at least this free (--fit-target; 0 for the host)
  size_t reserve = 0;  // taken by something else (--fit-reserve)
  // Bytes a run may use here (negative: not even an empty run keeps the target).
  int64_t budget() const { return (int64_t)free - (int64_t)reserve - (int64_t)target; }
};

struct Problem {
  int64_t n_layer = 0;
  bool moe = false;                   // the model has expert tensors
  std::vector<DeviceBudget> devices;  // the run's devices, CPU last
  std::vector<int> layer_devices;     // non-CPU devices that may take layers, in order
  Config given;                       // the user's run (n_ctx resolved; ts as placement would use it)
  int64_t n_ctx_min = 0;              // never shrink the context below this
  bool fixed_ctx = false;             // the user set -c
  bool fixed_ngl = false;             // -ngl
  bool fixed_split = false;           // -ts (or a split mode that ignores it)
  bool fixed_experts = false;         // -ot or -cmoe
  int64_t ctx_step = 256;             // reduced contexts are multiples of this
};

enum class FitStatus { unchanged, fit, no_fit };

struct Shortfall {
  int device = 0;
  int64_t bytes = 0;  // needed beyond the budget
};

struct PlanResult {
  FitStatus status = FitStatus::no_fit;
  Config config;                     // the answer (no_fit: the closest attempt)
  ProbeResult probe;                 // of config
  std::vector<Shortfall> shortfall;  // no_fit: devices that lack memory
  int probes = 0;                    // distinct probe calls
};

// Bytes above its budget that device d would need for this usage (0: it fits). A device that
// ends up holding nothing always fits; one with unknown memory fits only holding nothing.
int64_t overshoot(const DeviceBudget& d, const Usage& u);

// The search. Deterministic; calls probe only with valid configs.
PlanResult plan_fit(const Problem& problem, const Probe& probe);

}  // namespace loom::fit
