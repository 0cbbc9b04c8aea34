// Executor tests: multi-device runs equal the single-CPU run bit for bit (hand-made graphs and
// 220 random DAGs with random support masks, memory caps, pipeline copies and injected
// latency), the no-input-split race under latency, worst-case reserve and
// LOOM_SCHED_NO_REALLOC, a simulated device over its cap, and the optimize_graph hook.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <functional>

#include "loom/sched/describe.h"
#include "test_graphs.h"

namespace loom::test {
namespace {

using Bits = std::vector<std::vector<uint32_t>>;
using MakeGraph = std::function<std::unique_ptr<TestGraph>()>;

void fill_test_inputs(TestGraph& tg, uint32_t seed) {
  for (size_t i = 0; i < tg.inputs.size(); ++i) {
    Tensor* t = tg.inputs[i];
    if (t->type == DType::I32) {
      std::vector<int32_t> perm(6);
      for (int j = 0; j < 6; ++j) perm[(size_t)j] = j;
      std::shuffle(perm.begin(), perm.end(), std::mt19937(seed + (uint32_t)i));
      write(t, perm.data(), (size_t)t->nelements() * 4);
    } else {
      fill_f32(t, seed * 17 + (uint32_t)i);
    }
  }
}

void refill_weights(TestGraph& tg, uint32_t seed) {
  for (auto& [w, d] : tg.weights)
    if (w->type == DType::F32) fill_f32(w, seed + (uint32_t)w->id);
}

Bits read_outputs(const std::vector<Tensor*>& outs) {
  Bits b;
  for (const Tensor* t : outs) b.push_back(read_bits(t));
  return b;
}

Bits run_reference(const MakeGraph& make, uint32_t seed) {
  auto tg = make();
  cpu::CpuDevice cpu(1);
  auto buf = cpu::alloc_all(tg->ctx, cpu.buffer_type());
  refill_weights(*tg, seed);
  fill_test_inputs(*tg, seed);
  ThreadPool pool(1);
  cpu::compute_graph(tg->graph, pool);
  return read_outputs(tg->outputs);
}

// Plans and runs make() on devs `reps` times; returns the outputs of the last run.
Bits run_planned(const MakeGraph& make, Devices& devs, uint32_t seed, sched::PlanPolicy pol = {}, int reps = 2) {
  auto tg = make();
  std::vector<std::unique_ptr<Buffer>> bufs;
  tg->place_weights(devs, bufs, seed);
  const sched::ExecutionPlan p = sched::plan(tg->graph, devs.all, pol);
  sched::Executor ex(devs.all);
  EXPECT_TRUE(ex.alloc(tg->graph, p));
  fill_test_inputs(*tg, seed);
  Bits out;
  for (int r = 0; r < reps; ++r) {
    refill_weights(*tg, seed);  // the cache is written by the graph
    Status st = ex.compute(tg->graph, p);
    EXPECT_TRUE(st) << st.message();
    out = read_outputs(tg->outputs);
  }
  return out;
}

TEST(Executor, TwoLayersMatchTheCpu) {
  const MakeGraph make = [] { return two_layers(0, 1, 2); };
  const Bits ref = run_reference(make, 5);
  for (int n_copies : {1, 2}) {
    Devices devs(2);
    sched::PlanPolicy pol;
    pol.n_copies = n_copies;
    EXPECT_EQ(run_planned(make, devs, 5, pol, 3), ref);
  }
}

// Host waits per compute for make() on two SIM devices and the CPU (same outputs as the CPU).
uint64_t syncs_per_compute(const MakeGraph& make, const Bits& ref) {
  Devices devs(2);
  auto tg = make();
  std::vector<std::unique_ptr<Buffer>> bufs;
  tg->place_weights(devs, bufs, 5);
  const sched::ExecutionPlan p = sched::plan(tg->graph, devs.all, {});
  sched::Executor ex(devs.all);
  EXPECT_TRUE(ex.alloc(tg->graph, p));
  fill_test_inputs(*tg, 5);
  refill_weights(*tg, 5);
  const uint64_t before = ex.n_syncs();
  EXPECT_TRUE(ex.compute(tg->graph, p));
  EXPECT_EQ(read_outputs(tg->outputs), ref);
  return ex.n_syncs() - before;
}

TEST(Executor, WaitsOnlyForStreamsNoLaterWaitCovers) {
  // SIM0 -> SIM1 -> CPU: the CPU's copies wait for SIM1's event, SIM1's for SIM0's, so the end of
  // compute waits on no asynchronous stream; with the output on SIM1, on SIM1 alone.
  const MakeGraph to_cpu = [] { return two_layers(0, 1, 2); };
  const MakeGraph to_sim1 = [] { return two_layers(0, 1, 1); };
  const Bits ref_cpu = run_reference(to_cpu, 5), ref_sim1 = run_reference(to_sim1, 5);
  EXPECT_EQ(syncs_per_compute(to_cpu, ref_cpu), 0u);
  EXPECT_EQ(syncs_per_compute(to_sim1, ref_sim1), 1u);
  setenv("LOOM_SCHED_SYNC_ALL", "1", 1);  // the rule before: every stream
  EXPECT_EQ(syncs_per_compute(to_cpu, ref_cpu), 2u);
  EXPECT_EQ(syncs_per_compute(to_sim1, ref_sim1), 2u);
  unsetenv("LOOM_SCHED_SYNC_ALL");
}

TEST(Executor, CacheReadWriteMatchesTheCpu) {
  const MakeGraph make = [] { return cache_rw(0); };
  const Bits ref = run_reference(make, 9);
  Devices devs(2);
  devs.sim(0).set_op_filter([](const Tensor* t) { return t->op != OpKind::SCALE; });
  sched::PlanPolicy pol;
  pol.n_copies = 2;
  EXPECT_EQ(run_planned(make, devs, 9, pol, 3), ref);
}

TEST(Executor, NoInputRaceUnderLatency) {
  const MakeGraph make = [] { return no_input_race(32, 16); };
  const Bits ref = run_reference(make, 3);
  // SIM1 (the copy of `a`) is slow, SIM0 (split 2, overwriting a's bytes) is not.
  Devices devs({64u << 20, 64u << 20}, {0, 1000});
  EXPECT_EQ(run_planned(make, devs, 3, {}, 30), ref);
}

TEST(Executor, InputsGetHostMemoryAtAlloc) {
  Devices devs(1);
  auto tg = two_layers(0, 0, 0);
  std::vector<std::unique_ptr<Buffer>> bufs;
  tg->place_weights(devs, bufs, 1);
  const sched::ExecutionPlan p = sched::plan(tg->graph, devs.all);
  sched::Executor ex(devs.all);
  ASSERT_TRUE(ex.alloc(tg->graph, p));
  Tensor* in = tg->inputs[0];
  ASSERT_NE(in->data, nullptr);
  ASSERT_TRUE(in->buffer && in->buffer->type().is_host());
  EXPECT_EQ(in->buffer->usage(), BufferUsage::compute);
  EXPECT_GT(ex.buffer_size(1), 0u);
  // A second plan of the same graph sees the executor's bindings as no pins.
  const sched::ExecutionPlan p2 = sched::plan(tg->graph, devs.all);
  EXPECT_EQ(sched::describe(p2), sched::describe(p));
  // compute() of a plan that was never allocated cannot have filled inputs.
  sched::Executor ex2(devs.all);
  Status st = ex2.compute(tg->graph, p2);
  EXPECT_EQ(st.kind(), ErrorKind::usage);
  EXPECT_NE(st.message().find("'inp'"), std::string::npos) << st.message();
  fill_test_inputs(*tg, 1);
  EXPECT_TRUE(ex2.compute(tg->graph, p2));
}

TEST(Executor, ReserveThenNoReallocAcrossShapes) {
  Devices devs(2);
  auto big = two_layers(0, 1, 2, 16);
  auto small = two_layers(0, 1, 2, 1);
  std::vector<std::unique_ptr<Buffer>> bufs;
  big->place_weights(devs, bufs, 1);
  small->place_weights(devs, bufs, 1);
  const sched::ExecutionPlan pb = sched::plan(big->graph, devs.all);
  const sched::ExecutionPlan ps = sched::plan(small->graph, devs.all);
  sched::Executor ex(devs.all);
  ASSERT_TRUE(ex.reserve(big->graph, pb));
  const size_t size0 = ex.buffer_size(0);
  EXPECT_EQ(size0, pb.compute_bytes(0));
  setenv("LOOM_SCHED_NO_REALLOC", "1", 1);
  for (auto* g : {big.get(), small.get(), big.get()}) {
    const sched::ExecutionPlan& p = g == big.get() ? pb : ps;
    ASSERT_TRUE(ex.alloc(g->graph, p));
    fill_test_inputs(*g, 2);
    Status st = ex.compute(g->graph, p);
    EXPECT_TRUE(st) << st.message();
  }
  unsetenv("LOOM_SCHED_NO_REALLOC");
  EXPECT_EQ(ex.n_reallocs(), 0);
  EXPECT_EQ(ex.buffer_size(0), size0);
}

TEST(Executor, NoReallocNamesTheTensorThatGrew) {
  Devices devs(2);
  auto big = two_layers(0, 1, 2, 16);
  auto small = two_layers(0, 1, 2, 1);
  std::vector<std::unique_ptr<Buffer>> bufs;
  big->place_weights(devs, bufs, 1);
  small->place_weights(devs, bufs, 1);
  const sched::ExecutionPlan pb = sched::plan(big->graph, devs.all);
  const sched::ExecutionPlan ps = sched::plan(small->graph, devs.all);
  sched::Executor ex(devs.all);
  ASSERT_TRUE(ex.reserve(small->graph, ps));
  setenv("LOOM_SCHED_NO_REALLOC", "1", 1);
  Status st = ex.compute(big->graph, pb);
  unsetenv("LOOM_SCHED_NO_REALLOC");
  ASSERT_FALSE(st);
  EXPECT_EQ(st.kind(), ErrorKind::out_of_memory);
  EXPECT_NE(st.message().find("grew past the reserve"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("tensor '"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("SIM0"), std::string::npos) << st.message();
  // Without the variable the buffers grow and the run is right.
  ASSERT_TRUE(ex.alloc(big->graph, pb));
  fill_test_inputs(*big, 4);
  EXPECT_TRUE(ex.compute(big->graph, pb));
  EXPECT_GE(ex.n_reallocs(), 1);
}

TEST(Executor, SimDeviceOverItsCapIsOutOfMemory) {
  Devices devs(std::vector<size_t>{3072, 64u << 20});
  auto tg = two_layers(0, 1, 2, 64);
  std::vector<std::unique_ptr<Buffer>> bufs;
  tg->place_weights(devs, bufs, 1);
  const sched::ExecutionPlan p = sched::plan(tg->graph, devs.all);
  ASSERT_GT(p.compute_bytes(0), 3072u);
  sched::Executor ex(devs.all);
  Status st = ex.compute(tg->graph, p);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.kind(), ErrorKind::out_of_memory);
  EXPECT_NE(st.message().find("SIM0"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(fmt::format("{} bytes", p.compute_bytes(0))), std::string::npos) << st.message();
}

TEST(Executor, OptimizeGraphHookRunsOnCopiesAndIsChecked) {
  Devices devs(2);
  int calls = 0;
  devs.sim(0).set_optimize_hook([&](std::vector<Tensor*>& nodes) { ++calls; });
  const MakeGraph make = [] { return two_layers(0, 1, 2); };
  const Bits ref = run_reference(make, 8);
  EXPECT_EQ(run_planned(make, devs, 8), ref);
  EXPECT_EQ(calls, 1);
  devs.sim(0).set_optimize_hook([](std::vector<Tensor*>& nodes) { std::reverse(nodes.begin(), nodes.end()); });
  auto tg = make();
  std::vector<std::unique_ptr<Buffer>> bufs;
  tg->place_weights(devs, bufs, 1);
  const GraphSnapshot before(tg->graph);
  const sched::ExecutionPlan p = sched::plan(tg->graph, devs.all);
  sched::Executor ex(devs.all);
  Status st = ex.alloc(tg->graph, p);
  EXPECT_EQ(st.kind(), ErrorKind::internal);
  EXPECT_NE(st.message().find("optimize_graph"), std::string::npos);
  EXPECT_EQ(p.splits[0].nodes[0].front()->op, OpKind::MUL_MAT) << "the plan's own list is not reordered";
}

// 220 random DAGs on 2-4 SIMs + CPU with random support masks, weight placement, capacities
// (some too small: a clean out_of_memory naming the device), pipeline copies and 50 us latency.
TEST(Executor, RandomDagsMatchTheCpuBitForBit) {
  setenv("LOOM_SIM_LATENCY_US", "50", 1);
  int ran = 0, oom = 0, splits = 0, copies = 0, span_copies = 0, reused = 0, fallbacks = 0, syncs = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (uint32_t seed = 1; seed <= 220; ++seed) {
    SCOPED_TRACE(seed);
    std::mt19937 rng(seed * 7 + 1);
    const int n_sims = 2 + (int)(rng() % 3);
    std::vector<size_t> caps;
    for (int i = 0; i < n_sims; ++i) caps.push_back(rng() % 10 == 0 ? 256 + rng() % 4096 : (size_t)64 << 20);
    Devices devs(caps);
    for (int i = 0; i < n_sims; ++i) {
      const uint32_t mask = rng();
      devs.sim(i).set_op_filter(
          [mask](const Tensor* t) { return t->op == OpKind::SET_ROWS || ((mask >> ((int)t->op % 32)) & 3) != 0; });
    }
    const int n_ops = 4 + (int)(seed % 25);
    // Reference: everything in host memory on one CPU thread.
    auto ref = make_random_dag(seed, n_ops);
    cpu::CpuDevice cpu(1);
    auto ref_buf = cpu::alloc_all(ref->ctx, cpu.buffer_type());
    fill_weights(*ref, seed);
    fill_inputs(*ref, seed);
    ThreadPool pool(1);
    cpu::compute_graph(ref->graph, pool);
    const Bits want = read_outputs(ref->outputs);
    // Planned run.
    auto dag = make_random_dag(seed, n_ops);
    std::vector<std::unique_ptr<Buffer>> bufs;
    Status st;
    for (Tensor* w : dag->weights)
      if (st) st = place(w, *devs.all[rng() % devs.all.size()], bufs);
    sched::PlanPolicy pol;
    pol.n_copies = 1 + (int)(rng() % 3);
    std::unique_ptr<sched::ExecutionPlan> p;
    std::unique_ptr<sched::Executor> ex;
    if (st) {
      p = std::make_unique<sched::ExecutionPlan>(sched::plan(dag->graph, devs.all, pol));
      ex = std::make_unique<sched::Executor>(devs.all);
      st = ex->alloc(dag->graph, *p);
    }
    if (!st) {
      EXPECT_EQ(st.kind(), ErrorKind::out_of_memory) << st.message();
      EXPECT_NE(st.message().find("SIM"), std::string::npos) << st.message();
      ++oom;
      continue;
    }
    splits += (int)p->splits.size();
    copies += (int)p->copies.size();
    syncs += p->n_waits();
    for (const sched::CopyPlan& c : p->copies) span_copies += !c.tensor->is_contiguous();
    for (const sched::Split& s : p->splits) reused += (int)s.reused.size();
    for (const sched::NodePlan& n : p->nodes) fallbacks += n.cause == sched::Cause::fallback;
    fill_inputs(*dag, seed);
    for (int rep = 0; rep < 2; ++rep) {
      fill_weights(*dag, seed);  // restores the cache
      st = ex->compute(dag->graph, *p);
      ASSERT_TRUE(st) << st.message() << "\n" << sched::describe(*p);
      ASSERT_EQ(read_outputs(dag->outputs), want) << "rep " << rep << "\n" << sched::describe(*p);
    }
    ++ran;
  }
  unsetenv("LOOM_SIM_LATENCY_US");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "random DAGs: %d ran, %d out of memory, %d splits, %d copies (%d of strided views, %d reused), "
      "%d syncs, %d fallbacks, %.1f s\n",
      ran, oom, splits, copies, span_copies, reused, syncs, fallbacks, secs);
  EXPECT_GE(ran, 150);
  EXPECT_GE(oom, 1);
  EXPECT_GE(copies, 4 * ran) << "the graphs should cross devices a lot";
  EXPECT_GE(span_copies, 5);
  EXPECT_GE(reused, 5);
}

}  // namespace
}  // namespace loom::test
