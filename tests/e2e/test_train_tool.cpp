// loom-train as a user runs it: from scratch with a learned BPE vocabulary (output runs in
// loom-run), fine-tuning a quantized base (frozen, said so), SIGTERM at a random moment then
// --resume giving the uninterrupted run's file bit for bit, no partial file ever visible, and
// the exit-code contract for bad flags and files.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "loom/gguf/gguf.h"

#include "tool_runner.h"

namespace {

namespace fs = std::filesystem;

using ToolRun = loom::test::ToolResult;
using loom::test::quote;
using loom::test::slurp;

class TrainTool : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = loom::test::scratch_dir("loom-e2e-train");
    bin_ = std::string(LOOM_BIN_DIR);
    if (!fs::exists(bin_ + "/loom-train")) GTEST_SKIP() << bin_ << "/loom-train is not built";
    std::string text;
    uint32_t x = 7;
    static const char* const words[] = {"the", "cat", "sat", "on", "a", "mat", "and", "saw", "dog", "run",
                                        "in", "sun", "with", "red", "hat", "big", "old", "tree"};
    while (text.size() < 6000) {
      x = x * 1664525u + 1013904223u;
      text += words[(x >> 8) % 18];
      text += (x >> 20) % 9 == 0 ? ".\n" : " ";
    }
    std::ofstream(file("text.txt")) << text;
  }
  void TearDown() override { loom::test::remove_scratch(dir_); }

  ToolRun run(const std::string& tool, const std::string& args) {
    return loom::test::run_command(quote(bin_ + "/loom-" + tool) + " " + args, dir_);
  }
  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  // A small from-scratch run; extra flags appended.
  std::string train_args(const std::string& extra, int ctx = 32) const {
    return "-f " + quote(file("text.txt")) +
           " --init llama:tiny --n-layer 1 --n-embd 64 --n-head 4 --n-head-kv 2 --n-ff 96 --vocab-size 300 -c " +
           std::to_string(ctx) + " -b 4 --seed 3 -lr 3e-3 -t 2 " + extra;
  }
  std::vector<std::string> tmp_files() const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename().string().find(".tmp") != std::string::npos) out.push_back(e.path().string());
    return out;
  }

  fs::path dir_;
  std::string bin_;
};

TEST_F(TrainTool, FromScratchWithLearnedVocabRunsInLoomRun) {
  ToolRun r = run("train", train_args("--steps 12 -o " + quote(file("out.gguf"))));
  ASSERT_EQ(r.rc, 0) << r.err;
  const std::regex line(R"(train: \[[^\]]*\] data=\d{7}/\d{7} loss=[0-9.]+±[0-9.]+ acc=[0-9.]+±[0-9.]+% t=\d\d:\d\d:\d\d ETA=\d\d:\d\d:\d\d)");
  EXPECT_TRUE(std::regex_search(r.err, line)) << r.err;
  EXPECT_NE(r.err.find("val:   ["), std::string::npos) << r.err;
  auto f = loom::gguf::File::open(file("out.gguf"));
  EXPECT_EQ(f->get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f->find("tokenizer.ggml.merges")->strings.size(), 300u - 257u);
  EXPECT_EQ(f->find("tokenizer.ggml.tokens")->strings.size(), 300u);
  EXPECT_EQ(f->get_int("llama.vocab_size"), 300);
  for (const auto& [key, value] : f->metadata()) EXPECT_NE(key.rfind("train.", 0), 0u) << key;
  EXPECT_TRUE(tmp_files().empty());
  r = run("run", "-m " + quote(file("out.gguf")) + " -p 'the cat' -n 8 --temp 0");
  EXPECT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind("the cat", 0), 0u) << r.out;
}

TEST_F(TrainTool, FineTuningAQuantizedBaseFreezesItsQuantizedTensors) {
  ToolRun r = run("gguf", "new --arch qwen3 --preset tiny --type q8_0 --seed 2 -o " + quote(file("base.gguf")));
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run("train", "-f " + quote(file("text.txt")) + " -m " + quote(file("base.gguf")) + " -c 32 -b 2 --steps 3 -t 2 -o " +
                       quote(file("ft.gguf")));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("frozen: 16 tensors (q8_0)"), std::string::npos) << r.err;
  auto base = loom::gguf::File::open(file("base.gguf"));
  auto ft = loom::gguf::File::open(file("ft.gguf"));
  ASSERT_EQ(base->tensors().size(), ft->tensors().size());
  int changed = 0;
  for (const auto& t : base->tensors()) {
    const auto* u = ft->find_tensor(t.name);
    ASSERT_TRUE(u);
    EXPECT_EQ(u->type, t.type) << t.name;
    const bool same = std::equal(base->tensor_data(t), base->tensor_data(t) + t.nbytes, ft->tensor_data(*u));
    if (t.type == loom::DType::Q8_0) {
      EXPECT_TRUE(same) << t.name;
    }
    changed += !same;
  }
  EXPECT_GT(changed, 0);  // the f32 norms trained
  r = run("run", "-m " + quote(file("ft.gguf")) + " -p hi -n 4 --temp 0");
  EXPECT_EQ(r.rc, 0) << r.err;
}

