// Per-node entry points of the CPU kernels (see kernels.h for the family seam).
#pragma once

#include <span>
#include <vector>

#include "kernels.h"
#include "loom/graph/fusion.h"

namespace loom::cpu {

bool supports_node(const Tensor* node);
size_t work_size(const Tensor* node, int nth);
void compute_node(const KernelArgs& args, Tensor* node);

// Per node of a compute call (groups: the fused groups it runs; sizes: each node's work_size): 1
// where a MUL_MAT(_ID) finds its b prepared in the scratch by an earlier one (matmul_b_prepared_by) with only
// scratch-free nodes in between, so it skips preparing b (KernelArgs::b_ready).
std::vector<uint8_t> prepared_b_nodes(std::span<Tensor* const> nodes, std::span<const FusedGroup* const> groups,
                                      std::span<const size_t> sizes, int nth);

}  // namespace loom::cpu
