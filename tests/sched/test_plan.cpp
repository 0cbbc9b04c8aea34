// Planner unit tests on synthetic graphs (plan only, nothing allocated): every node has a
// device and a cause; each split's inputs are exactly the tensors produced or stored elsewhere;
// no redundant copies (and a fresh copy after the source is written); views follow their
// source; op-support fallback; the caller's graph is untouched; pipeline rings; split uids;
// and the sync edge for a split without inputs that reuses memory a copy still reads.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <set>

#include "loom/sched/describe.h"
#include "test_graphs.h"

namespace loom::test {
namespace {

using sched::Cause;
using sched::ExecutionPlan;

int node_index(const ExecutionPlan& p, const std::string& name) {
  for (size_t i = 0; i < p.nodes.size(); ++i)
    if (p.nodes[i].tensor->name == name) return (int)i;
  ADD_FAILURE() << "no node " << name;
  return 0;
}
const sched::NodePlan& node(const ExecutionPlan& p, const std::string& name) {
  return p.nodes[(size_t)node_index(p, name)];
}

// Where root r's bytes are, by the test's own account: a node's device, a weight's device as
// placed by the test, inputs in host memory (the last device, the CPU).
int home_of(const ExecutionPlan& p, const Tensor* r, const std::map<const Tensor*, int>& weight_dev) {
  for (const sched::NodePlan& n : p.nodes)
    if (n.tensor == r) return n.device;
  if (auto it = weight_dev.find(r); it != weight_dev.end()) return it->second;
  return (int)p.devices.size() - 1;
}

// Checks the invariants every plan must satisfy, computed independently of the planner.
void check_invariants(const ExecutionPlan& p, const Graph& g, const std::map<const Tensor*, int>& weight_dev) {
  ASSERT_EQ(p.nodes.size(), g.n_nodes());
  const int n_dev = (int)p.devices.size();
  int covered = 0;
  for (const sched::Split& s : p.splits) {
    EXPECT_EQ(s.first_node, covered) << "splits must tile the node list";
    covered += s.n_nodes;
    // Expected inputs: sources of computing nodes whose root lives on another device (no device
    // in these tests reads another's memory; the CPU reads host memory, where inputs live).
    std::set<const Tensor*> expect, got;
    for (int i = s.first_node; i < s.first_node + s.n_nodes; ++i) {
      const Tensor* t = g.node((size_t)i);
      ASSERT_GE(p.nodes[(size_t)i].device, 0);
      ASSERT_LT(p.nodes[(size_t)i].device, n_dev);
      EXPECT_EQ(p.nodes[(size_t)i].split, s.id);
      if (op_info(t->op).is_view) continue;
      EXPECT_EQ(p.nodes[(size_t)i].device, s.device) << t->name;
      EXPECT_TRUE(p.devices[(size_t)s.device]->supports_op(t)) << t->name;
      for (const Tensor* src : t->src)
        if (src && home_of(p, src->view_src ? src->view_src : src, weight_dev) != s.device) expect.insert(src);
    }
    for (int c : s.inputs) {
      EXPECT_TRUE(got.insert(p.copies[(size_t)c].tensor).second) << "copied twice in one split";
      EXPECT_EQ(p.copies[(size_t)c].to, s.device);
      EXPECT_EQ(p.copies[(size_t)c].split, s.id);
    }
    for (int c : s.reused) {
      EXPECT_TRUE(got.insert(p.copies[(size_t)c].tensor).second) << "reused and copied";
      EXPECT_EQ(p.copies[(size_t)c].to, s.device);
      EXPECT_LT(p.copies[(size_t)c].split, s.id);
    }
    EXPECT_EQ(got, expect) << "split " << s.id;
  }
  EXPECT_EQ(covered, (int)g.n_nodes());
  // Views go with their root.
  for (size_t i = 0; i < g.n_nodes(); ++i) {
    const Tensor* t = g.node(i);
    if (t->view_src) {
      EXPECT_EQ(p.nodes[i].device, home_of(p, t->view_src, weight_dev)) << t->name;
    }
  }
}

std::map<const Tensor*, int> weight_devices(const TestGraph& tg) {
  std::map<const Tensor*, int> m;
  for (auto& [w, d] : tg.weights) m[w] = d;
  return m;
}

TEST(Plan, TwoLayersOnTwoDevicesAndOutputOnCpu) {
  Devices devs(2);
  auto tg = two_layers(0, 1, 2);
  const ExecutionPlan p = sched::plan(tg->graph, devs.all, tg->policy(devs));
  check_invariants(p, tg->graph, weight_devices(*tg));
  ASSERT_EQ(p.splits.size(), 3u);
  EXPECT_EQ(p.splits[0].device, 0);
  EXPECT_EQ(p.splits[1].device, 1);
  EXPECT_EQ(p.splits[2].device, 2);
  EXPECT_EQ(node(p, "mm-0").cause, Cause::weight);
  EXPECT_EQ(node(p, "norm-0").cause, Cause::neighbour_down);
  EXPECT_EQ(node(p, "scaled-0").cause, Cause::weight);
  EXPECT_EQ(node(p, "resid-0").cause, Cause::neighbour_down);
  EXPECT_EQ(node(p, "logits").cause, Cause::weight);
  // Split 0 copies the input from the CPU; split 1 copies resid-0 from SIM0; split 2 resid-1.
  ASSERT_EQ(p.splits[0].inputs.size(), 1u);
  EXPECT_EQ(p.copies[(size_t)p.splits[0].inputs[0]].tensor->name, "inp");
  EXPECT_EQ(p.copies[(size_t)p.splits[0].inputs[0]].from, 2);
  ASSERT_EQ(p.splits[1].inputs.size(), 1u);
  EXPECT_EQ(p.copies[(size_t)p.splits[1].inputs[0]].tensor->name, "resid-0");
  EXPECT_EQ(p.copies[(size_t)p.splits[1].inputs[0]].bytes, 8u * 3 * 4);
  EXPECT_EQ(p.copy_bytes(), 3u * 8 * 3 * 4);
}

TEST(Plan, NothingIsAllocatedAndTheGraphIsUntouched) {
  Devices devs(2, 1 << 20);
  auto tg = cache_rw(0);
  std::vector<std::unique_ptr<Buffer>> bufs;
  tg->place_weights(devs, bufs, 1);  // real memory this time: pinned nodes come from buffers
  const size_t used0 = devs.sim(0).used(), used1 = devs.sim(1).used();
  const GraphSnapshot before(tg->graph);
  for (int n_copies : {1, 3}) {
    sched::PlanPolicy pol;
    pol.n_copies = n_copies;
    const ExecutionPlan p = sched::plan(tg->graph, devs.all, pol);
    check_invariants(p, tg->graph, weight_devices(*tg));
    EXPECT_GT(p.compute_bytes(0), 0u);
  }
  EXPECT_TRUE(before.same_as(tg->graph));
  EXPECT_EQ(devs.sim(0).used(), used0);
  EXPECT_EQ(devs.sim(1).used(), used1);
}

TEST(Plan, CopiesAreReusedUntilTheSourceIsWritten) {
  Devices devs(2);
  auto tg = cache_rw(0);
  const ExecutionPlan p = sched::plan(tg->graph, devs.all, tg->policy(devs));
  check_invariants(p, tg->graph, weight_devices(*tg));
  EXPECT_EQ(node(p, "store0").cause, Cause::pinned);
  EXPECT_EQ(node(p, "cache-view0").cause, Cause::pinned);
  EXPECT_EQ(node(p, "read0").device, 1);
  std::map<std::pair<std::string, int>, int> copies;  // (tensor, device) -> times copied
  for (const sched::CopyPlan& c : p.copies) ++copies[{c.tensor->name, c.to}];
  EXPECT_EQ((copies[{"cache-view0", 1}]), 2) << "once for read0 (reused by read0-again), again after store1";
  EXPECT_EQ((copies[{"inp", 0}]), 1) << "store0 and z share one copy";
  const int again = node(p, "read0-again").split;
  ASSERT_EQ(p.splits[(size_t)again].reused.size(), 1u);
  EXPECT_EQ(p.copies[(size_t)p.splits[(size_t)again].reused[0]].tensor->name, "cache-view0");
  for (int c : p.splits[(size_t)again].inputs) EXPECT_NE(p.copies[(size_t)c].tensor->name, "cache-view0");
  const int r1 = node(p, "read1").split;
  ASSERT_EQ(p.splits[(size_t)r1].inputs.size(), 1u);
  EXPECT_EQ(p.copies[(size_t)p.splits[(size_t)r1].inputs[0]].tensor->name, "cache-view0");
}

TEST(Plan, UnsupportedOpsFallBackToTheNextDevice) {
  Devices devs(3);
  devs.sim(0).set_op_filter([](const Tensor* t) { return t->op != OpKind::RMS_NORM; });
  devs.sim(1).set_op_filter([](const Tensor* t) { return t->op != OpKind::RMS_NORM && t->op != OpKind::MUL; });
  auto tg = two_layers(0, 1, 3);
  const ExecutionPlan p = sched::plan(tg->graph, devs.all, tg->policy(devs));
  check_invariants(p, tg->graph, weight_devices(*tg));
  // No device near norm-0 runs RMS_NORM: the first device in order that does.
  EXPECT_EQ(node(p, "norm-0").device, 2);
  EXPECT_EQ(node(p, "norm-0").cause, Cause::fallback);
  EXPECT_EQ(node(p, "norm-1").device, 2);
  // scaled-1 reads its weight on SIM1, which cannot MUL: the next device in order, SIM2.
  EXPECT_EQ(node(p, "scaled-1").device, 2);
  EXPECT_EQ(node(p, "scaled-1").cause, Cause::fallback);
  EXPECT_EQ(node(p, "mm-1").device, 1);
  EXPECT_EQ(node(p, "scaled-0").device, 0);
  EXPECT_EQ(node(p, "scaled-0").cause, Cause::weight);
}

TEST(Plan, NoDeviceCanRunANodeIsUnsupported) {
  sim::SimDevice sim0(0, 1 << 20);
  sim0.set_op_filter([](const Tensor* t) { return t->op != OpKind::SILU; });
  Device* devices[] = {&sim0};
  Context c;
  Tensor* w = c.new_tensor(DType::F32, {4}, "w");
  Graph g;
  g.build_forward(named(ops::silu(c, w), "act"));
  sched::PlanPolicy pol;
  pol.leaf_devices[w] = &sim0;
  try {
    sched::plan(g, devices, pol);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::unsupported);
    EXPECT_NE(std::string(e.what()).find("SILU 'act'"), std::string::npos) << e.what();
  }
  // A graph input without memory and no host device to hold it is a usage error.
  Tensor* x = c.new_tensor(DType::F32, {4}, "x");
  Graph g2;
  g2.build_forward(ops::scale(c, x, 2.0f));
  try {
    sched::plan(g2, devices);
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::usage);
    EXPECT_NE(std::string(e.what()).find("'x'"), std::string::npos) << e.what();
  }
}

