// fit_params: one snapshot of free memory, the Problem for the planner from the user's flags,
// the real probe, and the report (flags that differ from what was given, bytes per device).
#include "loom/fit/fit.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>

#include "loom/core/error.h"
#include "loom/fit/probe.h"

namespace loom::fit {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

// One value for every non-CPU device, or one each (reserves: optionally one more for the host;
// the host's alone when the CPU is the only device).
std::vector<size_t> per_device(const std::vector<size_t>& v, size_t n_gpu, bool host_allowed, const char* flag,
                               size_t fallback) {
  std::vector<size_t> out(n_gpu + 1, 0);
  if (v.empty()) {
    for (size_t i = 0; i < n_gpu; ++i) out[i] = fallback;
    return out;
  }
  if (v.size() == 1 && (n_gpu > 0 || !host_allowed)) {
    for (size_t i = 0; i < n_gpu; ++i) out[i] = v[0];
    return out;
  }
  LOOM_CHECK(v.size() == n_gpu || (host_allowed && v.size() == n_gpu + 1), usage,
             "{}: {} values for {} devices besides the CPU (give one, or one per device{})", flag, v.size(), n_gpu,
             host_allowed ? ", optionally plus one for the host" : "");
  for (size_t i = 0; i < v.size(); ++i) out[i] = v[i];
  return out;
}

std::string lack_message(const FitReport& r, const std::vector<Shortfall>& shortfall) {
  std::string msg;
  for (const Shortfall& s : shortfall) {
    const DeviceReport& d = r.devices[(size_t)s.device];
    std::string why;
    if (!d.known)
      why = "it reports no memory, so it must hold nothing";
    else if (d.is_cpu)
      why = fmt::format("needs {:.2f} MiB, {:.2f} MiB of RAM available{}", (double)d.usage.total() / kMiB,
                        (double)d.free / kMiB,
                        d.reserve ? fmt::format(", {:.2f} MiB reserved", (double)d.reserve / kMiB) : "");
    else
      why = fmt::format(
          "needs {:.2f} MiB (model {:.2f}, context {:.2f}, compute {:.2f}), {:.2f} MiB free, target {:.2f} MiB{}",
          (double)d.usage.total() / kMiB, (double)d.usage.model / kMiB, (double)d.usage.context / kMiB,
          (double)d.usage.compute / kMiB, (double)d.free / kMiB, (double)d.target / kMiB,
          d.reserve ? fmt::format(", reserve {:.2f} MiB", (double)d.reserve / kMiB) : "");
    msg += fmt::format("{}{} lacks {:.2f} MiB ({})", msg.empty() ? "" : "; ", d.name, (double)s.bytes / kMiB, why);
  }
  return msg.empty() ? "no configuration fits" : msg;
}

}  // namespace

