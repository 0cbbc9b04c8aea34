// MPI communicator (OpenMPI): one rank per process. Sums are an all-gather followed by a sum in
// rank order on every rank, so every rank holds the same bits (MPI_Allreduce does not promise
// that) and the result matches the in-process group exactly.
#include <mpi.h>

#include <cstdlib>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/fp16.h"
#include "loom/meta/comm.h"

namespace loom::meta {

namespace {

// mpi_abort_if_running's work once MPI runs (see set_mpi_abort)
void abort_if_running(int code) {
  int init = 0, fin = 0, size = 1;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (!init || fin) return;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) MPI_Abort(MPI_COMM_WORLD, code);
}

void check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  fail(ErrorKind::internal, "[mpi] {}: {}", what, std::string(msg, (size_t)len));
}

class MpiComm final : public Communicator {
 public:
  MpiComm() {
    int init = 0;
    MPI_Initialized(&init);
    if (!init) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      std::atexit([] {
        int fin = 0;
        MPI_Finalized(&fin);
        if (!fin) MPI_Finalize();
      });
    }
    set_mpi_abort(abort_if_running);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  const char* name() const override { return "mpi"; }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_reduce_sum(float* data, size_t n) override {
    count(n);
    if (size_ == 1) return;
    if (use_bf16(n)) {
      std::vector<bf16_t> mine(n), all(n * (size_t)size_);
      for (size_t i = 0; i < n; ++i) mine[i] = f32_to_bf16(data[i]);
      check(MPI_Allgather(mine.data(), (int)n, MPI_UINT16_T, all.data(), (int)n, MPI_UINT16_T, MPI_COMM_WORLD),
            "MPI_Allgather");
      for (size_t i = 0; i < n; ++i) {
        float s = 0.0f;
        for (int r = 0; r < size_; ++r) s += bf16_to_f32(all[(size_t)r * n + i]);
        data[i] = s;
      }
      return;
    }
    gathered_.resize(n * (size_t)size_);
    check(MPI_Allgather(data, (int)n, MPI_FLOAT, gathered_.data(), (int)n, MPI_FLOAT, MPI_COMM_WORLD), "MPI_Allgather");
    for (size_t i = 0; i < n; ++i) {
      float s = 0.0f;
      for (int r = 0; r < size_; ++r) s += gathered_[(size_t)r * n + i];
      data[i] = s;
    }
  }

  void all_gather(const float* local, const std::vector<size_t>& counts, float* out) override {
    std::vector<int> cnt(counts.size()), displ(counts.size());
    int off = 0;
    for (size_t r = 0; r < counts.size(); ++r) {
      cnt[r] = (int)counts[r];
      displ[r] = off;
      off += cnt[r];
    }
    check(
        MPI_Allgatherv(local, cnt[(size_t)rank_], MPI_FLOAT, out, cnt.data(), displ.data(), MPI_FLOAT, MPI_COMM_WORLD),
        "MPI_Allgatherv");
  }

  void broadcast(void* data, size_t n, int root) override {
    check(MPI_Bcast(data, (int)n, MPI_BYTE, root, MPI_COMM_WORLD), "MPI_Bcast");
  }

 private:
  int rank_ = 0;
  int size_ = 1;
  std::vector<float> gathered_;
};

}  // namespace

bool mpi_available() { return true; }

Communicator& mpi_world() {
  static MpiComm world;
  return world;
}

}  // namespace loom::meta
