// The tools against hostile inputs and environments, one test (or more) per numbered case of
// the reliability issue: resume past the text, threads that cannot start, FIFOs and devices as
// files, signals in every phase of loom-train, atomic outputs, checks before work, header-only
// files, stdout errors, small flag cases and an address-space limit smaller than the file.
// docs/TESTING.md "Hostile inputs" lists the classes and their exit codes.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <tuple>

#include "tool_runner.h"

namespace {

namespace fs = std::filesystem;
using loom::test::quote;
using loom::test::slurp;
using loom::test::ToolResult;
using Clock = std::chrono::steady_clock;

class Hostile : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = loom::test::scratch_dir("loom-e2e-hostile");
    bin_ = std::string(LOOM_BIN_DIR);
    for (const char* t : {"run", "gguf", "train", "fit-params", "split-inspect", "bench"})
      if (!fs::exists(bin_ + "/loom-" + t)) GTEST_SKIP() << "loom-" << t << " is not built";
    model_ = file("tiny.gguf");
    ASSERT_EQ(run("gguf", "new --arch llama --preset tiny --seed 1 -o " + quote(model_)).rc, 0);
    std::string text;
    for (int i = 0; i < 400; ++i) text += "the cat sat on the mat. the dog sat on the log. ";
    std::ofstream(file("c.txt")) << text;
    std::ofstream(file("short.txt")) << text.substr(0, 3000);
  }
  void TearDown() override { loom::test::remove_scratch(dir_); }

  std::string file(const std::string& name) const { return (dir_ / name).string(); }
  std::string tool(const std::string& name) const { return quote(bin_ + "/loom-" + name); }
  // Commands run in the scratch folder: relative paths land there.
  ToolResult sh(const std::string& cmd) {
    return loom::test::run_command("cd " + quote(dir_.string()) + " && " + cmd, dir_);
  }
  ToolResult run(const std::string& name, const std::string& args) { return sh(tool(name) + " " + args); }
  // Files in the scratch folder whose name holds ".tmp" (left-over temporaries).
  std::string temporaries() const {
    std::string out;
    for (const auto& e : fs::directory_iterator(dir_))
      if (e.path().filename().string().find(".tmp") != std::string::npos) out += e.path().filename().string() + " ";
    return out;
  }
  std::string train_args(const std::string& text, const std::string& extra) const {
    return "-f " + quote(file(text)) + " -m " + quote(model_) + " -c 32 -b 4 -t 1 " + extra;
  }

  // Starts a tool in the background with stderr to a file; returns its pid.
  pid_t spawn(const std::string& name, const std::string& args) {
    const std::string cmd = "cd " + quote(dir_.string()) + " && exec " + tool(name) + " " + args + " >/dev/null 2>" + quote(file("bg.err"));
    const pid_t pid = fork();
    if (pid == 0) {
      execl("/bin/sh", "sh", "-c", cmd.c_str(), (char*)nullptr);
      _exit(127);
    }
    return pid;
  }
  // Waits (up to 60 s) until the background tool's stderr contains `what`.
  bool wait_for_stderr(const std::string& what) {
    for (int i = 0; i < 6000; ++i) {
      if (slurp(file("bg.err")).find(what) != std::string::npos) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  // Sends sig and returns {exit code, seconds until exit}.
  std::pair<int, double> signal_and_wait(pid_t pid, int sig) {
    const auto t0 = Clock::now();
    kill(pid, sig);
    int status = 0;
    waitpid(pid, &status, 0);
    const double s = std::chrono::duration<double>(Clock::now() - t0).count();
    return {WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), s};
  }

  fs::path dir_;
  std::string bin_, model_;
};

// 1: a checkpoint from a longer text resumed on a shorter one.
TEST_F(Hostile, ResumeWithAShorterTextIsAnError) {
  ASSERT_EQ(run("train", train_args("c.txt", "--steps 40 --checkpoint-every 20 --checkpoint r.ckpt -o r.gguf")).rc,
            0);
  const ToolResult r = run("train", train_args("short.txt", "--steps 40 --checkpoint r.ckpt --resume r.ckpt -o r2.gguf"));
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("-f"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(file("r2.gguf")));
}

