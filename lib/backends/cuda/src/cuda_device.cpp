// CUDA devices, buffers, events and streams. Every call first makes the device current (the
// executor may drive several GPUs from one thread). Streams are non-blocking: ordering comes
// from events the executor records and waits for, and from synchronize().
#include "loom/cuda/cuda.h"

#include <cuda_runtime.h>

#include <cstring>
#include <mutex>

#include "capture_cache.h"
#include "cublas_lib.h"
#include "cuda_ops.h"
#include "loom/graph/fusion.h"

namespace loom::cuda {

namespace {

struct DeviceGuard {
  explicit DeviceGuard(int index) { check_cuda(cudaSetDevice(index), "cudaSetDevice"); }
};

class CudaDevice;

class CudaBuffer final : public Buffer {
 public:
  CudaBuffer(const BufferType& type, void* base, size_t size, int index, bool host)
      : Buffer(type, base, size), index_(index), host_(host) {}
  ~CudaBuffer() override {
    if (host_) {
      (void)cudaFreeHost(base_);
    } else {
      (void)cudaSetDevice(index_);
      (void)cudaFree(base_);
    }
  }
  void set(Tensor* t, const void* src, size_t offset, size_t n) override {
    DeviceGuard g(index_);
    check_cuda(cudaMemcpy(static_cast<char*>(t->data) + offset, src, n, cudaMemcpyDefault), "upload");
  }
  void get(const Tensor* t, void* dst, size_t offset, size_t n) const override {
    DeviceGuard g(index_);
    check_cuda(cudaMemcpy(dst, static_cast<const char*>(t->data) + offset, n, cudaMemcpyDefault), "download");
  }
  void clear(uint8_t value) override {
    if (host_) {
      std::memset(base_, value, size_);
      return;
    }
    DeviceGuard g(index_);
    check_cuda(cudaMemset(base_, value, size_), "cudaMemset");
    check_cuda(cudaDeviceSynchronize(), "clear");
  }

 private:
  int index_;
  bool host_;
};

class CudaBufferType final : public BufferType {
 public:
  CudaBufferType(Device& device, int index, bool host) : device_(device), index_(index), host_(host) {}
  const char* name() const override { return host_ ? "CUDA_Host" : "CUDA"; }
  size_t alignment() const override { return 256; }
  bool is_host() const override { return host_; }
  Status alloc(size_t size, std::unique_ptr<Buffer>& out) const override {
    void* p = nullptr;
    cudaError_t e = cudaSetDevice(index_);
    if (e == cudaSuccess) e = host_ ? cudaHostAlloc(&p, size ? size : 1, cudaHostAllocPortable) : cudaMalloc(&p, size ? size : 1);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      return Status::error(e == cudaErrorMemoryAllocation ? ErrorKind::out_of_memory : ErrorKind::internal,
                           fmt::format("{}: cannot allocate {} bytes ({})", device_.name(), size, cudaGetErrorString(e)));
    }
    out = std::make_unique<CudaBuffer>(*this, p, size, index_, host_);
    return Status::ok();
  }
  Device& device() const override { return device_; }

 private:
  Device& device_;
  int index_;
  bool host_;
};

class CudaEvent final : public Event {
 public:
  CudaEvent(int index, cudaStream_t s) : index_(index) {
    DeviceGuard g(index);
    check_cuda(cudaEventCreateWithFlags(&ev_, cudaEventDisableTiming), "cudaEventCreate");
    check_cuda(cudaEventRecord(ev_, s), "cudaEventRecord");
  }
  ~CudaEvent() override { (void)cudaEventDestroy(ev_); }
  void synchronize() override { check_cuda(cudaEventSynchronize(ev_), "cudaEventSynchronize"); }
  bool is_complete() override { return cudaEventQuery(ev_) == cudaSuccess; }
  cudaEvent_t get() const { return ev_; }

 private:
  int index_;
  cudaEvent_t ev_ = nullptr;
};

class CudaDevice final : public Device {
 public:
  CudaDevice(int index, std::string gpu_name)
      : index_(index), name_("CUDA" + std::to_string(index)), gpu_name_(std::move(gpu_name)),
        buffer_type_(*this, index, false), host_type_(*this, index, true) {}
  const std::string& name() const override { return name_; }
  DeviceKind kind() const override { return DeviceKind::gpu; }
  MemoryInfo memory() const override {
    size_t free = 0, total = 0;
    if (cudaSetDevice(index_) != cudaSuccess || cudaMemGetInfo(&free, &total) != cudaSuccess) (void)cudaGetLastError();
    return {free, total};
  }
  DeviceCaps caps() const override { return {.async = true, .events = true, .host_buffer = true}; }
  bool supports_op(const Tensor* node) const override { return op_supported(node); }
  bool supports_buffer_type(const BufferType& bt) const override { return &bt == &buffer_type_; }
  const BufferType& buffer_type() const override { return buffer_type_; }
  const BufferType* host_buffer_type() const override { return &host_type_; }
  std::vector<Counter> counters() const override {
    std::lock_guard lock(stats_mutex);
    return {{"graph_hits", stats.graph_hits},
            {"graph_captures", stats.graph_captures},
            {"graph_recaptures", stats.graph_recaptures},
            {"eager_splits", stats.eager_splits}};
  }
  std::unique_ptr<Stream> create_stream() override;

