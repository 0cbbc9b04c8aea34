// The newer architectures through the tools as a user drives them: loom-gguf new writes each
// one's full tensor set, loom-run generates the same greedy text on one device, split over
// layers and split by tensors, perplexity runs, loom-fit-params and loom-split-inspect plan them,
// and loom-train trains each one.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <string>

#include "tool_runner.h"

namespace {

namespace fs = std::filesystem;
using loom::test::quote;
using loom::test::run_tool;
using Result = loom::test::ToolResult;

struct ArchCase {
  const char* arch;
  const char* extra;  // flags of loom-gguf new
  std::set<std::string> must_have;  // tensor names of the architecture's set
};

const ArchCase kCases[] = {
    {"gemma2", "", {"blk.0.post_attention_norm.weight", "blk.1.post_ffw_norm.weight", "blk.0.ffn_gate.weight"}},
    {"gemma3", "", {"blk.5.attn_q_norm.weight", "blk.5.attn_k_norm.weight", "blk.0.post_ffw_norm.weight"}},
    {"phi3", "", {"blk.0.attn_qkv.weight", "rope_factors_long.weight", "rope_factors_short.weight", "output.weight"}},
    {"gpt-oss",
     "",
     {"blk.1.attn_sinks.weight", "blk.0.attn_output.bias", "blk.0.ffn_gate_inp.bias", "blk.0.ffn_down_exps.bias",
      "blk.1.post_attention_norm.weight", "blk.0.attn_q.bias"}},
    {"llama", "--rope-freqs", {"rope_freqs.weight", "blk.0.ffn_gate.weight", "output.weight"}},
    {"granite", "", {"blk.0.attn_q.weight", "blk.1.ffn_gate.weight", "token_embd.weight"}},
    {"gemma", "", {"blk.1.attn_k.weight", "blk.0.ffn_norm.weight", "token_embd.weight"}},
    {"qwen2moe", "", {"blk.0.ffn_gate_inp_shexp.weight", "blk.1.ffn_up_shexp.weight", "blk.0.attn_v.bias"}},
    {"smollm3", "", {"blk.3.attn_q.weight", "blk.0.ffn_gate.weight", "token_embd.weight"}},
    {"glm4", "", {"blk.0.post_ffw_norm.weight", "blk.1.attn_q.bias", "blk.0.ffn_up.weight"}},
    {"command-r", "", {"blk.1.attn_norm.weight", "blk.0.ffn_gate.weight", "token_embd.weight"}},
    {"cohere2", "", {"blk.3.attn_q.weight", "blk.0.ffn_up.weight", "output_norm.weight"}},
    {"granitemoe",
     "--n-ff-shared 96",
     {"blk.1.ffn_up_exps.weight", "blk.0.ffn_down_shexp.weight", "token_embd.weight"}},
    {"olmoe", "", {"blk.0.attn_k_norm.weight", "blk.1.ffn_gate_inp.weight", "blk.0.ffn_norm.weight"}},
    {"ernie4_5", "", {"blk.1.attn_q.weight", "blk.0.ffn_norm.weight", "token_embd.weight"}},
    {"exaone4", "--rope-freqs", {"rope_freqs.weight", "blk.1.attn_q_norm.weight", "blk.0.post_ffw_norm.weight"}},
    {"seed_oss", "", {"blk.0.post_attention_norm.weight", "blk.1.attn_k.bias", "output.weight"}},
    {"mistral3", "--rope-freqs", {"rope_freqs.weight", "blk.1.attn_v.weight", "output.weight"}},
    {"llama4", "--rope-freqs", {"blk.0.ffn_gate.weight", "blk.1.ffn_up_shexp.weight", "blk.3.ffn_down_exps.weight"}},
    {"ernie4_5-moe", "", {"blk.0.ffn_gate.weight", "blk.1.exp_probs_b.bias", "blk.1.ffn_down_shexp.weight"}},
    {"olmo2", "--n-swa 8 --n-layer 4", {"blk.0.attn_q_norm.weight", "blk.3.post_ffw_norm.weight", "output.weight"}},
    {"glm4moe",
     "",
     {"blk.0.ffn_gate.weight", "blk.1.exp_probs_b.bias", "blk.1.ffn_gate_shexp.weight", "blk.1.attn_q.bias",
      "blk.2.nextn.eh_proj.weight", "blk.2.ffn_up_exps.weight"}},
};

class ArchTools : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("loom-e2e-arch-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    for (const ArchCase& c : kCases) {
      const Result r = run_tool(std::string("loom-gguf new --arch ") + c.arch + " --preset tiny --seed 1 " + c.extra +
                                " -o " + quote(model(c.arch)));
      ASSERT_EQ(r.rc, 0) << c.arch << ": " << r.err;
    }
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string model(const std::string& arch) { return (dir_ / ("tiny-" + arch + ".gguf")).string(); }
  static fs::path dir_;
};
fs::path ArchTools::dir_;

