// plan(): runs the passes in order (assignment, splits and copies, memory and sync) and
// assembles the ExecutionPlan; plus small plan helpers.
#include <atomic>

#include "plan_internal.h"

namespace loom::sched {

const char* cause_name(Cause cause) {
  switch (cause) {
    case Cause::pinned:
      return "pinned";
    case Cause::weight:
      return "weight";
    case Cause::input:
      return "input";
    case Cause::neighbour_down:
      return "neighbour_down";
    case Cause::neighbour_up:
      return "neighbour_up";
    case Cause::offload:
      return "offload";
    case Cause::fallback:
      return "fallback";
    case Cause::view:
      return "view";
  }
  return "?";
}

size_t ExecutionPlan::copy_bytes() const {
  size_t n = 0;
  for (const CopyPlan& c : copies) n += c.bytes;
  return n;
}

int ExecutionPlan::n_waits() const {
  int n = 0;
  for (const Job& j : jobs) n += (int)j.waits.size();
  return n;
}

ExecutionPlan plan(const Graph& g, std::span<Device* const> devices, const PlanPolicy& policy) {
  static std::atomic<uint64_t> next_plan_uid{1};
  LOOM_CHECK(!devices.empty(), usage, "[plan] no devices to plan on");
  LOOM_CHECK(policy.n_copies >= 1 && policy.n_copies <= 16, usage, "[plan] n_copies {} (1 to 16)", policy.n_copies);
  for (size_t i = 0; i < devices.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      LOOM_CHECK(devices[i] != devices[j], usage, "[plan] device {} listed twice", devices[i]->name());

  ExecutionPlan p;
  p.uid = next_plan_uid.fetch_add(1);
  p.graph_uid = g.uid();
  p.n_copies = policy.n_copies;
  p.devices.assign(devices.begin(), devices.end());
  p.ctx = std::make_unique<Context>();
  p.device_plans.resize(devices.size());

  const detail::Assignment a = detail::assign_devices(g, devices, policy);
  for (size_t i = 0; i < g.n_nodes(); ++i) p.nodes.push_back({g.node(i), a.device[i], a.cause[i], -1});
  for (const Tensor* t : g.leafs()) {
    const detail::LeafInfo& li = a.leafs.at(t);
    p.leafs.push_back({t, li.device, li.host_input ? Cause::input : Cause::weight});
  }
  detail::build_splits(g, a, policy, p);
  detail::plan_memory_and_sync(a, policy, p);
  return p;
}

}  // namespace loom::sched
