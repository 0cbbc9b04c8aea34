// Registers MPI's world as the collectives across processes (--comm mpi). Apart from the
// backends' registration so that tools which never start MPI (loom-gguf) do not need libmpi.
#include "loom/backend/registry.h"
#include "loom/meta/comm.h"

namespace loom {
namespace {

const bool registered = registry().set_collectives({
    .mpi_world = []() -> Communicator& { return meta::mpi_world(); },
    .abort_world = [](int code) { meta::mpi_abort_if_running(code); },
});

}  // namespace
}  // namespace loom
