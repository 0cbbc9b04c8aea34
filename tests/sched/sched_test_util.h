// Helpers for the scheduler tests: a set of simulated devices plus the CPU, weights placed on
// a chosen device and filled from a seed, reading any tensor back to host bits, and a seeded
// random DAG builder (add/mul/scale/silu/rms_norm/mul_mat/get_rows/set_rows/views/cont) whose
// op set is restricted to what the CPU kernels support.
#pragma once

#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "loom/alloc/alloc.h"
#include "loom/cpu/cpu.h"
#include "loom/graph/ops.h"
#include "loom/sched/executor.h"
#include "loom/sched/plan.h"
#include "loom/sim/sim.h"

namespace loom::test {

// SIM0..SIM(n-1) with the given capacities, then the CPU; one kernel thread each.
struct Devices {
  std::vector<std::unique_ptr<sim::SimDevice>> sims;
  std::unique_ptr<cpu::CpuDevice> cpu;
  std::vector<Device*> all;

  // latency_us[i] >= 0: LOOM_SIM_LATENCY_US for SIM i (read when the device is made).
  explicit Devices(std::vector<size_t> caps, std::vector<int> latency_us = {}) {
    for (size_t i = 0; i < caps.size(); ++i) {
      const int us = i < latency_us.size() ? latency_us[i] : -1;
      if (us >= 0) setenv("LOOM_SIM_LATENCY_US", std::to_string(us).c_str(), 1);
      sims.push_back(std::make_unique<sim::SimDevice>((int)i, caps[i], 1));
      if (us >= 0) unsetenv("LOOM_SIM_LATENCY_US");
    }
    cpu = std::make_unique<cpu::CpuDevice>(1);
    for (auto& s : sims) all.push_back(s.get());
    all.push_back(cpu.get());
  }
  Devices(int n, size_t cap = 64u << 20) : Devices(std::vector<size_t>((size_t)n, cap)) {}
  sim::SimDevice& sim(int i) { return *sims[(size_t)i]; }
};

// Writes host bytes into t wherever it lives.
inline void write(Tensor* t, const void* src, size_t n) {
  if (!t->buffer || t->buffer->type().is_host())
    std::memcpy(t->data, src, n);
  else
    t->buffer->set(t, src, 0, n);
}

inline void fill_f32(Tensor* t, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v((size_t)t->nelements());
  for (float& x : v) x = dist(rng);
  write(t, v.data(), v.size() * sizeof(float));
}

// The bytes of contiguous t as 32-bit words, read through its buffer.
inline std::vector<uint32_t> read_bits(const Tensor* t) {
  std::vector<uint32_t> out(t->nbytes() / 4);
  if (!t->buffer || t->buffer->type().is_host())
    std::memcpy(out.data(), t->data, t->nbytes());
  else
    t->buffer->get(t, out.data(), 0, t->nbytes());
  return out;
}

// Allocates leaf t on device d (its own buffer), kept alive in bufs.
inline Status place(Tensor* t, Device& d, std::vector<std::unique_ptr<Buffer>>& bufs) {
  Tensor* one[] = {t};
  return alloc::alloc_tensors(one, d.buffer_type(), bufs);
}

// Snapshot of every field of every tensor of a graph, to prove plan() changes nothing.
struct GraphSnapshot {
  std::vector<Tensor*> nodes, leafs;
  std::vector<Tensor> copies;
  uint64_t uid;
  explicit GraphSnapshot(const Graph& g) : nodes(g.nodes()), leafs(g.leafs()), uid(g.uid()) {
    for (Tensor* t : nodes) copies.push_back(*t);
    for (Tensor* t : leafs) copies.push_back(*t);
  }
  bool same_as(const Graph& g) const {
    if (g.nodes() != nodes || g.leafs() != leafs || g.uid() != uid) return false;
    size_t k = 0;
    auto eq = [](const Tensor& a, const Tensor& b) {
      return a.type == b.type && std::memcmp(a.ne, b.ne, sizeof a.ne) == 0 &&
             std::memcmp(a.nb, b.nb, sizeof a.nb) == 0 && a.op == b.op &&
             std::memcmp(a.op_params, b.op_params, sizeof a.op_params) == 0 &&
             std::memcmp(a.src, b.src, sizeof a.src) == 0 && a.view_src == b.view_src && a.view_offs == b.view_offs &&
             a.flags == b.flags && a.data == b.data && a.buffer == b.buffer && a.name == b.name && a.id == b.id;
    };
    for (Tensor* t : nodes)
      if (!eq(*t, copies[k++])) return false;
    for (Tensor* t : leafs)
      if (!eq(*t, copies[k++])) return false;
    return true;
  }
};

// ---- random DAGs ---------------------------------------------------------------------------
// All activations are F32 {E, T}; weights: matrices {E, E}, vectors {E, 1}, an embedding
// {E, V}, a cache {E, C} written by set_rows and read back through a view.
struct RandomDag {
  Context ctx;
  Graph graph;
  std::vector<Tensor*> weights;  // leafs that get memory on some device (cache included)
  std::vector<Tensor*> inputs;   // host inputs without memory (F32 activations or I32 ids)
  std::vector<Tensor*> outputs;  // flagged kFlagOutput, contiguous F32
  Tensor* cache = nullptr;
};

inline constexpr int64_t kE = 8, kT = 3, kV = 11, kC = 6;

// Whether the CPU runs op on a representative node (built in a scratch context).
inline bool cpu_runs(OpKind op) {
  Context c;
  Tensor* a = c.new_tensor(DType::F32, {kE, kT});
  Tensor* w = c.new_tensor(DType::F32, {kE, kE});
  Tensor* ids = c.new_tensor(DType::I32, {kT});
  Tensor* n = nullptr;
  switch (op) {
    case OpKind::ADD:
      n = ops::add(c, a, a);
      break;
    case OpKind::MUL:
      n = ops::mul(c, a, c.new_tensor(DType::F32, {kE, 1}));
      break;
    case OpKind::SCALE:
      n = ops::scale(c, a, 0.5f);
      break;
    case OpKind::SILU:
      n = ops::silu(c, a);
      break;
    case OpKind::RMS_NORM:
      n = ops::rms_norm(c, a, 1e-5f);
      break;
    case OpKind::MUL_MAT:
      n = ops::mul_mat(c, w, a);
      break;
    case OpKind::GET_ROWS:
      n = ops::get_rows(c, c.new_tensor(DType::F32, {kE, kV}), ids);
      break;
    case OpKind::SET_ROWS:
      n = ops::set_rows(c, c.new_tensor(DType::F32, {kE, kC}), a, ids);
      break;
    case OpKind::CONT:
      n = ops::cont(c, ops::transpose(c, a));
      break;
    default:
      return false;
  }
  return cpu::supports(n);
}

inline std::unique_ptr<RandomDag> make_random_dag(uint32_t seed, int n_ops) {
  static const std::vector<OpKind> kOps = [] {
    std::vector<OpKind> ops;
    for (OpKind op : {OpKind::ADD, OpKind::MUL, OpKind::SCALE, OpKind::SILU, OpKind::RMS_NORM, OpKind::MUL_MAT,
                      OpKind::GET_ROWS, OpKind::SET_ROWS, OpKind::CONT})
      if (cpu_runs(op)) ops.push_back(op);
    return ops;
  }();
  auto dag = std::make_unique<RandomDag>();
  Context& c = dag->ctx;
  std::mt19937 rng(seed);
  auto rnd = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  auto weight = [&](std::initializer_list<int64_t> ne) {
    Tensor* w = c.new_tensor(DType::F32, ne, fmt::format("w{}", dag->weights.size()));
    dag->weights.push_back(w);
    return w;
  };
  auto input = [&](DType type, std::initializer_list<int64_t> ne) {
    Tensor* t = c.new_tensor(type, ne, fmt::format("in{}", dag->inputs.size()));
    t->flags |= kFlagInput;
    dag->inputs.push_back(t);
    return t;
  };
  std::vector<Tensor*> pool{input(DType::F32, {kE, kT})};
  std::vector<Tensor*> ids;  // I32 {T} inputs with distinct values < kC
  auto pick = [&] {
    const int n = (int)pool.size();
    return pool[(size_t)(rnd(0, 9) < 6 ? std::max(0, n - rnd(1, 2)) : rnd(0, n - 1))];
  };
  auto get_ids = [&] {
    if (ids.empty() || rnd(0, 2) == 0) ids.push_back(input(DType::I32, {kT}));
    return ids[(size_t)rnd(0, (int)ids.size() - 1)];
  };
  Tensor* last_sr = nullptr;  // set_rows chain on the cache: explicit write order
  int k = 0;
  for (int i = 0; i < n_ops && !kOps.empty(); ++i) {
    const OpKind op = kOps[(size_t)rnd(0, (int)kOps.size() - 1)];
    Tensor* a = pick();
    Tensor* t = nullptr;
    switch (op) {
      case OpKind::ADD:
      case OpKind::MUL: {
        Tensor* b = rnd(0, 1) ? pick() : weight({kE, 1});
        t = op == OpKind::ADD ? ops::add(c, a, b) : ops::mul(c, a, b);
        break;
      }
      case OpKind::SCALE:
        if (rnd(0, 2) == 0) {  // through a reshape view and back
          Tensor* flat = ops::scale(c, ops::reshape(c, a, {kE * kT}), 0.75f, 0.125f);
          t = ops::scale(c, ops::reshape(c, flat, {kE, kT}), 1.0f);
        } else {
          t = ops::scale(c, a, 0.5f + 0.125f * (float)rnd(0, 6), 0.25f * (float)rnd(-2, 2));
        }
        break;
      case OpKind::SILU:
        t = ops::silu(c, a);
        break;
      case OpKind::RMS_NORM:
        t = ops::rms_norm(c, a, 1e-5f);
        break;
      case OpKind::MUL_MAT:
        t = ops::mul_mat(c, weight({kE, kE}), a);
        break;
      case OpKind::GET_ROWS:
        t = ops::get_rows(c, weight({kE, kV}), get_ids());
        break;
      case OpKind::SET_ROWS: {
        if (!dag->cache) dag->cache = weight({kE, kC});
        Tensor* sr = ops::set_rows(c, last_sr ? last_sr : dag->cache, a, get_ids());
        last_sr = sr;
        t = ops::scale(c, ops::view_2d(c, sr, kE, kT, sr->nb[1], (size_t)rnd(0, (int)(kC - kT)) * sr->nb[1]), 1.0f);
        break;
      }
      case OpKind::CONT: {  // {E,T} -> {T,E} -> {E,T}, maybe with work on the transposed form
        Tensor* x = ops::cont(c, ops::transpose(c, a));
        if (rnd(0, 1)) x = ops::silu(c, x);
        t = ops::cont(c, ops::transpose(c, x));
        break;
      }
      default:
        break;
    }
    t->name = fmt::format("n{}", k++);
    pool.push_back(t);
  }
  // Outputs: the last node and a few random ones (contiguous, not views).
  std::vector<Tensor*> outs{pool.back()};
  for (size_t i = 1; i < pool.size(); ++i)
    if (rnd(0, 4) == 0 && !pool[i]->is_view() && pool[i] != pool.back()) outs.push_back(pool[i]);
  for (Tensor* o : outs) {
    if (o->is_view() || o->op == OpKind::NONE) continue;
    o->flags |= kFlagOutput;
    dag->outputs.push_back(o);
    dag->graph.build_forward(o);
  }
  return dag;
}

// Fills the DAG's inputs (after they have memory) deterministically from seed.
inline void fill_inputs(RandomDag& dag, uint32_t seed) {
  for (size_t i = 0; i < dag.inputs.size(); ++i) {
    Tensor* t = dag.inputs[i];
    if (!t->data) continue;  // not reached from any output: not in the graph
    if (t->type == DType::I32) {
      std::vector<int32_t> v((size_t)t->nelements());
      std::vector<int32_t> perm((size_t)kC);
      for (int j = 0; j < (int)kC; ++j) perm[(size_t)j] = j;
      std::shuffle(perm.begin(), perm.end(), std::mt19937(seed * 31 + (uint32_t)i));
      for (size_t j = 0; j < v.size(); ++j) v[j] = perm[j];  // distinct, < kC <= kV
      write(t, v.data(), v.size() * 4);
    } else {
      fill_f32(t, seed * 131 + (uint32_t)i);
    }
  }
}

inline void fill_weights(RandomDag& dag, uint32_t seed) {
  for (size_t i = 0; i < dag.weights.size(); ++i) fill_f32(dag.weights[i], seed * 7919 + (uint32_t)i);
}

}  // namespace loom::test