TEST_F(ArchTools, NewWritesEachArchitecturesTensorSet) {
  for (const ArchCase& c : kCases) {
    SCOPED_TRACE(c.arch);
    const Result r = run_tool("loom-gguf info --json " + quote(model(c.arch)));
    ASSERT_EQ(r.rc, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["metadata"]["general.architecture"], c.arch);
    std::set<std::string> names;
    for (const auto& t : j["tensors"]) names.insert(t["name"].get<std::string>());
    for (const std::string& n : c.must_have) EXPECT_TRUE(names.count(n)) << n;
  }
  // gemma ties its output to the embeddings; Gemma 1 has no post norms
  for (const char* arch : {"gemma", "gemma2"}) {
    const nlohmann::json g = nlohmann::json::parse(run_tool("loom-gguf info --json " + quote(model(arch))).out);
    for (const auto& t : g["tensors"]) {
      EXPECT_NE(t["name"], "output.weight") << arch;
      if (std::string(arch) == "gemma") EXPECT_EQ(t["name"].get<std::string>().find("post_"), std::string::npos);
    }
  }
}

// --tied: a llama without output.weight (Llama 3.2 1B/3B), its token embeddings the output matrix
// (repacked on the CPU where the type has a repacked layout, and still looked up by GET_ROWS)
TEST_F(ArchTools, NewTiedLlamaHasNoOutputMatrixAndRuns) {
  const std::string path = (dir_ / "tied-q4_0.gguf").string();
  Result r = run_tool("loom-gguf new --arch llama --preset tiny --tied --type q4_0 -o " + quote(path));
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run_tool("loom-gguf info --json " + quote(path));
  ASSERT_EQ(r.rc, 0) << r.err;
  std::set<std::string> names;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const auto& t : j["tensors"]) names.insert(t["name"].get<std::string>());
  EXPECT_TRUE(names.count("token_embd.weight"));
  EXPECT_FALSE(names.count("output.weight"));
  for (const char* layout : {"", " --no-repack"}) {
    r = run_tool("loom-run -m " + quote(path) + " -p 'hello world' -n 8 --temp 0" + layout);
    ASSERT_EQ(r.rc, 0) << layout << ": " << r.err;
    EXPECT_EQ(r.out.rfind("hello world", 0), 0u) << r.out;
  }
}

// --n-rot: Phi-4-mini's partial rotary embeddings (3/4 of each head), the RoPE factors as long as
// the rotated pairs; --n-ctx-train moves phi3's original context to a quarter of it. The text is
// the same on one device, over a layer split and under -sm tensor; only phi3 takes --n-rot.
TEST_F(ArchTools, NewPhi4MiniShapeRunsEverywhere) {
  const std::string path = (dir_ / "phi4-mini.gguf").string();
  Result r = run_tool("loom-gguf new --arch phi3 --preset tiny --n-rot 24 --n-ctx-train 2048 --tied -o " + quote(path));
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run_tool("loom-gguf info --json " + quote(path));
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["metadata"]["phi3.rope.dimension_count"], 24);
  EXPECT_EQ(j["metadata"]["phi3.rope.scaling.original_context_length"], 512);
  int factors = 0;
  for (const auto& t : j["tensors"]) {
    if (t["name"].get<std::string>().rfind("rope_factors_", 0) == 0) {
      EXPECT_EQ(t["shape"], nlohmann::json::array({12}));
      ++factors;
    }
  }
  EXPECT_EQ(factors, 2);
  const std::string base = "loom-run -m " + quote(path) + " -p 'hello world' -n 16 --temp 0";
  const Result one = run_tool(base);
  ASSERT_EQ(one.rc, 0) << one.err;
  for (const char* mode : {" --sim-devices 2x1GiB -ngl 99 -ts 1,1", " -sm tensor --sim-devices 2x64MiB -ts 1,1"}) {
    r = run_tool(base + mode);
    ASSERT_EQ(r.rc, 0) << mode << ": " << r.err;
    EXPECT_EQ(r.out, one.out) << mode;
  }
  for (const char* bad : {"--arch phi3 --n-rot 25", "--arch phi3 --n-rot 34", "--arch llama --n-rot 16"}) {
    r = run_tool(std::string("loom-gguf new --preset tiny ") + bad + " -o " + quote((dir_ / "bad.gguf").string()));
    EXPECT_EQ(r.rc, 2) << bad;
    EXPECT_NE(r.err.find("n_rot"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir_ / "bad.gguf")) << bad;
  }
}

// --n-swa: a window for the architectures that have sliding-window layers (olmo2 gets OLMo 3's
// pattern); refused elsewhere and when not positive, with nothing written.
TEST_F(ArchTools, NewSlidingWindowOnlyWhereTheArchitectureHasOne) {
  // exaone4's window applies with 64 layers only (llama.cpp's loader)
  for (const char* bad : {"--arch llama --n-swa 8", "--arch olmo2 --n-swa 0", "--arch qwen3 --n-swa 16",
                          "--arch exaone4 --n-swa 8"}) {
    const Result r =
        run_tool(std::string("loom-gguf new --preset tiny ") + bad + " -o " + quote((dir_ / "bad.gguf").string()));
    EXPECT_EQ(r.rc, 2) << bad;
    EXPECT_NE(r.err.find("--n-swa"), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(dir_ / "bad.gguf")) << bad;
  }
  const Result ok = run_tool("loom-gguf info " + quote(model("olmo2")));
  ASSERT_EQ(ok.rc, 0) << ok.err;
  EXPECT_NE(ok.out.find("olmo2.attention.sliding_window_pattern"), std::string::npos) << ok.out;
}

