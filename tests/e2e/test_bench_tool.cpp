// loom-bench as a user runs it: the md/json/csv shapes of a tiny model's pp and tg tests, tests
// at a context depth (-d, llama-bench's), llama-bench's sweeps (lists, ranges, -pg, a column per
// setting that varies, jsonl and sql), the read probe between generated tokens (--bandwidth), and
// bad flags (exit 2, one error line, no table).
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

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

// The table rows of markdown output (after the header and its rule).
std::vector<std::string> md_rows(const std::string& out) {
  std::vector<std::string> rows;
  std::istringstream in(out);
  std::string line;
  int n = 0;
  while (std::getline(in, line))
    if (line.rfind("| ", 0) == 0 && n++ >= 2) rows.push_back(line);
  return rows;
}

TEST_F(BenchTool, ThreadListMakesOneRowPerTestAndThreadCount) {
  // the example: two prompt sizes and one generation per thread count, threads a column
  const ToolResult r = loom::test::run_command(
      quote(bin_) + " -m " + quote(model_) + " -p 64,128 -n 16 -t 1,2 -r 1 -o md", dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("| threads |"), std::string::npos) << r.out;
  const std::vector<std::string> rows = md_rows(r.out);
  ASSERT_EQ(rows.size(), 6u) << r.out;
  const char* want[] = {"| 1 | pp64 |", "| 1 | pp128 |", "| 1 | tg16 |", "| 2 | pp64 |", "| 2 | pp128 |", "| 2 | tg16 |"};
  for (size_t i = 0; i < 6; ++i) EXPECT_NE(rows[i].find(want[i]), std::string::npos) << rows[i];
}

TEST_F(BenchTool, JsonLinesRangesAndPromptGenerationPairs) {
  ToolResult r = run("-p 8-32*2 -n 0 -pg 8,4 -r 1 -o jsonl");  // 8, 16, 32, then pp8+tg4
  ASSERT_EQ(r.rc, 0) << r.err;
  std::istringstream in(r.out);
  std::string line;
  std::vector<nlohmann::json> rows;
  while (std::getline(in, line)) rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 4u) << r.out;
  EXPECT_EQ(rows[0]["n_prompt"], 8);
  EXPECT_EQ(rows[1]["n_prompt"], 16);
  EXPECT_EQ(rows[2]["n_prompt"], 32);
  EXPECT_EQ(rows[3]["n_prompt"], 8);
  EXPECT_EQ(rows[3]["n_gen"], 4);
  for (const auto& j : rows) {
    EXPECT_EQ(j["backend"], "CPU");
    EXPECT_EQ(j["n_threads"], 1);
  }
  r = run("-p 4-12+4 -n 0 -r 1 -o json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 3u);
  EXPECT_EQ(j[2]["n_prompt"], 12);
}

TEST_F(BenchTool, VaryingSettingsGetColumnsAndSqlInserts) {
  ToolResult r = run("-p 8 -n 0 -fa 1 -ctk f16,q8_0 -ub 4,8 -r 1");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("| n_ubatch | type_k | test |"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("type_v"), std::string::npos) << "type_v did not vary: no column";
  EXPECT_EQ(md_rows(r.out).size(), 4u) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\\| 8 \\| q8_0 \\| pp8 \\|"))) << r.out;
  r = run("-p 8 -n 2 -r 1 -o sql");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind("CREATE TABLE IF NOT EXISTS test (", 0), 0u) << r.out;
  size_t inserts = 0;
  for (size_t p = r.out.find("INSERT INTO test ("); p != std::string::npos; p = r.out.find("INSERT INTO test (", p + 1))
    ++inserts;
  EXPECT_EQ(inserts, 2u) << r.out;
}

// llama-bench's -nkvo 0|1 list: one row per value, an nkvo column, and the field in every row.
TEST_F(BenchTool, NoKvOffloadIsASweptSetting) {
  ToolResult r = run("--sim-devices 1GiB -ngl all -p 8 -n 2 -nkvo 0,1 -r 1");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("| nkvo | test |"), std::string::npos) << r.out;
  EXPECT_EQ(md_rows(r.out).size(), 4u) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\\| 1 \\| tg2 \\|"))) << r.out;
  r = run("--sim-devices 1GiB -ngl all -p 8 -n 0 -nkvo 1 -r 1 -o jsonl");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out.substr(0, r.out.find('\n')))["no_kv_offload"], true) << r.out;
}

