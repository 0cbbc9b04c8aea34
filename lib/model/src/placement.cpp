// Weight placement: contiguous layer ranges per device by proportion, output on the last
// device when fully offloaded, name-based overrides last (they win).
#include "loom/model/placement.h"

#include "loom/backend/comm.h"

#include <cmath>
#include <regex>

#include "loom/core/error.h"

namespace loom {

std::vector<float> parse_tensor_split(const std::string& s) {
  std::vector<float> out;
  size_t start = 0;
  while (start <= s.size() && !s.empty()) {
    size_t end = s.find_first_of(",/", start);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(start, end - start);
    try {
      size_t pos = 0;
      const float v = std::stof(item, &pos);
      LOOM_CHECK(pos == item.size() && v >= 0 && std::isfinite(v), usage, "");
      out.push_back(v);
    } catch (const std::exception&) {
      fail(ErrorKind::usage, "-ts '{}': expected non-negative numbers separated by commas", s);
    }
    start = end + 1;
  }
  return out;
}

namespace {

int device_index(const std::vector<Device*>& devs, const std::string& name) {
  for (size_t i = 0; i < devs.size(); ++i)
    if (devs[i]->name() == name) return (int)i;
  std::string known;
  for (Device* d : devs) known += (known.empty() ? "" : ", ") + d->name();
  fail(ErrorKind::usage, "-ot: unknown device '{}' (devices in use: {})", name, known);
}

}  // namespace

WeightPlacement place_weights(const HParams& hp, const std::vector<std::string>& names, const PlacementParams& p) {
  WeightPlacement w;
  w.devices = p.devices;
  LOOM_CHECK(!w.devices.empty() && w.devices.back()->kind() == DeviceKind::cpu, internal,
             "device list must end with the CPU");
  const int cpu = (int)w.devices.size() - 1;
  std::vector<int> gpus;  // candidate devices for layers
  for (int i = 0; i < cpu; ++i) gpus.push_back(i);
  if (p.split_mode == SplitMode::none && !gpus.empty()) {
    LOOM_CHECK(p.main_gpu >= 0 && p.main_gpu < (int)gpus.size(), usage, "-mg {}: only {} devices besides the CPU",
               p.main_gpu, gpus.size());
    gpus = {gpus[(size_t)p.main_gpu]};
  }
  const int64_t n_layer = hp.n_layer;
  int64_t n_off = p.n_gpu_layers < 0 ? n_layer + 1 : std::min(p.n_gpu_layers, n_layer + 1);
  if (gpus.empty()) n_off = 0;
  const int64_t n_off_layers = std::min(n_off, n_layer);
  const int64_t first = n_layer - n_off_layers;

  std::vector<float> split = p.tensor_split;
  if (!gpus.empty()) {
    if (p.split_mode != SplitMode::none && !split.empty())
      LOOM_CHECK(split.size() == gpus.size(), usage, "-ts has {} values for {} devices", split.size(), gpus.size());
    if (split.empty() || p.split_mode == SplitMode::none) {
      split.clear();
      for (int g : gpus) split.push_back((float)std::max<size_t>(1, w.devices[(size_t)g]->memory().free >> 20));
    }
    float sum = 0;
    for (float v : split) sum += v;
    LOOM_CHECK(sum > 0, usage, "-ts: proportions sum to zero");
    // cumulative boundaries: layer i of the offloaded range goes to the first device whose
    // cumulative share exceeds i / n_off_layers
    for (float& v : split) v /= sum;
    for (size_t i = 1; i < split.size(); ++i) split[i] += split[i - 1];
  }
  // Units split by proportion: the offloaded layers, plus the output layer as one more unit
  // when everything is offloaded (as llama.cpp counts it).
  auto device_for_unit = [&](int64_t unit) {
    const float f = (float)unit / (float)n_off;
    size_t g = 0;
    while (g + 1 < gpus.size() && f >= split[g] - 1e-6f) ++g;
    return gpus[g];
  };
  w.layer_device.assign((size_t)n_layer, cpu);
  for (int64_t il = first; il < n_layer; ++il) w.layer_device[(size_t)il] = device_for_unit(il - first);
  w.output_device = n_off > n_layer ? device_for_unit(n_off_layers) : cpu;

  std::vector<std::pair<std::regex, int>> rules;
  for (const std::string& list : p.overrides) {
    size_t start = 0;
    while (start < list.size()) {
      size_t end = list.find(',', start);
      if (end == std::string::npos) end = list.size();
      const std::string item = list.substr(start, end - start);
      const size_t eq = item.rfind('=');
      LOOM_CHECK(eq != std::string::npos && eq > 0, usage, "-ot '{}': expected REGEX=DEVICE", item);
      try {
        rules.emplace_back(std::regex(item.substr(0, eq)), device_index(w.devices, item.substr(eq + 1)));
      } catch (const std::regex_error& e) {
        fail(ErrorKind::usage, "-ot '{}': bad regular expression: {}", item, e.what());
      }
      start = end + 1;
    }
  }
  LOOM_CHECK(p.n_cpu_moe >= 0, usage, "-ncmoe {}: must be 0 or more", p.n_cpu_moe);
  const std::regex experts(R"(blk\.\d+\.ffn_(up|down|gate|gate_up)_(ch|)exps)");
  auto expert_on_cpu = [&](const std::string& name, int64_t il) {
    return (p.cpu_moe || il < p.n_cpu_moe) && std::regex_search(name, experts);
  };

  for (const std::string& name : names) {
    int dev = cpu;
    int64_t il = -1;
    if (name.rfind("blk.", 0) == 0) {
      il = std::stoll(name.substr(4));
      if (il >= 0 && il < n_layer) dev = w.layer_device[(size_t)il];
    } else if (name.rfind("output", 0) == 0) {
      dev = w.output_device;
    }
    bool ruled = false;  // -ot first, then -cmoe / -ncmoe, as llama.cpp appends those rules after -ot's
    for (const auto& [re, d] : rules)
      if (std::regex_search(name, re)) {
        dev = d;
        ruled = true;
        break;
      }
    if (!ruled && expert_on_cpu(name, il)) dev = cpu;
    w.tensor_device[name] = dev;
  }
  return w;
}

SplitMode parse_split_mode(std::string_view name) {
  if (name == "none") return SplitMode::none;
  if (name == "layer") return SplitMode::layer;
  if (name == "tensor") return SplitMode::tensor;
  fail(ErrorKind::usage, "-sm '{}': expected none, layer or tensor", name);
}

void set_tensor_parallel_members(PlacementParams& p, std::string_view named, const Communicator* world) {
  LOOM_CHECK(!p.devices.empty(), internal, "-sm tensor: no devices");
  Device* host = p.devices.back();
  for (Device* d : p.devices)
    if (d->kind() == DeviceKind::cpu) host = d;
  std::string listed(1, ',');  // appended piecewise: GCC 12 warns (-Wrestrict) on "," + string
  listed.append(named).push_back(',');
  std::erase(listed, ' ');
  const bool host_named = !named.empty() && listed.find("," + host->name() + ",") != std::string::npos;
  std::vector<Device*> members, devices;  // devices: the host last, as placement expects
  for (Device* d : p.devices)
    if (d != host) {
      members.push_back(d);
      devices.push_back(d);
    } else if (host_named) {
      members.push_back(d);  // a member only when -dev names it
    }
  if (members.empty()) members.push_back(host);
  devices.push_back(host);
  p.devices = devices;
  p.tp_members = members;
  if (world) {
    p.tp_rank = world->rank();
    p.tp_size = world->size();
    p.tp_members = {members.front()};
  }
}

}  // namespace loom
