// The MoE phase of the fit planner on synthetic costs: experts leave for the CPU, come back
// layer by layer while the device has room (as many as brute force finds), then one partial
// layer; and the -ot rules that express it.
#include <gtest/gtest.h>

#include <functional>
#include <regex>

#include "loom/fit/planner.h"
#include "loom/fit/probe.h"
#include "synthetic.h"

namespace loom::fit {
namespace {

using test::Synth;

TEST(FitMoePlanner, ExpertsComeBackAsFarAsBruteForceAllows) {
  std::mt19937_64 rng(31337);
  int moved = 0, partial_layers = 0, n_cases = 0;
  for (int i = 0; i < 400 && n_cases < 120; ++i) {
    Problem pb;
    Synth s;
    test::random_case(rng, pb, s, /*moe=*/true);
    if (pb.layer_devices.empty()) continue;
    ++n_cases;
    const PlanResult r = plan_fit(pb, std::cref(s));
    SCOPED_TRACE(testing::Message() << "case " << i);
    if (r.status == FitStatus::no_fit) {
      EXPECT_FALSE(r.shortfall.empty());
      continue;
    }
    ASSERT_TRUE(test::fits_all(pb, s(r.config)));
    if (r.config.experts.empty()) continue;  // everything fitted with the experts in place
    ++moved;
    ASSERT_EQ((int64_t)r.config.experts.size(), pb.n_layer);
    EXPECT_EQ(r.config.n_ctx,
              std::min(pb.n_ctx_min, pb.given.n_ctx) == pb.given.n_ctx || pb.fixed_ctx ? pb.given.n_ctx : pb.n_ctx_min)
        << "experts move only at the smallest context";
    const bool dense_full = r.config.n_gpu_layers < 0;
    // Per device: its layers' experts in place for a prefix, then at most one partial layer.
    for (int d : pb.layer_devices) {
      std::vector<size_t> layers;
      for (size_t l = 0; l < r.probe.layer_device.size(); ++l)
        if (r.probe.layer_device[l] == d) layers.push_back(l);
      size_t j = 0;
      while (j < layers.size() && r.config.experts[layers[j]] == ExpertMode::with_layer) ++j;
      for (size_t k = j + 1; k < layers.size(); ++k) EXPECT_EQ((int)r.config.experts[layers[k]], (int)ExpertMode::cpu);
      if (!dense_full) continue;  // a partial dense fill leaves no room worth a search
      // brute force on this device alone: the most layers with their experts, then the best partial layer
      auto device_fits = [&](size_t n_with, ExpertMode partial) {
        Config c = r.config;
        for (size_t k = 0; k < layers.size(); ++k)
          c.experts[layers[k]] = k < n_with ? ExpertMode::with_layer : k == n_with ? partial : ExpertMode::cpu;
        return overshoot(pb.devices[(size_t)d], s(c).usage[(size_t)d]) == 0;
      };
      size_t best = 0;
      for (size_t n = layers.size(); n > 0; --n)
        if (device_fits(n, ExpertMode::cpu)) {
          best = n;
          break;
        }
      EXPECT_EQ(j, best) << "device " << d;
      if (best < layers.size()) {
        ExpertMode want = ExpertMode::cpu;
        if (device_fits(best, ExpertMode::keep_up_gate))
          want = ExpertMode::keep_up_gate;
        else if (device_fits(best, ExpertMode::keep_up))
          want = ExpertMode::keep_up;
        EXPECT_EQ((int)r.config.experts[layers[best]], (int)want);
        partial_layers += want != ExpertMode::cpu;
      }
    }
  }
  EXPECT_GE(n_cases, 100);
  EXPECT_GT(moved, 20);
  EXPECT_GT(partial_layers, 3);
}

// The host cannot hold every expert, only the few that do not fit the device: the host is
// checked once experts came back, not while they all sit on the CPU.
TEST(FitMoePlanner, HostHoldsOnlyTheExpertsLeftOver) {
  const size_t MiB = 1 << 20;
  Synth s;
  s.n_layer = 8;
  s.w_layer = 100.0 * MiB;
  for (double& w : s.w_experts) w = 100.0 * MiB;
  s.w_output = 50.0 * MiB;
  s.w_embd = 10.0 * MiB;
  s.host_compute = 10.0 * MiB;
  s.gpu = {test::SynthDevice{50.0 * MiB, 0, 1 << 30, 0}};
  Problem pb;
  pb.n_layer = 8;
  pb.moe = true;
  pb.devices = {DeviceBudget{"SIM0", false, true, 2450 * MiB, 2450 * MiB, 0, 0},
                DeviceBudget{"CPU", true, true, 1000 * MiB, 1000 * MiB, 0, 0}};
  pb.layer_devices = {0};
  pb.given = Config{512, -1, {2450.0f}, {}};
  pb.n_ctx_min = 512;
  const PlanResult r = plan_fit(pb, std::cref(s));
  ASSERT_EQ((int)r.status, (int)FitStatus::fit);
  ASSERT_EQ(r.config.experts.size(), 8u);
  // dense 850 + compute 50 leave 1550 MiB: 5 layers of experts (1500) and up+gate of a 6th (200 > 50: no)
  int with = 0;
  for (ExpertMode m : r.config.experts) with += m == ExpertMode::with_layer;
  EXPECT_EQ(with, 5);
  EXPECT_TRUE(test::fits_all(pb, s(r.config)));
}

TEST(FitMoePlanner, FixedOverridesAreNotTouched) {
  std::mt19937_64 rng(5);
  for (int i = 0; i < 100; ++i) {
    Problem pb;
    Synth s;
    test::random_case(rng, pb, s, /*moe=*/true);
    pb.fixed_experts = true;
    const PlanResult r = plan_fit(pb, std::cref(s));
    EXPECT_TRUE(r.config.experts.empty());
  }
}

TEST(FitOverrides, RulesMatchExactlyTheMovedTensors) {
  std::vector<ExpertMode> e(48, ExpertMode::with_layer);
  for (int l = 30; l <= 32; ++l) e[(size_t)l] = ExpertMode::cpu;
  for (int l : {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 12, 47}) e[(size_t)l] = ExpertMode::cpu;
  e[33] = ExpertMode::keep_up;
  e[11] = ExpertMode::keep_up_gate;
  const std::vector<std::string> rules = expert_overrides(e, "CPU");
  ASSERT_EQ(rules.size(), 3u);
  EXPECT_EQ(rules[0], R"(blk\.([0-9]|10|12|3[0-2]|47)\.ffn_(up|down|gate)_exps=CPU)");
  EXPECT_EQ(rules[1], R"(blk\.(33)\.ffn_(gate|down)_exps=CPU)");
  EXPECT_EQ(rules[2], R"(blk\.(11)\.ffn_down_exps=CPU)");
  // Applied as placement applies -ot (regex_search, first match): exactly the moved tensors.
  std::vector<std::regex> res;
  for (const std::string& r : rules) res.emplace_back(r.substr(0, r.rfind('=')));
  for (int l = 0; l < 48; ++l)
    for (const char* t : {"up", "gate", "down"}) {
      const std::string name = "blk." + std::to_string(l) + ".ffn_" + t + "_exps.weight";
      bool hit = false;
      for (const std::regex& re : res) hit = hit || std::regex_search(name, re);
      const ExpertMode m = e[(size_t)l];
      const bool want = m == ExpertMode::cpu || (m == ExpertMode::keep_up && std::string(t) != "up") ||
                        (m == ExpertMode::keep_up_gate && std::string(t) == "down");
      EXPECT_EQ(hit, want) << name;
      const std::string other = "blk." + std::to_string(l) + ".attn_q.weight";
      for (const std::regex& re : res) EXPECT_FALSE(std::regex_search(other, re));
    }
  EXPECT_TRUE(expert_overrides(std::vector<ExpertMode>(4, ExpertMode::with_layer), "CPU").empty());
}

}  // namespace
}  // namespace loom::fit
