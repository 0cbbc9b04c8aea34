// Session internals shared by session.cpp and session_state.cpp.
#pragma once

#include <memory>
#include <vector>

#include "forward.h"
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
};

}  // namespace loom
