// Collectives between the members of a tensor-parallel group: one Communicator per member
// (rank). Implementations: in-process (host memory, any member devices), MPI (one rank per
// process), NCCL (CUDA devices). See lib/backends/meta and docs/TENSOR-PARALLEL.md.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

namespace loom {

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  virtual const char* name() const = 0;  // "inproc", "mpi", "nccl"
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Sums n floats over all ranks, in rank order, so every rank ends with the same bits. Blocks
  // until every rank has contributed.
  virtual void all_reduce_sum(float* data, size_t n) = 0;
  // Concatenates every rank's block (counts[r] floats from rank r) into out, in rank order.
  virtual void all_gather(const float* local, const std::vector<size_t>& counts, float* out) = 0;
  // Copies root's n bytes to every rank.
  virtual void broadcast(void* data, size_t n, int root) = 0;

  // Called by the executor around a member's compute (in-process members take turns on the
  // host's threads); no-ops for communicators whose ranks are separate processes.
  virtual void begin_compute() {}
  virtual void end_compute() {}

  // (option) sums of at least min_elements travel as BF16: half the bytes, each contribution
  // rounded to 8 mantissa bits before the (f32, rank-order) sum. Default: never.
  void set_bf16_min_elements(size_t min_elements) { bf16_min_ = min_elements; }

  uint64_t n_all_reduce() const { return n_all_reduce_; }  // calls on this rank so far
  size_t bytes_reduced() const { return bytes_reduced_; }

 protected:
  void count(size_t n) {
    ++n_all_reduce_;
    bytes_reduced_ += n * (use_bf16(n) ? sizeof(uint16_t) : sizeof(float));
  }
  bool use_bf16(size_t n) const { return n >= bf16_min_; }

 private:
  size_t bf16_min_ = SIZE_MAX;
  uint64_t n_all_reduce_ = 0;
  size_t bytes_reduced_ = 0;
};

// A group of ranks of one process (see meta::InProcessGroup), made through registry().collectives().
class CommGroup {
 public:
  virtual ~CommGroup() = default;
  virtual int size() const = 0;
  virtual Communicator& rank(int r) = 0;
  // Wakes every rank blocked in a collective with an error (a member failed).
  virtual void abort(const std::string& why) = 0;
};

}  // namespace loom
