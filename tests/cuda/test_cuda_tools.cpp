// The CUDA backend through the tools. Without a GPU (CI): the device listing says so, -dev CUDA0 is
// a usage error, and the GPU tests skip with that reason. With one (scripts/device-check.sh):
// tiny models of each architecture and weight type give the CPU's greedy tokens on CUDA0 alone and
// split with the CPU, and every op case the backend claims passes against the CPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "../e2e/tool_runner.h"

namespace loom::test {
namespace {

bool have_cuda0() {
  static const bool yes = run_tool("loom-run --list-devices").out.find("CUDA0") != std::string::npos;
  return yes;
}

class CudaTools : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = scratch_dir("loom-cuda"); }
  void TearDown() override { remove_scratch(dir_); }
  std::string model(const std::string& arch, const std::string& type) {
    const std::string path = (dir_ / (arch + "-" + type + ".gguf")).string();
    const ToolResult r = run_tool("loom-gguf new --arch " + arch + " --preset tiny --seed 1 --type " + type + " -o " +
                                  quote(path));
    EXPECT_EQ(r.rc, 0) << r.err;
    return path;
  }
  std::filesystem::path dir_;
};

TEST_F(CudaTools, ListingSaysWhetherThereIsACudaDevice) {
  const ToolResult r = run_tool("loom-run --list-devices");
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string all = r.out + r.err;
  if (have_cuda0())
    EXPECT_NE(all.find("CUDA0"), std::string::npos);
  else
    EXPECT_NE(all.find("no CUDA device"), std::string::npos) << all;
}

TEST_F(CudaTools, MissingDeviceIsAUsageError) {
  const std::string m = model("llama", "f32");
  const ToolResult r = run_tool("loom-run -m " + quote(m) + " -p hi -n 2 -dev CUDA9");
  EXPECT_EQ(r.rc, 2) << r.err;
  if (!have_cuda0()) {
    const ToolResult r0 = run_tool("loom-run -m " + quote(m) + " -p hi -n 2 -dev CUDA0");
    EXPECT_EQ(r0.rc, 2) << r0.err;
  }
}

TEST_F(CudaTools, GreedyTokensEqualTheCpusOnCuda0AndSplit) {
  if (!have_cuda0()) GTEST_SKIP() << "no CUDA device";
  for (const char* arch : {"llama", "qwen2", "qwen3", "qwen3moe"})
    for (const char* type : {"f32", "f16", "q8_0", "q4_0", "q4_k"}) {
      const std::string m = model(arch, type);
      const std::string base = "loom-run -m " + quote(m) + " -p 'hello world' -n 24 --temp 0";
      const ToolResult cpu = run_tool(base);
      ASSERT_EQ(cpu.rc, 0) << cpu.err;
      for (const char* spec : {" -ngl 99 -dev CUDA0", " -ngl 1 -dev CUDA0,CPU"}) {
        const ToolResult gpu = run_tool(base + spec);
        ASSERT_EQ(gpu.rc, 0) << arch << " " << type << spec << ": " << gpu.err;
        EXPECT_EQ(gpu.out, cpu.out) << arch << " " << type << spec;
      }
    }
}

TEST_F(CudaTools, GraphsAreReplayedFromTheSecondDecodeStep) {
  if (!have_cuda0()) GTEST_SKIP() << "no CUDA device";
  const std::string m = model("llama", "q8_0");
  const ToolResult r = run_tool("loom-run -m " + quote(m) + " -p hi -n 16 --temp 0 -ngl 99 -dev CUDA0 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("\"graph_hits\""), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\"graph_hits\": 0,"), std::string::npos) << r.out;
  const ToolResult off = run_tool("LOOM_CUDA_GRAPHS=0 " + std::string(LOOM_BIN_DIR) + "/loom-run -m " + quote(m) +
                                  " -p hi -n 16 --temp 0 -ngl 99 -dev CUDA0");
  (void)off;
}

TEST_F(CudaTools, EveryClaimedOpCasePasses) {
  if (!have_cuda0()) GTEST_SKIP() << "no CUDA device";
  const ToolResult r = run_tool("loom-bench-ops test -b CUDA0");
  EXPECT_EQ(r.rc, 0) << r.out.substr(r.out.size() > 4000 ? r.out.size() - 4000 : 0);
}

}  // namespace
}  // namespace loom::test
