// The backend registry: every backend (CPU, SIM, Vulkan, CUDA, a test's fake) registers a
// factory that creates its devices for a run; tools list and select devices through it, and
// tensor parallelism finds its communicators here. Code above lib/backends never names a
// concrete backend: one registration unit (lib/backends/registration) adds the built-in ones,
// and a test may add its own from a static initializer of its own file.
#pragma once

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/backend/comm.h"
#include "loom/backend/device.h"
#include "loom/core/thread_pool.h"

namespace loom {

// What a run asks of every backend when it creates devices.
struct DeviceOptions {
  int n_threads = 0;      // threads of host kernels (CPU, SIM); 0: all cores
  std::string sim_sizes;  // SIM capacities ("2x24GiB"); empty: env LOOM_SIM_DEVICES, else none
  ThreadPlacement cpu_placement;  // the CPU device's threads (-C, -Cr, --cpu-strict, --poll)
};

// What one backend found for a run: its devices, or a note on why it has none ("no CUDA device").
struct BackendDevices {
  std::vector<std::unique_ptr<Device>> devices;
  // Devices used only when named (-dev, -b): software GPUs (lavapipe) that would compute on the
  // CPU's cores, only slower. Listed, never chosen by default.
  std::vector<std::unique_ptr<Device>> named_only;
  std::string note;
};

struct BackendFactory {
  std::string name;  // "CPU", "SIM", "Vulkan", ...: unique
  // Listing and priority order, lower first; accelerators before SIM before the CPU, like
  // llama.cpp lists GPUs before the CPU.
  int order = 0;
  // The host backend (the CPU): its first device is the planner's last resort, appended to
  // every selection. Exactly one backend is the host.
  bool host = false;
  std::function<BackendDevices(const DeviceOptions&)> create;
};

// The devices of a run, owned, in priority order with the host device last.
struct DeviceSet {
  std::vector<std::unique_ptr<Device>> owned;
  std::vector<Device*> all;
  Device* cpu = nullptr;           // the host device (also all.back())
  std::vector<std::string> notes;  // "CUDA: no CUDA device", one per backend that found none
  std::vector<Device*> named_only;  // selectable by name only (BackendDevices::named_only)
};

// Every device of a set as listed and selectable by name: the named-only ones first.
std::vector<Device*> listed_devices(const DeviceSet& set);

// Collectives for tensor parallelism, provided by lib/backends/meta through the registration unit.
struct Collectives {
  // n ranks in this process (threads taking turns on the host).
  std::function<std::unique_ptr<CommGroup>(int n)> in_process;
  // MPI's world (one rank per process); throws unsupported when not compiled in.
  std::function<Communicator&()> mpi_world;
  // Ends every MPI rank with code when a rank fails (no-op without MPI or with one rank).
  std::function<void(int code)> abort_world;
};

class BackendRegistry {
 public:
  // Adds a backend. Returns true so that a registration can initialize a static. Throws internal
  // for a duplicate name or a second host backend.
  bool add(BackendFactory factory);
  const std::vector<BackendFactory>& backends() const { return backends_; }
  // Every backend's devices for these options, in priority order, the host device last.
  // Throws unsupported when no host backend was registered (a binary without the registration unit).
  DeviceSet devices(const DeviceOptions& options = {}) const;
  // A new host device alone (a model loaded without a device list computes there).
  std::unique_ptr<Device> host_device(const DeviceOptions& options = {}) const;

  // Sets the functions c has (registration units may each provide some); returns true.
  bool set_collectives(Collectives c);
  // Empty functions when none were registered; in_process_group() says so in an error.
  const Collectives& collectives() const { return collectives_; }
  std::unique_ptr<CommGroup> in_process_group(int n) const;

 private:
  std::vector<BackendFactory> backends_;
  Collectives collectives_;
};

// The process's registry.
BackendRegistry& registry();

// registry().devices() with these SIM sizes and threads.
DeviceSet make_devices(const std::string& sim_sizes, int n_threads, const ThreadPlacement& cpu_placement = {});
// The devices named in `names` ("SIM0,SIM1"; "none" = CPU only), in the order given, with the
// host appended when absent (it is the planner's last resort). Unknown name -> Error(usage)
// listing the available devices.
std::vector<Device*> select_devices(const DeviceSet& set, std::string_view names);
// One line per device, "NAME  KIND  TOTAL MiB  FREE MiB  CAPS" under a header line, then the
// backends' notes ("CUDA: no CUDA device").
std::string list_devices(std::span<Device* const> devices, std::span<const std::string> notes = {});
std::string list_devices(const DeviceSet& set);

}  // namespace loom
