// A deliberately broken device (wrong values, a write past the end, a NaN in MUL_MAT results)
// must make test mode report FAIL naming the case, while its other ops still pass; and the
// in-process loom-bench-ops run ends with FAIL and exit code 1.
#include <gtest/gtest.h>

#include <cstdio>
#include <regex>
#include <string>

#include "loom/cpu/cpu.h"
#include "loom/testing/bench_ops.h"
#include "loom/testing/broken_device.h"
#include "loom/testing/runner.h"

namespace loom::testing {
namespace {

const OpCase& find_case(const std::string& op) {
  for (const OpCase* c : cases_for(kModeTest))
    if (c->op == op) return *c;
  throw std::runtime_error("no case " + op);
}

// Runs run_bench_ops with out captured; returns (exit code, text).
std::pair<int, std::string> capture(const BenchOpsOptions& o) {
  std::FILE* f = std::tmpfile();
  const int rc = run_bench_ops(o, f);
  std::rewind(f);
  std::string text;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) text.append(buf, n);
  std::fclose(f);
  return {rc, text};
}

struct Expect {
  Breakage how;
  const char* message;  // part of the failure reason
};

class BrokenDeviceTest : public ::testing::TestWithParam<Expect> {};

TEST_P(BrokenDeviceTest, TestModeReportsTheBrokenOp) {
  cpu::CpuDevice cpu(2);
  BrokenDevice broken("BROKEN", cpu, GetParam().how, OpKind::MUL_MAT);
  const CaseResult r = run_test(find_case("MUL_MAT"), broken);
  EXPECT_EQ(r.status, CaseStatus::fail);
  EXPECT_NE(r.message.find(GetParam().message), std::string::npos) << r.message;
  EXPECT_EQ(run_test(find_case("ADD"), broken).status, CaseStatus::ok);  // only MUL_MAT is broken
}

TEST_P(BrokenDeviceTest, BenchOpsPrintsFailWithTheCaseName) {
  cpu::CpuDevice cpu(2);
  BrokenDevice broken("BROKEN", cpu, GetParam().how, OpKind::MUL_MAT);
  BenchOpsOptions o;
  o.ops = {"MUL_MAT,ADD"};
  o.backends = {"BROKEN"};
  o.extra_devices = {&broken};
  auto [rc, text] = capture(o);
  EXPECT_EQ(rc, 1);
  EXPECT_TRUE(std::regex_search(text, std::regex(R"(\n  MUL_MAT\(type_a=f32,type_b=f32,m=16,n=1,k=256\): .+ FAIL\n)"))) << text;
  EXPECT_TRUE(std::regex_search(text, std::regex(R"(\n  ADD\(type_a=f32,type_b=f32,ne_a=\[10,5,4,3\],ne_b=\[10,5,4,3\]\): OK\n)")));
  EXPECT_NE(text.find("  Backend BROKEN: FAIL\n0/1 backends passed\nFAIL\n"), std::string::npos) << text;
}

INSTANTIATE_TEST_SUITE_P(Breakages, BrokenDeviceTest,
                         ::testing::Values(Expect{Breakage::wrong_value, "NMSE"},
                                           Expect{Breakage::write_past_end, "wrote past the end"},
                                           Expect{Breakage::nan, "NaN"}),
                         [](const auto& info) { return std::string(breakage_name(info.param.how)); });

}  // namespace
}  // namespace loom::testing
