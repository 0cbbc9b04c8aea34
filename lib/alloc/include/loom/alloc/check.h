// Invariant checker for graph memory plans, written independently of the planner: used by the
// tests and by debug builds of GraphAllocator.
#pragma once

#include "loom/alloc/alloc.h"

namespace loom::alloc {

// Checks that `plan` is a correct plan of `graph` in a buffer of bt: every tensor plan_graph
// must place is placed exactly once and nothing else; size == bt.alloc_size (larger than the
// natural size only for ops listed by op_alloc_size_may_expand); offsets aligned; everything
// within total; and no two tensors live at the same step share a byte, except a node placed in
// place on its src[0] (or src[1]) exactly as the in-place rule of plan_graph allows. Returns the
// first violation as Status(internal) naming the tensors.
Status check_plan(const Graph& graph, const BufferType& bt, const MemoryPlan& plan, const PlanOptions& opt = {});

}  // namespace loom::alloc
