// fit_params on header-only files of real shapes (planning only, nothing allocated): llama-8b
// on one 8 GiB device, llama-70b on 2x24 GiB, qwen3-30b-a3b on 16 GiB with experts moved; the
// answer is probed, keeps every target, and comes fast. Also no-fit reports, flag checks and
// the probe's bytes against a plan-only Session made by hand.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "loom/core/error.h"
#include "loom/fit/fit.h"
#include "loom/fit/probe.h"
#include "loom/model/model_file.h"
#include "loom/backend/registry.h"

namespace loom::fit {
namespace {

namespace fs = std::filesystem;
constexpr size_t kMiB = 1 << 20;

class FitModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("loom-fit-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    make(Arch::llama, "llama-8b", DType::Q4_K);
    make(Arch::llama, "llama-70b", DType::Q4_K);
    make(Arch::qwen3moe, "qwen3-30b-a3b", DType::Q4_K);
    make(Arch::llama, "tiny", DType::F32);
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static void make(Arch arch, const std::string& preset, DType type) {
    NewModelOptions o;
    o.hparams = preset_hparams(arch, preset);
    o.type = type;
    o.header_only = preset != "tiny";
    o.output = path(preset);
    make_random_model(o);
  }
  static std::string path(const std::string& preset) { return (dir_ / (preset + ".gguf")).string(); }

  struct Run {
    DeviceSet set;
    FitRequest req;
  };
  static Run request(const std::string& preset, const std::string& sims) {
    Run r;
    r.set = make_devices(sims, 1);
    r.req.model_path = path(preset);
    r.req.placement.devices = r.set.all;
    return r;
  }
  static void expect_targets_kept(const FitReport& rep) {
    for (const DeviceReport& d : rep.devices) {
      if (d.is_cpu) {
        EXPECT_GE(d.projected_free, 0) << "host";
      } else if (d.usage.total() > 0) {
        EXPECT_GE(d.projected_free, (int64_t)d.target) << d.name;
      }
    }
  }
  static fs::path dir_;
};
fs::path FitModel::dir_;

double timed(const std::function<void()>& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

TEST_F(FitModel, Llama8bOn8GiB) {
  Run r = request("llama-8b", "8GiB");
  FitReport rep;
  const double s = timed([&] { rep = fit_params(r.req); });
  std::printf("llama-8b q4_k on 8GiB: %s '%s' in %.3f s, %d probes\n",
              rep.status == FitStatus::unchanged ? "unchanged" : "fit", rep.args.c_str(), s, rep.probes);
  ASSERT_NE((int)rep.status, (int)FitStatus::no_fit) << rep.message;
  expect_targets_kept(rep);
  EXPECT_EQ(rep.n_gpu_layers, 33) << "4.6 GiB of weights fit an 8 GiB device whole";
  EXPECT_LT(s, 5.0);
}

TEST_F(FitModel, Llama70bOnTwo24GiB) {
  Run r = request("llama-70b", "2x24GiB");
  FitReport rep;
  const double s = timed([&] { rep = fit_params(r.req); });
  std::printf("llama-70b q4_k on 2x24GiB: '%s' in %.3f s, %d probes\n", rep.args.c_str(), s, rep.probes);
  ASSERT_NE((int)rep.status, (int)FitStatus::no_fit) << rep.message;
  expect_targets_kept(rep);
  EXPECT_EQ(rep.n_gpu_layers, 81);
  EXPECT_GT(rep.devices[0].usage.model, 18000 * kMiB) << "both devices hold about half";
  EXPECT_GT(rep.devices[1].usage.model, 18000 * kMiB);
  EXPECT_LT(s, 5.0);
}

TEST_F(FitModel, Qwen3MoeOn16GiBMovesExperts) {
  Run r = request("qwen3-30b-a3b", "16GiB");
  FitReport rep;
  const double s = timed([&] { rep = fit_params(r.req); });
  std::printf("qwen3-30b-a3b q4_k on 16GiB: '%s' in %.3f s, %d probes\n", rep.args.c_str(), s, rep.probes);
  ASSERT_EQ((int)rep.status, (int)FitStatus::fit) << rep.message;
  expect_targets_kept(rep);
  EXPECT_EQ(rep.n_gpu_layers, 49) << "every layer's attention stays on the device";
  ASSERT_FALSE(rep.overrides.empty());
  EXPECT_NE(rep.args.find("_exps=CPU"), std::string::npos) << rep.args;
  EXPECT_EQ(rep.config.n_ctx, 4096) << "the context shrinks first, to --fit-ctx";
  EXPECT_GT(rep.devices[1].usage.model, 1000 * kMiB) << "some experts live on the CPU";
  EXPECT_LT(rep.devices[0].projected_free - (int64_t)rep.devices[0].target, 1500 * (int64_t)kMiB)
      << "experts come back until the device is nearly full";
  EXPECT_LT(s, 5.0);
}

// The reported bytes are those of a plan-only Session for the printed flags, made by hand.
TEST_F(FitModel, ReportEqualsAPlanOnlySessionOfTheAnswer) {
  Run r = request("llama-70b", "16GiB,12GiB");
  const FitReport rep = fit_params(r.req);
  ASSERT_EQ((int)rep.status, (int)FitStatus::fit) << rep.message;
  EXPECT_NE(rep.args.find("-ngl "), std::string::npos) << "70b cannot be whole on 28 GiB: " << rep.args;
  EXPECT_NE(rep.args.find("-ts "), std::string::npos) << rep.args;
  ModelLoadOptions lo;
  lo.need_data = false;
  lo.placement.devices = r.set.all;
  lo.placement.n_gpu_layers = rep.config.n_gpu_layers;
  lo.placement.tensor_split = rep.config.tensor_split;
  auto model = Model::load(path("llama-70b"), lo);
  SessionParams sp;
  sp.n_ctx = rep.config.n_ctx;
  sp.plan_only = true;
  Session session(*model, sp);
  const auto mb = session.memory_breakdown();
  ASSERT_EQ(mb.size(), rep.devices.size());
  for (size_t d = 0; d < mb.size(); ++d) {
    EXPECT_EQ(mb[d].model_bytes, rep.devices[d].usage.model) << mb[d].device;
    EXPECT_EQ(mb[d].context_bytes, rep.devices[d].usage.context) << mb[d].device;
    EXPECT_EQ(mb[d].compute_bytes, rep.devices[d].usage.compute) << mb[d].device;
  }
}

TEST_F(FitModel, NoFitWhenHostRamIsShortNamesTheCpu) {
  Run r = request("llama-70b", "1GiB");
  r.req.reserves = {0, (size_t)1 << 40};  // the host's RAM is taken: nothing can stay there
  const FitReport rep = fit_params(r.req);
  ASSERT_EQ((int)rep.status, (int)FitStatus::no_fit);
  EXPECT_TRUE(rep.args.empty());
  EXPECT_NE(rep.message.find("CPU lacks"), std::string::npos) << rep.message;
}

TEST_F(FitModel, NoFitWithFixedLayersNamesTheDeviceAndKeepsTheFlags) {
  Run r = request("llama-8b", "2GiB");
  r.req.placement.n_gpu_layers = 33;
  r.req.fixed_ngl = true;
  const FitReport rep = fit_params(r.req);
  ASSERT_EQ((int)rep.status, (int)FitStatus::no_fit);
  EXPECT_EQ(rep.config.n_gpu_layers, 33);
  EXPECT_NE(rep.message.find("SIM0 lacks"), std::string::npos) << rep.message;
}

TEST_F(FitModel, FlagsThatCannotBeHonouredAreUsageErrors) {
  Run r = request("tiny", "64MiB,64MiB");
  r.req.targets = {kMiB, kMiB, kMiB};
  EXPECT_THROW(
      {
        try {
          fit_params(r.req);
        } catch (const Error& e) {
          EXPECT_EQ(e.kind(), ErrorKind::usage);
          EXPECT_NE(std::string(e.what()).find("--fit-target"), std::string::npos);
          throw;
        }
      },
      Error);
  r.req.targets = {};
  r.req.placement.split_mode = SplitMode::tensor;  // sized per member (docs/TENSOR-PARALLEL.md), never refused
  const FitReport tp = fit_params(r.req);
  ASSERT_FALSE(tp.devices.empty());
  EXPECT_GT(tp.devices.front().usage.model, 0u);
  EXPECT_EQ(parse_mib_list("1024,0.5", "--fit-target"), (std::vector<size_t>{1024 * kMiB, kMiB / 2}));
  EXPECT_THROW(parse_mib_list("12x", "--fit-target"), Error);
  EXPECT_THROW(parse_mib_list("-1", "--fit-target"), Error);
  EXPECT_THROW(parse_mib_list("", "--fit-reserve"), Error);
}

TEST_F(FitModel, ArgsListOnlyWhatChanged) {
  const Config given{8192, -1, {24576, 24576}, {}};
  EXPECT_EQ(format_args(given, given, {}), "-c 0 -ngl -1");
  Config a = given;
  a.n_ctx = 4096;
  EXPECT_EQ(format_args(a, given, {}), "-c 4096");
  a.n_gpu_layers = 51;
  a.tensor_split = {30, 21};
  EXPECT_EQ(format_args(a, given, {R"(blk\.(1)\.ffn_down_exps=CPU)"}),
            R"(-c 4096 -ngl 51 -ts 30,21 -ot "blk\.(1)\.ffn_down_exps=CPU")");
}

}  // namespace
}  // namespace loom::fit
