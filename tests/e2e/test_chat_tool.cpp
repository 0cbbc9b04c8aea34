// loom-run -cnv as a user runs it: turns through a pipe and through a pseudo-terminal, the
// rendered prompt of each template family, and the KV cache kept across turns (the second
// turn evaluates only its new tokens).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tool_runner.h"

namespace {

namespace fs = std::filesystem;
using loom::test::quote;
using loom::test::ToolResult;

class ChatTool : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = fs::temp_directory_path() / ("loom-e2e-chat-" + std::to_string(getpid()));
    fs::create_directories(dir_);
    ToolResult r = run("loom-gguf new --arch llama --preset tiny --seed 1 -o " + model());
    ASSERT_EQ(r.rc, 0) << r.err;
  }
  static void TearDownTestSuite() { fs::remove_all(dir_); }
  static std::string model() { return (dir_ / "tiny-llama.gguf").string(); }
  static ToolResult run(const std::string& args) { return loom::test::run_tool(args); }
  // A shell pipeline feeding loom-run (args after the binary) with `input` on stdin.
  static ToolResult piped(const std::string& input, const std::string& args) {
    return loom::test::run_command("printf " + quote(input) + " | " + quote(std::string(LOOM_BIN_DIR) + "/loom-run") +
                                       " " + args,
                                   dir_);
  }
  // Two turns piped into loom-run -cnv --json.
  static nlohmann::json two_turns(const std::string& flags) {
    ToolResult r = piped("hello\\nhow are you\\n", "-m " + model() + " -cnv -n 6 --temp 0 --json " + flags);
    EXPECT_EQ(r.rc, 0) << r.err;
    if (r.rc != 0) return {};
    return nlohmann::json::parse(r.out);
  }
  static fs::path dir_;
};
fs::path ChatTool::dir_;

TEST_F(ChatTool, PipedTurnsExitZero) {
  ToolResult r = piped("hello\\nhow are you\\n", "-m " + model() + " -cnv --chat-template chatml -n 8 --temp 0");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_FALSE(r.out.empty());
  EXPECT_EQ(r.out.find('\r'), std::string::npos);
  EXPECT_EQ(r.out.find("> "), std::string::npos) << "no input marker when stdin is not a terminal";
  EXPECT_NE(r.err.find("loom_perf: prompt eval time"), std::string::npos) << r.err;
}