// SIGTERM (and SIGINT) at a random step: exit 143/130, a complete checkpoint, no output; the
// resumed run writes the same bytes as an uninterrupted one. A watcher checks that the
// checkpoint file, whenever it exists, is a complete GGUF.
TEST_F(TrainTool, KillAtARandomStepThenResumeIsBitExact) {
  const std::string steps = "--steps 200 ";  // long enough that the signal lands mid-run
  ToolRun r = run("train", train_args(steps + "-o " + quote(file("a.gguf"))));
  ASSERT_EQ(r.rc, 0) << r.err;
  std::mt19937 rng((uint32_t)::getpid());
  for (int sig : {SIGTERM, SIGINT}) {
    SCOPED_TRACE(sig);
    const std::string ck = file("ck.bin"), out = file("b.gguf");
    fs::remove(ck);
    fs::remove(out);
    const std::string cmd = "exec " + quote(bin_ + "/loom-train") + " " +
                            train_args(steps + "--checkpoint " + quote(ck) + " --checkpoint-every 3 -o " + quote(out)) +
                            " 2>/dev/null";
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
      _exit(127);
    }
    bool complete = true;
    for (int i = 0; i < 3000 && !fs::exists(ck); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(rng() % 200));
    ::kill(pid, sig);
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (fs::exists(ck)) {
        try {
          loom::gguf::File::open(ck);
        } catch (const std::exception& e) {
          if (fs::exists(ck)) complete = false;  // not merely replaced while opening
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    ASSERT_TRUE(WIFEXITED(status));
    const int rc = WEXITSTATUS(status);
    EXPECT_TRUE(complete) << "a partial checkpoint was visible";
    ASSERT_EQ(rc, 128 + sig);
    EXPECT_FALSE(fs::exists(out)) << "an interrupted run left an output file";
    EXPECT_TRUE(tmp_files().empty());
    ASSERT_TRUE(fs::exists(ck));
    r = run("train", train_args(steps + "--checkpoint " + quote(ck) + " --checkpoint-every 3 --resume " + quote(ck) +
                                " -o " + quote(out)));
    ASSERT_EQ(r.rc, 0) << r.err;
    EXPECT_TRUE(slurp(file("a.gguf")) == slurp(out)) << "the resumed run differs from the uninterrupted one";
  }
}

// -dev SIM0: the weights, gradients and optimizer state on a simulated device, planned and run
// by the scheduler. The output is the CPU run's file byte for byte, a checkpoint written there
// resumes on the CPU to the same bytes, and a device too small is exit 4 with no output.
TEST_F(TrainTool, TrainingOnASimDeviceWritesTheCpuRunsBytes) {
  const std::string sim = "--sim-devices 1x256MiB -dev SIM0 ";
  ToolRun r = run("train", train_args("--steps 4 -o " + quote(file("cpu.gguf"))));
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run("train", train_args(sim + "--steps 4 -o " + quote(file("sim.gguf"))));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("weights on SIM0"), std::string::npos) << r.err;
  EXPECT_TRUE(slurp(file("cpu.gguf")) == slurp(file("sim.gguf"))) << "SIM0 trained other weights than the CPU";

  const std::string ck = quote(file("ck.gguf"));
  r = run("train", train_args(sim + "--steps 4 --checkpoint " + ck + " --checkpoint-every 2 -o " + quote(file("x.gguf"))));
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run("train", train_args("--steps 4 --resume " + ck + " -o " + quote(file("resumed.gguf"))));
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("resuming at step 2"), std::string::npos) << r.err;
  EXPECT_TRUE(slurp(file("cpu.gguf")) == slurp(file("resumed.gguf"))) << "SIM0 checkpoint resumed on the CPU differs";

  r = run("train", train_args("--sim-devices 1x64KiB -dev SIM0 --steps 2 -o " + quote(file("oom.gguf"))));
  EXPECT_EQ(r.rc, 4) << r.err;
  EXPECT_NE(r.err.find("--init llama:tiny: cannot place"), std::string::npos) << r.err;  // not a temporary name
  EXPECT_NE(r.err.find("SIM0"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(file("oom.gguf")));
  EXPECT_TRUE(tmp_files().empty());
}