// 2: a thread that cannot start is an error (exit 4), not std::terminate.
TEST_F(Hostile, ThreadStartFailureIsOutOfResources) {
  const ToolResult r = sh("ulimit -v 2000000; " + tool("run") + " -m " + quote(model_) + " -p hi -n 4 -t 300");
  EXPECT_EQ(r.rc, 4) << r.err;
  EXPECT_NE(r.err.find("cannot start thread"), std::string::npos) << r.err;
}

// 4: FIFOs and devices as input files fail at once (exit 3) instead of blocking in open().
TEST_F(Hostile, FifoAsModelOrTextFailsAtOnce) {
  ASSERT_EQ(mkfifo(file("fifo").c_str(), 0600), 0);
  for (const std::string& cmd : {tool("run") + " -m " + quote(file("fifo")) + " -p hi -n 2",
                                 tool("gguf") + " info " + quote(file("fifo")),
                                 tool("run") + " -m " + quote(model_) + " -f " + quote(file("fifo")) + " -n 2",
                                 tool("train") + " " + train_args("fifo", "--steps 1 -o x.gguf")}) {
    const ToolResult r = sh("timeout 20 " + cmd);
    EXPECT_EQ(r.rc, 3) << cmd << "\n" << r.err;
    EXPECT_NE(r.err.find("not a regular file"), std::string::npos) << r.err;
  }
}

// 5: MPI ranks started with different parameters or models stop at once with exit 2, rank 0
// naming what differs (no hang in a collective, no run on mismatched weights).
TEST_F(Hostile, MpiRanksThatDisagree) {
  if (sh("command -v mpirun").rc != 0) GTEST_SKIP() << "no mpirun";
  ASSERT_EQ(run("gguf", "new --arch llama --preset tiny --seed 2 -o " + quote(file("other.gguf"))).rc, 0);
  const std::string mpirun = "timeout 60 mpirun --allow-run-as-root --oversubscribe ";
  const std::string rank = tool("run") + " -sm tensor --comm mpi --temp 0 -t 1 ";
  const std::string m = quote(model_), c = quote(file("c.txt"));
  const ToolResult probe = sh(mpirun + "-np 2 " + rank + "-m " + m + " -p hi -n 2");
  if (probe.err.find("no MPI") != std::string::npos) GTEST_SKIP() << "built without MPI";
  ASSERT_EQ(probe.rc, 0) << probe.err;
  for (const auto& [a, b, named] :
       {std::tuple{"-m " + m + " -p hi -n 8", "-m " + m + " -p hi -n 2", std::string("-n differs")},
        {"-m " + m + " -p hi -n 2", "-m " + quote(file("other.gguf")) + " -p hi -n 2", "the model"},
        {"-m " + m + " -p hi -n 2", "-m " + m + " -p bye -n 2", "the prompt"},
        {"-m " + m + " -f " + c + " -n 2", "-m " + m + " -f " + c + " -n 2 --perplexity", "the mode"}}) {
    const ToolResult r = sh(mpirun + "-np 1 " + rank + a + " : -np 1 " + rank + b);
    EXPECT_EQ(r.rc, 2) << a << " | " << b << ": " << r.err;
    EXPECT_NE(r.err.find("MPI ranks disagree: " + named), std::string::npos) << r.err;
  }
}

// 5 (loom-bench): the ranks of a tensor-parallel benchmark compare their sweeps the same way.
TEST_F(Hostile, MpiBenchRanksThatDisagree) {
  if (sh("command -v mpirun").rc != 0) GTEST_SKIP() << "no mpirun";
  const std::string mpirun = "timeout 60 mpirun --allow-run-as-root --oversubscribe ";
  const std::string rank = tool("bench") + " -sm tensor --comm mpi -t 1 -r 1 -m " + quote(model_) + " ";
  const ToolResult same = sh(mpirun + "-np 2 " + rank + "-p 8 -n 2");
  if (same.err.find("no MPI") != std::string::npos) GTEST_SKIP() << "built without MPI";
  ASSERT_EQ(same.rc, 0) << same.err;
  EXPECT_EQ(std::count(same.out.begin(), same.out.end(), '\n'), 4) << "rank 0 prints the table alone:\n" << same.out;
  const ToolResult r = sh(mpirun + "-np 1 " + rank + "-p 8 -n 2 : -np 1 " + rank + "-p 8 -n 4");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("MPI ranks disagree: -n differs"), std::string::npos) << r.err;
}

