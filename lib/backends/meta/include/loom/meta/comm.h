// Communicator implementations and the factory behind --comm (inproc | mpi | nccl).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/backend/comm.h"

namespace loom::meta {

// In-process group of n ranks (threads of one process, host memory). Members take turns on
// the host: a rank computes while holding the group's turn and hands it over while it waits in
// a collective, so CPU and simulated members never run kernels at the same time on the
// shared thread pool.
class InProcessGroup final : public CommGroup {
 public:
  explicit InProcessGroup(int n);
  ~InProcessGroup() override;
  InProcessGroup(const InProcessGroup&) = delete;
  InProcessGroup& operator=(const InProcessGroup&) = delete;

  int size() const override;
  Communicator& rank(int r) override;
  void abort(const std::string& why) override;

  struct State;

 private:
  std::unique_ptr<State> state_;
  std::vector<std::unique_ptr<Communicator>> ranks_;
};

// Whether MPI / NCCL were compiled in.
bool mpi_available();
bool nccl_available();

// MPI: initializes MPI on first use (finalized at exit); one rank per process.
// Throws unsupported ("not compiled in") when built without MPI.
Communicator& mpi_world();
// A failing rank ends every rank (MPI_Abort with code) instead of leaving them blocked in a
// collective; a no-op without MPI or with one rank.
void mpi_abort_if_running(int code);
// The MPI communicator's abort, installed when it starts MPI (through which the above works).
void set_mpi_abort(void (*abort)(int));
// True when this process was started by mpirun/mpiexec (OpenMPI/PMIx environment).
bool launched_by_mpi();

// NCCL over the given CUDA device ordinals, one rank each (in this process).
// Throws unsupported when built without NCCL.
std::vector<std::unique_ptr<Communicator>> nccl_group(const std::vector<int>& cuda_devices);
// CUDA devices NCCL can use here (0 without NCCL or without a GPU).
int nccl_device_count();

}  // namespace loom::meta
