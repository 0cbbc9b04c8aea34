// Private seam for fused groups (see loom/graph/fusion.h): the CPU graph loop runs a group found
// by find_fusions as one kernel at its first node when fused_supported(group) holds.
#pragma once

#include "kernels.h"
#include "loom/graph/fusion.h"

namespace loom::cpu {

// The group's types and layouts are ones the fused kernels handle, and writing its outputs
// early cannot clobber an input it still reads (otherwise the nodes run one by one).
bool fused_supported(const FusedGroup& group);
size_t work_size_fused(const FusedGroup& group, int nth);
void compute_fused(const KernelArgs& args, const FusedGroup& group);

}  // namespace loom::cpu
