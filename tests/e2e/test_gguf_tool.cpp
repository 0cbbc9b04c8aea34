// loom-gguf as a user runs it: new (every architecture, header-only 70B), info --json reading
// back, tokenize, and the exit-code contract for bad files (3), bad flags (2) and unwritable
// outputs (no partial file left behind).
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "tool_runner.h"

namespace {

namespace fs = std::filesystem;

using ToolRun = loom::test::ToolResult;
using loom::test::quote;
using loom::test::slurp;

class GgufTool : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = loom::test::scratch_dir("loom-e2e-gguf");
    bin_ = std::string(LOOM_BIN_DIR) + "/loom-gguf";
    if (!fs::exists(bin_)) GTEST_SKIP() << bin_ << " is not built";
  }
  void TearDown() override { loom::test::remove_scratch(dir_); }

  ToolRun run(const std::string& args) {
    return loom::test::run_command(quote(bin_) + " " + args, dir_);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  fs::path dir_;
  std::string bin_;
};

TEST_F(GgufTool, NewTinyForEveryArchReadsBack) {
  // Tensor counts from REFERENCE.md's table: llama 9 per layer, qwen2 +3 biases, qwen3 +2 q/k
  // norms, qwen3moe: norms, q/k/v/o, q/k norms, router and 3 expert tensors; plus 3 globals.
  const std::pair<const char*, size_t> cases[] = {
      {"llama", 3 + 2 * 9}, {"qwen2", 3 + 2 * 12}, {"qwen3", 3 + 2 * 11}, {"qwen3moe", 3 + 2 * 12}};
  for (const auto& [arch, n_tensors] : cases) {
    SCOPED_TRACE(arch);
    const std::string path = file(std::string(arch) + ".gguf");
    ToolRun r = run(std::string("new --arch ") + arch + " --preset tiny --seed 3 -o " + quote(path));
    ASSERT_EQ(r.rc, 0) << r.err;
    r = run("info --json " + quote(path));
    ASSERT_EQ(r.rc, 0) << r.err;
    const nlohmann::json j = nlohmann::json::parse(r.out);
    EXPECT_EQ(j["version"], 3);
    EXPECT_EQ(j["metadata"]["general.architecture"], arch);
    EXPECT_EQ(j["metadata"][std::string(arch) + ".block_count"], 2);
    EXPECT_EQ(j["metadata"][std::string(arch) + ".embedding_length"], 256);
    EXPECT_EQ(j["n_tensors"], n_tensors);
    ASSERT_EQ(j["tensors"].size(), n_tensors);
    EXPECT_EQ(j["tensors"][0]["name"], "token_embd.weight");
    EXPECT_EQ(j["tensors"][0]["shape"], nlohmann::json::array({256, 384}));
    EXPECT_EQ(j["file_size"], fs::file_size(path));
    EXPECT_FALSE(fs::exists(path + ".tmp"));
  }
}

TEST_F(GgufTool, OverridesAndTypes) {
  const std::string path = file("m.gguf");
  ToolRun r = run("new --arch qwen3moe --preset tiny --n-layer 3 --n-expert 8 --n-expert-used 2 --n-ff-exp 256 --type q4_k -o " +
              quote(path));
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run("info --json " + quote(path));
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["metadata"]["qwen3moe.block_count"], 3);
  EXPECT_EQ(j["metadata"]["qwen3moe.expert_count"], 8);
  EXPECT_EQ(j["metadata"]["general.file_type"], 15);
  EXPECT_EQ(j["metadata"]["general.quantization_version"], 2);
  for (const auto& t : j["tensors"]) {
    if (t["name"] == "blk.2.ffn_up_exps.weight") {
      EXPECT_EQ(t["type"], "q4_K");
      EXPECT_EQ(t["shape"], nlohmann::json::array({256, 256, 8}));
      EXPECT_EQ(t["nbytes"], 256 / 256 * 144 * 256 * 8);
    }
    if (t["name"] == "blk.0.ffn_gate_inp.weight") {
      EXPECT_EQ(t["type"], "f32");
    }
  }
  // Human output: metadata, tensors and a total in binary units.
  r = run("info " + quote(path));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("general.architecture"), std::string::npos);
  EXPECT_NE(r.out.find("blk.2.ffn_down_exps.weight"), std::string::npos);
  EXPECT_NE(r.out.find("MiB"), std::string::npos);
  EXPECT_NE(r.out.find("more]"), std::string::npos);  // the token list is abbreviated
}

TEST_F(GgufTool, HeaderOnly70BIsFullSizeButSparse) {
  const std::string path = file("70b.gguf");
  ToolRun r = run("new --arch llama --preset llama-70b --type q4_k --header-only -o " + quote(path));
  ASSERT_EQ(r.rc, 0) << r.err;
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_GT((double)st.st_size, 30e9);
  EXPECT_LT((double)st.st_blocks * 512, 10.0 * 1024 * 1024);
  r = run("info --json " + quote(path));
  ASSERT_EQ(r.rc, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["n_params"], 70553706496);
  EXPECT_EQ(j["metadata"]["llama.attention.head_count_kv"], 8);
  EXPECT_EQ(j["metadata"]["llama.rope.freq_base"], 500000.0);
  EXPECT_EQ(j["metadata"]["llama.attention.layer_norm_rms_epsilon"], 1e-5);
}

