// The CUDA backend: devices CUDA0.. from the driver (free/total memory from cudaMemGetInfo),
// device buffers (cudaMalloc), a pinned host buffer type (cudaHostAlloc), and streams that run a
// split's kernels (own kernels + cuBLAS), capture them as a CUDA graph and replay it while the
// split is unchanged (LOOM_CUDA_GRAPHS=0: off); Device::counters() reports graph hits, captures,
// re-captures and splits run without a graph.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/backend/device.h"

namespace loom::cuda {

struct Enumeration {
  std::vector<std::unique_ptr<Device>> devices;
  std::string none_reason;  // why there is no device ("no CUDA device: ..."), empty when some
};
// One Device per GPU the runtime sees; none (with the reason) without a driver or a GPU.
Enumeration enumerate_devices(int n_threads);

}  // namespace loom::cuda
