// A synthetic model for planner tests: per-device costs that are monotone in layers and context
// (weights per layer, KV per token, a compute buffer that appears with the first layer and may
// jump at a threshold), the output layer, MoE experts, and placement's unit-to-device rule.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "loom/fit/planner.h"

namespace loom::fit::test {

struct SynthDevice {
  double compute_base = 0;     // bytes once the device holds anything
  double compute_per_tok = 0;  // per context token
  int64_t step_at = 1 << 30;   // holding this many units or more adds step_bytes
  double step_bytes = 0;
};

struct Synth {
  int64_t n_layer = 8;
  double w_layer = 0;        // dense weights of one layer
  double w_experts[3] = {};  // up, gate, down expert tensors of one layer (MoE)
  double w_output = 0;
  double w_embd = 0;      // token embeddings, always on the CPU
  double kv_per_tok = 0;  // KV bytes per layer per context token
  double compute_output = 0;
  double host_compute = 0;
  std::vector<SynthDevice> gpu;  // non-CPU devices
  mutable int calls = 0;

  // placement.cpp's rule: the last ngl units (layers, then the output) split by cumulative share.
  std::vector<int> layer_device(const Config& c, int& output_device) const {
    const int n_gpu = (int)gpu.size();
    const int cpu = n_gpu;
    int64_t n_off = c.n_gpu_layers < 0 ? n_layer + 1 : std::min(c.n_gpu_layers, n_layer + 1);
    if (n_gpu == 0) n_off = 0;
    const int64_t n_off_layers = std::min(n_off, n_layer);
    std::vector<float> split = c.tensor_split;
    if (split.empty()) split.assign((size_t)n_gpu, 1.0f);
    float sum = 0;
    for (float v : split) sum += v;
    for (float& v : split) v /= sum;
    for (size_t i = 1; i < split.size(); ++i) split[i] += split[i - 1];
    auto unit_device = [&](int64_t u) {
      const float f = (float)u / (float)n_off;
      size_t g = 0;
      while (g + 1 < split.size() && f >= split[g] - 1e-6f) ++g;
      return (int)g;
    };
    std::vector<int> ld((size_t)n_layer, cpu);
    for (int64_t il = n_layer - n_off_layers; il < n_layer; ++il)
      ld[(size_t)il] = unit_device(il - (n_layer - n_off_layers));
    output_device = n_off > n_layer ? unit_device(n_off_layers) : cpu;
    return ld;
  }

  ProbeResult operator()(const Config& c) const {
    ++calls;
    const int n_gpu = (int)gpu.size();
    int out_dev = 0;
    ProbeResult r;
    r.layer_device = layer_device(c, out_dev);
    std::vector<double> model((size_t)n_gpu + 1, 0), ctx((size_t)n_gpu + 1, 0);
    std::vector<int64_t> units((size_t)n_gpu + 1, 0);
    model[(size_t)n_gpu] += w_embd;
    for (int64_t l = 0; l < n_layer; ++l) {
      const int d = r.layer_device[(size_t)l];
      model[(size_t)d] += w_layer;
      ctx[(size_t)d] += kv_per_tok * (double)c.n_ctx;
      ++units[(size_t)d];
      const ExpertMode m = c.experts.empty() ? ExpertMode::with_layer : c.experts[(size_t)l];
      const bool on[3] = {m != ExpertMode::cpu, m == ExpertMode::with_layer || m == ExpertMode::keep_up_gate,
                          m == ExpertMode::with_layer};
      for (int e = 0; e < 3; ++e) model[on[e] ? (size_t)d : (size_t)n_gpu] += w_experts[e];
    }
    model[(size_t)out_dev] += w_output;
    ++units[(size_t)out_dev];
    for (int d = 0; d <= n_gpu; ++d) {
      double compute = 0;
      if (d == n_gpu) {
        compute = host_compute + (out_dev == n_gpu ? compute_output : 0);
      } else if (units[(size_t)d] > 0) {
        const SynthDevice& g = gpu[(size_t)d];
        compute = g.compute_base + g.compute_per_tok * (double)c.n_ctx + (out_dev == d ? compute_output : 0) +
                  (units[(size_t)d] >= g.step_at ? g.step_bytes : 0);
      }
      r.usage.push_back(Usage{(size_t)model[(size_t)d], (size_t)ctx[(size_t)d], (size_t)compute});
    }
    return r;
  }
};

inline bool fits_all(const Problem& pb, const ProbeResult& r) {
  for (size_t d = 0; d < r.usage.size(); ++d)
    if (overshoot(pb.devices[d], r.usage[d]) > 0) return false;
  return true;
}

// Random problem and costs; MiB-ish magnitudes so budgets land in every regime.
inline void random_case(std::mt19937_64& rng, Problem& pb, Synth& s, bool moe) {
  auto uni = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); };
  auto pick = [&](int64_t a, int64_t b) { return std::uniform_int_distribution<int64_t>(a, b)(rng); };
  const double MiB = 1 << 20;
  s = Synth{};
  s.n_layer = pick(1, 16);
  const int n_gpu = (int)pick(1, 4);
  s.w_layer = uni(50, 400) * MiB;
  if (moe)
    for (double& w : s.w_experts) w = uni(100, 600) * MiB;
  s.w_output = uni(0, 2) * s.w_layer;
  s.w_embd = uni(10, 500) * MiB;
  s.kv_per_tok = uni(2, 64) * 1024;
  s.compute_output = uni(0, 300) * MiB;
  s.host_compute = uni(10, 100) * MiB;
  for (int g = 0; g < n_gpu; ++g) {
    SynthDevice d;
    d.compute_base = uni(20, 400) * MiB;
    d.compute_per_tok = uni(0, 16) * 1024;
    if (pick(0, 2) == 0) {
      d.step_at = pick(2, 10);
      d.step_bytes = uni(10, 300) * MiB;
    }
    s.gpu.push_back(d);
  }
  pb = Problem{};
  pb.n_layer = s.n_layer;
  pb.moe = moe;
  const double per_layer = s.w_layer + s.w_experts[0] + s.w_experts[1] + s.w_experts[2];
  const double whole = per_layer * (double)s.n_layer + s.w_output;
  for (int g = 0; g < n_gpu; ++g) {
    DeviceBudget b;
    b.name = "SIM" + std::to_string(g);
    b.known = pick(0, 9) != 0;
    b.total = b.known ? (size_t)(uni(0.05, 2.0) * whole / n_gpu + 1024 * MiB) : 0;
    b.free = b.known ? (size_t)(b.total * uni(0.7, 1.0)) : 0;
    b.target = (size_t)(pick(0, 2) * 512 * MiB);
    pb.devices.push_back(b);
    if (b.known) pb.layer_devices.push_back(g);
    pb.given.tensor_split.push_back((float)std::max<size_t>(1, b.free >> 20));
  }
  DeviceBudget host;
  host.name = "CPU";
  host.is_cpu = true;
  host.total = (size_t)(uni(0.3, 2.0) * (whole + s.w_embd));
  host.free = host.total;
  pb.devices.push_back(host);
  const int64_t ctx_choices[] = {512, 2048, 4096, 8192, 32768};
  pb.given.n_ctx = ctx_choices[pick(0, 4)];
  pb.given.n_gpu_layers = -1;
  pb.n_ctx_min = std::min<int64_t>(pick(0, 1) ? 4096 : 1000, pb.given.n_ctx);
  pb.fixed_ctx = pick(0, 4) == 0;
}

}  // namespace loom::fit::test
