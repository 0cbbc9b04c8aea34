// The fit-params search over an abstract probe. Phases, in order (docs/FIT-PARAMS.md):
//   1. the user's run as given;
//   2. full offload at a smaller context (bracketing search over multiples of ctx_step),
//      with layers re-split across devices when -ts is free;
//   3. at the smallest context: whole layers from the last device backwards (output counted);
//   4. MoE instead of 3: experts to the CPU, back onto devices with room, then a partial layer.
// Every answer is a probed configuration: nothing is extrapolated into the result.
#include "loom/fit/planner.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "loom/core/error.h"
#include "search.h"

namespace loom::fit {

int64_t overshoot(const DeviceBudget& d, const Usage& u) {
  const size_t t = u.total();
  if (t == 0) return 0;
  if (d.is_cpu && !d.known) return 0;  // host memory unknown: not checked
  if (!d.known) return (int64_t)t;
  return std::max<int64_t>(0, (int64_t)t - d.budget());
}

namespace {

class Planner {
 public:
  Planner(const Problem& pb, const Probe& probe)
      : pb_(pb), probe_fn_(probe), cpu_((int)pb.devices.size() - 1), n_gpu_((int)pb.devices.size() - 1) {
    LOOM_ASSERT(!pb.devices.empty() && pb.devices.back().is_cpu, "devices must end with the CPU");
    LOOM_ASSERT(pb.given.n_ctx > 0 && pb.n_layer > 0, "bad problem");
    for (int d : pb.layer_devices)
      LOOM_ASSERT(d >= 0 && d < n_gpu_ && pb.devices[(size_t)d].known, "layer device {}", d);
    can_fill_ = !pb.fixed_split && n_gpu_ >= 1 && !(n_gpu_ == 1 && pb.layer_devices.size() == 1);
  }

  PlanResult run();

 private:
  struct CtxEval {
    Step step;
    Config cfg;
  };

  const Problem& pb_;
  const Probe& probe_fn_;
  const int cpu_;
  const int n_gpu_;  // non-CPU devices (the length of a tensor split)
  bool can_fill_ = false;
  std::vector<std::pair<Config, ProbeResult>> cache_;
  int n_probes_ = 0;
  std::optional<Config> last_;  // the closest attempt, reported when nothing fits

  // -- probing
  ProbeResult probe(const Config& config) {
    Config c = config;  // every expert in place is the same run as no expert modes at all
    if (std::all_of(c.experts.begin(), c.experts.end(), [](ExpertMode m) { return m == ExpertMode::with_layer; }))
      c.experts.clear();
    for (const auto& [k, r] : cache_)
      if (k == c) return r;
    ProbeResult r = probe_fn_(c);
    LOOM_ASSERT(r.usage.size() == pb_.devices.size(), "probe returned {} devices for {}", r.usage.size(),
                pb_.devices.size());
    ++n_probes_;
    cache_.emplace_back(c, r);
    return r;
  }
  void alias(const Config& c, const ProbeResult& r) {
    for (const auto& [k, v] : cache_)
      if (k == c) return;
    cache_.emplace_back(c, r);
  }
  const DeviceBudget& dev(int d) const { return pb_.devices[(size_t)d]; }
  // Every device fits (and the host, unless the caller will check it later).
  bool fits(const ProbeResult& r, bool host = true) const {
    for (size_t d = 0; d < r.usage.size(); ++d)
      if ((host || (int)d != cpu_) && overshoot(pb_.devices[d], r.usage[d]) > 0) return false;
    return true;
  }
  bool gpus_fit(const ProbeResult& r) const {
    for (int d = 0; d < n_gpu_; ++d)
      if (overshoot(dev(d), r.usage[(size_t)d]) > 0) return false;
    return true;
  }
  double slack(int d, const Usage& u) const {
    const DeviceBudget& b = dev(d);
    if (u.total() == 0) return b.known ? (double)std::max<int64_t>(b.budget(), 0) : 0.0;
    if (!b.known) return b.is_cpu ? 0.0 : -(double)u.total();
    return (double)b.budget() - (double)u.total();
  }
  Step device_step(int d, const ProbeResult& r) const {
    return Step{overshoot(dev(d), r.usage[(size_t)d]) == 0,
                {slack(d, r.usage[(size_t)d])},
                {(double)r.usage[(size_t)d].compute}};
  }
  Point empty_point(int d) const { return Point{0, Step{true, {slack(d, Usage{})}, {0.0}}, true}; }

