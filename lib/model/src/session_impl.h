// Session internals shared by session.cpp and session_state.cpp.
#pragma once

#include <memory>
#include <vector>

#include "loom/model/session.h"
#include "session_member.h"

namespace loom {

// One engine for every split mode: a one-device (or layer-split) run has one member holding the
// whole model; tensor parallelism has one member per shard held in this process.
struct Session::Impl {
  std::vector<Device*> devices;  // the model's, the host last
  bool plan_only = false;
  bool tensor_parallel = false;
  std::unique_ptr<CommGroup> group;  // tensor parallelism in this process: the members' collectives
  Communicator* remote = nullptr;    // tensor parallelism across processes: reaches the other ranks
  std::vector<std::unique_ptr<SessionMember>> members;
  uint64_t graphs_reused = 0;
};

}  // namespace loom
