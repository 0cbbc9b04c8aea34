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

// Per node: where it starts a run of products that mul_mat_run computes as one phase (the
// decode's q, k, v; gate, up: mul_mat_joins_run, their memory apart), the position of the run's
// last member; else 0. Members are consecutive but for views between them.
std::vector<uint32_t> product_runs(std::span<Tensor* const> nodes, std::span<const FusedGroup* const> groups, int nth);

// Per node: where a MUL_MAT (not in a run or group) is followed, views aside, by an ADD of its
// result that mul_mat_add makes in the product's phase (a residual: mul_mat_add_fusable), the
// ADD's position; else 0.
std::vector<uint32_t> product_adds(std::span<Tensor* const> nodes, std::span<const FusedGroup* const> groups,
                                   std::span<const uint32_t> run_last, int nth);

}  // namespace loom::cpu
