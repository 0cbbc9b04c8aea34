// Small hand-made graphs shared by the planner, golden and executor tests. Weights are leafs
// whose device is given either by real memory (place()) or by PlanPolicy::leaf_devices.
#pragma once

#include "sched_test_util.h"

namespace loom::test {

// A graph plus the device each weight should live on.
struct TestGraph {
  Context ctx;
  Graph graph;
  std::vector<std::pair<Tensor*, int>> weights;  // (leaf, device index)
  std::vector<Tensor*> inputs;
  std::vector<Tensor*> outputs;

  Tensor* weight(DType type, std::initializer_list<int64_t> ne, const std::string& name, int device) {
    Tensor* w = ctx.new_tensor(type, ne, name);
    weights.emplace_back(w, device);
    return w;
  }
  Tensor* input(DType type, std::initializer_list<int64_t> ne, const std::string& name) {
    Tensor* t = ctx.new_tensor(type, ne, name);
    t->flags |= kFlagInput;
    inputs.push_back(t);
    return t;
  }
  void output(Tensor* t) {
    t->flags |= kFlagOutput;
    outputs.push_back(t);
    graph.build_forward(t);
  }
  // Policy placing weights by leaf_devices (no memory is allocated).
  sched::PlanPolicy policy(const Devices& devs) const {
    sched::PlanPolicy p;
    for (auto& [w, d] : weights) p.leaf_devices[w] = devs.all[(size_t)d];
    return p;
  }
  // Gives every weight memory on its device and fills it from seed.
  void place_weights(Devices& devs, std::vector<std::unique_ptr<Buffer>>& bufs, uint32_t seed) {
    for (auto& [w, d] : weights) {
      place(w, *devs.all[(size_t)d], bufs).throw_if_error();
      if (w->type == DType::F32) fill_f32(w, seed + (uint32_t)w->id);
    }
  }
};

// Named node helper.
inline Tensor* named(Tensor* t, const std::string& name) {
  t->name = name;
  return t;
}

// Two transformer-like layers: layer 0 weights on device l0, layer 1 on l1, output on out.
// x = in; per layer: h = rms_norm(mul_mat(W, x)) * n; x = x + h; logits = mul_mat(Wo, x).
inline std::unique_ptr<TestGraph> two_layers(int l0, int l1, int out, int64_t T = 3, int64_t E = 8) {
  auto tg = std::make_unique<TestGraph>();
  Context& c = tg->ctx;
  Tensor* x = tg->input(DType::F32, {E, T}, "inp");
  const int dev[2] = {l0, l1};
  for (int l = 0; l < 2; ++l) {
    Tensor* w = tg->weight(DType::F32, {E, E}, fmt::format("blk.{}.w", l), dev[l]);
    Tensor* n = tg->weight(DType::F32, {E, 1}, fmt::format("blk.{}.norm", l), dev[l]);
    Tensor* h = named(ops::mul_mat(c, w, x), fmt::format("mm-{}", l));
    h = named(ops::rms_norm(c, h, 1e-5f), fmt::format("norm-{}", l));
    h = named(ops::mul(c, h, n), fmt::format("scaled-{}", l));
    x = named(ops::add(c, x, h), fmt::format("resid-{}", l));
  }
  Tensor* wo = tg->weight(DType::F32, {E, 16}, "output.w", out);
  tg->output(named(ops::mul_mat(c, wo, x), "logits"));
  return tg;
}

// The upstream race: split 0 on SIM0 makes a; split 1 on SIM1 copies a; split 2 on SIM0 has no
// inputs and reuses a's memory. Split 2 must wait for the copy.
inline std::unique_ptr<TestGraph> no_input_race(int64_t E = 8, int64_t T = 3) {
  auto tg = std::make_unique<TestGraph>();
  Context& c = tg->ctx;
  Tensor* in = tg->input(DType::F32, {E, T}, "inp");
  Tensor* w0 = tg->weight(DType::F32, {E, E}, "w0", 0);
  Tensor* w1 = tg->weight(DType::F32, {E, E}, "w1", 1);
  Tensor* w2 = tg->weight(DType::F32, {E, T}, "w2", 0);
  Tensor* a = named(ops::mul_mat(c, w0, in), "a");
  Tensor* b = named(ops::mul_mat(c, w1, a), "b");
  tg->output(named(ops::scale(c, b, 1.0f), "b-out"));
  Tensor* c1 = named(ops::scale(c, w2, 2.0f), "c1");
  tg->output(named(ops::silu(c, c1), "c2"));
  return tg;
}

// A KV-cache-like leaf on device `cache_dev`, written by set_rows and read through the same
// view by nodes on SIM1: the copy made for read0 is reused by read0-again (no write between)
// and made again for read1 (after store1 wrote the cache). Graph order is set by the output order.
inline std::unique_ptr<TestGraph> cache_rw(int cache_dev, int64_t E = 8, int64_t T = 2, int64_t C = 6) {
  auto tg = std::make_unique<TestGraph>();
  Context& c = tg->ctx;
  Tensor* x = tg->input(DType::F32, {E, T}, "inp");
  Tensor* ids0 = tg->input(DType::I32, {T}, "slots0");
  Tensor* ids1 = tg->input(DType::I32, {T}, "slots1");
  Tensor* cache = tg->weight(DType::F32, {E, C}, "cache", cache_dev);
  Tensor* w0 = tg->weight(DType::F32, {E, E}, "w0", 0);
  Tensor* w1 = tg->weight(DType::F32, {E, E}, "w1", 1);
  Tensor* sr0 = named(ops::set_rows(c, cache, x, ids0), "store0");
  Tensor* v0 = named(ops::view_2d(c, sr0, E, C, sr0->nb[1], 0), "cache-view0");
  tg->output(named(ops::mul_mat(c, w1, v0), "read0"));        // SIM1: copies cache-view0
  tg->output(named(ops::mul_mat(c, w0, x), "z"));             // SIM0 in between
  tg->output(named(ops::mul_mat(c, w1, v0), "read0-again"));  // SIM1: reuses the copy
  Tensor* y = named(ops::scale(c, x, 2.0f), "y");
  Tensor* sr1 = named(ops::set_rows(c, sr0, y, ids1), "store1");  // writes the cache again
  Tensor* v1 = named(ops::view_2d(c, sr1, E, C, sr1->nb[1], 0), "cache-view1");
  tg->output(named(ops::scale(c, v1, 0.5f), "t1"));
  tg->output(named(ops::mul_mat(c, w1, v0), "read1"));  // SIM1: must copy again
  return tg;
}

}  // namespace loom::test
