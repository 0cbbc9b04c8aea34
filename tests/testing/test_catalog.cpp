// The op-case catalog: size and coverage, every test case on the CPU (2 threads, fusion on)
// and on a simulated device against the single-threaded, node-by-node CPU reference, every grad
// case with a gradient rule, and the perf runner's accounting.
#include <gtest/gtest.h>

#include <set>

#include "loom/cpu/cpu.h"
#include "loom/graph/autograd.h"
#include "loom/graph/ops.h"
#include "loom/backend/registry.h"
#include "loom/sim/sim.h"
#include "loom/testing/op_case.h"
#include "loom/testing/runner.h"

namespace loom::testing {
namespace {

TEST(Catalog, HasThreeHundredTestCasesCoveringEveryOp) {
  const std::vector<const OpCase*> cases = cases_for(kModeTest);
  EXPECT_GE(cases.size(), 300u);
  std::set<std::string> ops, names;
  for (const OpCase* c : cases) {
    ops.insert(c->op);
    EXPECT_TRUE(names.insert(c->name()).second) << "duplicate case " << c->name();
  }
  for (int i = 1; i < kOpCount; ++i) {
    const OpInfo& info = op_info((OpKind)i);
    if (!info.is_view) {
      EXPECT_TRUE(ops.count(info.name)) << "no test case for " << info.name;
    }
  }
  EXPECT_TRUE(ops.count("RMS_NORM_MUL"));
  EXPECT_TRUE(ops.count("TOPK_MOE"));
  for (const OpCase* c : cases_for(kModePerf)) EXPECT_TRUE(names.insert("perf " + c->name()).second);
}

TEST(Catalog, MatrixLimitsFollowTheReference) {
  for (const OpCase& c : catalog()) {
    if (c.op == "MUL_MAT" || c.op == "MUL_MAT_ID" || c.op == "OUT_PROD" || c.op == "FLASH_ATTN_EXT") {
      EXPECT_DOUBLE_EQ(c.max_nmse, 5e-4) << c.name();
    } else if (c.op == "SOFT_MAX") {
      EXPECT_DOUBLE_EQ(c.max_nmse, 1e-6) << c.name();
    } else {
      EXPECT_DOUBLE_EQ(c.max_nmse, 1e-7) << c.name();
    }
  }
}

void expect_all_pass(Device& device) {
  int failed = 0;
  for (const OpCase* c : cases_for(kModeTest)) {
    const CaseResult r = run_test(*c, device);
    EXPECT_EQ(r.status, CaseStatus::ok) << r.name() << ": " << r.message;
    failed += r.status != CaseStatus::ok;
  }
  EXPECT_EQ(failed, 0);
}

TEST(Catalog, EveryTestCasePassesOnCpuAgainstTheReference) {
  cpu::CpuDevice cpu(2);
  expect_all_pass(cpu);
}

TEST(Catalog, EveryTestCasePassesOnASimulatedDevice) {
  DeviceSet set = make_devices("1x1GiB", 2);
  ASSERT_EQ(set.all.front()->name(), "SIM0");
  expect_all_pass(*set.all.front());
}

TEST(Catalog, GradModePassesForEveryOpWithARule) {
  cpu::CpuDevice cpu(2);
  int ran = 0;
  for (const OpCase* c : cases_for(kModeGrad)) {
    const CaseResult r = run_grad(*c, cpu);
    const bool has_rule = op_has_grad_rule(*op_from_name(c->op));
    if (has_rule) {
      EXPECT_EQ(r.status, CaseStatus::ok) << r.name() << ": " << r.message;
      ++ran;
    } else {
      EXPECT_EQ(r.status, CaseStatus::not_supported) << r.name();
    }
  }
  EXPECT_GE(ran, 40);
}

TEST(Catalog, GradModeFailsWhenNumericAndBackwardGradientsDisagree) {
  // log near 0 with a step of 0.1: the finite differences are far from 1/x, so the comparison fails.
  OpCase c;
  c.op = "LOG";
  c.params = "near_zero";
  c.modes = kModeGrad;
  c.build = [](CaseBuilder& b) { ops::log(b.ctx(), b.param({4, 3}, LeafInit::uniform(0.15, 0.2))); };
  cpu::CpuDevice cpu(1);
  const CaseResult r = run_grad(c, cpu);
  EXPECT_EQ(r.status, CaseStatus::fail);
  EXPECT_NE(r.message.find("MAA"), std::string::npos) << r.message;
  c.grad_eps = 0.001f;  // a small enough step agrees
  EXPECT_EQ(run_grad(c, cpu).status, CaseStatus::ok) << run_grad(c, cpu).message;
}

TEST(Catalog, PerfRunnerCountsFlopsAndBytes) {
  cpu::CpuDevice cpu(2);
  RunOptions opt;
  opt.perf_seconds = 0.01;
  OpCase mm;
  mm.op = "MUL_MAT";
  mm.params = "small";
  mm.build = [](CaseBuilder& b) { ops::mul_mat(b.ctx(), b.input(DType::F32, {64, 32}), b.input(DType::F32, {64, 8})); };
  CaseResult r = run_perf(mm, cpu, opt);
  ASSERT_EQ(r.status, CaseStatus::ok) << r.message;
  EXPECT_GT(r.runs, 0);
  EXPECT_GT(r.us_per_run, 0.0);
  EXPECT_DOUBLE_EQ(r.flops, 2.0 * 64 * 32 * 8);
  OpCase add;
  add.op = "ADD";
  add.params = "small";
  add.build = [](CaseBuilder& b) { ops::add(b.ctx(), b.input(DType::F32, {100, 3}), b.input(DType::F16, {100})); };
  r = run_perf(add, cpu, opt);
  ASSERT_EQ(r.status, CaseStatus::ok) << r.message;
  EXPECT_DOUBLE_EQ(r.flops, 0.0);
  EXPECT_DOUBLE_EQ(r.bytes, 300 * 4 + 100 * 2 + 300 * 4);  // two inputs read, one output written
}

TEST(Catalog, SupportAndTestModesNameTheMissingKernel) {
  DeviceSet set = make_devices("1x256MiB", 1);
  auto* sim = dynamic_cast<sim::SimDevice*>(set.all.front());
  ASSERT_TRUE(sim);
  sim->set_op_filter([](const Tensor* n) { return n->op != OpKind::MUL_MAT; });
  const OpCase* mm = cases_for(kModeTest)[0];
  for (const OpCase* c : cases_for(kModeTest))
    if (c->op == "MUL_MAT") mm = c;
  CaseResult r = run_support(*mm, *sim);
  EXPECT_EQ(r.status, CaseStatus::not_supported);
  EXPECT_NE(r.message.find("MUL_MAT"), std::string::npos) << r.message;
  EXPECT_EQ(run_test(*mm, *sim).status, CaseStatus::not_supported);
  EXPECT_EQ(run_support(*cases_for(kModeTest)[0], *sim).status, CaseStatus::ok);
}

}  // namespace
}  // namespace loom::testing
