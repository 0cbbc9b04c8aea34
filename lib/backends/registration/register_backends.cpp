// Registers the built-in backends (CUDA, Vulkan, SIM, CPU) and the in-process communicators of tensor
// parallelism with the backend registry. Linked whole into every tool and test binary (and
// loom::engine); a new backend adds its factory here. MPI's world is registered apart
// (register_mpi.cpp), so that a tool without collectives does not need libmpi.
#include <cstdlib>

#include "loom/backend/registry.h"
#include "loom/cpu/cpu.h"
#include "loom/meta/comm.h"
#include "loom/sim/sim.h"
#ifdef LOOM_HAVE_CUDA
#include "loom/cuda/cuda.h"
#endif
#ifdef LOOM_HAVE_VULKAN
#include "loom/vulkan/vulkan.h"
#endif

namespace loom {
namespace {

int host_threads(const DeviceOptions& o) { return o.n_threads > 0 ? o.n_threads : ThreadPool::default_threads(); }

BackendDevices create_cpu(const DeviceOptions& o) {
  BackendDevices out;
  out.devices.push_back(std::make_unique<cpu::CpuDevice>(host_threads(o), o.cpu_placement));
  return out;
}

// SIM0.. with the capacities of --sim-devices, else of env LOOM_SIM_DEVICES, else none.
BackendDevices create_sim(const DeviceOptions& o) {
  std::string spec = o.sim_sizes;
  if (spec.empty())
    if (const char* env = std::getenv("LOOM_SIM_DEVICES")) spec = env;
  BackendDevices out;
  const std::vector<size_t> caps = sim::parse_sim_sizes(spec);
  for (size_t i = 0; i < caps.size(); ++i)
    out.devices.push_back(std::make_unique<sim::SimDevice>((int)i, caps[i], host_threads(o)));
  return out;
}

// CUDA0.. from the driver; none (with the reason) without a driver or a GPU.
BackendDevices create_cuda(const DeviceOptions& o) {
  BackendDevices out;
#ifdef LOOM_HAVE_CUDA
  cuda::Enumeration e = cuda::enumerate_devices(host_threads(o));
  out.devices = std::move(e.devices);
  out.note = std::move(e.none_reason);
#else
  out.note = "not built (LOOM_CUDA=OFF, or no nvcc at build time)";
#endif
  return out;
}

// Vulkan0.. from the loader; software implementations (lavapipe) only by name.
BackendDevices create_vulkan(const DeviceOptions&) {
  BackendDevices out;
#ifdef LOOM_HAVE_VULKAN
  for (auto& d : vulkan::make_devices(out.note)) (vulkan::is_software(*d) ? out.named_only : out.devices).push_back(std::move(d));
#else
  out.note = "not built (LOOM_VULKAN=OFF, or libvulkan-dev/glslc missing at build time)";
#endif
  return out;
}

const bool registered = registry().add({.name = "CUDA", .order = 5, .host = false, .create = create_cuda}) &&
                        registry().add({.name = "Vulkan", .order = 10, .host = false, .create = create_vulkan}) &&
                        registry().add({.name = "SIM", .order = 100, .host = false, .create = create_sim}) &&
                        registry().add({.name = "CPU", .order = 1000, .host = true, .create = create_cpu}) &&
                        registry().set_collectives({
                            .in_process = [](int n) -> std::unique_ptr<CommGroup> {
                              return std::make_unique<meta::InProcessGroup>(n);
                            },
                        });

}  // namespace
}  // namespace loom
