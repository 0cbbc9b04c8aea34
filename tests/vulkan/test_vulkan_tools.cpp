// The tools on Vulkan0 as a user runs them: a tiny model gives the CPU's greedy tokens (float
// weights) and perplexity (every type) on Vulkan0 alone, split with the CPU by layers and by
// tensor (llama, qwen2, qwen3, qwen3moe in F32, F16, Q8_0, Q4_0, Q4_K); -dev Vulkan7 is a usage error (2); a device with too
// little memory is exit 4 naming it; loom-train -dev Vulkan0 gives the CPU's losses. Skips without
// the tools or a Vulkan device.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "../e2e/tool_runner.h"

namespace {

namespace fs = std::filesystem;
using loom::test::quote;
using loom::test::ToolResult;

class VulkanTools : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = loom::test::scratch_dir("loom-vulkan-tools");
    run_ = std::string(LOOM_BIN_DIR) + "/loom-run";
    const std::string gguf = std::string(LOOM_BIN_DIR) + "/loom-gguf";
    if (!fs::exists(run_) || !fs::exists(gguf)) GTEST_SKIP() << "loom-run / loom-gguf are not built";
    const ToolResult list = loom::test::run_command(quote(run_) + " --list-devices", dir_);
    if (list.out.find("Vulkan0") == std::string::npos) GTEST_SKIP() << "no Vulkan0: " << list.out;
    model_ = (dir_ / "tiny.gguf").string();
    const ToolResult r = loom::test::run_command(
        quote(gguf) + " new --arch qwen3moe --preset tiny --seed 3 --type q4_0 -o " + quote(model_), dir_);
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  void TearDown() override { loom::test::remove_scratch(dir_); }

  ToolResult run(const std::string& args, const std::string& env = "") {
    return loom::test::run_command(env + quote(run_) + " -m " + quote(model_) + " -t 1 " + args, dir_);
  }

  fs::path dir_;
  std::string run_, model_;
};

TEST_F(VulkanTools, TokensEqualTheCpusOnVulkanAndSplitWithTheCpu) {
  const ToolResult cpu = run("-p 'hello world' -n 8 --temp 0");
  ASSERT_EQ(cpu.rc, 0) << cpu.err;
  // -nkvo: the KV cache in host memory and the attention on the CPU, between Vulkan's products
  for (const char* spec : {"-ngl 99 -dev Vulkan0", "-ngl 1 -dev Vulkan0,CPU", "-ngl 99 -dev Vulkan0 -nkvo"}) {
    const ToolResult v = run(std::string("-p 'hello world' -n 8 --temp 0 ") + spec);
    ASSERT_EQ(v.rc, 0) << spec << ": " << v.err;
    EXPECT_EQ(v.out, cpu.out) << spec;
  }
}

// The matrix: every arch and weight type, on Vulkan0 alone, in a layer split with the
// CPU and split by tensor. The mat-mul shaders round quantized weights' activations as the CPU's
// kernels do (int8 blocks of 32 or 256 values; MatMulsRoundActivationsAsTheCpu holds each product
// to it), but the other ops (exp, norms, RoPE) differ from the CPU's in their last bits, which a
// random model's near-flat logits can turn into another greedy token after a few steps. So float
// weights must give the CPU's tokens, and every type the CPU's perplexity within 0.2% (measured:
// at most 0.07%; a wrong op or rounding moves it by far more).
class VulkanQuantTokens : public VulkanTools, public ::testing::WithParamInterface<std::tuple<const char*, const char*>> {};

double perplexity(const std::string& out) {
  const size_t at = out.find("PPL = ");
  return at == std::string::npos ? -1.0 : std::stod(out.substr(at + 6));
}

TEST_P(VulkanQuantTokens, EqualTheCpus) {
  const auto [arch, type] = GetParam();
  const std::string gguf = std::string(LOOM_BIN_DIR) + "/loom-gguf";
  model_ = (dir_ / (std::string(arch) + "-" + type + ".gguf")).string();
  const ToolResult g = loom::test::run_command(
      quote(gguf) + " new --arch " + arch + " --preset tiny --seed 1 --type " + type + " -o " + quote(model_), dir_);
  ASSERT_EQ(g.rc, 0) << g.err;
  const std::string text = (dir_ / "text.txt").string();
  {
    std::ofstream f(text);
    for (int i = 0; i < 40; ++i) f << "The quick brown fox jumps over the lazy dog " << i << " times, said the owl. ";
  }
  const bool floats = std::string(type) == "f32" || std::string(type) == "f16";
  const std::string gen = "-p 'hello world' -n 24 --temp 0 ";
  const std::string ppl = "--perplexity -f " + quote(text) + " -c 64 --chunks 4 ";
  const ToolResult cpu = run(gen), cpu_ppl = run(ppl);
  ASSERT_EQ(cpu.rc, 0) << cpu.err;
  ASSERT_EQ(cpu_ppl.rc, 0) << cpu_ppl.err;
  const double want = perplexity(cpu_ppl.out + cpu_ppl.err);
  ASSERT_GT(want, 1.0) << cpu_ppl.out << cpu_ppl.err;
  for (const char* spec : {"-ngl 99 -dev Vulkan0", "-ngl 1 -dev Vulkan0,CPU", "-sm tensor -dev Vulkan0,CPU -ts 1,1"}) {
    const ToolResult v = run(ppl + spec);
    ASSERT_EQ(v.rc, 0) << spec << ": " << v.err;
    EXPECT_NEAR(perplexity(v.out + v.err) / want, 1.0, 2e-3) << arch << " " << type << " " << spec;
    if (!floats) continue;
    const ToolResult t = run(gen + spec);
    ASSERT_EQ(t.rc, 0) << spec << ": " << t.err;
    EXPECT_EQ(t.out, cpu.out) << arch << " " << type << " " << spec;
  }
}

