// Golden plans: describe(plan) of three small graphs compared with tests/sched/golden/*.txt so
// that any change in placement causes, splits, copies, memory or syncs shows up in review.
// Regenerate with LOOM_UPDATE_GOLDEN=1 after checking the new text by hand.
#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "loom/sched/describe.h"
#include "test_graphs.h"

namespace loom::test {
namespace {

void check_golden(const std::string& name, const std::string& text) {
  const std::string path = std::string(LOOM_SOURCE_DIR) + "/tests/sched/golden/" + name + ".txt";
  const char* update = std::getenv("LOOM_UPDATE_GOLDEN");
  if (update && *update && std::string(update) != "0") {
    std::ofstream(path) << text;
    GTEST_SKIP() << "wrote " << path;
  }
  std::ifstream in(path);
  ASSERT_TRUE(in) << "missing " << path << " (run with LOOM_UPDATE_GOLDEN=1)";
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(ss.str(), text) << "plan changed; if intended, regenerate with LOOM_UPDATE_GOLDEN=1";
}

// Layer 0 on SIM0, layer 1 on SIM1, output on the CPU; SIM1 lacks RMS_NORM.
TEST(Golden, TwoLayersWithFallback) {
  Devices devs(2);
  devs.sim(1).set_op_filter([](const Tensor* t) { return t->op != OpKind::RMS_NORM; });
  auto tg = two_layers(0, 1, 2);
  check_golden("two_layers", sched::describe(sched::plan(tg->graph, devs.all, tg->policy(devs))));
}

TEST(Golden, NoInputRace) {
  Devices devs(2);
  auto tg = no_input_race();
  check_golden("no_input_race", sched::describe(sched::plan(tg->graph, devs.all, tg->policy(devs))));
}

// A cache on SIM0 written twice and read from SIM1, two pipeline copies; SIM0 lacks SCALE.
TEST(Golden, CacheReadWriteWithPipeline) {
  Devices devs(2);
  devs.sim(0).set_op_filter([](const Tensor* t) { return t->op != OpKind::SCALE; });
  auto tg = cache_rw(0);
  sched::PlanPolicy pol = tg->policy(devs);
  pol.n_copies = 2;
  check_golden("cache_rw", sched::describe(sched::plan(tg->graph, devs.all, pol)));
}

}  // namespace
}  // namespace loom::test