  // -- configs
  bool full(int64_t ngl) const { return ngl < 0 || ngl > pb_.n_layer; }
  int64_t full_ngl() const { return pb_.fixed_ngl ? pb_.given.n_gpu_layers : -1; }
  Config base(int64_t n_ctx, const std::vector<ExpertMode>& experts) const {
    Config c = pb_.given;
    c.n_ctx = n_ctx;
    c.experts = experts;
    return c;
  }
  Config split(Config c, const std::vector<int64_t>& counts, int64_t ngl) const {
    c.n_gpu_layers = ngl;
    if (n_gpu_ == 1) return c;  // one device: the split means nothing, keep the user's
    c.tensor_split.clear();
    if (ngl != 0)
      for (int64_t n : counts) c.tensor_split.push_back((float)n);
    return c;
  }
  // Layers on the CPU keep their experts there whatever the mode: drop modes that change nothing.
  Config normalize(const Config& c) {
    if (c.experts.empty()) return c;
    const ProbeResult r = probe(c);
    Config n = c;
    bool any = false;
    for (size_t l = 0; l < n.experts.size(); ++l) {
      if (r.layer_device[l] == cpu_) n.experts[l] = ExpertMode::with_layer;
      any = any || n.experts[l] != ExpertMode::with_layer;
    }
    if (!any) n.experts.clear();
    alias(n, r);
    return n;
  }

