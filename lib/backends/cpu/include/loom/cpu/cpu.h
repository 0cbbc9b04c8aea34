// The CPU device: host memory buffers and a stream that runs graph nodes with a thread pool.
// Also the direct entry point used by tests and tools: compute a graph whose tensors already
// live in host memory.
#pragma once

#include <cstdint>
#include <memory>

#include "loom/backend/device.h"
#include "loom/core/thread_pool.h"
#include "loom/graph/context.h"

namespace loom::cpu {

// Host memory (64-byte aligned). Any host-readable device can use it.
class HostBufferType final : public BufferType {
 public:
  explicit HostBufferType(Device& device) : device_(device) {}
  const char* name() const override { return "CPU"; }
  size_t alignment() const override { return 64; }
  bool is_host() const override { return true; }
  Status alloc(size_t size, std::unique_ptr<Buffer>& out) const override;
  Device& device() const override { return device_; }
  // Repacks matrices when allowed (repack_weight below), else copies.
  void upload_weight(Tensor* t, const void* src, bool may_transform) const override;

 private:
  Device& device_;
};

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(int n_threads = ThreadPool::default_threads(), ThreadPlacement placement = {});
  const std::string& name() const override { return name_; }
  DeviceKind kind() const override { return DeviceKind::cpu; }
  MemoryInfo memory() const override;  // from /proc/meminfo
  DeviceCaps caps() const override { return {}; }
  bool supports_op(const Tensor* node) const override;
  bool supports_buffer_type(const BufferType& bt) const override { return bt.is_host(); }
  const BufferType& buffer_type() const override { return buffer_type_; }
  std::unique_ptr<Stream> create_stream() override;

  int n_threads() const { return n_threads_; }
  void set_n_threads(int n) override;
  ThreadPool& pool();

 private:
  std::string name_ = "CPU";
  int n_threads_;
  ThreadPlacement placement_;  // every pool's
  std::unique_ptr<ThreadPool> pool_;
  std::unique_ptr<ThreadPool> spare_pool_;  // the pool of the count before (-t and -tb take turns)
  HostBufferType buffer_type_;
};

// Computes the nodes of a graph in order; every tensor must have host data. Throws
// loom::Error(unsupported) naming the node if the CPU has no kernel for it.
void compute_graph(const Graph& graph, ThreadPool& pool);
void compute_nodes(const Graph& graph, std::span<Tensor* const> nodes, ThreadPool& pool);
bool supports(const Tensor* node);

// Copies a weight's GGUF bytes `src` into its host memory (t.data) in the layout the active
// kernels read fastest (cpu_repack.h: quantized matrices, or stacks of them, with rows in
// groups of 8) and flags it kFlagRepacked; false (nothing written) when there is no such layout
// for it. Only for weights that MUL_MAT / MUL_MAT_ID alone read (not token embeddings).
bool repack_weight(Tensor& t, const void* src);

// How MUL_MAT / MUL_MAT_ID round the activations (b) before their products with weights of a
// type: not at all, to bf16 (nearest even), or to int8 blocks of 32 or 256 values (d = amax / 127,
// q = x * (127 / amax) rounded to nearest even; blocks of 32 as GGUF's Q8_0: q = x * (1 / d), d
// kept at fp16 precision), which depends on the columns one weight matrix meets (one expert's for
// MUL_MAT_ID): `small` below `large_from` columns, `large` from there. Another
// device that wants the CPU's numerics (Vulkan) rounds its activations the same way.
enum class ActRounding : uint8_t { none, bf16, q8_32, q8_256 };
struct MatmulActivations {
  ActRounding small = ActRounding::none, large = ActRounding::none;
  int64_t large_from = INT64_MAX;
};
// For K x M weights of `type` at the active kernel level (all none for a type the CPU cannot multiply).
MatmulActivations matmul_activations(DType type, int64_t K);

// Allocates one host buffer holding every tensor of the context that has no data yet (views
// are bound to their source). For tests and tools that need no memory reuse.
std::unique_ptr<Buffer> alloc_all(Context& ctx, const BufferType& bt);

}  // namespace loom::cpu