  int index() const { return index_; }
  const std::string& gpu_name() const { return gpu_name_; }
  struct Stats {
    uint64_t graph_hits = 0, graph_captures = 0, graph_recaptures = 0, eager_splits = 0;
  } stats;
  mutable std::mutex stats_mutex;

 private:
  int index_;
  std::string name_, gpu_name_;
  CudaBufferType buffer_type_, host_type_;
};

constexpr size_t kBlasWorkspace = 32u << 20;  // fixed, so cuBLAS never allocates during a capture

class CudaStream final : public Stream {
 public:
  explicit CudaStream(CudaDevice& dev) : dev_(dev), cache_(graphs_enabled_by_env()) {
    DeviceGuard g(dev.index());
    check_cuda(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    LOOM_CHECK(cublas().create(&blas_) == CUBLAS_STATUS_SUCCESS, internal, "{}: cublasCreate failed", dev.name());
    check_cuda(cudaMalloc(&blas_ws_, kBlasWorkspace), "cuBLAS workspace");
    LOOM_CHECK(cublas().set_workspace(blas_, blas_ws_, kBlasWorkspace) == CUBLAS_STATUS_SUCCESS, internal,
               "{}: cublasSetWorkspace failed", dev.name());
    LOOM_CHECK(cublas().set_stream(blas_, stream_) == CUBLAS_STATUS_SUCCESS, internal, "{}: cublasSetStream failed",
               dev.name());
  }
  ~CudaStream() override {
    (void)cudaSetDevice(dev_.index());
    (void)cudaStreamSynchronize(stream_);
    cache_.clear();
    cublas().destroy(blas_);
    (void)cudaFree(blas_ws_);
    (void)cudaFree(scratch_);
    (void)cudaStreamDestroy(stream_);
  }

  Status compute(const Graph& graph, std::span<Tensor* const> nodes) override {
    try {
      DeviceGuard g(dev_.index());
      size_t need = 0;
      for (const Tensor* n : nodes) {
        LOOM_CHECK(op_supported(n), unsupported, "{}: no kernel for {} '{}' ({})", dev_.name(), op_name(n->op), n->name,
                   describe(*n));
        LOOM_CHECK(n->data || n->nelements() == 0 || op_info(n->op).is_view, internal, "{}: node '{}' has no memory",
                   dev_.name(), n->name);
        need = std::max(need, op_scratch(n));
      }
      ensure_scratch(need);
      const CaptureKey key{graph.uid(), nodes.empty() ? nullptr : nodes[0], nodes.size()};
      const uint64_t addr = address_hash(nodes) ^ reinterpret_cast<uintptr_t>(scratch_);
      if (void* exec = cache_.lookup(key, addr)) {
        check_cuda(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), stream_), "cudaGraphLaunch");
      } else if (cache_.should_capture(key, addr)) {
        capture_and_launch(graph, nodes, key, addr);
      } else {
        enqueue(graph, nodes);
      }
      publish_stats();
    } catch (const Error& e) {
      return Status::error(e.kind(), e.what());
    }
    return Status::ok();
  }

  Status copy(const Tensor* src, Tensor* dst) override {
    const bool src_cuda = is_cuda(src), dst_cuda = is_cuda(dst);
    const bool src_host = src->buffer && src->buffer->type().is_host();
    const bool dst_host = dst->buffer && dst->buffer->type().is_host();
    if ((src_cuda || src_host) && (dst_cuda || dst_host)) {
      try {
        DeviceGuard g(dev_.index());
        check_cuda(cudaMemcpyAsync(dst->data, src->data, src->nbytes(), cudaMemcpyDefault, stream_), "copy");
      } catch (const Error& e) {
        return Status::error(e.kind(), e.what());
      }
      return Status::ok();
    }
    synchronize();  // another device kind: through its buffer's get/set, after our queued work
    return Stream::copy(src, dst);
  }

