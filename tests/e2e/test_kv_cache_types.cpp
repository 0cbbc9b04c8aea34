// KV cache types as a llama.cpp user sets them (-ctk/-ctv with -fa): quantized caches generate and
// score text close to the f16 cache, a quantized V without flash attention is a usage error, and
// the KV bytes fit-params and split-inspect report follow the type and equal what a run allocates.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>
#include <vector>

#include "tool_runner.h"

namespace {

namespace fs = std::filesystem;
using loom::test::run_tool;
using loom::test::ToolResult;

class KvCacheTypes : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("loom-e2e-kv-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    model_ = (dir_ / "tiny.gguf").string();
    ToolResult r = run_tool("loom-gguf new --arch llama --preset tiny --seed 3 -o " + model_);
    ASSERT_EQ(r.rc, 0) << r.err;
    text_ = (dir_ / "text.txt").string();
    std::ofstream f(text_);
    for (int i = 0; i < 40; ++i)
      f << "The meaning of life is a question people ask at night. A friend in need is a friend indeed, said "
        << "the old man " << i % 7 << " times. ";
  }
  // The bundled default model (trained: its attention matters, unlike a random model's).
  static std::string trained() { return std::string(LOOM_SOURCE_DIR) + "/models/loom-default.gguf"; }
  static void TearDownTestSuite() { fs::remove_all(dir_); }

  // Final PPL of loom-run --perplexity with these flags.
  static double ppl(const std::string& flags) {
    ToolResult r = run_tool("loom-run -m " + trained() + " --perplexity -f " + text_ + " -c 128 --chunks 2 -t 2 " + flags);
    EXPECT_EQ(r.rc, 0) << flags << ": " << r.err;
    std::smatch m;
    if (!std::regex_search(r.out, m, std::regex("Final estimate: PPL = ([0-9.]+)"))) return -1;
    return std::stod(m[1]);
  }

  static fs::path dir_;
  static std::string model_, text_;
};
fs::path KvCacheTypes::dir_;
std::string KvCacheTypes::model_, KvCacheTypes::text_;

TEST_F(KvCacheTypes, QuantizedCachesScoreCloseToF16) {
  const double f16 = ppl("");
  ASSERT_GT(f16, 1.0);
  // q8_0 keeps ~8 bits a value: the perplexity moves by well under 1%; q4_0 by a few percent
  for (const auto& [flags, tol] : {std::pair<std::string, double>{"-fa on -ctk q8_0 -ctv q8_0", 0.01},
                                  {"-fa on -ctk q8_0 -ctv f16", 0.01},
                                  {"-fa off -ctk q8_0", 0.01},  // quantized K on the plain attention path
                                  {"-fa on -ctk bf16 -ctv bf16", 0.01},
                                  {"-fa on -ctk q4_0 -ctv q4_0", 0.05}}) {
    SCOPED_TRACE(flags);
    const double p = ppl(flags);
    EXPECT_NEAR(p / f16, 1.0, tol) << "f16 " << f16 << ", " << flags << " " << p;
  }
  // flash attention and the plain path read the same q8_0 K rows: the same scores up to rounding
  EXPECT_NEAR(ppl("-fa on -ctk q8_0") / ppl("-fa off -ctk q8_0"), 1.0, 1e-3);
}

TEST_F(KvCacheTypes, GreedyTokensStayWithF16) {
  auto tokens = [&](const std::string& flags) {
    ToolResult r = run_tool("loom-run -m " + trained() + " -p 'The meaning of life is' -n 24 --temp 0 -t 2 --json " + flags);
    EXPECT_EQ(r.rc, 0) << flags << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out, nullptr, false);
    return j.is_discarded() ? std::vector<int>{} : j["tokens"].get<std::vector<int>>();
  };
  const std::vector<int> f16 = tokens("");
  ASSERT_GT(f16.size(), 24u);
  EXPECT_EQ(tokens("-fa on -ctk q8_0 -ctv q8_0"), f16) << "q8_0: the greedy text of the f16 cache";
  const std::vector<int> q4 = tokens("-fa on -ctk q4_0 -ctv q4_0");
  ASSERT_EQ(q4.size(), f16.size());
  size_t same = 0;  // q4_0 may drift late in the text; its first tokens agree
  while (same < q4.size() && q4[same] == f16[same]) ++same;
  EXPECT_GE(same, f16.size() - 16) << "q4_0 greedy tokens diverge at " << same;
}

TEST_F(KvCacheTypes, QuantizedVNeedsFlashAttention) {
  ToolResult r = run_tool("loom-run -m " + model_ + " -p hi -n 2 -fa off -ctv q8_0");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("flash attention"), std::string::npos) << r.err;
  r = run_tool("loom-run -m " + model_ + " -p hi -n 2 -ctk q3_0");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("q4_0"), std::string::npos) << "the message lists the types: " << r.err;
}

// The tiny model: 2 layers, 4 KV heads of 64 (n_embd_kv 256); a q8_0 row of 256 values is 8
// blocks of 34 bytes, an f16 row 512 bytes.
TEST_F(KvCacheTypes, ContextBytesFollowTheTypeAndMatchTheRun) {
  const int64_t n_ctx = 256;
  auto context_bytes = [&](const std::string& tool, const std::string& flags) -> double {
    ToolResult r = run_tool(tool + " -m " + model_ + " -c " + std::to_string(n_ctx) + " --json " + flags);
    EXPECT_EQ(r.rc, 0) << tool << " " << flags << ": " << r.err;
    const auto j = nlohmann::json::parse(r.out, nullptr, false);
    if (j.is_discarded() || !j.contains("devices") || j["devices"].empty()) return -1;
    const auto& d = j["devices"].back();  // the CPU
    return d.value("context_bytes", -1.0);
  };
  const double f16 = context_bytes("loom-split-inspect", "");
  const double q8 = context_bytes("loom-split-inspect", "-ctk q8_0 -ctv q8_0");
  const double q4 = context_bytes("loom-split-inspect", "-ctk q4_0 -ctv q4_0");
  ASSERT_GT(f16, 0);
  EXPECT_NEAR(q8 / f16, 34.0 / 64.0, 0.01) << "q8_0: 34 bytes per 32 values against f16's 64";
  EXPECT_NEAR(q4 / f16, 18.0 / 64.0, 0.01) << "q4_0: 18 bytes per 32 values";
  EXPECT_EQ(context_bytes("loom-run", "-p hi -n 1 -ctk q8_0 -ctv q8_0"), q8) << "what a run allocates";
}

}  // namespace