// 6: SIGTERM while the vocabulary is learned: exit 143 within a second, no output.
TEST_F(Hostile, SigtermDuringVocabularyLearning) {
  std::string noise(12u << 20, '\0');
  std::mt19937 rng(5);
  for (char& c : noise) c = (char)(rng() & 0xff);
  std::ofstream(file("rand.txt"), std::ios::binary) << noise;
  const pid_t pid = spawn("train", "-f " + quote(file("rand.txt")) +
                                       " --init llama:tiny --vocab-size 4096 --steps 1 -c 64 -b 1 -t 1 -o " +
                                       quote(file("v.gguf")));
  std::this_thread::sleep_for(std::chrono::milliseconds(700));
  ASSERT_EQ(slurp(file("bg.err")), "") << "vocabulary learning already done: the signal would miss its phase";
  const auto [rc, s] = signal_and_wait(pid, SIGTERM);
  EXPECT_EQ(rc, 143);
  EXPECT_LT(s, 1.0);
  EXPECT_FALSE(fs::exists(file("v.gguf")));
  EXPECT_EQ(temporaries(), "");
}

// 6: SIGINT during validation: exit 130 within a second, the checkpoint written, no output.
TEST_F(Hostile, SigintDuringValidation) {
  std::string text;
  for (int i = 0; i < 3000; ++i) text += "the cat sat on the mat. the dog sat on the log. ";
  std::ofstream(file("long.txt")) << text;
  const pid_t pid = spawn("train", "-f " + quote(file("long.txt")) + " -m " + quote(model_) +
                                       " -c 64 -b 1 --steps 1 --val-split 0.95 -t 1 -o " +
                                       quote(file("o.gguf")) + " --checkpoint " + quote(file("o.ckpt")));
  // The step's progress line ("loom-train: " lines come before any step): validation follows.
  ASSERT_TRUE(wait_for_stderr("train: [")) << slurp(file("bg.err"));
  const auto [rc, s] = signal_and_wait(pid, SIGINT);
  const std::string err = slurp(file("bg.err"));
  ASSERT_EQ(err.find("val: "), std::string::npos) << "validation finished before the signal: " << err;
  EXPECT_EQ(rc, 130) << err;
  EXPECT_LT(s, 1.0);
  EXPECT_FALSE(fs::exists(file("o.gguf")));
  EXPECT_TRUE(fs::exists(file("o.ckpt"))) << err;
  EXPECT_EQ(temporaries(), "");
}

// 6/7: SIGINT while a big output is written: exit 130, neither the output nor a temporary left.
TEST_F(Hostile, SigintWhileWritingLeavesNothing) {
  const pid_t pid = spawn("gguf", "new --arch llama --preset tiny --n-layer 48 --n-embd 1024 --n-ff 4096 -o " +
                                      quote(file("big.gguf")));
  bool writing = false;
  for (int i = 0; i < 2000 && !writing; ++i) {
    writing = temporaries() != "";
    if (!writing) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ASSERT_TRUE(writing) << "no temporary file appeared";
  const auto [rc, s] = signal_and_wait(pid, SIGINT);
  EXPECT_EQ(rc, 130);
  EXPECT_LT(s, 1.0);
  EXPECT_FALSE(fs::exists(file("big.gguf")));
  EXPECT_EQ(temporaries(), "");
}

// 7: outputs go through a unique temporary: a symlink at OUT.tmp is not followed, a device, FIFO
// or directory as -o is refused, and two writers to one path leave one whole file.
TEST_F(Hostile, AtomicOutputs) {
  std::ofstream(file("victim.txt")) << "keep";
  fs::create_symlink(file("victim.txt"), file("o.gguf.tmp"));
  ASSERT_EQ(run("gguf", "new --arch llama --preset tiny -o " + quote(file("o.gguf"))).rc, 0);
  EXPECT_EQ(slurp(file("victim.txt")), "keep");
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(file("o.gguf"))));
  fs::remove(file("o.gguf.tmp"));

  ASSERT_EQ(mkfifo(file("fifo").c_str(), 0600), 0);
  fs::create_directory(file("folder"));
  for (const std::string& out : {std::string("/dev/null"), file("fifo"), file("folder")}) {
    const ToolResult r = run("gguf", "new --arch llama --preset tiny -o " + quote(out));
    EXPECT_EQ(r.rc, 3) << out << ": " << r.err;
  }
  struct stat st {};
  ASSERT_EQ(stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
  EXPECT_EQ(fs::status(file("fifo")).type(), fs::file_type::fifo);

  const std::string same = quote(file("same.gguf"));
  const ToolResult two = sh(tool("gguf") + " new --arch llama --preset tiny --n-layer 8 --seed 1 -o " + same + " & " +
                            tool("gguf") + " new --arch llama --preset tiny --n-layer 8 --seed 2 -o " + same +
                            "; wait");
  ASSERT_EQ(run("gguf", "new --arch llama --preset tiny --n-layer 8 --seed 1 -o " + quote(file("s1.gguf"))).rc, 0);
  ASSERT_EQ(run("gguf", "new --arch llama --preset tiny --n-layer 8 --seed 2 -o " + quote(file("s2.gguf"))).rc, 0);
  const std::string got = slurp(file("same.gguf"));
  EXPECT_TRUE(got == slurp(file("s1.gguf")) || got == slurp(file("s2.gguf")));
  EXPECT_EQ(temporaries(), "");
}

