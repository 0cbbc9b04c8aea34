// The executor: per-device compute buffers sized from a plan, a stream per device, and the
// plan's jobs run in order (input copies, split computes, event waits). compute() returns with
// every output readable; the caller's tensors are bound (data/buffer) to the plan's memory.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "loom/backend/comm.h"
#include "loom/sched/plan.h"

namespace loom::sched {

class Executor {
 public:
  // Streams for these devices (the same list, in the same order, as the plans it runs).
  explicit Executor(std::span<Device* const> devices);
  ~Executor();
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  // Grows every compute buffer to what plan needs (a worst-case graph); binds nothing.
  Status reserve(const Graph& g, const ExecutionPlan& plan);
  // Binds plan and caller tensors to the compute buffers, growing them if needed (an error
  // naming the tensor under LOOM_SCHED_NO_REALLOC=1). Graph inputs without memory get host
  // memory here: fill them after alloc(), before compute().
  Status alloc(const Graph& g, const ExecutionPlan& plan);
  // Runs g as planned and waits for the end. A plan that is not the bound one (or whose buffers
  // reserve() replaced) is allocated first; if it has inputs without memory, that is an error
  // (usage): they could not have been filled; call alloc() and fill them first.
  Status compute(const Graph& g, const ExecutionPlan& plan);
  // Waits for all queued work; throws the first asynchronous error.
  void synchronize();

  // Tensor parallelism: ALL_REDUCE nodes are summed over comm's group right after
  // they are computed (the split is run in pieces around them). Not owned; may be null.
  void set_communicator(Communicator* comm) { comm_ = comm; }

  size_t buffer_size(int device) const;           // bytes of device's compute buffer (0: none)
  int n_reallocs() const { return n_reallocs_; }  // buffers grown after the first allocation
  uint64_t n_computes() const { return n_computes_; }
  // Host waits on asynchronous streams so far (end-of-compute waits the plan requires, streams
  // without events, AllReduce staging): compute() waits only for the streams whose last work no
  // other waited-for stream's event covers.
  uint64_t n_syncs() const { return n_syncs_; }
  uint64_t bound_plan() const { return bound_plan_; }  // uid of the plan whose memory is bound (0: none)

 private:
  Status ensure_buffer(int d, const ExecutionPlan& plan, bool is_reserve);
  void release_buffer(int d);
  void run_jobs(const ExecutionPlan& plan, size_t slot, std::vector<std::unique_ptr<Event>>& events, Status& result);

  const BufferType& compute_buffer_type(int d) const;
  std::vector<bool> streams_to_wait(const ExecutionPlan& plan) const;
  Status compute_nodes(Stream& stream, const Graph& graph, const std::vector<Tensor*>& nodes);

  Communicator* comm_ = nullptr;
  std::vector<Device*> devices_;
  std::vector<std::unique_ptr<Buffer>> buffers_;
  std::vector<std::unique_ptr<Stream>> streams_;              // destroyed before the buffers
  std::vector<std::vector<std::vector<Tensor*>>> run_nodes_;  // [pipeline copy][split], optimized
  uint64_t bound_plan_ = 0;
  uint64_t n_computes_ = 0;
  uint64_t n_syncs_ = 0;
  int n_reallocs_ = 0;
};

}  // namespace loom::sched