TEST_F(ChatTool, SecondTurnEvaluatesOnlyItsNewTokens) {
  nlohmann::json j = two_turns("--chat-template chatml -sys 'Be brief.'");
  ASSERT_EQ(j["turns"].size(), 2u) << j.dump();
  const auto& t1 = j["turns"][0];
  const auto& t2 = j["turns"][1];
  EXPECT_EQ(t1["prompt"], "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t1["n_past_before"], 0);
  // the KV cache holds turn 1's prompt and reply; turn 2 adds the reply's closing and its own text
  EXPECT_EQ(t2["n_past_before"].get<int>(), t1["n_prompt"].get<int>() + t1["n_gen"].get<int>());
  EXPECT_EQ(t2["prompt"], "<|im_end|>\n<|im_start|>user\nhow are you<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_LT(t2["n_prompt"].get<int>(), t2["n_past_before"].get<int>() + t2["n_prompt"].get<int>());
  EXPECT_EQ(j["rendered"], "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhello<|im_end|>\n"
                           "<|im_start|>assistant\n" + t1["reply"].get<std::string>() +
                           "<|im_end|>\n<|im_start|>user\nhow are you<|im_end|>\n<|im_start|>assistant\n" +
                           t2["reply"].get<std::string>() + "<|im_end|>\n");
  EXPECT_EQ(j["n_prompt"].get<int>(), t1["n_prompt"].get<int>() + t2["n_prompt"].get<int>());
}

// The first turn's rendered prompt and the second turn's new text per family (with -sys).
TEST_F(ChatTool, RenderedPromptPerFamily) {
  struct Case {
    const char* name;
    const char* first;
    const char* second_suffix;  // turn 2's prompt after the reply's closing
  };
  const Case cases[] = {
      {"llama3",
       "<|start_header_id|>system<|end_header_id|>\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\n"
       "hello<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
       "<|start_header_id|>user<|end_header_id|>\n\nhow are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
      {"gemma", "<start_of_turn>user\nBe brief.\n\nhello<end_of_turn>\n<start_of_turn>model\n",
       "<start_of_turn>user\nhow are you<end_of_turn>\n<start_of_turn>model\n"},
      {"phi3", "<|system|>\nBe brief.<|end|>\n<|user|>\nhello<|end|>\n<|assistant|>\n",
       "<|user|>\nhow are you<|end|>\n<|assistant|>\n"},
      {"mistral-v7", "[SYSTEM_PROMPT] Be brief.[/SYSTEM_PROMPT][INST] hello[/INST]", "[INST] how are you[/INST]"},
      {"llama2-sys", "[INST] <<SYS>>\nBe brief.\n<</SYS>>\n\nhello [/INST]", "[INST] how are you [/INST]"},
      {"deepseek3", "Be brief.\n\n<｜User｜>hello<｜Assistant｜>", "<｜User｜>how are you<｜Assistant｜>"},
      {"gpt-oss", "<|start|>system<|message|>Be brief.<|end|><|start|>user<|message|>hello<|end|><|start|>assistant",
       "<|start|>user<|message|>how are you<|end|><|start|>assistant"},
  };
  for (const Case& c : cases) {
    nlohmann::json j = two_turns(std::string("--chat-template ") + c.name + " -sys 'Be brief.'");
    ASSERT_EQ(j["turns"].size(), 2u) << c.name;
    EXPECT_EQ(j["template"], c.name);
    EXPECT_EQ(j["turns"][0]["prompt"], c.first) << c.name;
    const std::string second = j["turns"][1]["prompt"];
    EXPECT_TRUE(second.ends_with(c.second_suffix)) << c.name << ": " << second;
    EXPECT_GT(j["turns"][1]["n_past_before"].get<int>(), 0) << c.name << ": the KV cache was kept";
  }
}

TEST_F(ChatTool, KvReuseShowsInTheLog) {
  ToolResult r = piped("hello\\nhow are you\\n", "-m " + model() + " -cnv -n 4 --temp 0 -lv 3");
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.err.find("no tokenizer.chat_template: using chatml"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("turn 1: 0 tokens kept in the KV cache"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("turn 2: 0 tokens kept"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("turn 2: "), std::string::npos) << r.err;
}

// A turn that does not fit drops the oldest messages and evaluates the rest again; a reply that
// reaches the end of the context stops there.
TEST_F(ChatTool, FullContextShiftsOrStops) {
  ToolResult r = piped("hello\\nhow are you\\n", "-m " + model() + " -cnv -c 128 -n 40 --ignore-eos --temp 0 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["turns"].size(), 2u);
  EXPECT_FALSE(j["turns"][0]["context_shifted"].get<bool>());
  EXPECT_TRUE(j["turns"][1]["context_shifted"].get<bool>()) << j.dump();
  EXPECT_EQ(j["turns"][1]["n_past_before"], 0);
  EXPECT_EQ(j["turns"][1]["prompt"], "<|im_start|>user\nhow are you<|im_end|>\n<|im_start|>assistant\n");
  r = piped("hello\\n", "-m " + model() + " -cnv -c 80 -n -1 --ignore-eos --temp 0 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["turns"][0]["stop"], "context_full");
  EXPECT_EQ(j["turns"][0]["n_prompt"].get<int>() + j["turns"][0]["n_gen"].get<int>(), 80);
}

TEST_F(ChatTool, SingleTurnAndPromptAsFirstMessage) {
  ToolResult r = piped("never read\\n", "-m " + model() + " -cnv -p hi -st -n 3 --temp 0 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["turns"].size(), 1u);
  EXPECT_EQ(j["turns"][0]["user"], "hi");
  // -cnv with no input at all: the -p turn, then end of input
  r = run("loom-run -m " + model() + " -cnv -p hi -n 2 </dev/null");
  EXPECT_EQ(r.rc, 0) << r.err;
}

TEST_F(ChatTool, ReversePromptAndPlainInteractive) {
  // -i without -cnv: the text goes in as typed, with --in-prefix/--in-suffix around it
  ToolResult r = piped("more\\n", "-m " + model() + " -i -p 'once upon' --in-prefix ' [' --in-suffix ']' -n 3 --temp 0 --json");
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["template"], "none");
  ASSERT_EQ(j["turns"].size(), 2u);
  EXPECT_EQ(j["turns"][1]["prompt"], " [more]");
}

TEST_F(ChatTool, BadTemplateFlags) {
  ToolResult r = run("loom-run -m " + model() + " -cnv --chat-template nonesuch -p hi </dev/null");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("chatml"), std::string::npos) << "lists the known names: " << r.err;
  r = run("loom-run -m " + model() + " -cnv --jinja -p hi </dev/null");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("--chat-template"), std::string::npos) << r.err;
}

// loom-run on a pseudo-terminal (its stdin, stdout and stderr), read through the master side.
class Pty {
 public:
  explicit Pty(std::vector<std::string> args) {
    master_ = posix_openpt(O_RDWR | O_NOCTTY);
    if (master_ < 0 || grantpt(master_) != 0 || unlockpt(master_) != 0) return;
    const std::string slave_name = ptsname(master_);
    const std::string bin = std::string(LOOM_BIN_DIR) + "/loom-run";
    args.insert(args.begin(), bin);
    pid_ = fork();
    if (pid_ == 0) {
      setsid();  // the terminal becomes the controlling one: ^C there is SIGINT here
      const int slave = open(slave_name.c_str(), O_RDWR);
      dup2(slave, 0);
      dup2(slave, 1);
      dup2(slave, 2);
      close(master_);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(bin.c_str(), argv.data());
      _exit(127);
    }
  }
  ~Pty() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (master_ >= 0) close(master_);
  }
  bool ok() const { return master_ >= 0 && pid_ > 0; }
  void type(const std::string& s) { ASSERT_EQ(write(master_, s.data(), s.size()), (ssize_t)s.size()); }
  // Reads until `what` appears after position `from` (or the time runs out).
  bool read_until(const std::string& what, int seconds, size_t from = 0) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
    while (out_.find(what, from) == std::string::npos && std::chrono::steady_clock::now() < end) {
      pollfd p{master_, POLLIN, 0};
      if (poll(&p, 1, 200) <= 0) continue;
      char buf[4096];
      const ssize_t n = read(master_, buf, sizeof buf);
      if (n <= 0) break;
      out_.append(buf, (size_t)n);
    }
    return out_.find(what, from) != std::string::npos;
  }
  void drain() {
    pollfd p{master_, POLLIN, 0};
    char buf[4096];
    while (poll(&p, 1, 0) > 0) {
      const ssize_t n = read(master_, buf, sizeof buf);
      if (n <= 0) return;
      out_.append(buf, (size_t)n);
    }
  }
  // The exit code (128 + signal when killed), or -1 if it has not ended in `seconds`.
  int wait(int seconds) {
    int status = 0;
    for (int i = 0; i < seconds * 10; ++i) {
      drain();
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      usleep(100000);
    }
    return -1;
  }
  const std::string& out() const { return out_; }

 private:
  int master_ = -1;
  pid_t pid_ = -1;
  bool exited_ = false;
  std::string out_;
};

// The "> " marker appears, both typed turns get replies, Ctrl-D ends it.
TEST_F(ChatTool, PseudoTerminal) {
  Pty t({"-m", model(), "-cnv", "-n", "4", "--temp", "0", "-lv", "3"});
  ASSERT_TRUE(t.ok());
  EXPECT_TRUE(t.read_until("> ", 120)) << t.out();
  t.type("hello\n");
  EXPECT_TRUE(t.read_until("turn 1:", 120)) << t.out();
  t.type("how are you\n");
  EXPECT_TRUE(t.read_until("turn 2:", 120)) << t.out();
  t.type("\x04");  // Ctrl-D: end of input
  EXPECT_EQ(t.wait(60), 0) << t.out();
  EXPECT_NE(t.out().find("loom_perf: total time"), std::string::npos) << t.out();
}

// Ctrl-C ends the reply being written (the conversation goes on); Ctrl-C at the prompt exits 130.
TEST_F(ChatTool, CtrlCEndsTheReplyThenExits) {
  // A context far larger than the 300 ms before the Ctrl-C can fill (512 tokens take ~0.5 s).
  Pty t({"-m", model(), "-cnv", "-c", "16384", "-n", "-1", "--ignore-eos", "--temp", "0", "-lv", "3"});
  ASSERT_TRUE(t.ok());
  ASSERT_TRUE(t.read_until("> ", 120)) << t.out();
  t.type("hello\n");
  ASSERT_TRUE(t.read_until("hello\r\n", 60)) << t.out();
  usleep(300000);
  t.type("\x03");  // Ctrl-C during the reply
  EXPECT_TRUE(t.read_until("(interrupt)", 120)) << t.out();
  const size_t at = t.out().find("(interrupt)");
  EXPECT_TRUE(t.read_until("> ", 30, at)) << "the conversation continues: " << t.out();
  t.type("\x03");  // Ctrl-C at the prompt
  EXPECT_EQ(t.wait(30), 130) << t.out();
}

}  // namespace