TEST(Plan, PolicyPinsWin) {
  Devices devs(2);
  auto tg = two_layers(0, 0, 0);
  sched::PlanPolicy pol = tg->policy(devs);
  Tensor* norm1 = tg->ctx.find("norm-1");
  pol.pins[norm1] = devs.all[1];
  const ExecutionPlan p = sched::plan(tg->graph, devs.all, pol);
  check_invariants(p, tg->graph, weight_devices(*tg));
  EXPECT_EQ(node(p, "norm-1").device, 1);
  EXPECT_EQ(node(p, "norm-1").cause, Cause::pinned);
}

TEST(Plan, OffloadMovesHostWeightOpsToTheAskingDevice) {
  Devices devs(2);
  devs.sim(1).set_offload_filter([](const Tensor* t) { return t->op == OpKind::MUL_MAT; });
  auto tg = two_layers(2, 2, 2);  // every weight in host memory
  const ExecutionPlan p = sched::plan(tg->graph, devs.all, tg->policy(devs));
  check_invariants(p, tg->graph, weight_devices(*tg));
  EXPECT_EQ(node(p, "mm-0").device, 1);
  EXPECT_EQ(node(p, "mm-0").cause, Cause::offload);
  EXPECT_EQ(node(p, "scaled-0").device, 2);
  EXPECT_EQ(node(p, "scaled-0").cause, Cause::weight);
  sched::PlanPolicy no = tg->policy(devs);
  no.offload = false;
  const ExecutionPlan q = sched::plan(tg->graph, devs.all, no);
  EXPECT_EQ(node(q, "mm-0").device, 2);
  EXPECT_EQ(q.splits.size(), 1u);
}

