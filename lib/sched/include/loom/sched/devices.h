// The device registry of a run: Vulkan devices Vulkan0.. (where built), simulated devices SIM0..
// (from --sim-devices or LOOM_SIM_DEVICES) and the CPU last (like llama.cpp lists GPUs before the CPU), device
// selection by name (-dev), and the --list-devices text.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "loom/backend/device.h"

namespace loom::sched {

struct DeviceSet {
  std::vector<std::unique_ptr<Device>> owned;
  std::vector<Device*> all;  // in priority order: SIM0.., then CPU
  Device* cpu = nullptr;
  // Listed and selectable by name, never in `all` (the default device list): software
  // implementations of a GPU API (Mesa's lavapipe as Vulkan0), slower than the CPU backend.
  std::vector<Device*> named_only;
  std::vector<std::string> notes;  // why a backend has no devices ("Vulkan: not built (LOOM_VULKAN=OFF)")
};

// SIM devices with the capacities of sim_sizes (empty: env LOOM_SIM_DEVICES; see
// sim::parse_sim_sizes), then the CPU; every device computes with n_threads threads.
DeviceSet make_devices(const std::string& sim_sizes, int n_threads);
// The devices named in `names` ("SIM0,SIM1"; "none" = CPU only), in the order given, with the
// CPU appended when absent (it is the planner's last resort). Unknown name -> Error(usage)
// listing the available devices.
std::vector<Device*> select_devices(const DeviceSet& set, std::string_view names);
// `all` and `named_only`, for listing.
std::vector<Device*> listed_devices(const DeviceSet& set);
// One line per device, "NAME  KIND  TOTAL MiB  FREE MiB" with a header line.
std::string list_devices(std::span<Device* const> devices);

}  // namespace loom::sched