  // -- searches
  // Most units device d takes (0..hi); eval(k) probes d holding k.
  int64_t place_on(int d, int64_t hi, const std::function<Step(int64_t)>& eval) {
    if (hi <= 0 || dev(d).budget() <= 0) return 0;
    Step at_hi = eval(hi);
    if (at_hi.ok) return hi;
    return search_max(empty_point(d), Point{hi, at_hi, false}, eval);
  }
  std::optional<Config> fill_full(int64_t n_ctx, const std::vector<ExpertMode>& experts, bool host);
  Config fill_partial(int64_t n_ctx, const std::vector<ExpertMode>& experts, int64_t n_units);
  Config fit_ngl(int64_t n_ctx, const std::vector<ExpertMode>& experts, int64_t max_layers);
  std::optional<Config> offload_all(int64_t n_ctx, const std::vector<ExpertMode>& experts, bool host);
  CtxEval eval_ctx(int64_t n_ctx);
  PlanResult place_partially(int64_t n_ctx);
  PlanResult place_moe(int64_t n_ctx);
  PlanResult finish(FitStatus status, const Config& cfg);
  PlanResult verified(const Config& cfg) {
    last_ = cfg;
    return fits(probe(cfg)) ? finish(FitStatus::fit, cfg) : finish(FitStatus::no_fit, cfg);
  }
};

// Every layer and the output on the layer devices, filled from the last one backwards: device d
// takes as many units as it can while the device before it takes the rest (the first takes what
// is left). The output is the last unit, so it lands on the last device that holds anything.
std::optional<Config> Planner::fill_full(int64_t n_ctx, const std::vector<ExpertMode>& experts, bool host) {
  const std::vector<int>& use = pb_.layer_devices;
  if (use.empty()) return std::nullopt;
  const Config cfg = base(n_ctx, experts);
  std::vector<int64_t> counts((size_t)n_gpu_, 0);
  int64_t remaining = pb_.n_layer + 1;
  for (size_t i = use.size(); i-- > 0 && remaining > 0;) {
    const int d = use[i];
    if (i == 0) {
      counts[(size_t)d] = remaining;
      remaining = 0;
      break;
    }
    const int prev = use[i - 1];
    counts[(size_t)d] = place_on(d, remaining, [&](int64_t k) {
      std::vector<int64_t> c = counts;
      c[(size_t)d] = k;
      c[(size_t)prev] = remaining - k;
      return device_step(d, probe(split(cfg, c, full_ngl())));
    });
    remaining -= counts[(size_t)d];
  }
  const Config out = split(cfg, counts, full_ngl());
  last_ = out;
  if (!fits(probe(out), host)) return std::nullopt;
  return out;
}

// Up to n_units layers (no output), the last layers first, each device from the last backwards
// taking as many as fit while the device before it holds the rest (so its inputs come from
// where they will come from: a device's compute buffer depends on its neighbour). Repairs the
// rare device that the final neighbours still push over.
Config Planner::fill_partial(int64_t n_ctx, const std::vector<ExpertMode>& experts, int64_t n_units) {
  const Config cfg = base(n_ctx, experts);
  std::vector<int64_t> counts((size_t)n_gpu_, 0);
  int64_t placed = 0;
  const std::vector<int>& use = pb_.layer_devices;
  for (size_t i = use.size(); i-- > 0 && placed < n_units;) {
    const int d = use[i];
    counts[(size_t)d] = place_on(d, n_units - placed, [&](int64_t k) {
      std::vector<int64_t> c = counts;
      c[(size_t)d] = k;
      int64_t ngl = placed + k;
      if (i > 0) {
        c[(size_t)use[i - 1]] = n_units - ngl;
        ngl = n_units;
      }
      return device_step(d, probe(split(cfg, c, ngl)));
    });
    placed += counts[(size_t)d];
  }
  Config out = split(cfg, counts, placed);
  for (ProbeResult r = probe(out); !gpus_fit(r) && placed > 0; r = probe(out)) {
    for (int d = 0; d < n_gpu_; ++d)
      if (counts[(size_t)d] > 0 && overshoot(dev(d), r.usage[(size_t)d]) > 0) {
        --counts[(size_t)d];
        --placed;
        break;
      }
    out = split(cfg, counts, placed);
  }
  return out;
}

// -ts is fixed: the most layers (no output) whose proportional split fits every device.
Config Planner::fit_ngl(int64_t n_ctx, const std::vector<ExpertMode>& experts, int64_t max_layers) {
  Config cfg = base(n_ctx, experts);
  auto eval = [&](int64_t k) {
    cfg.n_gpu_layers = k;
    const ProbeResult r = probe(cfg);
    Step s{gpus_fit(r), {}, {}};
    for (int d = 0; d < n_gpu_; ++d) {
      s.slack.push_back(slack(d, r.usage[(size_t)d]));
      s.fixed.push_back((double)r.usage[(size_t)d].compute);
    }
    return s;
  };
  int64_t best = 0;
  if (n_gpu_ > 0) {
    const Step at_hi = eval(max_layers);
    if (at_hi.ok) {
      best = max_layers;
    } else {
      Point lo{0, Step{true, {}, {}}, true};
      for (int d = 0; d < n_gpu_; ++d) {
        lo.step.slack.push_back(slack(d, Usage{}));
        lo.step.fixed.push_back(0);
      }
      best = search_max(lo, Point{max_layers, at_hi, false}, eval);
    }
  }
  cfg.n_gpu_layers = best;
  return cfg;
}

// The run with as many units as the user asked for (all, or a fixed -ngl), re-split when -ts
// is free; nullopt when no split fits. host: the host must fit too (else checked later).
std::optional<Config> Planner::offload_all(int64_t n_ctx, const std::vector<ExpertMode>& experts, bool host) {
  const Config plain = base(n_ctx, experts);
  const ProbeResult r = probe(plain);
  if (fits(r, host)) return plain;
  last_ = plain;
  if (!can_fill_) return std::nullopt;
  // Weights and KV cache of the offloaded units must land somewhere: no split helps when they
  // alone exceed the room of every layer device together (give or take buffer alignment).
  double need = -65536.0 * n_gpu_, room = 0;
  for (int d = 0; d < n_gpu_; ++d) need += (double)(r.usage[(size_t)d].model + r.usage[(size_t)d].context);
  for (int d : pb_.layer_devices) room += (double)std::max<int64_t>(0, dev(d).budget());
  if (need > room) return std::nullopt;
  if (full(pb_.given.n_gpu_layers)) return fill_full(n_ctx, experts, host);
  const Config c = fill_partial(n_ctx, experts, pb_.given.n_gpu_layers);
  if (c.n_gpu_layers == pb_.given.n_gpu_layers && fits(probe(c), host)) return c;
  return std::nullopt;  // last_ stays the user's own split: its shortfall is the one to report
}

Planner::CtxEval Planner::eval_ctx(int64_t n_ctx) {
  const Config plain = base(n_ctx, pb_.given.experts);
  const ProbeResult r = probe(plain);
  CtxEval e{Step{fits(r), {}, {}}, plain};
  if (can_fill_) {  // the split may change: interpolate on the devices' total room
    double room = 0;
    for (int d : pb_.layer_devices) room += (double)dev(d).budget() - (double)r.usage[(size_t)d].total();
    e.step.slack = {room, slack(cpu_, r.usage[(size_t)cpu_])};
  } else {
    for (size_t d = 0; d < r.usage.size(); ++d) e.step.slack.push_back(slack((int)d, r.usage[d]));
  }
  if (e.step.ok) return e;
  if (std::optional<Config> c = offload_all(n_ctx, pb_.given.experts, true)) {
    e.step.ok = true;
    e.cfg = *c;
  }
  return e;
}

PlanResult Planner::run() {
  const int64_t n_ctx = pb_.given.n_ctx;
  const CtxEval top = eval_ctx(n_ctx);
  if (top.step.ok) return finish(top.cfg == pb_.given ? FitStatus::unchanged : FitStatus::fit, top.cfg);
  if (pb_.fixed_ctx || pb_.n_ctx_min >= n_ctx) return place_partially(n_ctx);

  // Phase 2: the largest context in [n_ctx_min, n_ctx) that keeps the offload, in steps.
  const int64_t c_min = std::max<int64_t>(1, pb_.n_ctx_min);
  const int64_t step = std::max<int64_t>(1, pb_.ctx_step);
  const int64_t j0 = c_min / step;
  const int64_t j_hi = (n_ctx + step - 1) / step - j0;
  auto ctx_at = [&](int64_t j) { return j == 0 ? c_min : std::min((j0 + j) * step, n_ctx); };
  std::vector<std::pair<int64_t, Config>> found;
  auto eval = [&](int64_t j) {
    CtxEval e = eval_ctx(ctx_at(j));
    if (e.step.ok) found.emplace_back(j, e.cfg);
    return e.step;
  };
  const Step at_min = eval(0);
  if (!at_min.ok) return place_partially(c_min);
  const int64_t j = search_max(Point{0, at_min, false}, Point{j_hi, top.step, false}, eval);
  for (const auto& [k, cfg] : found)
    if (k == j) return finish(FitStatus::fit, cfg);
  LOOM_ASSERT(false, "context search lost its answer");
  return {};
}

// Phase 3: full offload is out of reach at this context.
PlanResult Planner::place_partially(int64_t n_ctx) {
  if (pb_.moe && !pb_.fixed_experts) return place_moe(n_ctx);
  if (pb_.fixed_ngl) return finish(FitStatus::no_fit, last_.value_or(base(n_ctx, pb_.given.experts)));
  const Config c = pb_.fixed_split ? fit_ngl(n_ctx, pb_.given.experts, pb_.n_layer)
                                   : fill_partial(n_ctx, pb_.given.experts, pb_.n_layer);
  return verified(c);
}

// Phase 4: experts to the CPU; the dense part of every layer on the devices if it fits; then,
// device by device (front to back), experts of whole layers back while they fit, then one layer
// with part of its experts (keep up and gate, or keep up). The host is checked at the end, when
// the experts that came back have left it.
PlanResult Planner::place_moe(int64_t n_ctx) {
  const std::vector<ExpertMode> on_cpu((size_t)pb_.n_layer, ExpertMode::cpu);
  std::optional<Config> dense = offload_all(n_ctx, on_cpu, false);
  if (!dense) {
    if (pb_.fixed_ngl) return finish(FitStatus::no_fit, last_.value_or(base(n_ctx, on_cpu)));
    const Config c = pb_.fixed_split ? fit_ngl(n_ctx, on_cpu, pb_.n_layer) : fill_partial(n_ctx, on_cpu, pb_.n_layer);
    return verified(normalize(c));
  }
  Config cfg = *dense;
  const ProbeResult placed = probe(cfg);
  for (int d : pb_.layer_devices) {
    std::vector<size_t> layers;
    for (size_t l = 0; l < placed.layer_device.size(); ++l)
      if (placed.layer_device[l] == d) layers.push_back(l);
    if (layers.empty()) continue;
    auto with = [&](int64_t j) {
      Config x = cfg;
      for (int64_t i = 0; i < j; ++i) x.experts[layers[(size_t)i]] = ExpertMode::with_layer;
      return x;
    };
    auto eval = [&](int64_t j) { return device_step(d, probe(with(j))); };
    const int64_t n = (int64_t)layers.size();
    const Step at_n = eval(n);
    const int64_t j =
        at_n.ok ? n : search_max(Point{0, device_step(d, probe(cfg)), false}, Point{n, at_n, false}, eval);
    cfg = with(j);
    if (j == n) continue;
    for (ExpertMode mode : {ExpertMode::keep_up_gate, ExpertMode::keep_up}) {
      Config x = cfg;
      x.experts[layers[(size_t)j]] = mode;
      if (device_step(d, probe(x)).ok) {
        cfg = x;
        break;
      }
    }
  }
  return verified(normalize(cfg));
}

PlanResult Planner::finish(FitStatus status, const Config& cfg) {
  PlanResult res;
  res.status = status;
  res.config = cfg;
  res.probe = probe(cfg);
  if (status == FitStatus::no_fit)
    for (size_t d = 0; d < res.probe.usage.size(); ++d)
      if (const int64_t o = overshoot(pb_.devices[d], res.probe.usage[d]); o > 0) res.shortfall.push_back({(int)d, o});
  res.probes = n_probes_;
  return res;
}

}  // namespace

PlanResult plan_fit(const Problem& problem, const Probe& probe) {
  Planner p(problem, probe);
  return p.run();
}

}  // namespace loom::fit