// 8: loom-train's checks come before any work.
TEST_F(Hostile, TrainChecksBeforeWork) {
  fs::copy_file(model_, file("base.gguf"));
  const std::string before = slurp(file("base.gguf"));
  for (const std::string& ck : {file("base.gguf"), std::string("./base.gguf")}) {
    const ToolResult r = sh(tool("train") + " -f c.txt -m " +
                            quote(file("base.gguf")) + " -c 32 -b 4 --steps 5 --checkpoint " + quote(ck) +
                            " -o x.gguf -t 1");
    EXPECT_EQ(r.rc, 2) << r.err;
  }
  EXPECT_EQ(slurp(file("base.gguf")), before);
  for (const char* bad : {"--out-type q9_9 -o y.gguf", "-o /nonexistent-dir/x.gguf", "-o /dev/null",
                                 "--checkpoint /nonexistent-dir/x.ckpt -o y.gguf"}) {
    const ToolResult r = run("train", train_args("c.txt", std::string("--steps 200 ") + bad));
    EXPECT_TRUE(r.rc == 2 || r.rc == 3) << bad << ": " << r.rc << " " << r.err;
    EXPECT_EQ(r.err.find("params"), std::string::npos) << bad << ": training started: " << r.err;
  }
}

// 9: header-only files: refused by the tools that read weights, planned with by the others.
TEST_F(Hostile, HeaderOnlyFiles) {
  const std::string h = quote(file("h.gguf"));
  ASSERT_EQ(run("gguf", "new --arch llama --preset tiny --header-only -o " + h).rc, 0);
  for (const auto& [name, args] : {std::pair{"run", "-m " + h + " -p hi -n 2"}, {"bench", "-m " + h + " -p 8 -n 2 -r 1"},
                                   {"train", "-f " + quote(file("c.txt")) + " -m " + h + " -c 32 -b 4 --steps 1 -o t.gguf"}}) {
    const ToolResult r = run(name, args);
    EXPECT_EQ(r.rc, 2) << name << ": " << r.err;
    EXPECT_NE(r.err.find("header-only"), std::string::npos) << r.err;
  }
  EXPECT_EQ(run("gguf", "info " + h).rc, 0);
  EXPECT_EQ(run("fit-params", "-m " + h).rc, 0);
  EXPECT_EQ(run("split-inspect", "-m " + h).rc, 0);
}

