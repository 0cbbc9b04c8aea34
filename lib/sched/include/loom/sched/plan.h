// The planner: plan(graph, devices, policy) -> ExecutionPlan, a pure function that never touches
// the caller's graph. The plan holds, pass by pass: each node's device and the cause of that
// choice, the splits (runs of nodes on one device), the input copies each split needs (a ring of
// n_copies per input for pipeline parallelism), per-device memory plans (offsets only, nothing
// allocated), and the jobs in execution order with the sync edges derived from memory ranges.
// The plan computes on its own tensors (mirrors of the caller's nodes whose sources are
// replaced by local copies), so the caller's node list and sources stay exactly as they were.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include "loom/alloc/alloc.h"
#include "loom/backend/device.h"
#include "loom/graph/context.h"

namespace loom::sched {

// Why a node runs where it runs (one per pass that can decide).
enum class Cause : uint8_t {
  pinned,          // its memory already exists on that device (KV-cache view, set_rows) or a policy pin
  weight,          // it reads a weight (the largest one) that lives there; leafs: memory lives there
  input,           // leafs: a graph input without memory, allocated in host memory by the executor
  neighbour_down,  // took the device of the previous assigned node
  neighbour_up,    // took the device of the next assigned node
  offload,         // weights in host memory, but the device asked to run it (Device::offload_op)
  fallback,        // its device could not run it: the next device in order that can
  view,            // a view goes with its source
};
const char* cause_name(Cause cause);

struct PlanPolicy {
  int n_copies = 1;           // pipeline parallelism: input copies per split input (a ring, >= 1)
  bool offload = true;        // honour Device::offload_op for ops whose weights are in host memory
  bool allow_inplace = true;  // the graph allocator may run element-wise nodes in place
  // Nodes forced onto a device (cause pinned).
  std::unordered_map<const Tensor*, Device*> pins;
  // Where a leaf without memory will live (weights of a header-only model: plan without allocating).
  // Leafs without memory that are not listed are graph inputs in host memory.
  std::unordered_map<const Tensor*, Device*> leaf_devices;
};

struct NodePlan {
  const Tensor* tensor;  // the caller's node
  int device;            // index in ExecutionPlan::devices
  Cause cause;
  int split;  // the split whose node range holds it
};

struct LeafPlan {
  const Tensor* tensor;  // the caller's leaf
  int device;            // where its bytes live (host inputs: the host device)
  Cause cause;           // weight (has memory / leaf_devices) or input
};

// One input copy: the bytes of `tensor` copied to device `to` before split `split` runs.
struct CopyPlan {
  const Tensor* tensor;  // the caller's tensor as the consumer reads it (node, leaf or view)
  int from;              // device holding the bytes
  int to;
  int split;
  size_t bytes;
  Tensor* source;             // plan-owned view of the bytes on `from`
  std::vector<Tensor*> ring;  // plan-owned destinations on `to`, one per pipeline copy
};

struct Split {
  int id;
  int device;
  int first_node;                           // range of graph nodes [first_node, first_node + n_nodes); views inside it
  int n_nodes;                              // compute nothing and may belong to another device
  uint64_t uid;                             // derived from the graph uid and the split index
  std::vector<int> inputs;                  // copies issued right before this split (indices in copies)
  std::vector<int> reused;                  // copies made for an earlier split on this device, still valid
  std::vector<std::vector<Tensor*>> nodes;  // per pipeline copy: plan-owned nodes to compute
};

enum class JobKind : uint8_t { copy, compute };

// One unit of work on one device's stream, in execution order.
struct Job {
  JobKind kind;
  int index;               // into copies or splits
  int device;              // the stream that runs it (copies run on the destination's stream)
  std::vector<int> waits;  // earlier jobs on other streams that touched the memory it reads or writes
  bool signals = false;    // some later job waits for it (record an event after it)
};

struct DevicePlan {
  Graph graph;               // the device's plan-owned nodes, input copies and host inputs
  alloc::MemoryPlan memory;  // offsets in the device's compute buffer (memory.total = its size)
};

struct ExecutionPlan {
  ExecutionPlan() = default;
  ExecutionPlan(ExecutionPlan&&) = default;
  ExecutionPlan& operator=(ExecutionPlan&&) = default;

  uint64_t uid = 0;        // unique per plan
  uint64_t graph_uid = 0;  // the graph it was made for
  int n_copies = 1;
  bool plan_only = false;  // weights placed by PlanPolicy::leaf_devices: printable, not runnable
  std::vector<Device*> devices;
  std::vector<NodePlan> nodes;  // one per graph node, in graph order
  std::vector<LeafPlan> leafs;  // one per graph leaf
  std::vector<Split> splits;
  std::vector<CopyPlan> copies;
  std::vector<Job> jobs;
  std::vector<DevicePlan> device_plans;  // one per device
  // Caller tensors bound by the executor to the memory of a plan tensor (nodes, host inputs).
  std::vector<std::pair<Tensor*, Tensor*>> binds;
  // (pipeline copy 0 tensor, its clone for a later pipeline copy), in creation order.
  std::vector<std::pair<Tensor*, Tensor*>> clones;
  std::unique_ptr<Context> ctx;  // owns every plan tensor

  // Compute-buffer bytes of device d (from the graph allocator's plan; nothing is allocated).
  size_t compute_bytes(int d) const { return device_plans[(size_t)d].memory.total; }
  // Bytes copied between devices per compute (one pipeline copy).
  size_t copy_bytes() const;
  int n_waits() const;
};

// Plans g on devices (in priority order; the host device, usually the CPU, last). Pure: reads
// the graph, never writes it. Throws Error(unsupported) when no device can run a node, and
// Error(usage) for inconsistent inputs (a tensor in memory of a device not listed, ...).
ExecutionPlan plan(const Graph& g, std::span<Device* const> devices, const PlanPolicy& policy = {});

}  // namespace loom::sched
