// NCCL communicator: one rank per CUDA device of this process. Data is staged through the
// device (the executor hands host memory); the sum is ncclAllReduce (ncclSum, float), or, for
// sums set to travel as BF16, a gather of every rank's BF16-rounded contribution summed in rank
// order in f32 (the bits the in-process and MPI communicators give).
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/fp16.h"
#include "loom/meta/comm.h"

namespace loom::meta {

namespace {

void check_nccl(ncclResult_t r, const char* what) {
  LOOM_CHECK(r == ncclSuccess, internal, "[nccl] {}: {}", what, ncclGetErrorString(r));
}
void check_cuda(cudaError_t r, const char* what) {
  LOOM_CHECK(r == cudaSuccess, internal, "[nccl] {}: {}", what, cudaGetErrorString(r));
}

class NcclComm final : public Communicator {
 public:
  NcclComm(ncclComm_t comm, int device, int rank, int size) : comm_(comm), device_(device), rank_(rank), size_(size) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    check_cuda(cudaStreamCreate(&stream_), "cudaStreamCreate");
  }
  ~NcclComm() override {
    cudaFree(buf_);
    cudaStreamDestroy(stream_);
    ncclCommDestroy(comm_);
  }
  const char* name() const override { return "nccl"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(float* data, size_t n) override {
    count(n);
    if (n == 0) return;
    if (use_bf16(n)) return all_reduce_bf16(data, n);
    stage(n);
    check_cuda(cudaMemcpyAsync(buf_, data, n * sizeof(float), cudaMemcpyHostToDevice, stream_), "upload");
    check_nccl(ncclAllReduce(buf_, buf_, n, ncclFloat, ncclSum, comm_, stream_), "ncclAllReduce");
    check_cuda(cudaMemcpyAsync(data, buf_, n * sizeof(float), cudaMemcpyDeviceToHost, stream_), "download");
    check_cuda(cudaStreamSynchronize(stream_), "sync");
  }
  // NCCL gathers equal blocks: pad every rank's block to the largest, then compact.
  void all_gather(const float* local, const std::vector<size_t>& counts, float* out) override {
    LOOM_CHECK((int)counts.size() == size_, internal, "[nccl] all_gather: {} counts for {} ranks", counts.size(), size_);
    size_t block = 0;
    for (size_t c : counts) block = std::max(block, c);
    if (block == 0) return;
    stage(block * (size_t)(size_ + 1));
    float* send = static_cast<float*>(buf_);
    float* recv = send + block;
    check_cuda(cudaMemcpyAsync(send, local, counts[(size_t)rank_] * sizeof(float), cudaMemcpyHostToDevice, stream_),
               "upload");
    check_nccl(ncclAllGather(send, recv, block, ncclFloat, comm_, stream_), "ncclAllGather");
    host_.resize(block * (size_t)size_);
    check_cuda(cudaMemcpyAsync(host_.data(), recv, host_.size() * sizeof(float), cudaMemcpyDeviceToHost, stream_),
               "download");
    check_cuda(cudaStreamSynchronize(stream_), "sync");
    for (int r = 0; r < size_; ++r) out = std::copy_n(host_.data() + (size_t)r * block, counts[(size_t)r], out);
  }
  void broadcast(void* data, size_t n, int root) override {
    stage((n + 3) / 4);
    check_cuda(cudaMemcpyAsync(buf_, data, n, cudaMemcpyHostToDevice, stream_), "upload");
    check_nccl(ncclBroadcast(buf_, buf_, n, ncclChar, root, comm_, stream_), "ncclBroadcast");
    check_cuda(cudaMemcpyAsync(data, buf_, n, cudaMemcpyDeviceToHost, stream_), "download");
    check_cuda(cudaStreamSynchronize(stream_), "sync");
  }

 private:
  // Half the bytes of f32 on the wire; each contribution rounded once, the sum exact in rank order.
  void all_reduce_bf16(float* data, size_t n) {
    halves_.resize(n * (size_t)(size_ + 1));
    uint16_t* mine = halves_.data();
    for (size_t i = 0; i < n; ++i) mine[i] = f32_to_bf16(data[i]);
    stage((n * (size_t)(size_ + 1) + 1) / 2);
    auto* send = static_cast<uint16_t*>(buf_);
    uint16_t* recv = send + n;
    check_cuda(cudaMemcpyAsync(send, mine, n * sizeof(uint16_t), cudaMemcpyHostToDevice, stream_), "upload");
    check_nccl(ncclAllGather(send, recv, n, ncclBfloat16, comm_, stream_), "ncclAllGather");
    uint16_t* all = halves_.data() + n;
    check_cuda(cudaMemcpyAsync(all, recv, n * (size_t)size_ * sizeof(uint16_t), cudaMemcpyDeviceToHost, stream_),
               "download");
    check_cuda(cudaStreamSynchronize(stream_), "sync");
    for (size_t i = 0; i < n; ++i) {
      float sum = 0.0f;
      for (int r = 0; r < size_; ++r) sum += bf16_to_f32(all[(size_t)r * n + i]);
      data[i] = sum;
    }
  }

  // Makes this rank's GPU current for the calling thread, then grows the staging buffer to n floats.
  void stage(size_t n) {
    check_cuda(cudaSetDevice(device_), "cudaSetDevice");
    if (n <= cap_) return;
    cudaFree(buf_);
    check_cuda(cudaMalloc(&buf_, n * sizeof(float)), "cudaMalloc");
    cap_ = n;
  }
  ncclComm_t comm_;
  int device_, rank_, size_;
  cudaStream_t stream_ = nullptr;
  void* buf_ = nullptr;
  size_t cap_ = 0;
  std::vector<float> host_;  // all_gather staging
  std::vector<uint16_t> halves_;  // BF16 sums: this rank's contribution, then every rank's
};

}  // namespace

bool nccl_available() { return true; }

int nccl_device_count() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
}

std::vector<std::unique_ptr<Communicator>> nccl_group(const std::vector<int>& devices) {
  std::vector<ncclComm_t> comms(devices.size());
  check_nccl(ncclCommInitAll(comms.data(), (int)devices.size(), devices.data()), "ncclCommInitAll");
  std::vector<std::unique_ptr<Communicator>> out;
  for (size_t i = 0; i < devices.size(); ++i)
    out.push_back(std::make_unique<NcclComm>(comms[i], devices[i], (int)i, (int)devices.size()));
  return out;
}

}  // namespace loom::meta
