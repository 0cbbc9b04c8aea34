// llama.cpp habits across the tools: --version with the commit, -hf refused, seeds, logging
// flags (-lv, --log-file, --log-disable), and --json where llama.cpp users expect it
// (perplexity, tokenize, train).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tool_runner.h"

namespace {

namespace fs = std::filesystem;
using loom::test::quote;
using loom::test::slurp;
using loom::test::ToolResult;

class CliHabits : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("loom-e2e-habits-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    ToolResult r = run("loom-gguf new --arch llama --preset tiny --seed 1 -o " + model());
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string model() { return (dir_ / "tiny-llama.gguf").string(); }
  static std::string file(const std::string& name) { return (dir_ / name).string(); }
  static ToolResult run(const std::string& args) { return loom::test::run_tool(args); }
  static fs::path dir_;
};
fs::path CliHabits::dir_;

int count_lines(const std::string& s) { return (int)std::count(s.begin(), s.end(), '\n'); }

TEST_F(CliHabits, EveryToolPrintsItsVersionWithTheCommit) {
  for (const char* tool : {"run", "bench", "gguf", "bench-ops", "fit-params", "split-inspect", "train"}) {
    if (!fs::exists(std::string(LOOM_BIN_DIR) + "/loom-" + tool)) continue;
    ToolResult r = run(std::string("loom-") + tool + " --version");
    EXPECT_EQ(r.rc, 0) << tool << ": " << r.err;
    EXPECT_EQ(r.out.rfind(std::string("loom-") + tool + " ", 0), 0u) << r.out;
    EXPECT_NE(r.out.find("(commit "), std::string::npos) << r.out;
  }
}

TEST_F(CliHabits, DownloadFlagIsAUsageErrorNotHelp) {
  ToolResult r = run("loom-run -hf ggml-org/gemma-3-1b-it-GGUF -p hi");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.out, "") << "no help on stdout";
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("download the GGUF"), std::string::npos) << r.err;
}

TEST_F(CliHabits, MultiLetterFlagIsNotSplit) {
  ToolResult r = run("loom-run -m " + model() + " -cnv -p hi -n 2 </dev/null");
  EXPECT_EQ(r.rc, 0) << r.err;
  r = run("loom-gguf info " + model() + " -cnv");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("-cnv"), std::string::npos) << r.err;
}

TEST_F(CliHabits, SeedIsRandomPrintedAndReproducible) {
  const std::string base = "loom-run -m " + model() + " -p hi -n 16 --temp 1 --top-k 0 --top-p 1 --min-p 0 --json";
  ToolResult a = run(base), b = run(base);
  ASSERT_EQ(a.rc, 0) << a.err;
  const auto ja = nlohmann::json::parse(a.out), jb = nlohmann::json::parse(b.out);
  EXPECT_NE(ja["seed"], jb["seed"]) << "the default seed is random";
  EXPECT_NE(a.err.find("sampler seed: " + std::to_string(ja["seed"].get<int64_t>())), std::string::npos) << a.err;
  ToolResult c = run(base + " -s " + std::to_string(ja["seed"].get<int64_t>()));
  EXPECT_EQ(nlohmann::json::parse(c.out)["text"], ja["text"]) << "the printed seed reproduces the run";
}