// A llama-70b-like graph (80 layers, 4 devices) plans in well under a second in a release
// build, allocating nothing (weights placed by leaf_devices).
TEST(Plan, LargeGraphPlansQuickly) {
  Devices devs(4, 24ull << 30);
  Context c;
  Graph g;
  sched::PlanPolicy pol;
  const int64_t E = 8192, T = 512, F = 28672;
  Tensor* x = c.new_tensor(DType::F32, {E, T}, "inp");
  x->flags |= kFlagInput;
  auto weight = [&](std::initializer_list<int64_t> ne, std::string name, int dev) {
    Tensor* w = c.new_tensor(ne.size() == 1 ? DType::F32 : DType::Q4_0, ne, std::move(name));
    pol.leaf_devices[w] = devs.all[(size_t)dev];
    return w;
  };
  for (int l = 0; l < 80; ++l) {
    const int d = l * 4 / 80;
    Tensor* h = ops::rms_norm(c, x, 1e-5f);
    h = ops::mul(c, h, weight({E}, fmt::format("blk.{}.attn_norm", l), d));
    Tensor* q = ops::mul_mat(c, weight({E, E}, fmt::format("blk.{}.attn_q", l), d), h);
    x = ops::add(c, x, ops::mul_mat(c, weight({E, E}, fmt::format("blk.{}.attn_output", l), d), q));
    h = ops::mul(c, ops::rms_norm(c, x, 1e-5f), weight({E}, fmt::format("blk.{}.ffn_norm", l), d));
    Tensor* up = ops::mul_mat(c, weight({E, F}, fmt::format("blk.{}.ffn_up", l), d), h);
    Tensor* gate = ops::silu(c, ops::mul_mat(c, weight({E, F}, fmt::format("blk.{}.ffn_gate", l), d), h));
    x = ops::add(c, x, ops::mul_mat(c, weight({F, E}, fmt::format("blk.{}.ffn_down", l), d), ops::mul(c, up, gate)));
  }
  Tensor* out = ops::mul_mat(c, weight({E, 128256}, "output", 3), x);
  out->flags |= kFlagOutput;
  g.build_forward(out);
  const auto t0 = std::chrono::steady_clock::now();
  const ExecutionPlan p = sched::plan(g, devs.all, pol);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%zu nodes, %zu splits planned in %.1f ms\n", g.n_nodes(), p.splits.size(), ms);
  EXPECT_EQ(p.splits.size(), 4u);
  EXPECT_TRUE(p.plan_only);
  EXPECT_LT(ms, 20000.0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(devs.sim(i).used(), 0u);
}

TEST(Plan, GraphWithoutWeightsRunsOnTheFirstDevice) {
  Devices devs(2);
  Context c;
  Tensor* x = c.new_tensor(DType::F32, {8}, "x");
  x->flags |= kFlagInput;
  Tensor* y = named(ops::silu(c, named(ops::scale(c, x, 2.0f), "s")), "y");
  Graph g;
  g.build_forward(y);
  const ExecutionPlan p = sched::plan(g, devs.all);
  EXPECT_EQ(p.nodes[0].device, 0);
  EXPECT_EQ(p.nodes[0].cause, Cause::fallback);
  EXPECT_EQ(p.leafs[0].cause, Cause::input);
  EXPECT_EQ(p.leafs[0].device, 2);
}

TEST(Plan, PipelineRingsHaveDistinctMemory) {
  Devices devs(2);
  auto tg = two_layers(0, 1, 1);
  sched::PlanPolicy pol = tg->policy(devs);
  pol.n_copies = 3;
  const ExecutionPlan p = sched::plan(tg->graph, devs.all, pol);
  check_invariants(p, tg->graph, weight_devices(*tg));
  std::map<const Tensor*, size_t> offset;
  for (const auto& dp : p.device_plans)
    for (const auto& pl : dp.memory.placements) offset[pl.tensor] = pl.offset;
  for (const sched::CopyPlan& c : p.copies) {
    ASSERT_EQ(c.ring.size(), 3u);
    std::set<size_t> offs;
    for (Tensor* r : c.ring) {
      ASSERT_TRUE(offset.count(r)) << r->name;
      offs.insert(offset[r]);
    }
    EXPECT_EQ(offs.size(), 3u) << c.tensor->name;
  }
  for (const sched::Split& s : p.splits) {
    ASSERT_EQ(s.nodes.size(), 3u);
    if (!s.inputs.empty()) {
      EXPECT_NE(s.nodes[0], s.nodes[1]);
    }
    for (size_t k = 0; k < s.nodes[0].size(); ++k) EXPECT_EQ(s.nodes[0][k]->op, s.nodes[2][k]->op);
  }
  // Copy 1 of split 1's mul_mat reads ring entry 1.
  const Tensor* mm1 = p.splits[1].nodes[1][0];
  EXPECT_EQ(mm1->src[1], p.copies[(size_t)p.splits[1].inputs[0]].ring[1]);
}

TEST(Plan, SplitUidsDeriveFromTheGraphUid) {
  Devices devs(2);
  auto tg = two_layers(0, 1, 2);
  const ExecutionPlan a = sched::plan(tg->graph, devs.all, tg->policy(devs));
  const ExecutionPlan b = sched::plan(tg->graph, devs.all, tg->policy(devs));
  auto tg2 = two_layers(0, 1, 2);
  const ExecutionPlan c = sched::plan(tg2->graph, devs.all, tg2->policy(devs));
  std::set<uint64_t> uids;
  for (size_t k = 0; k < a.splits.size(); ++k) {
    EXPECT_EQ(a.splits[k].uid, b.splits[k].uid);
    EXPECT_NE(a.splits[k].uid, c.splits[k].uid);
    uids.insert(a.splits[k].uid);
  }
  EXPECT_EQ(uids.size(), a.splits.size());
  EXPECT_NE(a.uid, b.uid);
}

// The upstream race: split 2 (SIM0, no inputs) reuses the bytes of `a`, which the copy to SIM1
// (on SIM1's stream) reads; split 2 must wait for that copy.
TEST(Plan, SplitWithoutInputsWaitsForACopyReadingItsMemory) {
  Devices devs(2);
  auto tg = no_input_race();
  const ExecutionPlan p = sched::plan(tg->graph, devs.all, tg->policy(devs));
  check_invariants(p, tg->graph, weight_devices(*tg));
  const int split_c = node(p, "c1").split;
  ASSERT_EQ(p.splits.size(), 3u);
  ASSERT_EQ(split_c, 2);
  EXPECT_TRUE(p.splits[2].inputs.empty());
  // The premise: c1 takes a's bytes in SIM0's compute buffer.
  const Tensor* a_m = p.splits[0].nodes[0].back();
  const Tensor* c_m = p.splits[2].nodes[0].front();
  ASSERT_EQ(a_m->name, "a");
  ASSERT_EQ(c_m->name, "c1");
  std::map<const Tensor*, size_t> offset;
  for (const auto& pl : p.device_plans[0].memory.placements) offset[pl.tensor] = pl.offset;
  ASSERT_EQ(offset.at(a_m), offset.at(c_m)) << "the allocator no longer reuses a's bytes for c1";
  int copy_job = -1, c_job = -1;
  for (size_t j = 0; j < p.jobs.size(); ++j) {
    const sched::Job& job = p.jobs[j];
    if (job.kind == sched::JobKind::copy && p.copies[(size_t)job.index].tensor->name == "a") copy_job = (int)j;
    if (job.kind == sched::JobKind::compute && job.index == 2) c_job = (int)j;
  }
  ASSERT_GE(copy_job, 0);
  ASSERT_GE(c_job, 0);
  EXPECT_EQ(p.jobs[(size_t)c_job].waits, std::vector<int>{copy_job}) << sched::describe(p);
  EXPECT_TRUE(p.jobs[(size_t)copy_job].signals);
}

// Random DAGs, random support masks: the invariants hold for every plan.
TEST(Plan, RandomGraphsKeepTheInvariants) {
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    std::mt19937 rng(seed);
    const int n_sims = 2 + (int)(rng() % 3);
    Devices devs(n_sims);
    for (int i = 0; i < n_sims; ++i) {
      const uint32_t mask = rng();
      devs.sim(i).set_op_filter(
          [mask](const Tensor* t) { return t->op == OpKind::SET_ROWS || ((mask >> ((int)t->op % 32)) & 3) != 0; });
    }
    auto dag = make_random_dag(seed, 4 + (int)(seed % 30));
    sched::PlanPolicy pol;
    std::map<const Tensor*, int> wdev;
    for (Tensor* w : dag->weights) {
      const int d = (int)(rng() % (uint32_t)devs.all.size());
      pol.leaf_devices[w] = devs.all[(size_t)d];
      wdev[w] = d;
    }
    pol.n_copies = 1 + (int)(rng() % 3);
    const GraphSnapshot before(dag->graph);
    const ExecutionPlan p = sched::plan(dag->graph, devs.all, pol);
    SCOPED_TRACE(seed);
    check_invariants(p, dag->graph, wdev);
    EXPECT_TRUE(before.same_as(dag->graph));
    const nlohmann::json j = sched::to_json(p);
    EXPECT_EQ(j["totals"]["n_splits"], p.splits.size());
    EXPECT_EQ(j["nodes"].size(), dag->graph.n_nodes());
    if (HasFailure()) break;
  }
}

