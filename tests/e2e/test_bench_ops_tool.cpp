// loom-bench-ops as a user runs it: exit codes, the test-backend-ops output shape on SIM0,
// --list-ops and --show-coverage naming every op, perf JSON, --limits, bad flags, and (in a
// -DLOOM_BROKEN_KERNELS=ON build) the broken devices reported as FAIL with the case named.
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include "loom/graph/op.h"
#include "tool_runner.h"

namespace {

namespace fs = std::filesystem;

using Result = loom::test::ToolResult;

Result run(const std::string& args) { return loom::test::run_tool("loom-bench-ops " + args); }

std::string last_line(const std::string& s) {
  const size_t end = s.find_last_not_of('\n');
  if (end == std::string::npos) return {};
  const size_t start = s.rfind('\n', end);
  return s.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

TEST(BenchOpsTool, TestModeOnSim0HasTheTestBackendOpsShape) {
  Result r = run("test -b SIM0 --sim-devices 1x1GiB -o MUL_MAT,RMS_NORM_MUL,TOPK_MOE -t 2");
  ASSERT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n  MUL_MAT\(type_a=q4_0,type_b=f32,m=16,n=1,k=256\): OK\n)"))) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n  RMS_NORM_MUL\([^)]*\): OK\n)")));
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n  TOPK_MOE\([^)]*gating=sigmoid[^)]*\): OK\n)")));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex(R"(\n  (\d+)/(\d+) tests passed\n  Backend SIM0: OK\n1/1 backends passed\n)")));
  EXPECT_EQ(m[1], m[2]);
  EXPECT_GE(std::stoi(m[1]), 60);
  EXPECT_EQ(last_line(r.out), "OK");
}

TEST(BenchOpsTool, ListOpsAndCoverageNameEveryOp) {
  Result list = run("--list-ops");
  ASSERT_EQ(list.rc, 0) << list.err;
  Result cov = run("--show-coverage");
  ASSERT_EQ(cov.rc, 0) << cov.out << cov.err;
  for (int i = 1; i < loom::kOpCount; ++i) {
    const loom::OpInfo& info = loom::op_info((loom::OpKind)i);
    std::smatch m;
    ASSERT_TRUE(std::regex_search(cov.out, m, std::regex("\n  " + std::string(info.name) + " +([0-9]+) test +[0-9]+ grad +[0-9]+ perf +([0-9]+) in graphs")))
        << info.name;
    if (info.is_view) {
      EXPECT_GT(std::stoi(m[2]), 0) << info.name << " is read through by no case";
    } else {
      EXPECT_GT(std::stoi(m[1]), 0) << info.name << " has no test case";
      EXPECT_NE(("\n" + list.out).find("\n" + std::string(info.name) + "\n"), std::string::npos) << info.name;
    }
  }
  for (const char* fused : {"RMS_NORM_MUL", "TOPK_MOE"}) {
    EXPECT_NE(list.out.find(std::string(fused) + "\n"), std::string::npos);
    EXPECT_NE(cov.out.find("  " + std::string(fused) + " "), std::string::npos);
  }
}

TEST(BenchOpsTool, PerfJsonAndConsole) {
  Result j = run("perf -o ADD,RMS_NORM -b CPU --perf-seconds 0.01 --output json");
  ASSERT_EQ(j.rc, 0) << j.err;
  const nlohmann::json doc = nlohmann::json::parse(j.out);
  ASSERT_EQ(doc["results"].size(), 3u);
  for (const auto& r : doc["results"]) {
    EXPECT_EQ(r["mode"], "perf");
    EXPECT_GT(r["us_per_run"].get<double>(), 0.0);
  }
  Result c = run("perf -o RMS_NORM_MUL -b CPU --perf-seconds 0.01 -p 4096,1,");
  ASSERT_EQ(c.rc, 0) << c.err;
  EXPECT_TRUE(std::regex_search(c.out, std::regex(R"(\n  RMS_NORM_MUL\([^)]*\): +\d+ runs - +[0-9.]+ us/run - +48 kB/run - +[0-9.]+ GB/s\n)"))) << c.out;
}

TEST(BenchOpsTool, GradModePasses) {
  Result r = run("grad -o MUL_MAT,SOFT_MAX,RMS_NORM,CLAMP -t 2");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n  CLAMP\([^)]*\): not supported \[no gradient rule for CLAMP\]\n)"))) << r.out;
  EXPECT_EQ(last_line(r.out), "OK");
}

TEST(BenchOpsTool, LimitsJson) {
  Result r = run("--limits --json -t 1");
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["fp32_gflops"].get<double>(), 0.0);
  EXPECT_GT(j["read_gbps"].get<double>(), 0.0);
}

TEST(BenchOpsTool, BadFlagsExitTwoWithOneLine) {
  for (const char* args : {"-b NOPE", "-o MATMUL", "--output xml", "fast", "-p '('", "--sim-devices 3XB",
                           "perf --perf-seconds nan", "perf --perf-seconds 0", "perf --perf-seconds 1e12"}) {
    Result r = run(args);
    EXPECT_EQ(r.rc, 2) << args << ": " << r.out << r.err;
    EXPECT_EQ(r.err.rfind("loom-bench-ops: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
}

TEST(BenchOpsTool, BrokenKernelsAreCaught) {
  Result probe = run("test -b BROKEN_VALUE -o ADD -p ne_b=.1,1,1,1.");
  if (probe.rc == 2) GTEST_SKIP() << "built without -DLOOM_BROKEN_KERNELS=ON";
  for (const char* dev : {"BROKEN_VALUE", "BROKEN_OOB", "BROKEN_NAN"}) {
    Result r = run(std::string("test -b ") + dev + " -o MUL_MAT,ADD");
    EXPECT_EQ(r.rc, 1) << dev;
    EXPECT_TRUE(std::regex_search(r.out, std::regex(R"(\n  MUL_MAT\(type_a=f32,type_b=f32,m=16,n=1,k=256\): .+ FAIL\n)"))) << r.out;
    EXPECT_NE(r.out.find("  ADD(type_a=f32,type_b=f32,ne_a=[10,5,4,3],ne_b=[10,5,4,3]): OK\n"), std::string::npos);
    EXPECT_EQ(last_line(r.out), "FAIL");
  }
}

}  // namespace