TEST_F(CliHabits, SamplerFlags) {
  const std::string base = "loom-run -m " + model() + " -p hi -n 8 -s 3 --no-echo ";
  for (const char* flags : {"--presence-penalty 0.5 --frequency-penalty 0.5", "--typical 0.9", "--xtc-probability 0.5",
                            "--dry-multiplier 0.8", "--mirostat 2", "--mirostat 1", "-l 5+2 -l 6-inf", "--ignore-eos",
                            "--samplers 'top_k;temperature'", "--sampling-seq kt"}) {
    ToolResult r = run(base + flags);
    EXPECT_EQ(r.rc, 0) << flags << ": " << r.err;
  }
  ToolResult r = run(base + "--top-p 2");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--top-p 2: must be in [0, 1]"), std::string::npos) << r.err;
  r = run(base + "--samplers 'top_k;nonesuch'");
  EXPECT_EQ(r.rc, 2);
  // --ignore-eos with -n generates exactly n tokens
  r = run("loom-run -m " + model() + " -p hi -n 12 --ignore-eos --temp 0 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["n_gen"], 12);
}

TEST_F(CliHabits, LogLevelsAndFile) {
  const std::string base = "loom-run -m " + model() + " -p hi -n 2 --temp 0";
  ToolResult quiet = run(base);
  EXPECT_EQ(quiet.err.find("load: arch = llama"), std::string::npos) << "warnings only by default: " << quiet.err;
  ToolResult info = run(base + " -lv 3");
  EXPECT_NE(info.err.find("load: arch = llama"), std::string::npos) << info.err;
  EXPECT_NE(info.err.find("model buffer"), std::string::npos) << info.err;
  EXPECT_NE(info.err.find("KV buffer"), std::string::npos) << info.err;
  EXPECT_EQ(info.err.find('\r'), std::string::npos);
  ToolResult off = run(base + " -v --log-disable");
  EXPECT_EQ(off.err.find("load: "), std::string::npos) << off.err;
  ToolResult to_file = run(base + " --log-file " + file("run.log"));
  ASSERT_EQ(to_file.rc, 0) << to_file.err;
  std::stringstream log;
  log << std::ifstream(file("run.log")).rdbuf();
  EXPECT_NE(log.str().find("load: arch = llama"), std::string::npos) << log.str();
  ToolResult bad = run(base + " --log-file /nonexistent-dir/run.log");
  EXPECT_EQ(bad.rc, 2);
  EXPECT_EQ(count_lines(bad.err), 1) << bad.err;
  EXPECT_NE(bad.err.find("--log-file"), std::string::npos) << bad.err;
}

TEST_F(CliHabits, PerplexityJson) {
  std::string text;
  for (int i = 0; i < 120; ++i) text += "the cat sat on the mat. ";
  std::ofstream(file("t.txt")) << text;
  ToolResult r = run("loom-run -m " + model() + " --perplexity -f " + file("t.txt") + " -c 32 --chunks 3 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_GT(j["ppl"].get<double>(), 1.0);
  EXPECT_GE(j["ppl_stderr"].get<double>(), 0.0);
  ASSERT_EQ(j["chunks"].size(), 3u);
  EXPECT_DOUBLE_EQ(j["chunks"][2].get<double>(), j["ppl"].get<double>());
  EXPECT_EQ(j["n_ctx"], 32);
  EXPECT_GT(j["tokens_per_second"].get<double>(), 0.0);
}

TEST_F(CliHabits, KlDivergenceAgainstABaseFile) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the cat sat on the mat, " + std::to_string(i) + " times. ";
  std::ofstream(file("kt.txt")) << text;
  const std::string base = file("base.kld");
  ToolResult r = run("loom-run -m " + model() + " --perplexity -f " + file("kt.txt") +
                     " -c 64 --chunks 4 --json --kl-divergence-base " + base);
  ASSERT_EQ(r.rc, 0) << r.err;
  const double ppl = nlohmann::json::parse(r.out)["ppl"];
  ASSERT_TRUE(fs::exists(base));
  // llama-perplexity's layout: header, 4 x 64 tokens, 4 x 31 rows of (4 + 384) uint16
  EXPECT_EQ(fs::file_size(base), 20u + 4 * 64 * 4 + 4 * 31 * (4 + 384) * 2);
  // the same model against its own file: the same perplexity, next to no divergence
  r = run("loom-run -m " + model() + " --kl-divergence --kl-divergence-base " + base + " --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["chunks"], 4);
  EXPECT_EQ(j["n_scored"], 4 * 31);
  EXPECT_NEAR(j["ppl"].get<double>(), ppl, 1e-4 * ppl);
  EXPECT_NEAR(j["ppl_base"].get<double>(), ppl, 1e-3 * ppl);
  EXPECT_LT(j["kld_mean"].get<double>(), 1e-6);
  EXPECT_GE(j["same_top_p"].get<double>(), 0.95);
  // a quantized copy moves away from it; the text report has llama-perplexity's sections
  ASSERT_EQ(run("loom-gguf quantize " + model() + " " + file("q4.gguf") + " Q4_0").rc, 0);
  r = run("loom-run -m " + file("q4.gguf") + " --kl-divergence --kl-divergence-base " + base);
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const char* want : {"====== KL divergence statistics ======", "Mean    KLD:", "Same top p:", "Mean PPL(base)"})
    EXPECT_NE(r.out.find(want), std::string::npos) << want << "\n" << r.out;
  r = run("loom-run -m " + file("q4.gguf") + " --kl-divergence --kl-divergence-base " + base + " --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_GT(nlohmann::json::parse(r.out)["kld_mean"].get<double>(), 10 * j["kld_mean"].get<double>());
  // misuse: one line and the documented exit code
  r = run("loom-run -m " + model() + " --kl-divergence");
  EXPECT_EQ(r.rc, 2) << r.err;
  r = run("loom-run -m " + model() + " --kl-divergence --kl-divergence-base " + base + " -c 32");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("was made with a context of 64 tokens"), std::string::npos) << r.err;
  r = run("loom-run -m " + model() + " --kl-divergence --kl-divergence-base " + file("kt.txt"));
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  // a run that fails leaves no base file behind
  r = run("loom-run -m " + model() + " --perplexity -f " + file("kt.txt") + " -c 4096 --kl-divergence-base " +
          file("none.kld"));
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_FALSE(fs::exists(file("none.kld")));
}

TEST_F(CliHabits, TokenizeJson) {
  ToolResult r = run("loom-gguf tokenize -m " + model() + " -p 'hello world' --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j["tokens"].is_array());
  EXPECT_EQ(j["n_tokens"].get<size_t>(), j["tokens"].size());
  std::string joined;
  for (const auto& p : j["pieces"]) joined += p.get<std::string>();
  EXPECT_NE(joined.find("hello"), std::string::npos) << joined;
}

TEST_F(CliHabits, TrainJsonPerStepAndSummary) {
  std::string text;
  for (int i = 0; i < 200; ++i) text += "the cat sat on a mat and saw a dog. ";
  std::ofstream(file("train.txt")) << text;
  ToolResult r =
      run("loom-train -f " + file("train.txt") + " --init llama:tiny --n-layer 1 --n-embd 64 --n-head 4 " +
          "--n-head-kv 2 --n-ff 96 --vocab-size 300 -c 32 -b 2 --steps 3 --seed 3 -t 2 --json -o " + file("out.gguf"));
  ASSERT_EQ(r.rc, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  int steps = 0;
  bool summary = false;
  while (std::getline(lines, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("summary")) {
      summary = true;
      EXPECT_EQ(j["steps"], 3);
    } else {
      EXPECT_EQ(j["step"], ++steps);
      EXPECT_GT(j["loss"].get<double>(), 0.0);
      EXPECT_TRUE(j.contains("lr") && j.contains("grad_norm"));
    }
  }
  EXPECT_EQ(steps, 3);
  EXPECT_TRUE(summary);
  EXPECT_EQ(r.err.find('\r'), std::string::npos) << "no carriage returns when stderr is not a terminal";
}

// --override-kv as llama.cpp takes it: a model's key replaced for every tool that loads it (here
// the training context, which sizes the KV cache of -c 0), malformed entries a one-line usage
// error, and loom-train refusing it (its output keeps the file's metadata).
TEST_F(CliHabits, OverrideKvReplacesAKeyForEveryTool) {
  auto context_bytes = [&](const std::string& extra) {
    ToolResult r = run("loom-fit-params -m " + model() + " --json " + extra);
    EXPECT_EQ(r.rc, 0) << r.err;
    return nlohmann::json::parse(r.out)["devices"][0]["context_bytes"].get<int64_t>();
  };
  const int64_t full = context_bytes(""), small = context_bytes("--override-kv llama.context_length=int:64");
  EXPECT_GT(full, 0);
  EXPECT_EQ(small * 8, full) << "the tiny preset trains at 512 tokens";

  ToolResult r = run("loom-run -m " + model() + " -p hi -n 2 -c 0 -v --override-kv llama.context_length=int:64");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("n_ctx = 64,"), std::string::npos) << r.err;

  r = run("loom-run -m " + model() + " -p hi -n 2 --override-kv llama.context_length=int:6.4");
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("not a 64-bit integer"), std::string::npos) << r.err;
  r = run("loom-run -m " + model() + " -p hi -n 2 --override-kv llama.block_count=int:0");
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  r = run("loom-train -m " + model() + " -f " + model() + " -o " + file("o.gguf") +
          " --override-kv llama.context_length=int:64");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_FALSE(fs::exists(file("o.gguf")));
}

// Escapes as llama-cli takes them by default: in -p and typed input (and --in-prefix), not with
// --no-escape.
TEST_F(CliHabits, RopeFlagsOverrideTheFilesRopeKeys) {
  std::string text;
  for (int i = 0; i < 100; ++i) text += "the cat sat on the mat and the dog ran " + std::to_string(i) + ". ";
  std::ofstream(file("rope.txt")) << text;
  auto ppl = [&](const std::string& flags) {
    ToolResult r =
        run("loom-run -m " + model() + " --perplexity -f " + file("rope.txt") + " -c 64 --chunks 2 --json " + flags);
    EXPECT_EQ(r.rc, 0) << flags << ": " << r.err;
    return r.rc == 0 ? nlohmann::json::parse(r.out)["ppl"].get<double>() : -1.0;
  };
  const double plain = ppl("");
  const double base = ppl("--rope-freq-base 500000");
  EXPECT_NE(base, plain);
  EXPECT_EQ(base, ppl("--override-kv llama.rope.freq_base=float:500000"));
  EXPECT_EQ(base, ppl("--override-kv llama.rope.freq_base=float:7 --rope-freq-base 500000"));  // the flag wins
  const double yarn = ppl("--rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 32");
  EXPECT_NE(yarn, plain);
  EXPECT_EQ(yarn, ppl("--override-kv llama.rope.scaling.type=str:yarn,llama.rope.scaling.factor=float:4,"
                      "llama.rope.scaling.original_context_length=int:32"));
  EXPECT_EQ(ppl("--rope-freq-scale 0.5"), ppl("--rope-scale 2"));
  // YaRN's tuning flags: no extrapolation at all is linear scaling; the others move the result
  const std::string y = "--rope-scaling yarn --rope-scale 4 --yarn-orig-ctx 32 ";
  EXPECT_EQ(ppl(y + "--yarn-ext-factor 0"), ppl("--rope-scaling linear --rope-scale 4"));
  for (const char* tuning : {"--yarn-ext-factor 0.5", "--yarn-attn-factor 1.3", "--yarn-beta-slow 2"})
    EXPECT_NE(ppl(y + tuning), yarn) << tuning;
  EXPECT_EQ(ppl(y + "--yarn-ext-factor -1 --yarn-attn-factor 1 --yarn-beta-fast 32 --yarn-beta-slow 1"), yarn)
      << "llama.cpp's defaults";
  for (const char* bad : {"--rope-freq-base -1", "--rope-freq-base nan", "--rope-scaling ntk",
                          "--rope-scale 2 --rope-freq-scale 0.5", "--yarn-orig-ctx -5", "--yarn-beta-fast 0",
                          "--yarn-beta-slow -1", "--yarn-attn-factor nan", "--yarn-ext-factor inf"}) {
    ToolResult r = run("loom-run -m " + model() + " -p hi -n 1 " + bad);
    EXPECT_EQ(r.rc, 2) << bad << ": " << r.err;
    EXPECT_EQ(count_lines(r.err), 1) << r.err;
  }
  for (const char* flag : {"--rope-freq-base 1e6", "--yarn-attn-factor 2"}) {
    ToolResult r = run("loom-train -m " + model() + " -f " + file("rope.txt") + " " + flag + " -o " + file("x.gguf"));
    EXPECT_EQ(r.rc, 2) << flag << ": " << r.err;
  }
}

TEST_F(CliHabits, LoraAdaptersFromEveryTool) {
  ToolResult r = run("loom-gguf new-lora -m " + model() + " -o " + file("ad.gguf") +
                     " --targets attn_q,attn_v,ffn_down --rank 4 --sigma 0.1");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("6 LoRA pairs of rank 4"), std::string::npos) << r.out;
  std::ofstream(file("lora.txt")) << "The adapter moves every logit a little, so perplexity tells it apart.\n";
  auto ppl = [&](const std::string& flags) {
    ToolResult p =
        run("loom-run -m " + model() + " --perplexity -f " + file("lora.txt") + " -c 16 --chunks 1 --json " + flags);
    EXPECT_EQ(p.rc, 0) << flags << ": " << p.err;
    return p.rc == 0 ? nlohmann::json::parse(p.out)["ppl"].get<double>() : -1.0;
  };
  const double plain = ppl(""), with = ppl("--lora " + file("ad.gguf"));
  EXPECT_NE(with, plain);
  EXPECT_EQ(with, ppl("--lora-scaled " + file("ad.gguf") + " 1"));
  EXPECT_EQ(plain, ppl("--lora-scaled " + file("ad.gguf") + " 0"));
  const double twice = ppl("--lora-scaled " + file("ad.gguf") + " 2");  // two adds, not bit for bit one
  EXPECT_NEAR(ppl("--lora " + file("ad.gguf") + "," + file("ad.gguf")), twice, 1e-5 * twice);
  // fit-params and split-inspect plan with the adapter's bytes; loom-bench runs with it
  r = run("loom-split-inspect -m " + model() + " --lora " + file("ad.gguf") + " --json");
  EXPECT_EQ(r.rc, 0) << r.err;
  r = run("loom-bench -m " + model() + " -p 0 -n 2 -r 1 --lora " + file("ad.gguf"));
  EXPECT_EQ(r.rc, 0) << r.err;
  r = run("loom-fit-params -m " + model() + " --lora " + file("ad.gguf") + " -c 64");
  EXPECT_EQ(r.rc, 0) << r.err;
  std::ofstream(file("not-an-adapter.gguf")) << "junk";
  // bad files exit 3 (the adapter named), bad flags 2
  for (const auto& [bad, rc] : std::vector<std::pair<std::string, int>>{
           {"--lora " + file("missing.gguf"), 3},
           {"--lora " + file("not-an-adapter.gguf"), 3},
           {"--lora " + model(), 3},
           {"--lora-scaled " + file("ad.gguf") + " x", 2},
           {"--lora-scaled " + file("ad.gguf") + " nan", 2},
           {"--lora-scaled " + file("ad.gguf"), 2},
           {"--lora " + file("ad.gguf") + " -sm tensor --sim-devices 2x1GiB", 2}}) {
    ToolResult b = run("loom-run -m " + model() + " -p hi -n 1 " + bad);
    EXPECT_EQ(b.rc, rc) << bad << ": " << b.err;
    EXPECT_EQ(count_lines(b.err), 1) << bad << ": " << b.err;
    if (rc == 3) {
      EXPECT_NE(b.err.find(bad.substr(7)), std::string::npos) << b.err;
    }
  }
  // a prompt cache holds the state of one model and adapter set
  r = run("loom-run -m " + model() + " -p 'hello there' -n 2 --temp 0 --prompt-cache " + file("pc.bin"));
  EXPECT_EQ(r.rc, 0) << r.err;
  r = run("loom-run -m " + model() + " -p 'hello there' -n 2 --temp 0 --prompt-cache " + file("pc.bin") + " --lora " +
          file("ad.gguf"));
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_NE(r.err.find("--lora"), std::string::npos) << r.err;
  r = run("loom-train -m " + model() + " -f " + file("lora.txt") + " --lora " + file("ad.gguf") + " -o " +
          file("t.gguf"));
  EXPECT_EQ(r.rc, 2) << r.err;
  r = run("loom-gguf new-lora -m " + model() + " -o " + file("x.gguf") + " --targets attn_qkv");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_FALSE(std::filesystem::exists(file("x.gguf")));
}

