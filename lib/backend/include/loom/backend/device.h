// The backend seam, in layers: Device -> BufferType -> Buffer, and Stream/Event for work.
// Abstract classes, virtual per buffer or per graph, never per element. Each method says
// whether it is optional. Device-like objects are non-copyable.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/graph/graph.h"

namespace loom {

class Device;
class BufferType;

// What a buffer holds, as the planner needs it: tensors in a compute buffer are placed anew by
// every plan; tensors in any other buffer (weights, KV cache, inputs) keep their memory.
enum class BufferUsage { any, weights, compute };

// A block of device memory. Tensors placed in it get data = base() + offset.
class Buffer {
 public:
  Buffer(const BufferType& type, void* base, size_t size) : type_(type), base_(base), size_(size) {}
  virtual ~Buffer() = default;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  const BufferType& type() const { return type_; }
  void* base() const { return base_; }
  size_t size() const { return size_; }
  BufferUsage usage() const { return usage_; }
  void set_usage(BufferUsage usage) { usage_ = usage; }

  // Binds t (not a view) to this buffer at offset; checks that it fits. Views follow their source.
  virtual Status init_tensor(Tensor* t, size_t offset);
  // Byte copies between host memory and a tensor's bytes (offset within the tensor).
  virtual void set(Tensor* t, const void* src, size_t offset, size_t n) = 0;
  virtual void get(const Tensor* t, void* dst, size_t offset, size_t n) const = 0;
  virtual void clear(uint8_t value) = 0;

 protected:
  const BufferType& type_;
  void* base_;
  size_t size_;
  BufferUsage usage_ = BufferUsage::any;
};

class BufferType {
 public:
  virtual ~BufferType() = default;
  virtual const char* name() const = 0;
  virtual size_t alignment() const = 0;
  virtual size_t max_size() const { return SIZE_MAX; }
  virtual bool is_host() const = 0;  // host code may read/write tensor->data directly
  // Allocates size bytes; out-of-memory is a Status, never an abort.
  virtual Status alloc(size_t size, std::unique_ptr<Buffer>& out) const = 0;
  // Bytes this device needs for t: its natural size, larger only for ops listed by
  // op_alloc_size_may_expand() (checked by the allocator).
  virtual size_t alloc_size(const Tensor* t) const { return t->nbytes(); }
  virtual Device& device() const = 0;
  // Writes a weight's file bytes src into t (bound to a buffer of this type). may_transform: t
  // is read only by matrix products (MUL_MAT / MUL_MAT_ID), so a backend may store it in the
  // layout its kernels read fastest and flag it (the CPU repacks Q8_0 / Q4_0 / K-quant rows in
  // groups of 8). Default: a plain copy.
  virtual void upload_weight(Tensor* t, const void* src, bool may_transform) const;
};

enum class DeviceKind { cpu, sim, gpu, remote, meta };
const char* device_kind_name(DeviceKind kind);

struct MemoryInfo {
  size_t free = 0;
  size_t total = 0;
};

struct DeviceCaps {
  bool async = false;        // compute and copies may overlap the caller
  bool events = false;       // supports Event for cross-stream sync
  bool host_buffer = false;  // has a pinned host buffer type
};

// A point in a stream's work; complete once everything queued before it has finished.
class Event {
 public:
  virtual ~Event() = default;
  virtual void synchronize() = 0;  // blocks the caller until complete
  virtual bool is_complete() = 0;
};

// An ordered queue of work on one device.
class Stream {
 public:
  virtual ~Stream() = default;
  // Runs nodes (a contiguous part of a graph, all on this device); may return before done if async.
  virtual Status compute(const Graph& graph, std::span<Tensor* const> nodes) = 0;
  // Copies src's bytes into dst (same byte size, both contiguous); one of them lives on this
  // stream's device, the other anywhere. Async on async devices: src must stay unchanged
  // until the copy completes (record an event after it). Default: synchronous via Buffer get/set.
  virtual Status copy(const Tensor* src, Tensor* dst);
  // (optional, needs caps().events) an event completing after all work queued so far.
  virtual std::unique_ptr<Event> record() { return nullptr; }
  // (optional) later work on this stream waits for e (which may belong to another stream).
  virtual void wait(Event& e) { e.synchronize(); }
  virtual void synchronize() = 0;
  // (optional) the first error of queued work that has already failed, without waiting for the
  // rest; the executor asks streams whose work an event it waited for already covers.
  virtual Status error() { return Status::ok(); }
  // (optional) may reorder nodes of one split before compute (e.g. to save barriers);
  // must keep every node after its sources.
  virtual void optimize_graph(std::vector<Tensor*>& nodes) { (void)nodes; }
  // (optional) barriers this stream would record between the nodes of one split in this order;
  // -1 when its work needs none (inspection: optimize_graph's effect, loom-split-inspect).
  virtual int count_barriers(const std::vector<Tensor*>& nodes) { return (void)nodes, -1; }
};

class Device {
 public:
  virtual ~Device() = default;
  Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual const std::string& name() const = 0;
  virtual DeviceKind kind() const = 0;
  virtual MemoryInfo memory() const = 0;
  virtual DeviceCaps caps() const = 0;
  virtual bool supports_op(const Tensor* node) const = 0;
  virtual bool supports_buffer_type(const BufferType& bt) const = 0;
  virtual const BufferType& buffer_type() const = 0;
  virtual std::unique_ptr<Stream> create_stream() = 0;
  // (optional) prefer running this op here even though its weights live elsewhere
  virtual bool offload_op(const Tensor* node) const { return false; }
  // (optional) threads for host-side kernels (the CPU's thread pool); ignored elsewhere.
  virtual void set_n_threads(int n) { (void)n; }
  // (optional) what --list-devices adds after the caps: driver, limits ("" for nothing)
  virtual std::string details() const { return {}; }
  // (optional, caps().host_buffer) pinned host memory this device copies from and to without
  // staging; host devices may compute in it (the executor puts the host's compute buffer there).
  virtual const BufferType* host_buffer_type() const { return nullptr; }
  // (optional) named counters of the device's work so far, e.g. CUDA graph replays.
  struct Counter {
    std::string name;
    uint64_t value = 0;
  };
  virtual std::vector<Counter> counters() const { return {}; }
};

// Byte copy between any two tensors of equal size through their buffers' get/set (staging
// through host memory when neither side is host-accessible). Synchronous.
Status copy_tensor(const Tensor* src, Tensor* dst);

}  // namespace loom
