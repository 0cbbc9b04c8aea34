// loom-run as a user runs it: a tiny model made by loom-gguf, greedy determinism across thread
// counts, seeded sampling, the loom_perf lines, --json, perplexity, and bad input exit codes.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <string>

#include "tool_runner.h"

namespace {

namespace fs = std::filesystem;

using Result = loom::test::ToolResult;

// The lowest CPU this process may run on (its children inherit the set), below 64.
int first_cpu() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < 64; ++c)
      if (CPU_ISSET(c, &set)) return c;
  return 0;
}
inline Result run(const std::string& args) { return loom::test::run_tool(args); }

class RunTool : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // per process: ctest runs each test in its own process, several at once
    dir_ = fs::temp_directory_path() / ("loom-e2e-run-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    for (const char* arch : {"llama", "qwen2", "qwen3", "qwen3moe"}) {
      const std::string m = model(arch);
      Result r = run("loom-gguf new --arch " + std::string(arch) + " --preset tiny --seed 1 -o " + m);
      ASSERT_EQ(r.rc, 0) << r.err;
    }
  }
  static std::string model(const std::string& arch) { return (dir_ / ("tiny-" + arch + ".gguf")).string(); }
  static fs::path dir_;
};
fs::path RunTool::dir_;

TEST_F(RunTool, GreedyIsDeterministicAcrossThreadCounts) {
  for (const char* arch : {"llama", "qwen2", "qwen3", "qwen3moe"}) {
    Result a = run("loom-run -m " + model(arch) + " -p hello -n 24 --temp 0 -t 1");
    Result b = run("loom-run -m " + model(arch) + " -p hello -n 24 --temp 0 -t 2");
    ASSERT_EQ(a.rc, 0) << arch << ": " << a.err;
    ASSERT_EQ(b.rc, 0) << arch << ": " << b.err;
    EXPECT_EQ(a.out, b.out) << arch;
    // -tb: the prompt on 2 threads, each generated token on 1 (and -t -1, llama.cpp's "all cores")
    Result c = run("loom-run -m " + model(arch) + " -p hello -n 24 --temp 0 -t 1 -tb 2");
    ASSERT_EQ(c.rc, 0) << arch << ": " << c.err;
    EXPECT_EQ(a.out, c.out) << arch << " with -tb";
    Result d = run("loom-run -m " + model(arch) + " -p hello -n 24 --temp 0 -t -1 -tb -1");
    ASSERT_EQ(d.rc, 0) << arch << ": " << d.err;
    EXPECT_EQ(a.out, d.out) << arch << " with -t -1";
    // llama.cpp's CPU placement: both threads on the first CPU this process may use, never polling
    const int cpu = first_cpu();
    Result e = run(fmt::format("loom-run -m {} -p hello -n 24 --temp 0 -t 2 -C {:#x} -Cr {}-{} --cpu-strict 1 --poll 0",
                               model(arch), uint64_t{1} << cpu, cpu, cpu));
    ASSERT_EQ(e.rc, 0) << arch << ": " << e.err;
    EXPECT_EQ(a.out, e.out) << arch << " placed on CPU " << cpu;
    EXPECT_EQ(a.out.rfind("hello", 0), 0u) << "the prompt is echoed first: " << a.out;
    EXPECT_GT(a.out.size(), std::string("hello\n").size()) << "something was generated";
    EXPECT_TRUE(std::regex_search(a.err, std::regex("loom_perf: prompt eval time = [0-9.]+ ms / [0-9]+ tokens")));
    EXPECT_TRUE(std::regex_search(a.err, std::regex("loom_perf: eval time = [0-9.]+ ms / [0-9]+ runs .*tokens per second\\)")));
    EXPECT_TRUE(std::regex_search(a.err, std::regex("loom_perf: load time = [0-9.]+ ms")));
    EXPECT_TRUE(std::regex_search(a.err, std::regex("loom_perf: total time = [0-9.]+ ms / [0-9]+ tokens")));
  }
  // --no-perf: the same text without the timing lines (--no-warmup is accepted and changes nothing)
  Result q = run("loom-run -m " + model("llama") + " -p hello -n 24 --temp 0 -t 1 --no-perf --no-warmup");
  ASSERT_EQ(q.rc, 0) << q.err;
  EXPECT_EQ(q.out, run("loom-run -m " + model("llama") + " -p hello -n 24 --temp 0 -t 1").out);
  EXPECT_EQ(q.err.find("loom_perf"), std::string::npos) << q.err;
}

