// One member of a session: the forward model it computes (the whole model, or one tensor-
// parallel shard) with its KV cache, plan policy, executor, and the last step's graph and plan.
// A one-device run has one member; tensor parallelism has one per shard held here. Both reuse
// the last graph and plan while a step's shape stays the same.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "loom/model/forward.h"
#include "loom/model/session.h"
#include "loom/model/tp_split.h"
#include "loom/sched/executor.h"

namespace loom {

// Cache rows a step attends to are n_past + n_tokens rounded up to this (masked past the end).
inline constexpr int64_t kKvPad = 256;

struct MemberSetup {
  ForwardModel fm;
  std::vector<Device*> devices;   // the devices its plans use, the host last
  std::vector<int> model_device;  // index of each in model.devices()
  std::vector<int> kv_device;     // per layer: index into devices of its KV cache (empty: no cache here)
  int64_t kv_width = 0;           // KV values of a cache row held here
  int64_t kv_col = 0;             // the first of them in a whole row (all heads)
  tp::Range vocab;                // logits rows computed here
  int rank = 0;
  Communicator* comm = nullptr;   // tensor parallelism: reaches the other members
  int n_copies = 1;               // pipeline copies (1 under tensor parallelism)
  // Planning only: where the weights without memory will live.
  std::unordered_map<const Tensor*, Device*> leaf_devices;
};

class SessionMember {
 public:
  // Allocates the KV cache (unless plan_only), plans the worst-case steps and reserves compute
  // buffers for them. Throws out_of_memory naming the device.
  SessionMember(MemberSetup setup, const SessionParams& params, bool plan_only);

  // Builds the step graph and plan for shape, or keeps the last ones when the shape is the same
  // (pipeline copies rotate inputs per compute, so those runs build every step); binds memory.
  // Returns true when the last graph was reused.
  bool prepare(const ForwardShape& shape);
  // Fills the step's inputs (a member's graph may not read some: they have no memory).
  void set_inputs(std::span<const int32_t> tokens, int64_t n_past, bool all_logits);
  Status compute();
  // This member's logits rows of every output, vocab.size() x n_outputs floats; false when it has none.
  bool read_logits(float* out) const;
  void clear();

  Session::StepPlan plan_step(int64_t n_tokens) const;
  const MemberSetup& setup() const { return s_; }
  uint64_t n_syncs() const { return exec_ ? exec_->n_syncs() : 0; }
  const KvCache& kv() const { return kv_; }
  size_t kv_bytes(size_t d) const { return kv_bytes_[d]; }
  // Compute bytes on devices()[d]: the larger of the planned worst case and the live buffer.
  size_t compute_bytes(size_t d) const;

 private:
  struct Step {
    ForwardShape shape;
    std::unique_ptr<Context> ctx;
    ForwardInputs in;
    std::unique_ptr<Graph> graph;
    std::unique_ptr<sched::ExecutionPlan> plan;
    std::vector<ImatrixProbe> probes;  // SessionParams::imatrix: what compute() reads back
  };
  MemberSetup s_;
  SessionParams params_;
  Context kv_ctx_;
  KvCache kv_;
  std::vector<std::unique_ptr<Buffer>> kv_buffers_;
  std::vector<size_t> kv_bytes_;       // per device
  std::vector<size_t> compute_bytes_;  // per device: worst case over the reserved graphs
  sched::PlanPolicy policy_;
  std::unique_ptr<sched::Executor> exec_;
  std::optional<Step> last_;
};

}  // namespace loom
