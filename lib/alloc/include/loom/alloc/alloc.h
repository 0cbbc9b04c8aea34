// Memory for tensors. Weights: alloc_tensors packs tensors into as few buffers as a buffer
// type's max_size allows. Activations: plan_graph is a pure function that places every tensor a
// graph computes in one buffer, reusing a tensor's bytes once its last reader has run (in place
// for element-wise ops where safe); apply_plan binds the tensors; GraphAllocator keeps the buffer.
#pragma once

#include <cstddef>
#include <memory>
#include <span>
#include <vector>

#include "loom/backend/device.h"

namespace loom::alloc {

// One tensor placed at [offset, offset + size) of a buffer; size is bt.alloc_size(tensor).
struct Placement {
  Tensor* tensor;
  size_t offset;
  size_t size;
};

// Memory for one graph in one buffer of `total` bytes.
struct MemoryPlan {
  size_t total = 0;                   // high-water mark: the buffer size the plan needs
  std::vector<Placement> placements;  // in allocation order: pinned tensors first, then nodes
  std::vector<Tensor*> views;         // views without data, bound to their root by apply_plan
};

struct PlanOptions {
  bool allow_inplace = true;  // element-wise nodes may take over src[0]'s bytes
};

// Plans memory for every node of `graph` and every leaf that has no data yet and is not a view.
// Leaves and kFlagInput tensors are placed before node 0 and never reused (an input also flagged
// kFlagRefilled is free once its last reader has run, as any node); kFlagOutput tensors
// (and roots of output views) are never reused. Any other tensor's bytes are free once its last
// reader (readers of its views count) has run; a node nobody reads is free right after it runs.
// In place: an element-wise node (op_info(op).may_inplace) takes src[0]'s bytes (ADD SUB MUL
// DIV: src[0]'s or src[1]'s, the lower offset of the two that qualify) when that source is
// planned here, is not a view/leaf/input/output, is last read by this node, no other source of
// the node aliases it, and both are contiguous with the same type and byte size.
// Offsets are multiples of bt.alignment(). Deterministic; modifies no tensor. Throws
// loom::Error(internal) if bt.alloc_size() is below a tensor's natural size, or above it for an
// op not listed by op_alloc_size_may_expand() (a backend bug).
MemoryPlan plan_graph(const Graph& graph, const BufferType& bt, const PlanOptions& opt = {});

// Binds each placement to buf (Buffer::init_tensor), then each view to its root's bytes.
Status apply_plan(const MemoryPlan& plan, Buffer& buf);

// A reusable graph allocator: one buffer of bt, grown when a graph needs more.
class GraphAllocator {
 public:
  explicit GraphAllocator(const BufferType& bt) : bt_(bt) {}
  GraphAllocator(const GraphAllocator&) = delete;
  GraphAllocator& operator=(const GraphAllocator&) = delete;

  // Sizes the buffer for g (the worst case) without binding any tensor.
  Status reserve(const Graph& g, const PlanOptions& opt = {});
  // Plans g and binds its tensors, growing the buffer if needed (tensors bound to the old buffer
  // become invalid). Tensors of g already bound to this allocator's buffer are planned again.
  // With env LOOM_SCHED_NO_REALLOC=1, growing the buffer once it exists (from reserve or an
  // earlier alloc_graph) is an error naming the largest tensor placed past its size.
  Status alloc_graph(const Graph& g, const PlanOptions& opt = {});
  size_t buffer_size() const { return buffer_ ? buffer_->size() : 0; }
  const MemoryPlan& last_plan() const { return plan_; }

 private:
  Status grow(size_t size);
  const BufferType& bt_;
  std::unique_ptr<Buffer> buffer_;
  MemoryPlan plan_;
};

// Weights: places every tensor without data (views are bound to their root afterwards) in as
// many buffers of bt as needed so that no buffer exceeds bt.max_size(); appends them to out.
// On failure no tensor is bound and out is unchanged.
Status alloc_tensors(std::span<Tensor* const> tensors, const BufferType& bt,
                     std::vector<std::unique_ptr<Buffer>>& out);
// Bytes alloc_tensors would allocate for these tensors, all buffers together.
size_t tensors_size(std::span<Tensor* const> tensors, const BufferType& bt);

}  // namespace loom::alloc
