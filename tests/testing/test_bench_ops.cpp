// loom-bench-ops in process: output shapes of each mode and format, --list-ops, --show-coverage,
// option errors, and the machine-limits measurement (its threads' placement).
#include <gtest/gtest.h>
#include <sched.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/graph/op.h"
#include "loom/testing/bench_ops.h"
#include "loom/testing/limits.h"

namespace loom::testing {
namespace {

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

std::string last_line(const std::string& text) {
  const size_t end = text.find_last_not_of('\n');
  const size_t start = text.rfind('\n', end);
  return text.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
}

TEST(BenchOps, TestModeOnCpuHasTheConsoleShape) {
  BenchOpsOptions o;
  o.ops = {"RMS_NORM_MUL", "TOPK_MOE"};
  o.backends = {"CPU"};
  auto [rc, text] = capture(o);
  EXPECT_EQ(rc, 0) << text;
  EXPECT_TRUE(std::regex_search(text, std::regex(R"(\n  TOPK_MOE\(n_expert=128,k=8,n_tokens=33,[^)]*\): OK\n)"))) << text;
  EXPECT_TRUE(std::regex_search(text, std::regex(R"(\n  (\d+)/\1 tests passed\n  Backend CPU: OK\n1/1 backends passed\nOK\n$)"))) << text;
  EXPECT_EQ(last_line(text), "OK");
}

TEST(BenchOps, TestModeSkipsTheCpuUnlessNamed) {
  BenchOpsOptions o;
  o.ops = {"ADD"};
  o.sim_devices = "1x512MiB";
  auto [rc, text] = capture(o);
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("Backend 1/2: SIM0\n"), std::string::npos) << text;
  EXPECT_NE(text.find("  Skipping CPU backend\n2/2 backends passed\nOK\n"), std::string::npos) << text;
}

TEST(BenchOps, PerfJsonIsOneDocumentWithRates) {
  BenchOpsOptions o;
  o.mode = "perf";
  o.ops = {"RMS_NORM_MUL"};
  o.params_regex = R"(ne=\[4096,1,)";
  o.backends = {"CPU"};
  o.output = "json";
  o.perf_seconds = 0.01;
  auto [rc, text] = capture(o);
  ASSERT_EQ(rc, 0) << text;
  const nlohmann::json j = nlohmann::json::parse(text);
  ASSERT_EQ(j["results"].size(), 2u);  // fused and not fusable
  for (const auto& r : j["results"]) {
    EXPECT_EQ(r["op"], "RMS_NORM_MUL");
    EXPECT_GT(r["runs"].get<int64_t>(), 0);
    EXPECT_GT(r["gbps"].get<double>(), 0.0);
    EXPECT_DOUBLE_EQ(r["bytes_per_run"].get<double>(), (4096.0 + 4096.0 + 4096.0) * 4);
  }
  EXPECT_TRUE(j["ok"].get<bool>());
}

TEST(BenchOps, PerfConsoleLineShape) {
  BenchOpsOptions o;
  o.mode = "perf";
  o.ops = {"MUL_MAT"};
  o.params_regex = "type_a=q4_0.*n=1,";
  o.backends = {"CPU"};
  o.perf_seconds = 0.01;
  auto [rc, text] = capture(o);
  ASSERT_EQ(rc, 0) << text;
  EXPECT_TRUE(std::regex_search(
      text, std::regex(R"(\n  MUL_MAT\(type_a=q4_0,type_b=f32,m=4096,n=1,k=4096\): +\d+ runs - +[0-9.]+ us/run - +33\.55 MFLOP/run - +[0-9.]+ [kMGT]?FLOPS\n)")))
      << text;
}

// Type names as llama.cpp prints them (q4_K), matched either way; a filter that selects nothing
// is an error (exit 1), not an empty pass.
TEST(BenchOps, ParamsFilterIsCaseInsensitiveAndMustMatch) {
  BenchOpsOptions o;
  o.mode = "support";
  o.ops = {"MUL_MAT"};
  o.backends = {"CPU"};
  for (const char* re : {"type_a=q4_K,", "type_a=Q4_K,", "type_a=q4_k,"}) {
    o.params_regex = re;
    auto [rc, text] = capture(o);
    EXPECT_EQ(rc, 0) << re;
    EXPECT_NE(text.find("MUL_MAT(type_a=q4_K,type_b=f32,m=16,n=1,k=256)"), std::string::npos) << text;
  }
  o.params_regex = "type_a=iq4_xs,";
  EXPECT_NE(capture(o).second.find("type_a=iq4_xs"), std::string::npos);
  o.params_regex = "type_a=nonesuch";
  EXPECT_EQ(capture(o).first, 1);
  o.mode = "test";
  EXPECT_EQ(capture(o).first, 1);
}

TEST(BenchOps, CsvAndSqlHaveOneRowPerCase) {
  BenchOpsOptions o;
  o.mode = "support";
  o.ops = {"COUNT_EQUAL"};
  o.backends = {"CPU"};
  o.output = "csv";
  auto [rc, csv] = capture(o);
  EXPECT_EQ(rc, 0);
  std::istringstream lines(csv);
  std::string line;
  int n = 0;
  while (std::getline(lines, line)) ++n;
  EXPECT_EQ(n, 1 + 3) << csv;  // header + 3 cases
  EXPECT_EQ(csv.rfind("backend,mode,op,params,status", 0), 0u);
  o.output = "sql";
  auto [rc2, sql] = capture(o);
  EXPECT_EQ(rc2, 0);
  EXPECT_EQ(std::count(sql.begin(), sql.end(), '\n'), 4) << sql;
  EXPECT_NE(sql.find("INSERT INTO bench_ops"), std::string::npos);
}

TEST(BenchOps, ListOpsAndCoverageNameEveryOp) {
  BenchOpsOptions o;
  o.list_ops = true;
  auto [rc, list] = capture(o);
  EXPECT_EQ(rc, 0);
  o.list_ops = false;
  o.show_coverage = true;
  auto [rc2, cov] = capture(o);
  EXPECT_EQ(rc2, 0) << cov;
  for (int i = 1; i < kOpCount; ++i) {
    const OpInfo& info = op_info((OpKind)i);
    EXPECT_TRUE(std::regex_search(cov, std::regex("\n  " + std::string(info.name) + " +[0-9]+ test"))) << info.name;
    if (!info.is_view) {
      EXPECT_NE(list.find(std::string(info.name) + "\n"), std::string::npos) << info.name;
    }
  }
  EXPECT_NE(list.find("TOPK_MOE\n"), std::string::npos);
  const std::string all = std::to_string(kOpCount - 1);  // every op but NONE
  EXPECT_NE(cov.find(all + "/" + all + " ops covered"), std::string::npos) << cov;
}

TEST(BenchOps, BadOptionsAreUsageErrors) {
  auto usage = [](BenchOpsOptions o) {
    try {
      capture(o);
    } catch (const Error& e) {
      return e.kind() == ErrorKind::usage;
    }
    return false;
  };
  BenchOpsOptions o;
  o.mode = "fast";
  EXPECT_TRUE(usage(o));
  o = {};
  o.ops = {"MATMUL"};
  EXPECT_TRUE(usage(o));
  o = {};
  o.backends = {"GPU7"};
  EXPECT_TRUE(usage(o));
  o = {};
  o.output = "xml";
  EXPECT_TRUE(usage(o));
  o = {};
  o.params_regex = "(";
  EXPECT_TRUE(usage(o));
}

TEST(Limits, MeasuresPositivePeaksAndPrintsJson) {
  const MachineLimits m = measure_limits(1, 0.02, size_t(16) << 20);
  EXPECT_GT(m.fp32_gflops, 0.1);
  EXPECT_GT(m.read_gbps, 0.1);
  EXPECT_FALSE(m.fma_isa.empty());
  EXPECT_EQ(m.int8_isa.empty(), m.int8_gops == 0.0);
  EXPECT_EQ(m.int8_isa.empty(), m.int8_block32_gops == 0.0);
  EXPECT_EQ(m.bf16_isa.empty(), m.bf16_gflops == 0.0);
  const nlohmann::json j = nlohmann::json::parse(limits_json(m));
  EXPECT_DOUBLE_EQ(j["fp32_gflops"].get<double>(), m.fp32_gflops);
  EXPECT_DOUBLE_EQ(j["int8_block32_gops"].get<double>(), m.int8_block32_gops);
  EXPECT_NE(limits_text(m).find("GFLOPS"), std::string::npos);
}

// loom-bench --bandwidth -C/--cpu-strict: the pool pins the main thread (its thread 0), and the
// probe's threads, started from it, ran on that one CPU and read half the memory's rate. Placed,
// thread t runs where the pool's thread t does.
TEST(Limits, ProbeThreadsRunWhereThePoolsThreadsDo) {
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof saved, &saved), 0);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE && cpus.size() < 2; ++c)
    if (CPU_ISSET(c, &saved)) cpus.push_back(c);
  if (cpus.size() < 2) GTEST_SKIP() << "fewer than two CPUs to place threads on";
  ThreadPlacement strict;
  strict.cpu_sets = {{cpus[0]}, {cpus[1]}};
  place_current_thread(strict, 0);  // as ThreadPool places its calling thread
  std::vector<int> seen(2, -1);
  run_threads(
      2, [&](int t) { seen[(size_t)t] = sched_getcpu(); }, strict);
  std::vector<int> inherited(2, -1);
  run_threads(2, [&](int t) { inherited[(size_t)t] = sched_getcpu(); });
  ASSERT_EQ(sched_setaffinity(0, sizeof saved, &saved), 0);
  EXPECT_EQ(seen, cpus);
  EXPECT_EQ(inherited, std::vector<int>(2, cpus[0]));  // unplaced: the calling thread's one CPU
}

}  // namespace
}  // namespace loom::testing