TEST(Plan, JsonAndDotShapes) {
  Devices devs(2);
  auto tg = two_layers(0, 1, 2);
  const ExecutionPlan p = sched::plan(tg->graph, devs.all, tg->policy(devs));
  const nlohmann::json j = sched::to_json(p);
  EXPECT_EQ(j["devices"].size(), 3u);
  EXPECT_EQ(j["splits"][1]["device"], "SIM1");
  EXPECT_EQ(j["splits"][1]["inputs"][0]["tensor"], "resid-0");
  EXPECT_EQ(j["splits"][1]["inputs"][0]["from"], "SIM0");
  EXPECT_EQ(j["splits"][1]["inputs"][0]["bytes"], 96);
  EXPECT_EQ(j["nodes"][0]["name"], "mm-0");
  EXPECT_EQ(j["nodes"][0]["op"], "MUL_MAT");
  EXPECT_EQ(j["nodes"][0]["cause"], "weight");
  EXPECT_EQ(j["totals"]["n_copies"], 3);
  EXPECT_EQ(j["totals"]["copy_bytes"], 288);
  const std::string dot = sched::to_dot(p);
  EXPECT_NE(dot.find("subgraph cluster_1"), std::string::npos);
  EXPECT_NE(dot.find("style=dashed"), std::string::npos);
  EXPECT_EQ(sched::format_bytes(16 * 1024), "16.0 KiB");
  EXPECT_EQ(sched::format_bytes(512), "512 B");
}

}  // namespace
}  // namespace loom::test
