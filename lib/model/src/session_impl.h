// Session internals shared by session.cpp and session_state.cpp.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "loom/model/forward.h"
#include "loom/model/session.h"
#include "loom/sched/executor.h"
#include "tp_runner.h"

namespace loom {

struct Session::Impl {
  std::vector<Device*> devices;
  Context kv_ctx;
  KvCache kv;
  std::vector<std::unique_ptr<Buffer>> kv_buffers;
  std::vector<size_t> kv_bytes;       // per device
  std::vector<size_t> compute_bytes;  // per device: worst case over the reserved graphs
  std::unique_ptr<sched::Executor> exec;
  sched::PlanPolicy policy;
  bool plan_only = false;
  std::unique_ptr<TpRunner> tp;  // split mode tensor
  // The last step's graph, plan and bound memory, run again while the shape stays the same:
  // decode steps pad n_kv to kKvPad, so one graph serves kKvPad tokens and building + planning
  // (~1 ms per token on a small model, ~9% of its decode) is paid once per kKvPad tokens.
  struct Step {
    ForwardShape shape;
    std::unique_ptr<Context> ctx;
    ForwardInputs in;
    std::unique_ptr<Graph> graph;
    std::unique_ptr<sched::ExecutionPlan> plan;
  };
  std::optional<Step> last_step;
};

// Cache rows a step attends to are n_past + n_tokens rounded up to this (masked past the end).
inline constexpr int64_t kKvPad = 256;

}  // namespace loom