TEST_F(CliHabits, ControlVectorsFromEveryTool) {
  ToolResult r = run("loom-gguf new-control-vector -m " + model() + " -o " + file("cv.gguf") + " --sigma 0.5");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::ofstream(file("cv.txt")) << "A control vector moves every layer's output, so perplexity tells it apart.\n";
  auto ppl = [&](const std::string& flags) {
    ToolResult p =
        run("loom-run -m " + model() + " --perplexity -f " + file("cv.txt") + " -c 16 --chunks 1 --json " + flags);
    EXPECT_EQ(p.rc, 0) << flags << ": " << p.err;
    return p.rc == 0 ? nlohmann::json::parse(p.out)["ppl"].get<double>() : -1.0;
  };
  const double plain = ppl(""), with = ppl("--control-vector " + file("cv.gguf"));
  EXPECT_NE(with, plain);
  EXPECT_EQ(plain, ppl("--control-vector-scaled " + file("cv.gguf") + " 0"));
  EXPECT_EQ(plain, ppl("--control-vector " + file("cv.gguf") + " --control-vector-layer-range 5 9"));
  for (const char* tool : {"loom-split-inspect", "loom-fit-params"}) {
    r = run(std::string(tool) + " -m " + model() + " --control-vector " + file("cv.gguf") + " -c 64");
    EXPECT_EQ(r.rc, 0) << tool << ": " << r.err;
  }
  ToolResult other = run("loom-gguf new --arch llama --preset tiny --n-embd 128 --n-head 4 -o " + file("narrow.gguf"));
  ASSERT_EQ(other.rc, 0) << other.err;
  r = run("loom-gguf new-control-vector -m " + file("narrow.gguf") + " -o " + file("cv128.gguf"));
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const auto& [bad, rc] : std::vector<std::pair<std::string, int>>{
           {"--control-vector " + file("missing.gguf"), 3},
           {"--control-vector " + file("cv128.gguf"), 3},
           {"--control-vector " + model(), 3},
           {"--control-vector-scaled " + file("cv.gguf") + " x", 2},
           {"--control-vector " + file("cv.gguf") + " --control-vector-layer-range 1", 2},
           {"--control-vector-layer-range 1 2", 2},
           {"--control-vector " + file("cv.gguf") + " -sm tensor --sim-devices 2x1GiB", 2}}) {
    ToolResult b = run("loom-run -m " + model() + " -p hi -n 1 " + bad);
    EXPECT_EQ(b.rc, rc) << bad << ": " << b.err;
    EXPECT_EQ(count_lines(b.err), 1) << bad << ": " << b.err;
  }
  r = run("loom-run -m " + model() + " -p 'hello there' -n 2 --temp 0 --prompt-cache " + file("cvpc.bin"));
  EXPECT_EQ(r.rc, 0) << r.err;
  r = run("loom-run -m " + model() + " -p 'hello there' -n 2 --temp 0 --prompt-cache " + file("cvpc.bin") +
          " --control-vector " + file("cv.gguf"));
  EXPECT_EQ(r.rc, 3) << r.err;
  r = run("loom-train -m " + model() + " -f " + file("cv.txt") + " --control-vector " + file("cv.gguf") + " -o " +
          file("t.gguf"));
  EXPECT_EQ(r.rc, 2) << r.err;
}