FitReport fit_params(const FitRequest& req) {
  const auto t0 = std::chrono::steady_clock::now();
  // -sm tensor: every member holds a slice of every layer, so only the context is searched;
  // -ts (default: by free memory, as the run) is kept and the bytes per member are predicted.
  const bool tensor = req.placement.split_mode == SplitMode::tensor;
  const std::vector<Device*>& devices = req.placement.devices;
  LOOM_CHECK(!devices.empty() && devices.back()->kind() == DeviceKind::cpu, internal,
             "[fit-params] the device list must end with the CPU");
  LOOM_CHECK(req.fit_ctx >= 1, usage, "--fit-ctx {}: must be at least 1", req.fit_ctx);
  const size_t n_gpu = devices.size() - 1;
  const std::vector<size_t> targets = per_device(req.targets, n_gpu, false, "--fit-target", (size_t)1024 << 20);
  const std::vector<size_t> reserves = per_device(req.reserves, n_gpu, true, "--fit-reserve", 0);

  // One snapshot of free memory: budgets and the default split come from it alone.
  const PlacementParams& pp = req.placement;
  std::vector<DeviceBudget> budgets;
  for (size_t d = 0; d < devices.size(); ++d) {
    const MemoryInfo m = devices[d]->memory();
    DeviceBudget b;
    b.name = devices[d]->name();
    b.is_cpu = d == n_gpu;
    b.known = m.total > 0;
    b.total = m.total;
    b.free = m.free;
    b.target = targets[d];
    b.reserve = reserves[d];
    budgets.push_back(b);
  }
  PlacementParams user = pp;
  if (user.tensor_split.empty() && pp.split_mode != SplitMode::none && !tensor)  // what placement would take from free memory
    for (size_t d = 0; d < n_gpu; ++d) user.tensor_split.push_back((float)std::max<size_t>(1, budgets[d].free >> 20));

  ModelProbe probe(req.model_path, user, req.session, req.kv_overrides, req.adapters, req.control_vectors);
  const HParams& hp = probe.hparams();
  Problem pb;
  pb.n_layer = hp.n_layer;
  pb.moe = probe.has_experts();
  pb.devices = budgets;
  if (pp.split_mode == SplitMode::none) {
    LOOM_CHECK(n_gpu == 0 || (pp.main_gpu >= 0 && pp.main_gpu < (int)n_gpu), usage,
               "-mg {}: only {} devices besides the CPU", pp.main_gpu, n_gpu);
    if (n_gpu > 0 && pb.devices[(size_t)pp.main_gpu].known) pb.layer_devices = {pp.main_gpu};
  } else {
    for (size_t d = 0; d < n_gpu; ++d)
      if (pb.devices[d].known) pb.layer_devices.push_back((int)d);
  }
  pb.given.n_ctx = req.session.n_ctx > 0 ? req.session.n_ctx : hp.n_ctx_train;
  pb.given.n_gpu_layers = pp.n_gpu_layers;
  pb.given.tensor_split = user.tensor_split;
  pb.n_ctx_min = std::min(req.fit_ctx, pb.given.n_ctx);
  pb.fixed_ctx = req.fixed_ctx;
  pb.fixed_ngl = req.fixed_ngl || tensor;
  pb.fixed_split = req.fixed_split || pp.split_mode == SplitMode::none || tensor;
  pb.fixed_experts = req.fixed_experts || pp.cpu_moe || pp.n_cpu_moe > 0 || !pp.overrides.empty() || tensor;

  const PlanResult plan = plan_fit(pb, [&](const Config& c) { return probe(c); });

  FitReport r;
  r.status = plan.status;
  r.config = plan.config;
  r.n_layer = hp.n_layer;
  const int64_t ngl = plan.config.n_gpu_layers;
  r.n_gpu_layers = n_gpu == 0 ? 0 : ngl < 0 ? hp.n_layer + 1 : std::min(ngl, hp.n_layer + 1);
  if (!tensor && (!req.placement.tensor_split.empty() || plan.config.tensor_split != pb.given.tensor_split))
    r.tensor_split = plan.config.tensor_split;
  const std::vector<std::string> moved = expert_overrides(plan.config.experts, devices.back()->name());
  r.overrides = moved.empty() ? pp.overrides : moved;
  for (size_t d = 0; d < devices.size(); ++d) {
    const DeviceBudget& b = pb.devices[d];
    DeviceReport dr{b.name, b.is_cpu, b.known, b.total, b.free, b.target, b.reserve, plan.probe.usage[d], 0};
    dr.projected_free = (int64_t)b.free - (int64_t)b.reserve - (int64_t)dr.usage.total();
    r.devices.push_back(dr);
  }
  if (plan.status == FitStatus::no_fit)
    r.message = lack_message(r, plan.shortfall);
  else
    r.args = format_args(plan.config, pb.given, moved);
  r.probes = plan.probes;
  r.elapsed_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return r;
}

std::vector<size_t> parse_mib_list(const std::string& text, const char* flag) {
  std::vector<size_t> out;
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    const std::string item = text.substr(start, end - start);
    double v = -1;
    try {
      size_t pos = 0;
      v = std::stod(item, &pos);
      if (pos != item.size()) v = -1;
    } catch (const std::exception&) {
    }
    LOOM_CHECK(std::isfinite(v) && v >= 0 && v <= 1024.0 * 1024 * 1024, usage,
               "{} '{}': expected MiB values (non-negative numbers) separated by commas", flag, text);
    out.push_back((size_t)std::llround(v * kMiB));
    start = end + 1;
  }
  return out;
}

}  // namespace loom::fit
