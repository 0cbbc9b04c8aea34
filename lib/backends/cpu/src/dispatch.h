// Per-node entry points of the CPU kernels (see kernels.h for the family seam).
#pragma once

#include "kernels.h"

namespace loom::cpu {

bool supports_node(const Tensor* node);
size_t work_size(const Tensor* node, int nth);
void compute_node(const KernelArgs& args, Tensor* node);

}  // namespace loom::cpu