TEST_F(TrainTool, BadFlagsAndFilesGiveExitCodesAndNoOutput) {
  const std::string out = " -o " + quote(file("out.gguf"));
  const std::string text = " -f " + quote(file("text.txt"));
  std::ofstream(file("empty.txt")).close();
  std::ofstream(file("junk.gguf")) << "GGUF not really";
  const std::pair<std::string, int> cases[] = {
      {"-f " + quote(file("missing.txt")) + " --init llama" + out, 3},
      {"-f " + quote(file("empty.txt")) + " --init llama" + out, 3},
      {"-f " + quote(dir_.string()) + " --init llama" + out, 3},
      {text + " --init bogus" + out, 2},
      {text + " --init llama:huge" + out, 2},
      {text + out, 2},                                                   // no model
      {text + " --init llama -m " + quote(file("junk.gguf")) + out, 2},  // two models
      {text + " -m " + quote(file("junk.gguf")) + out, 3},
      {text + " -m " + quote(file("junk.gguf")) + " --vocab-size 300" + out, 2},
      {text + " --init llama --vocab-size 100" + out, 2},
      {text + " --init llama -b 4 -ub 3" + out, 2},
      {text + " --init llama -opt adam" + out, 2},
      {text + " --init llama -c 100000" + out, 3},  // longer than the text
      {text + " --init llama --resume " + quote(file("missing.ck")) + out, 3},
      {text + " --init llama --resume " + quote(file("junk.gguf")) + out, 3},
      {text + " --init llama --train-tensors '('" + out, 2},
      {text + " --init llama -wd nan" + out, 2},  // NaN weights after one step otherwise
      {text + " --init llama -lr-schedule cosine -lr-min nan" + out, 2},
      {text + " --init llama -o " + quote(file("no/such/dir/out.gguf")), 3},
  };
  for (const auto& [args, want] : cases) {
    SCOPED_TRACE(args);
    const ToolRun r = run("train", args);
    EXPECT_EQ(r.rc, want) << r.err;
    EXPECT_NE(r.err.find("loom-train: error: "), std::string::npos) << r.err;
    EXPECT_FALSE(fs::exists(file("out.gguf")));
    EXPECT_TRUE(tmp_files().empty());
  }
}

TEST_F(TrainTool, ResumeWithDifferentGeometryIsAUsageError) {
  ToolRun r = run("train", train_args("--steps 4 --checkpoint-every 2 --checkpoint " + quote(file("ck")) + " -o " +
                                      quote(file("a.gguf"))));
  ASSERT_EQ(r.rc, 0) << r.err;
  ASSERT_TRUE(fs::exists(file("ck")));
  r = run("train", train_args("--steps 4 --resume " + quote(file("ck")) + " -o " + quote(file("b.gguf")), 16));
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("-c 16"), std::string::npos) << r.err;
}

// One epoch on real prose (two licence texts Debian ships) must generalize: the perplexity
// loom-run measures on a held-out file (the Apache licence, never seen in training) is well
// below the vocabulary size, i.e. the mean loss well below log(vocab) of an untrained model.
TEST_F(TrainTool, OneEpochLowersTheLossOnAHeldOutFile) {
  const fs::path licenses = "/usr/share/common-licenses";
  for (const char* f : {"GPL-3", "MPL-2.0", "Apache-2.0"})
    if (!fs::exists(licenses / f)) GTEST_SKIP() << licenses / f << " is absent (Debian's base-files provides it)";
  std::ofstream(file("corpus.txt")) << slurp(licenses / "GPL-3") << slurp(licenses / "MPL-2.0");
  ToolRun r = run("train", "-f " + quote(file("corpus.txt")) +
                               " --init llama:tiny --vocab-size 512 -c 64 -b 4 -epochs 1 --seed 3 -lr 3e-3 -t 2 -o " +
                               quote(file("ep1.gguf")));
  ASSERT_EQ(r.rc, 0) << r.err;
  r = run("run", "-m " + quote(file("ep1.gguf")) + " --perplexity -f " + quote((licenses / "Apache-2.0").string()) +
                     " -c 128 -t 2");
  ASSERT_EQ(r.rc, 0) << r.err;
  std::smatch m;
  const std::string all = r.out + r.err;
  ASSERT_TRUE(std::regex_search(all, m, std::regex(R"(Final estimate: PPL = ([0-9.]+))"))) << all;
  const double held_out_loss = std::log(std::stod(m[1]));
  EXPECT_LT(held_out_loss, 0.75 * std::log(512.0)) << "PPL " << m[1] << " on the held-out file";
}

}  // namespace