TEST_F(RunTool, SeededSamplingIsReproducibleAndSeedsDiffer) {
  const std::string m = model("llama");
  Result a = run("loom-run -m " + m + " -p hello -n 32 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed 5 --no-echo");
  Result b = run("loom-run -m " + m + " -p hello -n 32 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed 5 --no-echo");
  Result c = run("loom-run -m " + m + " -p hello -n 32 --temp 1.5 --top-k 0 --top-p 1 --min-p 0 --seed 6 --no-echo");
  ASSERT_EQ(a.rc, 0) << a.err;
  EXPECT_EQ(a.out, b.out);
  EXPECT_NE(a.out, c.out) << "a random model at temperature 1.5 should not repeat itself across seeds";
}

TEST_F(RunTool, JsonHasTheContractFields) {
  Result r = run("loom-run -m " + model("llama") + " -p hi -n 3 --temp 0 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["text"].is_string());
  EXPECT_EQ(j["n_gen"].get<int>(), 3);
  EXPECT_EQ((int)j["tokens"].size(), j["n_prompt"].get<int>() + 3);
  EXPECT_GT(j["timings"]["eval_tps"].get<double>(), 0);
  EXPECT_GT(j["devices"][0]["model_bytes"].get<double>(), 0);
  EXPECT_GT(j["devices"][0]["context_bytes"].get<double>(), 0);
}

// Syncs per token on two asynchronous (SIM) devices: the executor waits only for the stream whose
// last work no other waited-for stream covers (one per step); LOOM_SCHED_SYNC_ALL=1, the rule
// before, waits for both. Same tokens either way.
TEST_F(RunTool, OneSyncPerStepOnTwoAsyncDevices) {
  const std::string cmd = "loom-run -m " + model("llama") + " -p hi -n 8 --temp 0 --json --sim-devices 2x1GiB -dev SIM0,SIM1";
  Result now = run(cmd);
  setenv("LOOM_SCHED_SYNC_ALL", "1", 1);  // inherited by the tool's shell
  Result before = run(cmd);
  unsetenv("LOOM_SCHED_SYNC_ALL");
  ASSERT_EQ(now.rc, 0) << now.err;
  ASSERT_EQ(before.rc, 0) << before.err;
  auto a = nlohmann::json::parse(now.out), b = nlohmann::json::parse(before.out);
  const int steps = 8;  // the prompt, then 7 decode steps
  EXPECT_EQ(a["perf"]["syncs"].get<int>(), steps) << now.out;
  EXPECT_EQ(b["perf"]["syncs"].get<int>(), 2 * steps) << before.out;
  EXPECT_EQ(a["tokens"], b["tokens"]);
}

TEST_F(RunTool, PerplexityPrintsChunksAndFinalEstimate) {
  const std::string text = (dir_ / "ppl.txt").string();
  {
    std::ofstream f(text);
    for (int i = 0; i < 60; ++i) f << "The quick brown fox jumps over the lazy dog. ";
  }
  Result r = run("loom-run -m " + model("llama") + " --perplexity -f " + text + " -c 64 --chunks 3");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(std::regex_search(r.out, std::regex("^\\[1\\][0-9]+\\.[0-9]{4},\\[2\\][0-9.]+,\\[3\\][0-9.]+,")));
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.out, m, std::regex("Final estimate: PPL = ([0-9.]+) \\+/- ([0-9.]+)")));
  const double ppl = std::stod(m[1]);
  // a random model is close to uniform over its 384-token vocab: far above 1, not above ~vocab * e
  EXPECT_GT(ppl, 20.0);
  EXPECT_LT(ppl, 384.0 * 3);
}

