// The fit planner against brute force on synthetic cost functions: same status, context and
// layer counts as an exhaustive search on random cases, with few probes; fixed flags untouched.
#include <gtest/gtest.h>

#include <cstdio>
#include <functional>
#include <random>

#include "loom/fit/planner.h"
#include "synthetic.h"

namespace loom::fit {
namespace {

using test::Synth;
using test::SynthDevice;

// Every count vector over the layer devices with the given sum (other devices 0).
void compositions(const std::vector<int>& use, int n_gpu, int64_t total,
                  const std::function<void(const std::vector<int64_t>&)>& f) {
  std::vector<int64_t> c((size_t)n_gpu, 0);
  std::function<void(size_t, int64_t)> rec = [&](size_t i, int64_t left) {
    if (i + 1 == use.size()) {
      c[(size_t)use[i]] = left;
      f(c);
      return;
    }
    for (int64_t k = 0; k <= left; ++k) {
      c[(size_t)use[i]] = k;
      rec(i + 1, left - k);
    }
  };
  if (!use.empty()) rec(0, total);
}

Config with_counts(Config c, const std::vector<int64_t>& counts, int64_t ngl) {
  c.n_gpu_layers = ngl;
  c.tensor_split.clear();
  if (ngl != 0)
    for (int64_t n : counts) c.tensor_split.push_back((float)n);
  return c;
}

struct Expected {
  FitStatus status = FitStatus::no_fit;
  int64_t n_ctx = 0;
  bool full = false;
  int64_t n_layers = 0;         // partial: layers offloaded
  std::vector<int64_t> counts;  // partial: per device
};

// Exhaustive: the user's run; else full offload at the largest context; else, at the smallest
// context, the most layers (ties: the most on the last device, then the one before, ...).
Expected brute_force(const Problem& pb, const Synth& s) {
  const int n_gpu = (int)pb.devices.size() - 1;
  auto full_fits = [&](int64_t c) {
    bool ok = false;
    compositions(pb.layer_devices, n_gpu, pb.n_layer + 1, [&](const std::vector<int64_t>& counts) {
      if (!ok) ok = test::fits_all(pb, s(with_counts(Config{c, -1, {}, {}}, counts, -1)));
    });
    Config plain = pb.given;
    plain.n_ctx = c;
    return ok || test::fits_all(pb, s(plain));
  };
  Expected e;
  const int64_t c0 = pb.given.n_ctx;
  if (test::fits_all(pb, s(pb.given))) return {FitStatus::unchanged, c0, true, 0, {}};
  if (full_fits(c0)) return {FitStatus::fit, c0, true, 0, {}};
  int64_t cp = c0;
  if (!pb.fixed_ctx && pb.n_ctx_min < c0) {
    std::vector<int64_t> cands;
    for (int64_t c = (c0 - 1) / pb.ctx_step * pb.ctx_step; c > pb.n_ctx_min; c -= pb.ctx_step) cands.push_back(c);
    cands.push_back(pb.n_ctx_min);
    for (int64_t c : cands)
      if (full_fits(c)) return {FitStatus::fit, c, true, 0, {}};
    cp = pb.n_ctx_min;
  }
  e.n_ctx = cp;
  e.n_layers = -1;
  for (int64_t total = 0; total <= pb.n_layer; ++total) {
    auto consider = [&](const std::vector<int64_t>& counts) {
      if (!test::fits_all(pb, s(with_counts(Config{cp, total, {}, {}}, counts, total)))) return;
      bool better = total > e.n_layers;
      if (total == e.n_layers)
        for (int d = n_gpu - 1; d >= 0; --d)
          if (counts[(size_t)d] != e.counts[(size_t)d]) {
            better = counts[(size_t)d] > e.counts[(size_t)d];
            break;
          }
      if (better) {
        e.n_layers = total;
        e.counts = counts;
      }
    };
    if (total == 0)
      consider(std::vector<int64_t>((size_t)n_gpu, 0));
    else
      compositions(pb.layer_devices, n_gpu, total, consider);
  }
  e.status = e.n_layers >= 0 ? FitStatus::fit : FitStatus::no_fit;
  return e;
}

std::vector<int64_t> counts_of(const Synth& s, const Config& c) {
  int out = 0;
  const std::vector<int> ld = s.layer_device(c, out);
  std::vector<int64_t> counts(s.gpu.size(), 0);
  for (int d : ld)
    if (d < (int)s.gpu.size()) ++counts[(size_t)d];
  return counts;
}

int log2_ceil(int64_t n) { return (int)std::ceil(std::log2((double)std::max<int64_t>(n, 2))); }

TEST(FitPlanner, MatchesBruteForceOnRandomCases) {
  std::mt19937_64 rng(20240611);
  int n_cases = 0, by_status[3] = {0, 0, 0}, partial = 0, ctx_reduced = 0;
  for (int i = 0; i < 400 && n_cases < 160; ++i) {
    Problem pb;
    Synth s;
    test::random_case(rng, pb, s, /*moe=*/false);
    if (pb.layer_devices.empty()) continue;
    ++n_cases;
    const Expected e = brute_force(pb, s);
    s.calls = 0;
    const PlanResult r = plan_fit(pb, std::cref(s));
    SCOPED_TRACE(testing::Message() << "case " << i << ": n_layer " << pb.n_layer << ", devices "
                                    << pb.devices.size() - 1 << ", n_ctx " << pb.given.n_ctx
                                    << (pb.fixed_ctx ? " fixed" : ""));
    ASSERT_EQ((int)r.status, (int)e.status);
    ++by_status[(int)r.status];
    EXPECT_EQ(r.probes, s.calls) << "probes are counted once each";
    if (e.status == FitStatus::no_fit) {
      EXPECT_FALSE(r.shortfall.empty()) << "a no-fit names the device that lacks memory";
      continue;
    }
    EXPECT_TRUE(test::fits_all(pb, s(r.config))) << "the answer fits";
    EXPECT_EQ(r.config.n_ctx, e.n_ctx);
    if (r.config.n_ctx < pb.given.n_ctx) ++ctx_reduced;
    int out_dev = 0;
    if (e.full) {
      EXPECT_TRUE(r.config.n_gpu_layers < 0) << "full offload keeps -ngl all";
      for (int d : s.layer_device(r.config, out_dev)) EXPECT_LT(d, (int)s.gpu.size()) << "every layer offloaded";
      EXPECT_LT(out_dev, (int)s.gpu.size()) << "the output offloaded";
    } else {
      ++partial;
      EXPECT_EQ(r.config.n_gpu_layers, e.n_layers);
      EXPECT_EQ(counts_of(s, r.config), e.counts);
    }
    // Probes: the context search and up to two layer fills, each ~log2 per device.
    const int per_device = log2_ceil(pb.n_layer + 2) + 5;
    const int n_dev = (int)pb.layer_devices.size();
    const int ctx_steps = pb.fixed_ctx ? 1 : log2_ceil(pb.given.n_ctx / pb.ctx_step + 1) + 5;
    EXPECT_LE(r.probes, 2 + ctx_steps * (1 + n_dev * per_device) + 2 * n_dev * per_device);
  }
  EXPECT_GE(n_cases, 100);
  std::printf("cases %d: unchanged %d, fit %d (context reduced %d, partial %d), no fit %d\n", n_cases,
              by_status[(int)FitStatus::unchanged], by_status[(int)FitStatus::fit], ctx_reduced, partial,
              by_status[(int)FitStatus::no_fit]);
  // The random cases cover every outcome.
  EXPECT_GT(by_status[(int)FitStatus::unchanged], 5);
  EXPECT_GT(by_status[(int)FitStatus::fit], 30);
  EXPECT_GT(by_status[(int)FitStatus::no_fit], 3);
  EXPECT_GT(partial, 10);
  EXPECT_GT(ctx_reduced, 5);
}

// One device, fixed context: the layer search alone, about log2(n_layer) probes.
TEST(FitPlanner, LayerSearchTakesFewProbes) {
  std::mt19937_64 rng(7);
  int total_probes = 0, n = 0;
  for (int i = 0; i < 200; ++i) {
    Synth s;
    s.n_layer = std::uniform_int_distribution<int64_t>(8, 128)(rng);
    s.w_layer = 200 << 20;
    s.w_output = 300 << 20;
    s.w_embd = 100 << 20;
    s.kv_per_tok = 16 << 10;
    s.host_compute = 50 << 20;
    SynthDevice g;
    g.compute_base = std::uniform_real_distribution<double>(50, 500)(rng) * (1 << 20);
    if (i % 3 == 0) {  // a compute buffer that jumps: interpolation alone would be misled
      g.step_at = std::uniform_int_distribution<int64_t>(2, s.n_layer)(rng);
      g.step_bytes = 700 << 20;
    }
    s.gpu = {g};
    Problem pb;
    pb.n_layer = s.n_layer;
    pb.devices = {DeviceBudget{"SIM0", false, true, 0, 0, 1 << 30, 0}, DeviceBudget{"CPU", true, true, 0, 0, 0, 0}};
    pb.devices[0].free = pb.devices[0].total =
        (size_t)(std::uniform_real_distribution<double>(0.05, 0.95)(rng) * (double)s.n_layer * s.w_layer) + (1u << 30);
    pb.devices[1].free = pb.devices[1].total = (size_t)1 << 40;
    pb.layer_devices = {0};
    pb.given = Config{4096, -1, {1.0f}, {}};
    pb.fixed_ctx = true;
    s.calls = 0;
    const PlanResult r = plan_fit(pb, std::cref(s));
    ASSERT_EQ((int)r.status, (int)FitStatus::fit);
    // the answer is the largest count that fits
    EXPECT_TRUE(test::fits_all(pb, s(r.config)));
    if (r.config.n_gpu_layers < s.n_layer) {
      Config more = r.config;
      ++more.n_gpu_layers;
      EXPECT_FALSE(test::fits_all(pb, s(more))) << "one more layer would fit";
    }
    EXPECT_LE(r.probes, 1 + log2_ceil(s.n_layer + 1) + 4) << "n_layer " << s.n_layer;
    total_probes += r.probes;
    ++n;
  }
  EXPECT_LE((double)total_probes / n, 6.0) << "affine costs converge in a few probes";
}

// Flags the user fixed are never changed; fixed -ts still yields the most layers that fit.
TEST(FitPlanner, FixedFlagsAreKept) {
  std::mt19937_64 rng(99);
  int checked = 0;
  for (int i = 0; i < 300; ++i) {
    Problem pb;
    Synth s;
    test::random_case(rng, pb, s, /*moe=*/false);
    if (pb.layer_devices.empty()) continue;
    const int mode = i % 3;
    if (mode == 0) {  // -ts given
      pb.fixed_split = true;
      for (float& v : pb.given.tensor_split) v = (float)std::uniform_int_distribution<int>(1, 4)(rng);
    } else if (mode == 1) {  // -ngl N given
      pb.fixed_ngl = true;
      pb.given.n_gpu_layers = std::uniform_int_distribution<int64_t>(0, pb.n_layer + 1)(rng);
    } else {  // -c given
      pb.fixed_ctx = true;
    }
    const PlanResult r = plan_fit(pb, std::cref(s));
    if (pb.fixed_split) {
      EXPECT_EQ(r.config.tensor_split, pb.given.tensor_split);
    }
    if (pb.fixed_ngl) {
      EXPECT_EQ(r.config.n_gpu_layers, pb.given.n_gpu_layers);
    }
    if (pb.fixed_ctx) {
      EXPECT_EQ(r.config.n_ctx, pb.given.n_ctx);
    }
    if (r.status == FitStatus::no_fit) {
      EXPECT_FALSE(r.shortfall.empty());
      continue;
    }
    ++checked;
    EXPECT_TRUE(test::fits_all(pb, s(r.config)));
    EXPECT_GE(r.config.n_ctx, std::min(pb.n_ctx_min, pb.given.n_ctx));
    EXPECT_EQ(r.config.n_ctx % pb.ctx_step == 0 || r.config.n_ctx == pb.given.n_ctx || r.config.n_ctx == pb.n_ctx_min,
              true)
        << "a reduced context is a multiple of " << pb.ctx_step;
  }
  EXPECT_GT(checked, 50);
}

// A device reporting no memory gets nothing, even when the default split would give it layers.
TEST(FitPlanner, UnknownMemoryDeviceGetsNothing) {
  Synth s;
  s.n_layer = 10;
  s.w_layer = 100 << 20;
  s.w_output = 50 << 20;
  s.gpu = {SynthDevice{}, SynthDevice{}};
  Problem pb;
  pb.n_layer = 10;
  pb.devices = {DeviceBudget{"SIM0", false, false, 0, 0, 0, 0},
                DeviceBudget{"SIM1", false, true, size_t{4} << 30, size_t{4} << 30, 0, 0},
                DeviceBudget{"CPU", true, true, size_t{8} << 30, size_t{8} << 30, 0, 0}};
  pb.layer_devices = {1};
  pb.given = Config{512, -1, {1.0f, 4096.0f}, {}};
  pb.n_ctx_min = 512;
  const PlanResult r = plan_fit(pb, std::cref(s));
  ASSERT_EQ((int)r.status, (int)FitStatus::fit);
  EXPECT_EQ(r.probe.usage[0].total(), 0u);
  EXPECT_EQ(counts_of(s, r.config), (std::vector<int64_t>{0, 10}));
  EXPECT_LT(r.config.n_gpu_layers, 0) << "everything, output included, on SIM1";
}

// Nothing fits: the host alone is too small for what must stay there.
TEST(FitPlanner, HostTooSmallIsNoFit) {
  Synth s;
  s.n_layer = 4;
  s.w_layer = 100 << 20;
  s.w_embd = 900 << 20;
  s.gpu = {SynthDevice{}};
  Problem pb;
  pb.n_layer = 4;
  pb.devices = {DeviceBudget{"SIM0", false, true, 2u << 30, 2u << 30, 1u << 30, 0},
                DeviceBudget{"CPU", true, true, 512u << 20, 512u << 20, 0, 0}};
  pb.layer_devices = {0};
  pb.given = Config{512, -1, {2048.0f}, {}};
  pb.n_ctx_min = 512;
  const PlanResult r = plan_fit(pb, std::cref(s));
  ASSERT_EQ((int)r.status, (int)FitStatus::no_fit);
  ASSERT_EQ(r.shortfall.size(), 1u);
  EXPECT_EQ(r.shortfall[0].device, 1);
  EXPECT_EQ(r.shortfall[0].bytes, (int64_t)(900u << 20) - (int64_t)(512u << 20));
}

}  // namespace
}  // namespace loom::fit
