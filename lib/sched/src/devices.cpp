// Device registry: building the device list, selecting by name, listing.
#include "loom/sched/devices.h"

#include <algorithm>
#include <cstdlib>

#include "loom/cpu/cpu.h"
#include "loom/sim/sim.h"
#ifdef LOOM_HAVE_VULKAN
#include "loom/vulkan/vulkan.h"
#endif

namespace loom::sched {

DeviceSet make_devices(const std::string& sim_sizes, int n_threads) {
  std::string spec = sim_sizes;
  if (spec.empty())
    if (const char* env = std::getenv("LOOM_SIM_DEVICES")) spec = env;
  DeviceSet set;
#ifdef LOOM_HAVE_VULKAN
  std::string note;
  std::vector<std::unique_ptr<Device>> gpus = vulkan::make_devices(note);
  if (!note.empty()) set.notes.push_back("Vulkan: " + note);
#else
  set.notes.push_back("Vulkan: not built (LOOM_VULKAN=OFF or libvulkan-dev/glslc missing at build time)");
#endif
  const std::vector<size_t> caps = sim::parse_sim_sizes(spec);
  for (size_t i = 0; i < caps.size(); ++i)
    set.owned.push_back(std::make_unique<sim::SimDevice>((int)i, caps[i], n_threads));
  set.owned.push_back(std::make_unique<cpu::CpuDevice>(n_threads));
  for (auto& d : set.owned) set.all.push_back(d.get());
  set.cpu = set.all.back();
#ifdef LOOM_HAVE_VULKAN
  // GPUs first (before SIM and the CPU); software ones only by name
  std::vector<Device*> hw;
  for (auto& d : gpus) (vulkan::is_software(*d) ? set.named_only : hw).push_back(d.get());
  set.all.insert(set.all.begin(), hw.begin(), hw.end());
  for (auto& d : gpus) set.owned.push_back(std::move(d));
#endif
  return set;
}

std::vector<Device*> listed_devices(const DeviceSet& set) {
  std::vector<Device*> out = set.named_only;
  out.insert(out.end(), set.all.begin(), set.all.end());
  return out;
}

std::vector<Device*> select_devices(const DeviceSet& set, std::string_view names) {
  std::vector<Device*> out;
  auto available = [&] {
    std::string s;
    for (Device* d : listed_devices(set)) s += (s.empty() ? "" : ", ") + d->name();
    return s;
  };
  size_t start = 0;
  while (start <= names.size()) {
    const size_t comma = names.find(',', start);
    std::string_view name = names.substr(start, comma == names.npos ? names.npos : comma - start);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    if (name == "none") {
      // CPU only: nothing to add
    } else {
      Device* found = nullptr;
      for (Device* d : listed_devices(set))
        if (d->name() == name) found = d;
      LOOM_CHECK(found, usage, "[-dev] unknown device '{}' (available: {}){}", name, available(),
                 name.rfind("Vulkan", 0) == 0 && !set.notes.empty() ? "; " + set.notes.front() : std::string());
      LOOM_CHECK(std::find(out.begin(), out.end(), found) == out.end(), usage, "[-dev] device '{}' listed twice", name);
      out.push_back(found);
    }
    if (comma == names.npos) break;
    start = comma + 1;
  }
  if (set.cpu && std::find(out.begin(), out.end(), set.cpu) == out.end()) out.push_back(set.cpu);
  return out;
}

std::string list_devices(std::span<Device* const> devices) {
  std::string out = "NAME  KIND  TOTAL MiB  FREE MiB\n";
  for (Device* d : devices) {
    const MemoryInfo m = d->memory();
    std::string about;
#ifdef LOOM_HAVE_VULKAN
    about = vulkan::describe(*d);
#endif
    out += fmt::format("{}  {}  {}  {}{}\n", d->name(), device_kind_name(d->kind()), m.total / (1024 * 1024),
                       m.free / (1024 * 1024), about.empty() ? "" : "  " + about);
  }
  return out;
}

}  // namespace loom::sched