// --ppl-stride: llama-perplexity's windows (-b 32 -c 32: one sequence, so a window of 32 + 8 tokens
// padded to 64), one running value per window, starts every 16 tokens with --ppl-output-type 1.
TEST_F(RunTool, StridedPerplexityPrintsLlamaPerplexitysLines) {
  const std::string text = (dir_ / "ppl-stride.txt").string();
  {
    std::ofstream f(text);
    for (int i = 0; i < 60; ++i) f << "The quick brown fox jumps over the lazy dog. ";
  }
  const std::string base =
      "loom-run -m " + model("llama") + " --perplexity -f " + text + " -c 32 -b 32 --ppl-stride 16";
  Result r = run(base + " --chunks 3");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_TRUE(std::regex_match(r.out, std::regex("\\[1\\][0-9]+\\.[0-9]{4},\\[2\\][0-9.]+,\\[3\\][0-9.]+,\n")))
      << r.out;
  Result t = run(base + " --chunks 3 --ppl-output-type 1");
  ASSERT_EQ(t.rc, 0) << t.err;
  EXPECT_TRUE(std::regex_match(t.out, std::regex("       0  [0-9.]+\n      16  [0-9.]+\n      32  [0-9.]+\n\n")))
      << t.out;
  // the same windows' running values in both forms
  EXPECT_EQ(r.out.substr(r.out.rfind(']') + 1, 6), t.out.substr(t.out.rfind("32  ") + 4, 6));
  Result j = run(base + " --json");
  ASSERT_EQ(j.rc, 0) << j.err;
  const nlohmann::json js = nlohmann::json::parse(j.out);
  EXPECT_EQ(js["ppl_stride"], 16);
  EXPECT_GT(js["ppl"].get<double>(), 1.0);
  for (const char* bad : {" --ppl-stride -1", " --ppl-output-type 2", " --ppl-stride 64"}) {
    Result b = run("loom-run -m " + model("llama") + " --perplexity -f " + text + " -c 32 -b 32" + bad);
    EXPECT_EQ(b.rc, 2) << bad << ": " << b.err;
    EXPECT_TRUE(b.out.empty()) << bad << ": " << b.out;
  }
  Result gen = run("loom-run -m " + model("llama") + " -p hi --ppl-stride 16");
  EXPECT_EQ(gen.rc, 2) << "--ppl-stride without --perplexity: " << gen.err;
}

TEST_F(RunTool, BadInputGetsTheDocumentedExitCode) {
  const std::string m = model("llama");
  EXPECT_EQ(run("loom-run -m " + m + " -p x -n -5").rc, 2);
  EXPECT_EQ(run("loom-run -m " + m + " -p x -n -3").rc, 2);
  EXPECT_EQ(run("loom-run -m " + m + " -p x --predict -2 -c 16 --temp 0").rc, 0) << "-2: until the context is full";
  EXPECT_EQ(run("loom-run -m " + m + " -p x -n 1 --no-such-flag").rc, 2);
  EXPECT_EQ(run("loom-run -m " + m + " -p x -ctk q9_9").rc, 2);
  EXPECT_EQ(run("loom-run -m " + m).rc, 2) << "no prompt";
  EXPECT_EQ(run("loom-run -m /nonexistent/model.gguf -p x").rc, 3);
  EXPECT_EQ(run("loom-run -m " + dir_.string() + " -p x").rc, 3) << "a directory";
  // truncated model
  const std::string trunc = (dir_ / "trunc.gguf").string();
  {
    std::ifstream in(m, std::ios::binary);
    std::string bytes(3000, '\0');
    in.read(bytes.data(), (std::streamsize)bytes.size());
    std::ofstream(trunc, std::ios::binary).write(bytes.data(), (std::streamsize)bytes.size());
  }
  Result t = run("loom-run -m " + trunc + " -p x -n 1");
  EXPECT_EQ(t.rc, 3);
  EXPECT_NE(t.err.find("loom-run: error:"), std::string::npos) << t.err;
  EXPECT_EQ(std::count(t.err.begin(), t.err.end(), '\n'), 1) << "one error line: " << t.err;
  // a prompt longer than the context
  std::string long_prompt(400, 'a');
  Result l = run("loom-run -m " + m + " -c 32 -n 1 -p " + long_prompt);
  EXPECT_EQ(l.rc, 3) << l.err;
  EXPECT_NE(l.err.find("context"), std::string::npos) << l.err;
}