  std::unique_ptr<Event> record() override { return std::make_unique<CudaEvent>(dev_.index(), stream_); }
  void wait(Event& e) override {
    if (auto* ce = dynamic_cast<CudaEvent*>(&e)) {
      DeviceGuard g(dev_.index());
      check_cuda(cudaStreamWaitEvent(stream_, ce->get(), 0), "cudaStreamWaitEvent");
    } else {
      e.synchronize();
    }
  }
  void synchronize() override {
    DeviceGuard g(dev_.index());
    check_cuda(cudaStreamSynchronize(stream_), "cudaStreamSynchronize");
  }
  Status error() override {
    const cudaError_t e = cudaStreamQuery(stream_);
    if (e == cudaSuccess || e == cudaErrorNotReady) return Status::ok();
    (void)cudaGetLastError();
    return Status::error(ErrorKind::internal, fmt::format("{}: {}", dev_.name(), cudaGetErrorString(e)));
  }

 private:
  static bool is_cuda(const Tensor* t) {
    return t->buffer && dynamic_cast<const CudaDevice*>(&t->buffer->type().device()) && !t->buffer->type().is_host();
  }

  void ensure_scratch(size_t need) {
    if (need <= scratch_size_) return;
    check_cuda(cudaStreamSynchronize(stream_), "scratch");  // the old scratch may still be read
    (void)cudaFree(scratch_);
    scratch_ = nullptr;
    scratch_size_ = 0;
    check_cuda(cudaMalloc(&scratch_, need), "CUDA scratch");
    scratch_size_ = need;
    cache_.clear();  // captured graphs point into the old scratch
  }

  void enqueue(const Graph& graph, std::span<Tensor* const> nodes) {
    const OpContext ctx{stream_, blas_, static_cast<char*>(scratch_), scratch_size_};
    std::vector<FusedGroup> groups;
    if (fusion_enabled())
      for (FusedGroup& g : find_fusions(graph, nodes))
        if (fused_supported(g)) groups.push_back(std::move(g));
    size_t next = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (next < groups.size() && groups[next].first == i) {
        run_fused(ctx, groups[next]);
        i = groups[next++].last;
        continue;
      }
      run_op(ctx, nodes[i]);
    }
  }

  void capture_and_launch(const Graph& graph, std::span<Tensor* const> nodes, const CaptureKey& key, uint64_t addr) {
    check_cuda(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    cudaGraph_t g = nullptr;
    try {
      enqueue(graph, nodes);
    } catch (...) {
      (void)cudaStreamEndCapture(stream_, &g);
      if (g) (void)cudaGraphDestroy(g);
      throw;
    }
    check_cuda(cudaStreamEndCapture(stream_, &g), "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
    (void)cudaGraphDestroy(g);
    if (e != cudaSuccess) {  // capture not possible for this split: run it eagerly
      (void)cudaGetLastError();
      cache_.count_eager();
      enqueue(graph, nodes);
      return;
    }
    cache_.store(key, addr, exec, [](void* h) { (void)cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(h)); });
    check_cuda(cudaGraphLaunch(exec, stream_), "cudaGraphLaunch");
  }

  static bool fusion_enabled() {
    const char* v = std::getenv("LOOM_DISABLE_FUSION");
    return !v || !*v || std::string_view(v) == "0";
  }

  void publish_stats() {
    const CaptureStats& s = cache_.stats();
    std::lock_guard lock(dev_.stats_mutex);
    dev_.stats.graph_hits += s.hits - seen_.hits;
    dev_.stats.graph_captures += s.captures - seen_.captures;
    dev_.stats.graph_recaptures += s.recaptures - seen_.recaptures;
    dev_.stats.eager_splits += s.eager - seen_.eager;
    seen_ = s;
  }

  CudaDevice& dev_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  void* blas_ws_ = nullptr;
  void* scratch_ = nullptr;
  size_t scratch_size_ = 0;
  CaptureCache cache_;
  CaptureStats seen_;
};

std::unique_ptr<Stream> CudaDevice::create_stream() { return std::make_unique<CudaStream>(*this); }

}  // namespace

Enumeration enumerate_devices(int n_threads) {
  (void)n_threads;
  Enumeration out;
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    (void)cudaGetLastError();
    out.none_reason = e != cudaSuccess ? fmt::format("no CUDA device ({})", cudaGetErrorString(e)) : "no CUDA device";
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, i) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    out.devices.push_back(std::make_unique<CudaDevice>(i, prop.name));
  }
  if (out.devices.empty()) out.none_reason = "no CUDA device (properties unreadable)";
  return out;
}

}  // namespace loom::cuda