TEST_F(CliHabits, PerplexityTextsKeepTheirBackslashesAsInLlamaPerplexity) {
  std::ofstream(file("esc.txt")) << R"(\n\t\x41 "\n", escapes written out first, as code has them.)"
                                 << "\n";
  auto ppl = [&](const std::string& flags) {
    ToolResult p =
        run("loom-run -m " + model() + " --perplexity -f " + file("esc.txt") + " -c 16 --chunks 1 --json " + flags);
    EXPECT_EQ(p.rc, 0) << flags << ": " << p.err;
    return p.rc == 0 ? nlohmann::json::parse(p.out)["ppl"].get<double>() : -1.0;
  };
  const double plain = ppl("");
  EXPECT_EQ(plain, ppl("--no-escape"));
  EXPECT_NE(plain, ppl("-e"));
}

TEST_F(CliHabits, HellaswagAsLlamaPerplexityPrintsIt) {
  std::ofstream hs(file("hs.txt"));
  for (int i = 0; i < 5; ++i) {
    hs << "A cook takes the pan off the stove and" << (i ? " then" : "") << "\n" << (i % 4) << "\n";
    for (int j = 0; j < 4; ++j)
      hs << (j == i % 4 ? "serves the eggs on a plate." : "paints the wall blue " + std::to_string(j)) << "\n";
  }
  hs.close();
  const std::string base = "loom-run -m " + model() + " --hellaswag -f " + file("hs.txt") + " -c 128";
  ToolResult r = run(base + " --hellaswag-tasks 3");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind("\ntask\tacc_norm\n1\t", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\n3\t"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("\n4\t"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Final estimate: acc_norm = "), std::string::npos) << r.out;
  r = run(base + " --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tasks"], 5);
  EXPECT_DOUBLE_EQ(j["acc_norm"].get<double>(), 100.0 * j["correct"].get<double>() / 5.0);
  std::ofstream(file("bad-hs.txt")) << "only\nfive\nlines\nof\ntext\n";
  for (const auto& [flags, rc] :
       std::vector<std::pair<std::string, int>>{{"--hellaswag -f " + file("bad-hs.txt"), 3},
                                                {"--hellaswag", 2},
                                                {"--hellaswag -f " + file("hs.txt") + " --hellaswag-tasks 0", 2},
                                                {"--hellaswag --perplexity -f " + file("hs.txt"), 2},
                                                {"--hellaswag -f " + file("hs.txt") + " -c 8", 3}}) {
    ToolResult b = run("loom-run -m " + model() + " " + flags);
    EXPECT_EQ(b.rc, rc) << flags << ": " << b.err;
    EXPECT_EQ(count_lines(b.err), 1) << flags << ": " << b.err;
  }
}