TEST_F(ArchTools, GreedyTextIsTheSameInEverySplitMode) {
  for (const ArchCase& c : kCases) {
    SCOPED_TRACE(c.arch);
    const std::string base = "loom-run -m " + quote(model(c.arch)) + " -p 'hello world' -n 16 --temp 0";
    const Result one = run_tool(base);
    ASSERT_EQ(one.rc, 0) << one.err;
    EXPECT_EQ(one.out.rfind("hello world", 0), 0u) << one.out;
    for (const char* mode : {" -t 1", " -fa off", " --sim-devices 2x1GiB -ngl 99 -ts 1,1",
                             " -sm tensor --sim-devices 2x64MiB -ts 1,1", " -sm tensor --sim-devices 3x64MiB -ts 3,2,2"}) {
      const Result r = run_tool(base + mode);
      ASSERT_EQ(r.rc, 0) << mode << ": " << r.err;
      EXPECT_EQ(r.out, one.out) << mode;
    }
  }
}

TEST_F(ArchTools, PerplexityFitAndInspectRun) {
  const std::string text = (dir_ / "ppl.txt").string();
  {
    std::ofstream f(text);
    for (int i = 0; i < 40; ++i) f << "The quick brown fox jumps over the lazy dog. ";
  }
  for (const ArchCase& c : kCases) {
    SCOPED_TRACE(c.arch);
    const Result p = run_tool("loom-run -m " + quote(model(c.arch)) + " --perplexity -f " + quote(text) + " -c 64 --chunks 2");
    ASSERT_EQ(p.rc, 0) << p.err;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(p.out, m, std::regex("Final estimate: PPL = ([0-9.]+)"))) << p.out;
    EXPECT_GT(std::stod(m[1]), 1.0);
    const Result f = run_tool("loom-fit-params -m " + quote(model(c.arch)) + " --sim-devices 2x64MiB --json");
    EXPECT_EQ(f.rc, 0) << f.err;
    const Result s = run_tool("loom-split-inspect -m " + quote(model(c.arch)) + " --sim-devices 2x64MiB -ngl all -ts 1,1");
    EXPECT_EQ(s.rc, 0) << s.err;
  }
}

// loom-train on each architecture's tiny model: the loss falls over a few steps and a
// checkpoint resumes to the uninterrupted run's bytes.
TEST_F(ArchTools, TrainingLowersTheLossAndResumesBitExact) {
  if (!fs::exists(fs::path(LOOM_BIN_DIR) / "loom-train")) GTEST_SKIP() << "loom-train is not built";
  const std::string text = (dir_ / "train.txt").string();
  {
    std::ofstream f(text);
    for (int i = 0; i < 40; ++i) f << "The quick brown fox jumps over the lazy dog. ";
  }
  const auto out = [](const std::string& name) { return quote((dir_ / name).string()); };
  for (const ArchCase& c : kCases) {
    SCOPED_TRACE(c.arch);
    const std::string a = c.arch;
    auto train = [&](const std::string& extra) {
      return run_tool("loom-train -f " + quote(text) + " -m " + quote(model(a)) +
                      " -c 32 -b 2 -lr 3e-3 --steps 6 -t 2 --seed 1 " + extra);
    };
    const std::string csv = (dir_ / (a + ".csv")).string();
    Result r = train("--log-csv " + quote(csv) + " -o " + out(a + "-a.gguf"));
    ASSERT_EQ(r.rc, 0) << r.err;
    std::vector<double> losses;  // step,epoch,loss,...
    std::ifstream f(csv);
    for (std::string line; std::getline(f, line);)
      if (!line.empty() && std::isdigit((unsigned char)line[0])) {
        const size_t c1 = line.find(','), c2 = line.find(',', c1 + 1);
        losses.push_back(std::stod(line.substr(c2 + 1)));
      }
    ASSERT_EQ(losses.size(), 6u);
    EXPECT_LT(losses.back(), losses.front());

    const std::string ck = out(a + ".ckpt");
    r = train("--checkpoint " + ck + " --checkpoint-every 3 -o " + out(a + "-x.gguf"));
    ASSERT_EQ(r.rc, 0) << r.err;
    r = train("--resume " + ck + " -o " + out(a + "-resumed.gguf"));
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_NE(r.err.find("resuming at step 3"), std::string::npos) << r.err;
    EXPECT_TRUE(loom::test::slurp(dir_ / (a + "-a.gguf")) == loom::test::slurp(dir_ / (a + "-resumed.gguf")))
        << "the resumed run differs from the uninterrupted one";
  }
  const Result r = run_tool("loom-gguf new --arch gemma2 --preset tiny --rope-freqs -o " + quote((dir_ / "x.gguf").string()));
  EXPECT_EQ(r.rc, 2) << r.err;
}

}  // namespace
