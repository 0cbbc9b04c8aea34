// Private parts of the planner shared by its files: the device assignment (passes 1-5, in
// plan_assign.cpp), the builder of splits, mirrors and copies (plan_splits.cpp), and the memory
// and sync pass (plan_memory.cpp).
#pragma once

#include <unordered_map>
#include <vector>

#include "loom/sched/executor.h"
#include "loom/sched/plan.h"

namespace loom::sched::detail {

inline Tensor* root_of(Tensor* t) { return t->view_src ? t->view_src : t; }
inline const Tensor* root_of(const Tensor* t) { return t->view_src ? t->view_src : t; }
inline size_t offset_in_root(const Tensor* t) { return t->view_src ? t->view_offs : 0; }
// A view op (VIEW, RESHAPE, PERMUTE, TRANSPOSE): no compute. CPY/SET_ROWS results are views
// that do compute (they write into their root).
inline bool is_pure_view(const Tensor* t) { return op_info(t->op).is_view; }
// Memory the caller (not an executor) gave the tensor: weights, KV cache, caller-owned inputs.
inline bool has_fixed_memory(const Tensor* t) { return t->data && !(t->buffer && t->buffer->usage() == BufferUsage::compute); }

struct LeafInfo {
  int device;       // where its bytes live
  bool host_input;  // no memory yet: the executor places it in host memory
};

// Result of the assignment passes.
struct Assignment {
  std::vector<int> device;   // per node
  std::vector<Cause> cause;  // per node
  std::unordered_map<const Tensor*, int> node_index;
  std::unordered_map<const Tensor*, LeafInfo> leafs;
  int host = -1;  // the device whose buffer type is host memory (last such); -1: none

  bool is_node(const Tensor* t) const { return node_index.count(t) != 0; }
  int device_of_node(const Tensor* t) const { return device[(size_t)node_index.at(t)]; }
};

// Passes 1-5: every node gets a device and a cause. Pure.
Assignment assign_devices(const Graph& g, std::span<Device* const> devices, const PlanPolicy& policy);
// The device whose memory holds root r (a node or a leaf), or -1 if it has no memory anywhere yet.
int fixed_device(const Tensor* r, std::span<Device* const> devices, const PlanPolicy& policy, int host);
// Whether device d reads the memory of fixed root r (a leaf or node with memory) directly.
bool can_read_fixed(const Tensor* r, int d, std::span<Device* const> devices, const PlanPolicy& policy, int host);

// Builds splits, mirrors, copies and the device graphs into p (needs p.devices, p.nodes).
void build_splits(const Graph& g, const Assignment& a, const PlanPolicy& policy, ExecutionPlan& p);
// Memory plans per device, then jobs with their sync edges from memory ranges.
void plan_memory_and_sync(const Assignment& a, const PlanPolicy& policy, ExecutionPlan& p);

}  // namespace loom::sched::detail
