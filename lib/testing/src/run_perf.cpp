// Perf mode: a case's nodes computed again and again on a device until the time budget is spent
// (small graphs repeat their node list inside one compute call so dispatch cost is amortized).
// Reports us/run and FLOPs (matrix products, attention) or bytes (leaves + outputs) per run.
#include <chrono>
#include <cmath>

#include "loom/core/error.h"
#include "loom/testing/runner.h"
#include "placed_case.h"

namespace loom::testing {

namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Computes `nodes` once on the stream and waits; returns seconds taken.
double timed_compute(Stream& stream, const Graph& g, const std::vector<Tensor*>& nodes) {
  const auto t0 = std::chrono::steady_clock::now();
  Status st = stream.compute(g, std::span<Tensor* const>(nodes.data(), nodes.size()));
  if (st) stream.synchronize();
  st.throw_if_error();
  return seconds_since(t0);
}

}  // namespace

CaseResult run_perf(const OpCase& c, Device& device, const RunOptions& opt) {
  CaseResult r = detail::make_result(c, "perf", device);
  try {
    detail::PlacedCase pc(c, opt.seed);
    if (const Tensor* n = detail::unsupported_node(pc, device)) {
      r.status = CaseStatus::not_supported;
      r.message = fmt::format("{} has no kernel for {} ({})", device.name(), op_name(n->op), describe(*n));
      return r;
    }
    pc.place(device.buffer_type());
    pc.upload();
    for (const Tensor* n : pc.compute_nodes()) r.flops += op_flops(n);
    r.bytes = pc.traffic_bytes();
    std::unique_ptr<Stream> stream = device.create_stream();
    const std::vector<Tensor*>& once = pc.graph().nodes();
    const double first = timed_compute(*stream, pc.graph(), once);  // warm-up (page faults, caches)
    const double budget = std::max(opt.perf_seconds, 1e-3);
    // Repeat the node list inside one call so each call takes about 1 ms (at most 1000 runs).
    int64_t per_call = 1;
    if (first < 1e-3) per_call = std::min<int64_t>(1000, (int64_t)std::ceil(1e-3 / std::max(first, 1e-7)));
    std::vector<Tensor*> nodes;
    for (int64_t i = 0; i < per_call; ++i) nodes.insert(nodes.end(), once.begin(), once.end());
    double total = 0;
    int64_t runs = 0;
    do {
      total += timed_compute(*stream, pc.graph(), nodes);
      runs += per_call;
    } while (total < budget);
    r.runs = runs;
    r.us_per_run = total * 1e6 / (double)runs;
  } catch (const Error& e) {
    r.status = CaseStatus::fail;
    r.message = e.what();
  }
  return r;
}

}  // namespace loom::testing
