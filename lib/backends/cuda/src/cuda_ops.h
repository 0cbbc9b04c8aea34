// The CUDA backend's op table: which nodes the kernels run (exactly; everything else is placed on
// another device by the planner), the scratch each needs, and the launch of one node or one fused
// group on a stream. Host code: kernels/kernels.h holds the launchers.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "loom/graph/fusion.h"

namespace loom::cuda {

struct OpContext {
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  char* scratch = nullptr;  // device memory of at least op_scratch() bytes for the node run
  size_t scratch_size = 0;
};

bool op_supported(const Tensor* node);
size_t op_scratch(const Tensor* node);  // device scratch bytes run_op needs for node
// Queues node's kernels; throws loom::Error on a CUDA or cuBLAS error.
void run_op(const OpContext& ctx, Tensor* node);

bool fused_supported(const FusedGroup& group);
void run_fused(const OpContext& ctx, const FusedGroup& group);

// Throws loom::Error naming what failed when e is not cudaSuccess (out_of_memory for allocations).
void check_cuda(cudaError_t e, const char* what);

}  // namespace loom::cuda
