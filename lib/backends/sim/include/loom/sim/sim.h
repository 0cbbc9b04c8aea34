// Simulated devices SIM0..: the CPU kernels in a private memory arena with a hard capacity,
// buffers that are not host-accessible, and streams with their own worker thread (async
// compute, async copies, events), so every multi-device path is testable without GPUs.
// LOOM_SIM_LATENCY_US=N sleeps a random 0..N us before each queued job to shake out races.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "loom/backend/device.h"
#include "loom/core/thread_pool.h"

namespace loom::sim {

class SimDevice;

// The arena of one simulated device: allocations beyond the capacity fail with out_of_memory.
class SimBufferType final : public BufferType {
 public:
  explicit SimBufferType(SimDevice& device) : device_(device) {}
  const char* name() const override;
  size_t alignment() const override { return 64; }
  bool is_host() const override { return false; }
  Status alloc(size_t size, std::unique_ptr<Buffer>& out) const override;
  Device& device() const override;
  // Weights in the CPU's kernel layout, as the CPU lays them out: a SIM device computes with the
  // CPU's kernels, so its results have the CPU's bits.
  void upload_weight(Tensor* t, const void* src, bool may_transform) const override;

 private:
  SimDevice& device_;
};

class SimDevice final : public Device {
 public:
  // Device "SIM<index>" with `capacity` bytes; kernels run on a pool of n_threads threads.
  SimDevice(int index, size_t capacity, int n_threads = 1);
  ~SimDevice() override;

  const std::string& name() const override { return name_; }
  DeviceKind kind() const override { return DeviceKind::sim; }
  MemoryInfo memory() const override { return {capacity_ - used_.load(), capacity_}; }
  DeviceCaps caps() const override { return {.async = true, .events = true, .host_buffer = false}; }
  bool supports_op(const Tensor* node) const override;
  bool supports_buffer_type(const BufferType& bt) const override { return &bt == &buffer_type_; }
  const BufferType& buffer_type() const override { return buffer_type_; }
  std::unique_ptr<Stream> create_stream() override;
  bool offload_op(const Tensor* node) const override { return offload_filter_ && offload_filter_(node); }

  size_t capacity() const { return capacity_; }
  size_t used() const { return used_.load(); }
  int latency_us() const { return latency_us_; }
  // (test hook) supports_op also requires filter(node); emulates a device lacking some ops.
  void set_op_filter(std::function<bool(const Tensor*)> filter) { op_filter_ = std::move(filter); }
  // (test hook) offload_op answers filter(node): ask for ops whose weights are in host memory.
  void set_offload_filter(std::function<bool(const Tensor*)> filter) { offload_filter_ = std::move(filter); }
  // (test hook) the stream's optimize_graph calls this on each split's node list.
  void set_optimize_hook(std::function<void(std::vector<Tensor*>&)> hook) { optimize_hook_ = std::move(hook); }

  // Internal (buffers and streams): reserve/release arena bytes; run nodes on the device's pool.
  bool reserve_bytes(size_t n);
  void release_bytes(size_t n) { used_.fetch_sub(n); }
  void run_nodes(const Graph& graph, std::span<Tensor* const> nodes);
  void optimize(std::vector<Tensor*>& nodes) const {
    if (optimize_hook_) optimize_hook_(nodes);
  }

 private:
  std::string name_;
  size_t capacity_;
  std::atomic<size_t> used_{0};
  int n_threads_;
  int latency_us_;
  std::mutex pool_mutex_;  // one pool per device: streams take turns
  std::unique_ptr<ThreadPool> pool_;
  std::function<bool(const Tensor*)> op_filter_;
  std::function<bool(const Tensor*)> offload_filter_;
  std::function<void(std::vector<Tensor*>&)> optimize_hook_;
  SimBufferType buffer_type_;
};

// Parses a list of capacities: "8GiB,8GiB", "2x24GiB", "512MiB", "3x64MiB,1GiB" (units B, KiB,
// MiB, GiB, TiB or K/M/G/T, binary; decimals allowed: "1.5GiB"). Throws Error(usage) naming the
// bad string.
std::vector<size_t> parse_sim_sizes(std::string_view spec);

}  // namespace loom::sim
