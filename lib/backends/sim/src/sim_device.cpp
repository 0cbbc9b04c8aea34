// SimDevice and its arena: buffers are plain host allocations counted against the device's
// capacity (so "free = capacity - used" is exact), but they report is_host false, so host code
// and other devices go through Buffer::set/get or a planned copy, like with a real GPU.
#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "loom/cpu/cpu.h"
#include "loom/sim/sim.h"

namespace loom::sim {

namespace {

class SimBuffer final : public Buffer {
 public:
  SimBuffer(const SimBufferType& type, SimDevice& dev, void* base, size_t size, size_t reserved)
      : Buffer(type, base, size), dev_(dev), reserved_(reserved) {}
  ~SimBuffer() override {
    std::free(base_);
    dev_.release_bytes(reserved_);
  }
  void set(Tensor* t, const void* src, size_t offset, size_t n) override {
    std::memcpy(static_cast<char*>(t->data) + offset, src, n);
  }
  void get(const Tensor* t, void* dst, size_t offset, size_t n) const override {
    std::memcpy(dst, static_cast<const char*>(t->data) + offset, n);
  }
  void clear(uint8_t value) override { std::memset(base_, value, size_); }

 private:
  SimDevice& dev_;
  size_t reserved_;
};

int latency_from_env() {
  const char* v = std::getenv("LOOM_SIM_LATENCY_US");
  if (!v || !*v) return 0;
  char* end = nullptr;
  const long us = std::strtol(v, &end, 10);
  LOOM_CHECK(end && *end == '\0' && us >= 0 && us <= 10'000'000, usage,
             "LOOM_SIM_LATENCY_US='{}': expected microseconds (0 to 10000000)", v);
  return (int)us;
}

}  // namespace

const char* SimBufferType::name() const { return device_.name().c_str(); }

Device& SimBufferType::device() const { return device_; }

void SimBufferType::upload_weight(Tensor* t, const void* src, bool may_transform) const {
  if (may_transform && cpu::repack_weight(*t, src)) return;
  t->buffer->set(t, src, 0, t->nbytes());
}

Status SimBufferType::alloc(size_t size, std::unique_ptr<Buffer>& out) const {
  const size_t a = alignment();
  const size_t bytes = (std::max<size_t>(size, 1) + a - 1) / a * a;
  if (!device_.reserve_bytes(size))
    return Status::error(ErrorKind::out_of_memory,
                         fmt::format("{}: cannot allocate {} bytes ({:.2f} MiB): {} of {} bytes in use", device_.name(),
                                     size, (double)size / (1024.0 * 1024.0), device_.used(), device_.capacity()));
  void* p = std::aligned_alloc(a, bytes);
  if (!p) {
    device_.release_bytes(size);
    return Status::error(ErrorKind::out_of_memory,
                         fmt::format("{}: host memory backing {} bytes is exhausted", device_.name(), size));
  }
  out = std::make_unique<SimBuffer>(*this, device_, p, size, size);
  return Status::ok();
}

SimDevice::SimDevice(int index, size_t capacity, int n_threads)
    : name_(fmt::format("SIM{}", index)),
      capacity_(capacity),
      n_threads_(std::max(1, n_threads)),
      latency_us_(latency_from_env()),
      buffer_type_(*this) {}

SimDevice::~SimDevice() = default;

bool SimDevice::supports_op(const Tensor* node) const {
  if (op_filter_ && !op_filter_(node)) return false;
  return cpu::supports(node);
}

bool SimDevice::reserve_bytes(size_t n) {
  size_t used = used_.load();
  do {
    if (n > capacity_ || used > capacity_ - n) return false;
  } while (!used_.compare_exchange_weak(used, used + n));
  return true;
}

void SimDevice::run_nodes(const Graph& graph, std::span<Tensor* const> nodes) {
  std::lock_guard lock(pool_mutex_);
  if (!pool_) pool_ = std::make_unique<ThreadPool>(n_threads_);
  cpu::compute_nodes(graph, nodes, *pool_);
}

}  // namespace loom::sim
