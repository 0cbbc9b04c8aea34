// The backend registry: factories, the devices of a run, selection by name, the listing.
#include "loom/backend/registry.h"

#include <fmt/format.h>

#include <algorithm>

#include "loom/core/error.h"

namespace loom {

BackendRegistry& registry() {
  static BackendRegistry r;
  return r;
}

bool BackendRegistry::add(BackendFactory factory) {
  LOOM_CHECK(factory.create, internal, "backend '{}' registered without a factory", factory.name);
  for (const BackendFactory& b : backends_) {
    LOOM_CHECK(b.name != factory.name, internal, "backend '{}' registered twice", factory.name);
    LOOM_CHECK(!(b.host && factory.host), internal, "two host backends: '{}' and '{}'", b.name, factory.name);
  }
  // stable by order: equal orders keep registration order
  auto at = std::upper_bound(backends_.begin(), backends_.end(), factory.order,
                             [](int order, const BackendFactory& b) { return order < b.order; });
  backends_.insert(at, std::move(factory));
  return true;
}

DeviceSet BackendRegistry::devices(const DeviceOptions& options) const {
  DeviceSet set;
  std::unique_ptr<Device> host;
  for (const BackendFactory& b : backends_) {
    BackendDevices found = b.create(options);
    if (!found.note.empty()) set.notes.push_back(b.name + ": " + found.note);
    for (auto& d : found.named_only) {
      set.named_only.push_back(d.get());
      set.owned.push_back(std::move(d));
    }
    for (auto& d : found.devices) {
      if (b.host && !host) {
        host = std::move(d);  // last, whatever the order says
        continue;
      }
      set.owned.push_back(std::move(d));
    }
  }
  LOOM_CHECK(host, unsupported, "no host (CPU) backend registered: this binary lacks the backend registration unit");
  set.owned.push_back(std::move(host));
  for (auto& d : set.owned)
    if (std::find(set.named_only.begin(), set.named_only.end(), d.get()) == set.named_only.end())
      set.all.push_back(d.get());
  set.cpu = set.all.back();
  return set;
}

std::unique_ptr<Device> BackendRegistry::host_device(const DeviceOptions& options) const {
  DeviceOptions host_only = options;
  host_only.sim_sizes.clear();
  for (const BackendFactory& b : backends_)
    if (b.host) {
      BackendDevices found = b.create(host_only);
      if (!found.devices.empty()) return std::move(found.devices.front());
    }
  fail(ErrorKind::unsupported, "no host (CPU) backend registered: this binary lacks the backend registration unit");
}

bool BackendRegistry::set_collectives(Collectives c) {
  if (c.in_process) collectives_.in_process = std::move(c.in_process);
  if (c.mpi_world) collectives_.mpi_world = std::move(c.mpi_world);
  if (c.abort_world) collectives_.abort_world = std::move(c.abort_world);
  return true;
}

std::unique_ptr<CommGroup> BackendRegistry::in_process_group(int n) const {
  LOOM_CHECK(collectives_.in_process, unsupported, "no communicators registered (tensor parallelism unavailable)");
  return collectives_.in_process(n);
}

DeviceSet make_devices(const std::string& sim_sizes, int n_threads, const ThreadPlacement& cpu_placement) {
  return registry().devices(
      DeviceOptions{.n_threads = n_threads, .sim_sizes = sim_sizes, .cpu_placement = cpu_placement});
}

std::vector<Device*> listed_devices(const DeviceSet& set) {
  std::vector<Device*> out = set.named_only;
  out.insert(out.end(), set.all.begin(), set.all.end());
  return out;
}

std::vector<Device*> select_devices(const DeviceSet& set, std::string_view names) {
  std::vector<Device*> out;
  const std::vector<Device*> listed = listed_devices(set);
  auto available = [&] {
    std::string s;
    for (Device* d : listed) s += (s.empty() ? "" : ", ") + d->name();
    for (const std::string& n : set.notes) s += "; " + n;  // why a backend has none
    return s;
  };
  size_t start = 0;
  while (start <= names.size()) {
    const size_t comma = names.find(',', start);
    std::string_view name = names.substr(start, comma == names.npos ? names.npos : comma - start);
    while (!name.empty() && name.front() == ' ') name.remove_prefix(1);
    while (!name.empty() && name.back() == ' ') name.remove_suffix(1);
    if (name != "none") {  // "none": the host only, added below
      Device* found = nullptr;
      for (Device* d : listed)
        if (d->name() == name) found = d;
      LOOM_CHECK(found, usage, "[-dev] unknown device '{}' (available: {})", name, available());
      LOOM_CHECK(std::find(out.begin(), out.end(), found) == out.end(), usage, "[-dev] device '{}' listed twice", name);
      out.push_back(found);
    }
    if (comma == names.npos) break;
    start = comma + 1;
  }
  if (set.cpu && std::find(out.begin(), out.end(), set.cpu) == out.end()) out.push_back(set.cpu);
  return out;
}

namespace {

std::string caps_text(const DeviceCaps& c) {
  std::string s;
  auto add = [&](bool on, const char* what) {
    if (!on) return;
    if (!s.empty()) s += ',';
    s += what;
  };
  add(c.async, "async");
  add(c.events, "events");
  add(c.host_buffer, "host_buffer");
  return s.empty() ? "-" : s;
}

}  // namespace

std::string list_devices(std::span<Device* const> devices, std::span<const std::string> notes) {
  std::string out = "NAME  KIND  TOTAL MiB  FREE MiB  CAPS\n";
  for (Device* d : devices) {
    const MemoryInfo m = d->memory();
    const std::string details = d->details();
    out += fmt::format("{}  {}  {}  {}  {}{}\n", d->name(), device_kind_name(d->kind()), m.total / (1024 * 1024),
                       m.free / (1024 * 1024), caps_text(d->caps()), details.empty() ? "" : "  " + details);
  }
  for (const std::string& n : notes) out += n + "\n";
  return out;
}

std::string list_devices(const DeviceSet& set) { return list_devices(listed_devices(set), set.notes); }

}  // namespace loom