TEST_F(GgufTool, BadFilesExit3) {
  const std::string good = file("good.gguf");
  ASSERT_EQ(run("new --arch llama --preset tiny -o " + quote(good)).rc, 0);
  const std::string all = slurp(good);
  const std::string trunc = file("trunc.gguf");
  std::ofstream(trunc, std::ios::binary) << all.substr(0, all.size() / 2);
  const std::string v2 = file("v2.gguf");
  std::ofstream(v2, std::ios::binary) << std::string("GGUF\x02\x00\x00\x00", 8);
  const std::string huge = file("huge.gguf");
  std::ofstream(huge, std::ios::binary)
      << std::string("GGUF\x03\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\x3f\x00\x00\x00\x00\x00\x00\x00\x00", 24);
  for (const std::string& bad : {trunc, v2, huge, dir_.string(), file("missing.gguf")}) {
    SCOPED_TRACE(bad);
    const ToolRun r = run("info " + quote(bad));
    EXPECT_EQ(r.rc, 3) << r.err;
    EXPECT_EQ(r.err.rfind("loom-gguf: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(bad), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  EXPECT_EQ(run("new --arch llama --vocab " + quote(trunc) + " -o " + quote(file("x.gguf"))).rc, 3);
  EXPECT_FALSE(fs::exists(file("x.gguf")));
}

TEST_F(GgufTool, BadFlagsExit2) {
  const std::string out = quote(file("x.gguf"));
  EXPECT_EQ(run("new --arch llama --bogus -o " + out).rc, 2);
  EXPECT_EQ(run("").rc, 2);
  EXPECT_EQ(run("info").rc, 2);
  EXPECT_EQ(run("new --arch gpt2 -o " + out).rc, 2);
  EXPECT_EQ(run("new --arch llama --type q5_k -o " + out).rc, 2);
  EXPECT_EQ(run("new --arch llama --preset qwen3-8b -o " + out).rc, 2);
  EXPECT_EQ(run("new --arch llama --n-layer 0 -o " + out).rc, 2);
  EXPECT_EQ(run("new --arch llama --n-vocab 100 -o " + out).rc, 2);
  EXPECT_EQ(run("new --arch llama --n-layer abc -o " + out).rc, 2);
  EXPECT_FALSE(fs::exists(file("x.gguf")));
  const ToolRun help = run("--help");
  EXPECT_EQ(help.rc, 0);
  EXPECT_NE(help.out.find("info"), std::string::npos);
  const ToolRun version = run("--version");
  EXPECT_EQ(version.rc, 0);
  EXPECT_NE(version.out.find("loom-gguf"), std::string::npos);
}

TEST_F(GgufTool, UnwritableOutputLeavesNothing) {
  const ToolRun missing = run("new --arch llama -o " + quote(file("no/such/dir/x.gguf")));
  EXPECT_EQ(missing.rc, 3) << missing.err;
  EXPECT_NE(missing.err.find("no/such/dir/x.gguf"), std::string::npos) << missing.err;
  // A regular file where a directory should be: fails even for root.
  const std::string blocker = file("blocker");
  std::ofstream(blocker) << "x";
  const ToolRun not_dir = run("new --arch llama -o " + quote(blocker + "/x.gguf"));
  EXPECT_EQ(not_dir.rc, 3) << not_dir.err;
  // The output path is an existing directory: the rename fails and the temporary is removed.
  const fs::path out_dir = dir_ / "out.gguf";
  fs::create_directories(out_dir / "keep");
  const ToolRun is_dir = run("new --arch llama -o " + quote(out_dir.string()));
  EXPECT_EQ(is_dir.rc, 3) << is_dir.err;
  EXPECT_FALSE(fs::exists(out_dir.string() + ".tmp"));
}

TEST_F(GgufTool, ReadOnlyDirectoryLeavesNothing) {
  const fs::path ro = dir_ / "ro";
  fs::create_directories(ro);
  fs::permissions(ro, fs::perms::owner_read | fs::perms::owner_exec);
  if (::access(ro.c_str(), W_OK) == 0) GTEST_SKIP() << "running as root: directory permissions are not enforced";
  const ToolRun r = run("new --arch llama -o " + quote((ro / "x.gguf").string()));
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_TRUE(fs::is_empty(ro));
}

TEST_F(GgufTool, TokenizeWithTheByteVocab) {
  const std::string path = file("tiny.gguf");
  ASSERT_EQ(run("new --arch llama --preset tiny --header-only -o " + quote(path)).rc, 0);
  // The built-in vocabulary has no merges and byte b is token b, so ids are the UTF-8 bytes.
  ToolRun r = run("tokenize -m " + quote(path) + " -p 'Hi there' --ids");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "72 105 32 116 104 101 114 101\n");
  r = run("tokenize -m " + quote(path) + " -p 'a b'");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("97 -> 'a'"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("32 -> ' '"), std::string::npos) << r.out;
}

TEST_F(GgufTool, TokenizeMatchesPeerVectors) {
  const fs::path vocab = fs::path(LOOM_SHARED_DIR) / "data" / "vocab" / "ggml-vocab-llama-spm.gguf";
  if (!fs::exists(vocab)) GTEST_SKIP() << "no peer vocab at " << vocab;
  // First test string of the .inp file and its expected ids from the .out file.
  const std::string inp = slurp(vocab.string() + ".inp");
  const std::string first = inp.substr(0, inp.find("\n__ggml_vocab_test__\n"));
  std::istringstream out_lines(slurp(vocab.string() + ".out"));
  std::string expected;
  std::getline(out_lines, expected);
  while (!expected.empty() && expected.back() == ' ') expected.pop_back();
  while (!expected.empty() && expected.front() == ' ') expected.erase(0, 1);
  const std::string text_file = file("text.txt");
  std::ofstream(text_file, std::ios::binary) << first;
  const ToolRun r = run("tokenize -m " + quote(vocab.string()) + " --ids -p \"$(cat " + quote(text_file) + ")\"");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, expected + "\n") << "text: '" << first << "'";
}

}  // namespace