// -mmp 0,1 (one model load each), --progress's lines and -oe's second copy of the rows on
// stderr, as llama-bench prints them.
TEST_F(BenchTool, MmapListProgressAndRowsOnStderr) {
  const ToolResult r = run("-p 8 -n 2 -r 2 -mmp 0,1 --progress -oe jsonl --delay 0");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("| mmap | test |"), std::string::npos) << r.out;
  ASSERT_EQ(md_rows(r.out).size(), 4u) << r.out;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("\\| 1 \\| tg2 \\|"))) << r.out;
  for (const char* line :
       {"loom-bench: benchmark 1/4: starting\n", "loom-bench: benchmark 1/4: warmup prompt run\n",
        "loom-bench: benchmark 1/4: prompt run 2/2\n", "loom-bench: benchmark 4/4: warmup generation run\n",
        "loom-bench: benchmark 4/4: generation run 1/2\n"})
    EXPECT_NE(r.err.find(line), std::string::npos) << line << r.err;
  std::vector<nlohmann::json> rows;
  std::istringstream err(r.err);
  for (std::string line; std::getline(err, line);)
    if (!line.empty() && line[0] == '{') rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 4u) << r.err;
  EXPECT_EQ(rows[0]["use_mmap"], false);
  EXPECT_EQ(rows[3]["use_mmap"], true);
  EXPECT_EQ(rows[3]["n_gen"], 2);
  for (const char* args : {"-oe yaml", "--delay -1", "-mmp 2"}) {
    const ToolResult bad = run(std::string(args) + " -p 8 -n 1 -r 1");
    EXPECT_EQ(bad.rc, 2) << args << ": " << bad.err;
    EXPECT_TRUE(bad.out.empty()) << args << ": " << bad.out;
  }
}

TEST_F(BenchTool, ListDevicesAndBadListsAreUsageErrors) {
  ToolResult r = loom::test::run_command(quote(bin_) + " --list-devices --sim-devices 1GiB", dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("SIM0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("CPU"), std::string::npos) << r.out;
  for (const char* args :
       {"-p 8-4", "-p 8,,16", "-p 4-64*1", "-t 1,x", "-pg 8", "-o yaml", "-ctk f16,q9_0", "-nkvo 2", "-nkvo 0,x"}) {
    SCOPED_TRACE(args);
    r = run(std::string(args) + " -n 1 -r 1");
    EXPECT_EQ(r.rc, 2) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_NE(r.err.find("loom-bench: error:"), std::string::npos) << r.err;
  }
}

TEST_F(BenchTool, BackendNamesTheDevicesThatHeldTheWeights) {
  const ToolResult r = run("--sim-devices 1GiB -ngl all -p 8 -n 0 -r 1 -o jsonl");
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out.substr(0, r.out.find('\n')));
  EXPECT_NE(j["backend"].get<std::string>().find("SIM0"), std::string::npos) << r.out;
}

TEST_F(BenchTool, BandwidthSetsEachTokenAgainstAReadOfMemory) {
  ToolResult r = run("-p 4 -n 3 -r 2 --bandwidth -o json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_FALSE(j[0].contains("samples_read_gbps")) << "pp tests are not probed";
  EXPECT_EQ(j[0]["avg_read_gbps"], 0.0);
  const nlohmann::json& tg = j[1];
  ASSERT_EQ(tg["samples_weight_gbps"].size(), 6u);  // 3 tokens x 2 repetitions
  ASSERT_EQ(tg["samples_read_gbps"].size(), 6u);
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_GT(tg["samples_weight_gbps"][i].get<double>(), 0.0);
    EXPECT_GT(tg["samples_read_gbps"][i].get<double>(), 0.1);  // a 512 MiB read, not a cached one
  }
  EXPECT_GT(tg["median_read_ratio"].get<double>(), 0.0);
  r = run("-p 4 -n 3 -r 1 --bandwidth -o csv");  // one set of columns for the pp and tg rows
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.find("samples"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(",avg_weight_gbps,avg_read_gbps,median_read_ratio\n"), std::string::npos) << r.out;
  r = run("-p 4 -n 3 -r 1 --bandwidth");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("| t/s | weights GB/s | read GB/s | % of read |"), std::string::npos) << r.out;
  const std::vector<std::string> rows = md_rows(r.out);
  ASSERT_EQ(rows.size(), 2u) << r.out;
  EXPECT_NE(rows[0].find("| - | - | - |"), std::string::npos) << rows[0];
  const std::regex probed("\\| tg3 \\| .* \\| [0-9.]+ \\| [0-9.]+ \\| [0-9.]+% \\|$");
  EXPECT_TRUE(std::regex_search(rows[1], probed)) << rows[1];
}

TEST_F(BenchTool, BandwidthControlReadsInPlaceOfTheTokens) {
  ToolResult r = run("-p 0 -n 2 -r 1 --bandwidth --bandwidth-control -o json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j.size(), 1u);
  ASSERT_EQ(j[0]["samples_weight_gbps"].size(), 2u);
  EXPECT_GT(j[0]["median_read_ratio"].get<double>(), 0.0) << r.out;
  r = run("-p 0 -n 2 -r 1 --bandwidth-control");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("loom-bench: error: --bandwidth-control needs --bandwidth"), std::string::npos) << r.err;
}

TEST_F(BenchTool, BandwidthRefusesWeightsOffTheCpu) {
  const ToolResult r = run("--sim-devices 1GiB -ngl all -p 0 -n 2 -r 1 --bandwidth");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
  EXPECT_NE(r.err.find("loom-bench: error: --bandwidth reads the host's memory, but the weights are on SIM0"),
            std::string::npos)
      << r.err;
}

}  // namespace
