// loom-bench as a user runs it: the md/json/csv shapes of a tiny model's pp and tg tests, tests
// at a context depth (-d, llama-bench's), and bad flags (exit 2, one error line, no table).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "tool_runner.h"

namespace {

namespace fs = std::filesystem;

using loom::test::quote;
using loom::test::ToolResult;

class BenchTool : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = loom::test::scratch_dir("loom-e2e-bench");
    bin_ = std::string(LOOM_BIN_DIR) + "/loom-bench";
    const std::string gguf = std::string(LOOM_BIN_DIR) + "/loom-gguf";
    if (!fs::exists(bin_) || !fs::exists(gguf)) GTEST_SKIP() << "loom-bench / loom-gguf are not built";
    model_ = (dir_ / "tiny.gguf").string();
    const ToolResult r =
        loom::test::run_command(quote(gguf) + " new --arch llama --preset tiny --seed 5 -o " + quote(model_), dir_);
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  void TearDown() override { loom::test::remove_scratch(dir_); }

  ToolResult run(const std::string& args) {
    return loom::test::run_command(quote(bin_) + " -m " + quote(model_) + " -t 1 " + args, dir_);
  }

  fs::path dir_;
  std::string bin_, model_;
};

TEST_F(BenchTool, TestsAtDepthAreNamedAndReported) {
  ToolResult r = run("-p 8 -n 4 -d 16 -r 2 -o json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["n_prompt"], 8);
  EXPECT_EQ(j[1]["n_gen"], 4);
  for (const auto& t : j) {
    EXPECT_EQ(t["n_depth"], 16);
    EXPECT_EQ(t["samples_ts"].size(), 2u);
    EXPECT_GT(t["avg_ts"].get<double>(), 0.0);
  }
  r = run("-p 8 -n 4 -d 16 -r 1");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("| pp8 @ d16 |"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("| tg4 @ d16 |"), std::string::npos) << r.out;
  r = run("-p 0 -n 4 -r 1 -o csv");  // no depth: the plain names, n_depth 0
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find(",n_prompt,n_gen,n_depth,"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(",0,4,0,"), std::string::npos) << r.out;
}

TEST_F(BenchTool, ContextTooSmallForTheDepthIsAUsageError) {
  for (const char* args : {"-c 16 -d 16 -p 8 -n 0", "-d -1 -n 4 -p 0"}) {
    SCOPED_TRACE(args);
    const ToolResult r = run(std::string(args) + " -r 1");
    EXPECT_EQ(r.rc, 2);
    EXPECT_TRUE(r.out.empty()) << r.out;  // no table header either
    EXPECT_NE(r.err.find("loom-bench: error:"), std::string::npos) << r.err;
  }
}

}  // namespace