// 10: --resume with other inputs names what differs; a corrupted checkpoint is exit 3.
TEST_F(Hostile, ResumeWithOtherInputs) {
  ASSERT_EQ(run("train", train_args("c.txt", "--steps 10 --checkpoint-every 5 --checkpoint r.ckpt -o r.gguf")).rc, 0);
  ASSERT_EQ(run("gguf", "new --arch llama --preset tiny --seed 2 -o " + quote(file("other.gguf"))).rc, 0);
  const std::string resume = " --steps 10 --checkpoint r.ckpt --resume r.ckpt -o r2.gguf";
  const std::string m = quote(model_), c = quote(file("c.txt"));
  for (const auto& [args, named] :
       {std::pair{"-f " + c + " -m " + quote(file("other.gguf")) + " -c 32 -b 4" + resume, std::string("-m")},
        {"-f " + quote(file("short.txt")) + " -m " + m + " -c 32 -b 4" + resume, "-f"},
        {"-f " + c + " -m " + m + " -c 16 -b 4" + resume, "-c"},
        {"-f " + c + " -m " + m + " -c 32 -b 2" + resume, "-b"},
        {"-f " + c + " -m " + m + " -c 32 -b 4 --val-split 0.2" + resume, "--val-split"}}) {
    const ToolResult r = run("train", args);
    EXPECT_EQ(r.rc, 2) << args << ": " << r.err;
    EXPECT_NE(r.err.find(named), std::string::npos) << r.err;
  }
  // Flip one byte of the optimizer state near the end of the file.
  std::string ck = slurp(file("r.ckpt"));
  ASSERT_GT(ck.size(), 1000u);
  ck[ck.size() - 100] ^= 0x40;
  std::ofstream(file("r.ckpt"), std::ios::binary) << ck;
  const ToolResult r = run("train", "-f " + c + " -m " + m + " -c 32 -b 4 -t 1" + resume);
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_NE(r.err.find("corrupt"), std::string::npos) << r.err;
}

// 11: a failed write to stdout is exit 1 with a message, on every tool that prints.
TEST_F(Hostile, StdoutErrorsAreExitOne) {
  if (access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full";
  const std::string m = quote(model_);
  for (const std::string& cmd : {tool("run") + " -m " + m + " -p hi -n 4", tool("fit-params") + " -m " + m,
                                 tool("gguf") + " info " + m, tool("split-inspect") + " -m " + m,
                                 tool("bench") + " -m " + m + " -p 8 -n 2 -r 1"}) {
    const int status = std::system((cmd + " >/dev/full 2>" + quote(file("err.txt"))).c_str());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << cmd << ": " << status;
    EXPECT_NE(slurp(file("err.txt")).find("standard output"), std::string::npos) << slurp(file("err.txt"));
  }
}

// 12: the small ones.
TEST_F(Hostile, SmallFlagCases) {
  const std::string m = quote(model_);
  EXPECT_EQ(run("run", "-m " + m + " -p hi -n 2 --log-file /nonexistent-dir/x.log").rc, 2);
  EXPECT_EQ(run("run", "-m " + m + " -n 2 -f " + quote(dir_.string())).rc, 3);
  const ToolResult ppl = run("run", "-m " + m + " --perplexity -f " + quote(file("c.txt")) + " -c 1");
  EXPECT_EQ(ppl.rc, 2) << ppl.out << ppl.err;
  EXPECT_EQ(ppl.out.find("nan"), std::string::npos);
  EXPECT_EQ(run("run", "-m " + m + " -p hi -n 2 --top-p 2").rc, 2);
  EXPECT_EQ(run("train", train_args("c.txt", "--steps 1 -o " + quote(dir_.string()))).rc, 3);
}

// 12: a loss that becomes NaN/Inf stops training with exit 3 naming the step.
TEST_F(Hostile, NonFiniteLossStopsTraining) {
  const ToolResult r = run("train", train_args("c.txt", "--steps 30 -lr 1e30 -o n.gguf"));
  EXPECT_EQ(r.rc, 3) << r.err;
  EXPECT_NE(r.err.find("step "), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(file("n.gguf")));
  const ToolResult go_on = run("train", train_args("c.txt", "--steps 30 -lr 1e30 --allow-nan -o n.gguf"));
  EXPECT_EQ(go_on.rc, 0) << go_on.err;
}

// 13: planning tools read only the metadata: they work under an address-space limit smaller
// than the file (a 4.2 GB header-only llama-8b in q4_0 under 3 GB).
TEST_F(Hostile, PlanningUnderAnAddressSpaceLimit) {
  const std::string big = quote(file("big.gguf"));
  ASSERT_EQ(run("gguf", "new --arch llama --preset llama-8b --type q4_0 --header-only -o " + big).rc, 0);
  ASSERT_GT(fs::file_size(file("big.gguf")), 3ull << 30);
  for (const std::string& cmd : {tool("gguf") + " info " + big, tool("fit-params") + " -m " + big,
                                 tool("split-inspect") + " -m " + big}) {
    const ToolResult r = sh("ulimit -v 3000000; " + cmd);
    EXPECT_EQ(r.rc, 0) << cmd << ": " << r.err;
  }
}

}  // namespace
