// The communicators a build leaves out: without MPI or NCCL their entry points fail with a clear
// "not compiled in" (unsupported) error instead of being missing at link time.
#include <cstdlib>

#include "loom/core/error.h"
#include "loom/meta/comm.h"

namespace loom::meta {

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "MPI_LOCALNRANKS"})
    if (std::getenv(v)) return true;
  return false;
}

// Set by the MPI communicator once MPI runs: a program that never asks for MPI (loom-gguf)
// references no MPI symbol through this, so the linker (--as-needed) leaves libmpi out of it.
namespace {
void (*g_mpi_abort)(int) = nullptr;
}
void set_mpi_abort(void (*abort)(int)) { g_mpi_abort = abort; }
void mpi_abort_if_running(int code) {
  if (g_mpi_abort) g_mpi_abort(code);
}

#ifndef LOOM_HAVE_MPI
bool mpi_available() { return false; }
Communicator& mpi_world() {
  fail(ErrorKind::unsupported,
       "--comm mpi: this build has no MPI (install OpenMPI, e.g. scripts/setup-deps.sh, and rebuild with "
       "-DLOOM_MPI=ON)");
}
#endif

#ifndef LOOM_HAVE_NCCL
bool nccl_available() { return false; }
int nccl_device_count() { return 0; }
std::vector<std::unique_ptr<Communicator>> nccl_group(const std::vector<int>&) {
  fail(ErrorKind::unsupported, "--comm nccl: this build has no NCCL (needs -DLOOM_CUDA=ON and NCCL)");
}
#endif

}  // namespace loom::meta
