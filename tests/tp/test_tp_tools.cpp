// The tools under -sm tensor: loom-split-inspect --json reports every member's weights and
// compute buffer and the AllReduce nodes of a step; loom-fit-params predicts per-member bytes
// and says which member lacks how much; loom-run gives the text of one device.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "loom/model/model_file.h"

namespace loom {
namespace {

struct Out {
  int rc = -1;
  std::string out;
};

Out tool(const std::string& args) {
  Out r;
  FILE* p = popen((std::string(LOOM_BIN_DIR) + "/" + args + " 2>/dev/null").c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

class TensorParallelTools : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    NewModelOptions o;
    o.hparams = preset_hparams(Arch::qwen3, "tiny");
    o.seed = 5;
    o.output = model_ =
        (std::filesystem::temp_directory_path() / ("loom-tp-tools-" + std::to_string(getpid()) + ".gguf")).string();
    make_random_model(o);
  }
  static void TearDownTestSuite() { std::filesystem::remove(model_); }
  static inline std::string model_;
};

TEST_F(TensorParallelTools, SplitInspectJsonReportsEveryMember) {
  const Out one = tool("loom-split-inspect -m " + model_ + " --sim-devices 1x64MiB --json");
  ASSERT_EQ(one.rc, 0);
  const Out tp = tool("loom-split-inspect -m " + model_ + " --sim-devices 2x64MiB -sm tensor -ts 1,1 --json");
  ASSERT_EQ(tp.rc, 0);
  const auto a = nlohmann::json::parse(one.out), b = nlohmann::json::parse(tp.out);
  ASSERT_EQ(b["devices"].size(), 3u);  // SIM0, SIM1, CPU
  const double single_model = a["devices"][0]["model_bytes"], single_compute = a["devices"][0]["compute_bytes"];
  for (int d = 0; d < 2; ++d) {
    const double model = b["devices"][d]["model_bytes"], compute = b["devices"][d]["compute_bytes"];
    EXPECT_LT(model, 0.6 * single_model) << d;
    EXPECT_GT(model, 0.4 * single_model) << d;
    EXPECT_LT(compute, single_compute) << d;
  }
  const auto& t = b["tensor_parallel"];
  EXPECT_EQ(t["device"], "META");
  EXPECT_EQ(t["n_members"], 2);
  EXPECT_EQ(t["all_reduce_per_step"], 4 * 2);  // tiny: 2 layers, 4 joins each
  EXPECT_EQ(t["members"][1]["device"], "SIM1");
  EXPECT_EQ(t["members"][1]["head_kv"][1], 4);
}

TEST_F(TensorParallelTools, FitParamsSizesMembersAndNamesTheOneThatLacks) {
  const Out ok =
      tool("loom-fit-params -m " + model_ + " --sim-devices 2x64MiB -sm tensor -ts 1,1 --fit-target 1 --json");
  ASSERT_EQ(ok.rc, 0) << ok.out;
  const auto j = nlohmann::json::parse(ok.out);
  EXPECT_NE(j["status"], "no_fit");
  EXPECT_EQ(j["devices"][0]["model_bytes"], j["devices"][1]["model_bytes"]);
  // uneven: the first member holds more
  const Out uneven =
      tool("loom-fit-params -m " + model_ + " --sim-devices 2x64MiB -sm tensor -ts 3,1 --fit-target 1 --json");
  ASSERT_EQ(uneven.rc, 0);
  const auto u = nlohmann::json::parse(uneven.out);
  EXPECT_GT(u["devices"][0]["model_bytes"].get<size_t>(), 2 * u["devices"][1]["model_bytes"].get<size_t>());
  const Out no = tool("loom-fit-params -m " + model_ + " --sim-devices 2x2MiB -sm tensor -ts 1,1 --fit-target 1");
  EXPECT_EQ(no.rc, 1);
  EXPECT_EQ(no.out, "");
}

TEST_F(TensorParallelTools, RunGivesTheTextOfOneDevice) {
  const std::string args = " -m " + model_ + " -p 'hello world' -n 12 --temp 0";
  const Out one = tool("loom-run" + args);
  ASSERT_EQ(one.rc, 0);
  for (const std::string spec : {"--sim-devices 2x64MiB -ts 1,1", "--sim-devices 3x64MiB -ts 3,2,2",
                                 "--sim-devices 1x64MiB -dev SIM0,CPU -ts 1,1", "-dev CPU"}) {
    const Out tp = tool("loom-run" + args + " -sm tensor " + spec);
    ASSERT_EQ(tp.rc, 0) << spec;
    EXPECT_EQ(tp.out, one.out) << spec;
  }
  EXPECT_EQ(tool("loom-run" + args + " -sm tensor --sim-devices 2x64MiB -ts 1,1,1").rc, 2);
  EXPECT_EQ(tool("loom-run" + args + " -sm tensor --sim-devices 2x64MiB --comm nccl").rc, 3);  // unsupported here
}

}  // namespace
}  // namespace loom
