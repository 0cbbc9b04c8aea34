// GraphAllocator: one buffer reused across graphs, sized up front by reserve() and grown by
// alloc_graph() when a graph needs more (an error under LOOM_SCHED_NO_REALLOC=1).
#include <cstdlib>
#include <cstring>

#include "loom/alloc/alloc.h"
#include "loom/alloc/check.h"

namespace loom::alloc {

namespace {

bool no_realloc_env() {
  const char* v = std::getenv("LOOM_SCHED_NO_REALLOC");
  return v && *v && std::strcmp(v, "0") != 0;
}

// The planner throws loom::Error only for a buffer type that breaks the alloc_size contract.
Status plan_checked(const Graph& g, const BufferType& bt, const PlanOptions& opt, MemoryPlan& out) {
  try {
    out = plan_graph(g, bt, opt);
  } catch (const Error& e) {
    return Status::error(e.kind(), e.what());
  }
#ifndef NDEBUG
  if (Status st = check_plan(g, bt, out, opt); !st) return st;
#endif
  return Status::ok();
}

// The largest placement that ends past `size` (the first of equals): the tensor that grew.
// Falls back to the placement that ends last (only empty tensors can reach past by padding).
const Placement& largest_past(const MemoryPlan& plan, size_t size) {
  const Placement* worst = nullptr;
  for (const Placement& p : plan.placements)
    if (p.offset + p.size > size && (!worst || p.size > worst->size)) worst = &p;
  if (!worst)
    for (const Placement& p : plan.placements)
      if (!worst || p.offset + p.size > worst->offset + worst->size) worst = &p;
  return *worst;
}

}  // namespace

Status GraphAllocator::grow(size_t size) {
  buffer_.reset();  // free the old buffer first: the peak is the new size, not both
  return bt_.alloc(size, buffer_);
}

Status GraphAllocator::reserve(const Graph& g, const PlanOptions& opt) {
  MemoryPlan plan;
  if (Status st = plan_checked(g, bt_, opt, plan); !st) return st;
  if (!buffer_ || plan.total > buffer_->size()) return grow(plan.total);
  return Status::ok();
}

Status GraphAllocator::alloc_graph(const Graph& g, const PlanOptions& opt) {
  // Tensors this allocator bound before (the same graph run again) are planned afresh.
  if (buffer_) {
    auto unbind = [&](Tensor* t) {
      if (t->buffer == buffer_.get()) {
        t->data = nullptr;
        t->buffer = nullptr;
      }
    };
    for (Tensor* t : g.leafs()) unbind(t);
    for (Tensor* t : g.nodes()) unbind(t);
  }
  if (Status st = plan_checked(g, bt_, opt, plan_); !st) return st;
  if (!buffer_ || plan_.total > buffer_->size()) {
    if (buffer_ && no_realloc_env()) {
      const Placement& p = largest_past(plan_, buffer_->size());
      return Status::error(
          ErrorKind::out_of_memory,
          fmt::format("[alloc_graph] LOOM_SCHED_NO_REALLOC=1: graph needs {} bytes but {} are reserved; tensor '{}' "
                      "({} {}, {} bytes at offset {}) grew past the reserve",
                      plan_.total, buffer_->size(), p.tensor->name, op_name(p.tensor->op), describe(*p.tensor), p.size,
                      p.offset));
    }
    if (Status st = grow(plan_.total); !st) return st;
  }
  return apply_plan(plan_, *buffer_);
}

}  // namespace loom::alloc