TEST_F(RunTool, WrongTensorShapeIsRejectedNamingTheTensor) {
  // a qwen3 file renamed to claim llama: llama expects no q_norm tensors, and the count differs
  const std::string m = (dir_ / "bad-shape.gguf").string();
  Result r = run("loom-gguf new --arch llama --preset tiny --n-embd 128 --seed 1 -o " + m);
  ASSERT_EQ(r.rc, 0) << r.err;
  // flip embedding_length in the header to 256 while tensors stay 128 wide
  std::fstream f(m, std::ios::in | std::ios::out | std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), {});
  const std::string key = "llama.embedding_length";
  size_t pos = bytes.find(key);
  ASSERT_NE(pos, std::string::npos);
  pos += key.size() + 4;  // value type (u32 = 4), then the value
  uint32_t v;
  std::memcpy(&v, bytes.data() + pos, 4);
  ASSERT_EQ(v, 128u);
  v = 256;
  f.seekp((std::streamoff)pos);
  f.write(reinterpret_cast<const char*>(&v), 4);
  f.close();
  Result b = run("loom-run -m " + m + " -p x -n 1");
  EXPECT_EQ(b.rc, 3);
  EXPECT_NE(b.err.find("token_embd.weight"), std::string::npos) << b.err;
}

}  // namespace

namespace {

// --prompt-cache as llama-cli's: the second run of a prompt evaluates only its last token, a
// prompt that shares a prefix evaluates the rest, and the text is what a run without the cache
// writes; -ro never writes; a file that is not a cache of this model ends in exit 3, untouched.
TEST_F(RunTool, PromptCacheReusesTheCommonPrefix) {
  const std::string m = model("qwen3moe"), cache = (dir_ / "prompt.cache").string();
  auto gen = [&](const std::string& prompt, const std::string& extra) {
    Result r = run("loom-run -m " + m + " -p '" + prompt + "' -n 12 --temp 0 --json " + extra);
    EXPECT_EQ(r.rc, 0) << r.err;
    return r.rc == 0 ? nlohmann::json::parse(r.out) : nlohmann::json{};
  };
  const std::string a = "the cat sat on the mat and looked", b = "the cat sat on the rug";
  const auto plain_a = gen(a, ""), plain_b = gen(b, "");
  EXPECT_FALSE(fs::exists(cache));
  gen(a, "--prompt-cache " + cache + " --prompt-cache-ro");
  EXPECT_FALSE(fs::exists(cache)) << "-ro writes nothing";
  const auto first = gen(a, "--prompt-cache " + cache);
  EXPECT_EQ(first["n_cached"], 0);
  EXPECT_EQ(first["text"], plain_a["text"]);
  ASSERT_TRUE(fs::exists(cache));
  const auto again = gen(a, "--prompt-cache " + cache);
  EXPECT_EQ(again["n_prompt"], 1) << "only the last prompt token is evaluated again";
  EXPECT_EQ(again["text"], plain_a["text"]);
  const auto other = gen(b, "--prompt-cache " + cache);  // shares "the cat sat on the"
  EXPECT_GT(other["n_cached"].get<int>(), 0);
  EXPECT_LT(other["n_cached"].get<int>(), plain_b["n_prompt"].get<int>());
  EXPECT_EQ(other["n_cached"].get<int>() + other["n_prompt"].get<int>(), plain_b["n_prompt"].get<int>());
  EXPECT_EQ(other["text"], plain_b["text"]);

  // another model's cache, and a file that is no cache at all: exit 3 before any output
  Result r = run("loom-run -m " + model("llama") + " -p hi -n 2 --prompt-cache " + cache);
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_NE(r.err.find("another model"), std::string::npos) << r.err;
  const std::string before = loom::test::slurp(m);
  r = run("loom-run -m " + m + " -p hi -n 2 --prompt-cache " + m);
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(loom::test::slurp(m), before) << "the model file is not overwritten";
  r = run("loom-run -m " + m + " -p hi -n 2 --prompt-cache-all");
  EXPECT_EQ(r.rc, 2) << r.err;
}

}  // namespace

namespace {

// --verbose-prompt: llama-cli's listing of the prompt's tokens, as many as the run evaluates
TEST_F(RunTool, VerbosePromptListsTheTokens) {
  Result r = run("loom-run -m " + model("llama") + " -p 'hello there' -n 1 --temp 0 --json --verbose-prompt");
  ASSERT_EQ(r.rc, 0) << r.err;
  const int n = nlohmann::json::parse(r.out)["n_prompt"];
  EXPECT_NE(r.err.find("prompt: 'hello there'\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("number of tokens in prompt = " + std::to_string(n) + "\n"), std::string::npos) << r.err;
  const std::regex line(R"(\n +[0-9]+ -> '[^\n]*'(?=\n))");
  EXPECT_EQ(std::distance(std::sregex_iterator(r.err.begin(), r.err.end(), line), std::sregex_iterator()), n) << r.err;
}

}  // namespace