TEST_F(CliHabits, WinograndeAsLlamaPerplexityPrintsIt) {
  std::ofstream wg(file("wg.csv"));
  for (int i = 0; i < 6; ++i)
    wg << i << ",The cup did not fit on the shelf because the _ was too small " << i << ".,cup,shelf," << 1 + i % 2
       << "\n";
  wg << "6,The file's last line is never _ (as in llama-perplexity).,read,seen,1\n";
  wg.close();
  const std::string base = "loom-run -m " + model() + " --winogrande -f " + file("wg.csv") + " -c 128";
  ToolResult r = run(base);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind("1\t", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\n6\t"), std::string::npos) << r.out;  // rows 0-5 as tasks 1-6, the last row left out
  EXPECT_EQ(r.out.find("\n7\t"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Final Winogrande score(6 tasks): "), std::string::npos) << r.out;
  r = run(base + " --winogrande-tasks 3 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tasks"], 3);
  std::ofstream(file("bad-wg.csv")) << "no,underscore,in,this,1\nnor,here,a,b,2\n";
  for (const auto& [flags, rc] :
       std::vector<std::pair<std::string, int>>{{"--winogrande -f " + file("bad-wg.csv"), 3},
                                                {"--winogrande", 2},
                                                {"--winogrande --hellaswag -f " + file("wg.csv"), 2},
                                                {"--winogrande -f " + file("wg.csv") + " --winogrande-tasks -1", 2}}) {
    ToolResult b = run("loom-run -m " + model() + " " + flags);
    EXPECT_EQ(b.rc, rc) << flags << ": " << b.err;
    EXPECT_EQ(count_lines(b.err), 1) << flags << ": " << b.err;
  }
}

TEST_F(CliHabits, MultipleChoiceAsLlamaPerplexityPrintsIt) {
  std::string bin;  // llama.cpp's task file: count, offsets, then question, mc1, mc2 per task
  auto u32 = [](std::string& b, uint32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); };
  std::vector<std::string> bodies;
  for (int i = 0; i < 4; ++i) {
    std::string t;
    const std::vector<std::string> parts = {"Which way is up " + std::to_string(i) + "?", "the sky", "the ground"};
    u32(t, (uint32_t)parts[0].size());
    t += parts[0];
    u32(t, 2);
    for (int k = 1; k < 3; ++k) {
      u32(t, (uint32_t)parts[(size_t)k].size());
      t += parts[(size_t)k];
    }
    u32(t, 1);
    u32(t, 0);
    u32(t, 0);
    bodies.push_back(t);
  }
  u32(bin, 4);
  uint32_t pos = 4 + 16;
  for (const std::string& t : bodies) {
    u32(bin, pos);
    pos += (uint32_t)t.size();
  }
  for (const std::string& t : bodies) bin += t;
  std::ofstream(file("mc.bin"), std::ios::binary) << bin;
  const std::string base = "loom-run -m " + model() + " --multiple-choice -f " + file("mc.bin") + " -c 128";
  ToolResult r = run(base);
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind("\ntask\tacc_norm\n1\t", 0), 0u) << r.out;
  EXPECT_NE(r.out.find("\n4\t"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("Random chance: 50.0000"), std::string::npos) << r.out;
  r = run(base + " --multiple-choice-tasks 2 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["tasks"], 2);
  std::ofstream(file("short.bin"), std::ios::binary) << bin.substr(0, bin.size() - 5);
  for (const auto& [flags, rc] : std::vector<std::pair<std::string, int>>{
           {"--multiple-choice -f " + file("short.bin"), 3},
           {"--multiple-choice", 2},
           {"--multiple-choice --winogrande -f " + file("mc.bin"), 2},
           {"--multiple-choice -f " + file("mc.bin") + " --multiple-choice-tasks -2", 2}}) {
    ToolResult b = run("loom-run -m " + model() + " " + flags);
    EXPECT_EQ(b.rc, rc) << flags << ": " << b.err;
    EXPECT_EQ(count_lines(b.err), 1) << flags << ": " << b.err;
  }
}

TEST_F(CliHabits, CacheLayoutFlagsOfLlamaCppAreAcceptedAndChangeNothing) {
  const std::string base = "loom-run -m " + model() + " -p hi -n 4 --temp 0 --no-echo";
  ToolResult plain = run(base), flags = run(base + " --swa-full -kvu --kv-unified");
  EXPECT_EQ(flags.rc, 0) << flags.err;
  EXPECT_EQ(flags.out, plain.out);
}

TEST_F(CliHabits, InPrefixBosStartsEachLaterTurn) {
  std::ofstream(file("bos-turns.txt")) << "hi\nagain\n";
  auto turns = [&](const std::string& flags) {
    ToolResult r = run("loom-run -m " + model() + " -cnv --chat-template chatml -n 3 --temp 0 --json " + flags + " <" +
                       file("bos-turns.txt"));
    EXPECT_EQ(r.rc, 0) << r.err;
    return nlohmann::json::parse(r.out)["turns"];
  };
  const auto plain = turns(""), bos = turns("--in-prefix-bos");
  ASSERT_EQ(plain.size(), 2u);
  ASSERT_EQ(bos.size(), 2u);
  EXPECT_EQ(bos[0]["n_prompt"], plain[0]["n_prompt"]);  // the first turn has its BOS already
  EXPECT_EQ(bos[1]["n_prompt"].get<int>(), plain[1]["n_prompt"].get<int>() + 1);
  EXPECT_NE(bos[1]["prompt"].get<std::string>().find("<|endoftext|><|im_start|>user"), std::string::npos)
      << bos[1]["prompt"];
}

TEST_F(CliHabits, EscapesInPromptsAndTypedInput) {
  ToolResult r = run("loom-run -m " + model() + R"( -p 'a\tb' -n 1 --temp 0)");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind("a\tb", 0), 0u) << r.out;
  r = run("loom-run -m " + model() + R"( -p 'a\tb' -n 1 --temp 0 --no-escape)");
  EXPECT_EQ(r.out.rfind(R"(a\tb)", 0), 0u) << r.out;
  // the typed line is say\nhi (printf's \\ is one backslash)
  r = loom::test::run_command(R"(printf 'say\\nhi\n' | )" + std::string(LOOM_BIN_DIR) + "/loom-run -m " + model() +
                                  R"( -cnv --json -n 2 --temp 0 --in-prefix 'P\t')",
                              dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["turns"][0]["user"], "say\nhi");
  EXPECT_NE(j["turns"][0]["prompt"].get<std::string>().find("P\tsay\nhi"), std::string::npos) << j.dump();
}

// -sysf: the system message from a file (its last newline dropped, as llama.cpp reads it); -sys
// and -sysf together are a usage error.
TEST_F(CliHabits, SystemPromptFromAFile) {
  { std::ofstream(file("sys.txt")) << "Be terse.\n"; }
  ToolResult r = loom::test::run_command("echo hi | " + std::string(LOOM_BIN_DIR) + "/loom-run -m " + model() +
                                             " -cnv --json -n 2 --temp 0 -sysf " + file("sys.txt"),
                                         dir_);
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::string prompt = nlohmann::json::parse(r.out)["turns"][0]["prompt"];
  EXPECT_NE(prompt.find("Be terse.<|im_end|>"), std::string::npos) << prompt;
  r = loom::test::run_command("echo hi | " + std::string(LOOM_BIN_DIR) + "/loom-run -m " + model() +
                                  " -cnv -n 2 -sys x -sysf " + file("sys.txt"),
                              dir_);
  EXPECT_EQ(r.rc, 2) << r.err;
}

TEST_F(CliHabits, GrammarConstrainsGenerationAndReplies) {
  // a random model's text, held to the grammar whatever the seed; generation ends with the match
  for (int seed = 1; seed <= 4; ++seed) {
    ToolResult r = run("loom-run -m " + model() + " -p Q: -n 40 --temp 1 --json -s " + std::to_string(seed) +
                       " --grammar " + quote(R"(root ::= ("yes" | "no") "." | "{\"n\": " [1-9] [0-9]{0,2} "}")"));
    ASSERT_EQ(r.rc, 0) << r.err;
    const auto j = nlohmann::json::parse(r.out);
    const std::string text = j["text"];
    EXPECT_TRUE(text == "yes." || text == "no." ||
                (text.rfind("{\"n\": ", 0) == 0 && text.back() == '}' && text.size() >= 8 && text.size() <= 10))
        << text;
    EXPECT_LT(j["n_gen"].get<int>(), 40) << "stops at the end of the match";
  }
  // each reply of a conversation matches from the grammar's start
  std::ofstream(file("two-turns.txt")) << "hi\nagain\n";
  std::ofstream(file("yn.gbnf")) << "# yes or no\nroot ::= yn \".\"\nyn ::= \"yes\" | \"no\"\n";
  ToolResult r = run("loom-run -m " + model() + " -cnv --chat-template chatml -n 20 --json --grammar-file " +
                     file("yn.gbnf") + " <" + file("two-turns.txt"));
  ASSERT_EQ(r.rc, 0) << r.err;
  const auto turns = nlohmann::json::parse(r.out)["turns"];
  ASSERT_EQ(turns.size(), 2u) << r.out;
  for (const auto& t : turns) EXPECT_TRUE(t["reply"] == "yes." || t["reply"] == "no.") << t.dump();
  // a bad grammar: one line naming the file, line and column, exit 2, nothing on stdout
  std::ofstream(file("bad.gbnf")) << "root ::= x\nx ::= [a-";
  r = run("loom-run -m " + model() + " -p hi --grammar-file " + file("bad.gbnf"));
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("bad.gbnf': grammar: line 2, column 7: unterminated character class"), std::string::npos)
      << r.err;
  r = run("loom-run -m " + model() + " -p hi --grammar 'root ::= \"a\"' --grammar-file " + file("yn.gbnf"));
  EXPECT_EQ(r.rc, 2) << r.err;
  // a JSON Schema (-j, -jf) becomes a grammar: the text parses and holds the required keys
  std::ofstream(file("s.json")) << R"({"type": "object", "properties": {"name": {"type": "string", "maxLength": 8},
      "n": {"type": "integer"}, "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "maxItems": 2}},
      "required": ["name", "n"]})";
  for (int seed = 1; seed <= 3; ++seed) {
    for (const std::string& flag : {"-jf " + file("s.json"), "-j " + quote(slurp(file("s.json")))}) {
      r = run("loom-run -m " + model() + " -p Q: -n 300 --temp 1 --json -s " + std::to_string(seed) + " " + flag);
      ASSERT_EQ(r.rc, 0) << r.err;
      const auto obj = nlohmann::json::parse(nlohmann::json::parse(r.out)["text"].get<std::string>());
      ASSERT_TRUE(obj["name"].is_string()) << obj;
      const std::string name = obj["name"];
      EXPECT_LE(std::count_if(name.begin(), name.end(), [](char c) { return (c & 0xC0) != 0x80; }), 8)
          << obj;  // code points
      EXPECT_TRUE(obj["n"].is_number_integer()) << obj;
    }
  }
  std::ofstream(file("bad.json")) << R"({"type": "string", "pattern": "^a$"})";
  r = run("loom-run -m " + model() + " -p hi -jf " + file("bad.json"));
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(count_lines(r.err), 1) << r.err;
  EXPECT_NE(r.err.find("'pattern' is not supported"), std::string::npos) << r.err;
  r = run("loom-run -m " + model() + " -p hi -j '{}' --grammar 'root ::= \"a\"'");
  EXPECT_EQ(r.rc, 2) << r.err;
}

}  // namespace
