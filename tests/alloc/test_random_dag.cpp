// plan_graph on hundreds of seeded random DAGs: the checker's invariants hold for several buffer
// types with and without in place, the plan is deterministic, and running the graph with the
// plan applied gives the same bits as with the naive one-tensor-per-slot allocation (by the
// reference interpreter always, by the CPU kernels where they exist).
#include <gtest/gtest.h>

#include "alloc_test_util.h"
#include "loom/alloc/check.h"

namespace loom::test {
namespace {

using alloc::MemoryPlan;

constexpr uint32_t kSeeds = 250;

int n_ops_for(uint32_t seed) { return 4 + (int)(seed % 37); }

// Outputs of the DAG for `seed` run by `run` with every tensor given its own bytes (alloc_all).
std::vector<std::vector<uint32_t>> run_naive(uint32_t seed, void (*run)(const Graph&)) {
  auto dag = make_random_dag(seed, n_ops_for(seed));
  cpu::CpuDevice dev(1);
  auto buf = cpu::alloc_all(dag->ctx, dev.buffer_type());
  fill_inputs(*dag, seed);
  run(dag->graph);
  std::vector<std::vector<uint32_t>> out;
  for (Tensor* t : dag->outputs) out.push_back(bits(t));
  return out;
}

// The same with plan_graph's plan applied to a buffer first filled with garbage.
std::vector<std::vector<uint32_t>> run_planned(uint32_t seed, void (*run)(const Graph&), const BufferType& bt,
                                               const alloc::PlanOptions& opt, size_t* total = nullptr) {
  auto dag = make_random_dag(seed, n_ops_for(seed));
  MemoryPlan plan = alloc::plan_graph(dag->graph, bt, opt);
  std::unique_ptr<Buffer> buf;
  EXPECT_TRUE(bt.alloc(plan.total, buf));
  buf->clear(0xA5);
  Status st = alloc::apply_plan(plan, *buf);
  EXPECT_TRUE(st) << st.message();
  fill_inputs(*dag, seed);
  run(dag->graph);
  if (total) *total = plan.total;
  std::vector<std::vector<uint32_t>> out;
  for (Tensor* t : dag->outputs) out.push_back(bits(t));
  return out;
}

void run_interpreter(const Graph& g) { interpret(g); }

void run_cpu1(const Graph& g) {
  static ThreadPool pool(1);
  cpu::compute_graph(g, pool);
}

// Two threads (per-node barriers are slow on a loaded machine, so used on a few seeds only).
void run_cpu2(const Graph& g) {
  static ThreadPool pool(2);
  cpu::compute_graph(g, pool);
}

struct Stats {
  int inplace = 0;
  int reused = 0;  // placements sharing an offset with an earlier, dead placement
};

void count(const MemoryPlan& p, Stats& s) {
  for (size_t i = 0; i < p.placements.size(); ++i)
    for (size_t j = i; j-- > 0;)  // the latest earlier placement at the same offset
      if (p.placements[j].offset == p.placements[i].offset) {
        ++s.reused;
        if (p.placements[i].tensor->src[0] == p.placements[j].tensor) ++s.inplace;
        break;
      }
}

TEST(RandomDag, PlansSatisfyInvariants) {
  const TestBufferType types[] = {TestBufferType(64), TestBufferType(256),
                                  TestBufferType(32, SIZE_MAX, Expand::leaves, 40)};
  Stats stats;
  for (uint32_t seed = 0; seed < kSeeds; ++seed) {
    auto dag = make_random_dag(seed, n_ops_for(seed));
    for (const TestBufferType& bt : types)
      for (bool inplace : {true, false}) {
        const alloc::PlanOptions opt{.allow_inplace = inplace};
        MemoryPlan p = alloc::plan_graph(dag->graph, bt, opt);
        Status st = alloc::check_plan(dag->graph, bt, p, opt);
        ASSERT_TRUE(st) << "seed " << seed << ": " << st.message();
        size_t sum = 0;
        for (const auto& pl : p.placements) sum += (pl.size + bt.alignment() - 1) / bt.alignment() * bt.alignment();
        EXPECT_LE(p.total, sum) << "seed " << seed;
        MemoryPlan again = alloc::plan_graph(dag->graph, bt, opt);
        ASSERT_EQ(again.placements.size(), p.placements.size());
        for (size_t i = 0; i < p.placements.size(); ++i)
          ASSERT_EQ(again.placements[i].offset, p.placements[i].offset) << "seed " << seed;
        if (inplace && &bt == &types[0]) count(p, stats);
      }
  }
  // The generator must exercise what is being tested.
  std::printf("in place %d, reused %d\n", stats.inplace, stats.reused);
  EXPECT_GT(stats.inplace, 100);
  EXPECT_GT(stats.reused, 2 * stats.inplace);
}

TEST(RandomDag, PlannedRunMatchesNaiveBitForBit) {
  const TestBufferType bt(64);
  size_t planned_bytes = 0, naive_bytes = 0;
  for (uint32_t seed = 0; seed < kSeeds; ++seed) {
    const auto want = run_naive(seed, run_interpreter);
    for (bool inplace : {true, false}) {
      size_t total = 0;
      const auto got = run_planned(seed, run_interpreter, bt, {.allow_inplace = inplace}, &total);
      ASSERT_EQ(got.size(), want.size());
      for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "seed " << seed << " output " << i;
      if (inplace) planned_bytes += total;
    }
    auto dag = make_random_dag(seed, n_ops_for(seed));
    for (Tensor& t : dag->ctx.tensors())
      if (!t.view_src) naive_bytes += (t.nbytes() + 63) / 64 * 64;
  }
  EXPECT_LT(planned_bytes, naive_bytes);
}

// The comparison above can fail: a plan that puts a node over a source still needed is caught.
TEST(RandomDag, ComparisonDetectsABrokenPlan) {
  Context c;
  Tensor* x = c.new_tensor(DType::F32, {16, 4}, "x");
  x->flags |= kFlagInput;
  Tensor* a = ops::scale(c, x, 3.0f, 1.0f);
  Tensor* b = ops::silu(c, a);
  Tensor* e = ops::add(c, b, a);
  e->flags |= kFlagOutput;
  Graph g;
  g.build_forward(e);
  const TestBufferType bt(64);
  MemoryPlan plan = alloc::plan_graph(g, bt);
  auto result = [&](const MemoryPlan& p) {
    std::unique_ptr<Buffer> buf;
    EXPECT_TRUE(bt.alloc(p.total, buf));
    for (Tensor& t : c.tensors()) t.data = nullptr, t.buffer = nullptr;
    EXPECT_TRUE(alloc::apply_plan(p, *buf));
    for (int i = 0; i < 64; ++i) static_cast<float*>(x->data)[i] = 0.1f * (float)i - 2.0f;
    interpret(g);
    return bits(e);
  };
  const auto good = result(plan);
  for (auto& pl : plan.placements)  // b over a, which e still reads
    if (pl.tensor == b) pl.offset = plan.placements[1].offset;
  ASSERT_EQ(plan.placements[1].tensor, a);
  EXPECT_FALSE(alloc::check_plan(g, bt, plan));
  EXPECT_NE(result(plan), good);
}

TEST(RandomDag, CpuKernelsWithPlanMatchNaive) {
  const TestBufferType bt(64);
  int ran = 0;
  for (uint32_t seed = 0; seed < kSeeds; ++seed) {
    auto dag = make_random_dag(seed, n_ops_for(seed));
    bool supported = true;
    for (Tensor* n : dag->graph.nodes()) supported = supported && cpu::supports(n);
    if (!supported) continue;
    ++ran;
    auto* run = seed < 20 ? run_cpu2 : run_cpu1;
    const auto want = run_naive(seed, run);
    const auto got = run_planned(seed, run, bt, {});
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "seed " << seed << " output " << i;
  }
  if (ran == 0) GTEST_SKIP() << "the CPU kernels for these random graphs are not written yet";
  std::printf("ran %d of %u random graphs on the CPU kernels\n", ran, kSeeds);
}

}  // namespace
}  // namespace loom::test