INSTANTIATE_TEST_SUITE_P(TinyModels, VulkanQuantTokens,
                         ::testing::Combine(::testing::Values("llama", "qwen2", "qwen3", "qwen3moe"),
                                            ::testing::Values("f32", "f16", "q8_0", "q4_0", "q4_k")),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                         });
// The architectures of shared experts, sigmoid routing and NoPE layers: float and one quant type.
INSTANTIATE_TEST_SUITE_P(NewerArchs, VulkanQuantTokens,
                         ::testing::Combine(::testing::Values("glm4moe", "qwen2moe", "smollm3", "command-r", "cohere2",
                                                              "olmo2", "granitemoe", "olmoe", "ernie4_5", "exaone4",
                                                              "seed_oss", "ernie4_5-moe", "mistral3", "llama4"),
                                            ::testing::Values("f32", "q4_k")),
                         [](const auto& info) {
                           std::string name = std::string(std::get<0>(info.param)) + "_" + std::get<1>(info.param);
                           std::replace(name.begin(), name.end(), '-', '_');  // "command-r"
                           return name;
                         });

// An i-quant model on Vulkan0: every product runs there (no weight crosses to the CPU), the run
// allocates what fit-params predicts, and the perplexity is the CPU's.
TEST_F(VulkanTools, IQuantModelRunsOnVulkan) {
  const std::string gguf = std::string(LOOM_BIN_DIR) + "/loom-gguf", f16 = (dir_ / "w256.gguf").string();
  ToolResult r = loom::test::run_command(
      quote(gguf) + " new --arch llama --preset tiny --n-embd 256 --n-ff 512 --seed 1 --type f16 -o " + quote(f16),
      dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  model_ = (dir_ / "iq3_m.gguf").string();
  r = loom::test::run_command(quote(gguf) + " quantize " + quote(f16) + " " + quote(model_) + " IQ3_M 2", dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string inspect = std::string(LOOM_BIN_DIR) + "/loom-split-inspect";
  if (fs::exists(inspect)) {
    r = loom::test::run_command(quote(inspect) + " -m " + quote(model_) + " -ngl 99 -dev Vulkan0 -c 128", dir_);
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_EQ(r.out.find(".weight <- Vulkan0"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("MUL_MAT  CPU"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("MUL_MAT  Vulkan0"), std::string::npos) << r.out;
  }
  // The run allocates per device what fit-params predicts.
  const std::string fit = std::string(LOOM_BIN_DIR) + "/loom-fit-params";
  if (fs::exists(fit)) {
    const std::string flags = " -dev Vulkan0 -c 256 -ngl -1 -t 1";
    r = loom::test::run_command(quote(fit) + " -m " + quote(model_) + flags + " --json", dir_);
    ASSERT_EQ(r.rc, 0) << r.err;
    const ToolResult ran = run(flags + " -p hi -n 2 --temp 0 --json");
    ASSERT_EQ(ran.rc, 0) << ran.err;
    const nlohmann::json want = nlohmann::json::parse(r.out)["devices"],
                         got = nlohmann::json::parse(ran.out)["devices"];
    ASSERT_EQ(want.size(), 2u);
    ASSERT_EQ(got.size(), 2u);
    for (size_t d = 0; d < 2; ++d)
      for (const char* k : {"name", "model_bytes", "context_bytes", "compute_bytes"})
        EXPECT_EQ(want[d][k], got[d][k]) << k;
    EXPECT_EQ(got[1]["name"], "CPU");
    EXPECT_GT(got[0]["model_bytes"].get<int64_t>(), got[1]["model_bytes"].get<int64_t>()) << "the IQ3_S matrices";
  }
  const std::string text = (dir_ / "text.txt").string();
  {
    std::ofstream f(text);
    for (int i = 0; i < 40; ++i) f << "The quick brown fox jumps over the lazy dog " << i << " times, said the owl. ";
  }
  const std::string ppl = "--perplexity -f " + quote(text) + " -c 64 --chunks 4 ";
  const ToolResult cpu = run(ppl), v = run(ppl + "-ngl 99 -dev Vulkan0");
  ASSERT_EQ(cpu.rc, 0) << cpu.err;
  ASSERT_EQ(v.rc, 0) << v.err;
  const double want = perplexity(cpu.out + cpu.err);
  ASSERT_GT(want, 1.0);
  EXPECT_NEAR(perplexity(v.out + v.err) / want, 1.0, 2e-3);
}

// The CPU computes in Vulkan0's pinned host memory, so inputs and outputs cross as transfers on
// the queue (async_copies) and the host waits once per step: syncs == steps.
TEST_F(VulkanTools, InputsCrossAsyncAndTheHostWaitsOncePerStep) {
  auto number = [](const std::string& j, const std::string& key) {
    const size_t at = j.find("\"" + key + "\":");
    return at == std::string::npos ? -1L : std::stol(j.substr(at + key.size() + 3));
  };
  const ToolResult v = run("-p 'hello world' -n 8 --temp 0 -ngl 99 -dev Vulkan0 --json");
  ASSERT_EQ(v.rc, 0) << v.err;
  EXPECT_GT(number(v.out, "async_copies"), 0) << v.out;
  EXPECT_EQ(number(v.out, "syncs"), 8) << "one wait per step (prompt + 7 decode steps): " << v.out;
}

// loom-train -dev Vulkan0 on the architectures whose ops came last to training (gemma2's
// soft-capping, gpt-oss's sinks and SWIGLU_OAI, their gradients built from ordinary ops): each
// step's loss and gradient norm are the CPU's to the CSV's digits (float sums in another order).
TEST_F(VulkanTools, TrainingOnVulkanGivesTheCpusLosses) {
  const std::string train = std::string(LOOM_BIN_DIR) + "/loom-train";
  const std::string gguf = std::string(LOOM_BIN_DIR) + "/loom-gguf";
  if (!fs::exists(train)) GTEST_SKIP() << "loom-train is not built";
  const std::string text = (dir_ / "text.txt").string();
  {
    std::ofstream f(text);
    for (int i = 0; i < 30; ++i) f << "The quick brown fox jumps over the lazy dog. ";
  }
  // step,epoch,loss,accuracy,lr,grad_norm: loss and grad_norm of every step
  auto columns = [](const std::string& csv) {
    std::vector<double> out;
    std::ifstream f(csv);
    for (std::string line; std::getline(f, line);) {
      if (line.empty() || !std::isdigit((unsigned char)line[0])) continue;
      std::vector<std::string> cells;
      for (size_t at = 0, next; at <= line.size(); at = next + 1) {
        next = std::min(line.find(',', at), line.size());
        cells.push_back(line.substr(at, next - at));
      }
      out.push_back(std::stod(cells.at(2)));
      out.push_back(std::stod(cells.at(5)));
    }
    return out;
  };
  for (const char* arch : {"gemma2", "gpt-oss"}) {
    SCOPED_TRACE(arch);
    const std::string m = (dir_ / (std::string(arch) + ".gguf")).string();
    ASSERT_EQ(loom::test::run_command(quote(gguf) + " new --arch " + arch + " --preset tiny --seed 1 -o " + quote(m), dir_).rc, 0);
    std::vector<double> got[2];
    for (int vk = 0; vk < 2; ++vk) {
      const std::string csv = (dir_ / (std::string(arch) + (vk ? "-vk.csv" : "-cpu.csv"))).string();
      const ToolResult r = loom::test::run_command(
          quote(train) + " -m " + quote(m) + " -f " + quote(text) + " -c 16 -b 2 --steps 2 -lr 3e-3 -t 1 --log-csv " +
              quote(csv) + (vk ? " -dev Vulkan0" : " -dev CPU") + " -o " + quote((dir_ / "out.gguf").string()),
          dir_);
      ASSERT_EQ(r.rc, 0) << r.err;
      got[vk] = columns(csv);
    }
    ASSERT_EQ(got[0].size(), 4u);
    ASSERT_EQ(got[1].size(), 4u);
    for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(got[1][i], got[0][i], 1e-4 * std::fabs(got[0][i])) << "value " << i;
  }
}

TEST_F(VulkanTools, UnknownDeviceIsAUsageErrorAndTooLittleMemoryExitsFour) {
  ToolResult r = run("-p hi -n 2 -dev Vulkan7");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("Vulkan7"), std::string::npos) << r.err;
  r = run("-p hi -n 2 -ngl 99 -dev Vulkan0", "LOOM_VULKAN_MEMORY=1000000 ");
  EXPECT_EQ(r.rc, 4) << r.err;
  EXPECT_NE(r.err.find("Vulkan0"), std::string::npos) << r.err;
}

}  // namespace
