// Finite-difference checking of the autograd rules: a case builds y = f(params, inputs); the
// loss is sum(y * R) for a fixed random R, so every element of dy matters. Analytic gradients
// come from build_backward; numeric ones from central differences of the loss, evaluated in
// double on the host from the forward graph's float outputs.
#pragma once

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "loom/cpu/cpu.h"
#include "loom/graph/autograd.h"
#include "loom/graph/ops.h"

namespace loom::test {

struct GradCase {
  Context ctx;
  std::vector<Tensor*> params;
  std::vector<std::pair<Tensor*, std::function<void(Tensor*, std::mt19937&)>>> fills;
  std::mt19937 rng{1234};

  // A trainable F32 tensor filled with N(0, sigma) (or uniform [lo, hi) when lo < hi).
  Tensor* param(std::initializer_list<int64_t> ne, float sigma = 1.0f, float lo = 0, float hi = 0) {
    Tensor* t = ctx.new_tensor(DType::F32, ne, fmt::format("p{}", params.size()));
    t->flags |= kFlagParam;
    params.push_back(t);
    fills.emplace_back(t, [=](Tensor* x, std::mt19937& r) { fill_float(x, r, sigma, lo, hi); });
    return t;
  }
  // A constant input (float or I32) filled by fn.
  Tensor* input(DType type, std::initializer_list<int64_t> ne, std::function<void(Tensor*, std::mt19937&)> fn) {
    Tensor* t = ctx.new_tensor(type, ne, "in");
    t->flags |= kFlagInput;
    fills.emplace_back(t, std::move(fn));
    return t;
  }
  static void fill_float(Tensor* t, std::mt19937& r, float sigma, float lo = 0, float hi = 0) {
    std::vector<float> v((size_t)t->nelements());
    if (lo < hi) {
      std::uniform_real_distribution<float> d(lo, hi);
      for (float& x : v) x = d(r);
    } else {
      std::normal_distribution<float> d(0.0f, sigma);
      for (float& x : v) x = d(r);
    }
    set(t, v);
  }
  static void set(Tensor* t, const std::vector<float>& v) {
    const DTypeInfo& info = dtype_info(t->type);
    for (int64_t r = 0; r < t->nrows(); ++r)
      info.from_float(v.data() + r * t->ne[0], static_cast<char*>(t->data) + r * t->nb[1], t->ne[0]);
  }
  static std::vector<double> get(const Tensor* t) {
    std::vector<double> out;
    std::vector<float> row((size_t)t->ne[0]);
    const DTypeInfo& info = dtype_info(t->type);
    if (info.block_size > 1) {  // quantized: whole rows (unit-stride dim 0)
      for (int64_t r = 0; r < t->nrows(); ++r) {
        const int64_t i1 = r % t->ne[1], i2 = (r / t->ne[1]) % t->ne[2], i3 = r / (t->ne[1] * t->ne[2]);
        info.to_float(static_cast<const char*>(t->data) + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3], row.data(),
                      t->ne[0]);
        out.insert(out.end(), row.begin(), row.end());
      }
      return out;
    }
    for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
      for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
        for (int64_t i1 = 0; i1 < t->ne[1]; ++i1)
          for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) {
            float x;
            info.to_float(static_cast<const char*>(t->data) + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] +
                              i3 * t->nb[3],
                          &x, 1);
            out.push_back(x);
          }
    return out;
  }
};

struct GradCheckOptions {
  double eps = 1e-2;
  double max_rel_err = 2e-3;  // || analytic - numeric || / || numeric ||
  int max_elems = 48;         // elements checked per parameter (spread over the tensor)
  int n_threads = 2;
};

// Builds the loss on y, checks every parameter's gradient. Returns the largest relative error.
inline double check_gradients(GradCase& gc, Tensor* y, const GradCheckOptions& opt = {}) {
  Context& c = gc.ctx;
  Tensor* r = gc.input(DType::F32, {y->ne[0], y->ne[1], y->ne[2], y->ne[3]},
                       [](Tensor* t, std::mt19937& g) { GradCase::fill_float(t, g, 1.0f); });
  Tensor* loss = ops::sum(c, ops::mul(c, y->type == DType::F32 ? y : ops::cont(c, y), r));
  Graph fwd;
  fwd.build_forward(loss);
  Gradients grads = build_backward(c, fwd, loss);
  Graph full;
  full.build_forward(loss);
  std::vector<Tensor*> gs;
  for (Tensor* p : gc.params) {
    Tensor* g = grads.of(p);
    EXPECT_NE(g, nullptr) << "no gradient for " << p->name;
    if (!g) return 1e9;
    full.build_forward(g);
    gs.push_back(g);
  }
  cpu::CpuDevice dev(opt.n_threads);
  auto buf = cpu::alloc_all(c, dev.buffer_type());
  for (auto& [t, fn] : gc.fills) fn(t, gc.rng);
  for (const GradConstant& k : grads.constants) std::memcpy(k.tensor->data, k.values.data(), k.values.size() * 4);
  cpu::compute_graph(full, dev.pool());
  const std::vector<double> rv = GradCase::get(r);
  auto eval = [&]() {
    cpu::compute_graph(fwd, dev.pool());
    const std::vector<double> yv = GradCase::get(y);
    double l = 0;
    for (size_t i = 0; i < yv.size(); ++i) l += yv[i] * rv[i];
    return l;
  };
  double worst = 0;
  for (size_t pi = 0; pi < gc.params.size(); ++pi) {
    Tensor* p = gc.params[pi];
    const std::vector<double> an = GradCase::get(gs[pi]);
    auto* data = static_cast<float*>(p->data);
    const int64_t n = p->nelements();
    // half the checked elements spread over the tensor, half where the analytic gradient is
    // largest (so rows a batch never touches do not make the check all noise)
    std::vector<int64_t> picks;
    const int64_t step = std::max<int64_t>(1, n / std::max(1, opt.max_elems / 2));
    for (int64_t i = 0; i < n; i += step) picks.push_back(i);
    std::vector<int64_t> by_size((size_t)n);
    for (int64_t i = 0; i < n; ++i) by_size[(size_t)i] = i;
    const size_t top = std::min<size_t>((size_t)n, (size_t)opt.max_elems / 2);
    std::partial_sort(by_size.begin(), by_size.begin() + (ptrdiff_t)top, by_size.end(),
                      [&](int64_t a, int64_t b) { return std::fabs(an[(size_t)a]) > std::fabs(an[(size_t)b]); });
    for (size_t k = 0; k < top; ++k)
      if (std::find(picks.begin(), picks.end(), by_size[k]) == picks.end()) picks.push_back(by_size[k]);
    double num2 = 0, diff2 = 0;
    for (int64_t i : picks) {
      const float x0 = data[i];
      const double h = opt.eps * std::max(1.0, std::fabs((double)x0));
      data[i] = (float)(x0 + h);
      const double hp = (double)data[i] - x0;
      const double lp = eval();
      data[i] = (float)(x0 - h);
      const double hm = x0 - (double)data[i];
      const double lm = eval();
      data[i] = x0;
      const double num = (lp - lm) / (hp + hm);
      num2 += num * num;
      diff2 += (num - an[(size_t)i]) * (num - an[(size_t)i]);
    }
    const double rel = std::sqrt(diff2) / std::max(std::sqrt(num2), 1e-6);
    EXPECT_LE(rel, opt.max_rel_err) << "parameter " << p->name << " " << describe(*p);
    worst = std::max(worst, rel);
  }
  return worst;
}

}  // namespace loom::test
