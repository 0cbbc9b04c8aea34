// Flag parsing as llama.cpp users type it: each test is a trap the parser fell into before
// (multi-letter short flags split as -c nv, repeated flags refused, values starting with '-').
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "loom/core/error.h"
#include "loom/tools/common.h"
#include "loom/tools/main.h"
#include "loom/tools/run.h"

namespace {

struct Parsed {
  CLI::App app{"test"};
  loom::tools::CommonOptions common;
  loom::tools::RunOptions run;
  Parsed() {
    loom::tools::add_common_flags(app, common);
    loom::tools::add_run_flags(app, run);
    loom::tools::take_last_repetition(app);
  }
  void parse(std::vector<std::string> args) {
    args.insert(args.begin(), "loom-run");
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    std::vector<std::string> v = loom::tools::normalize_args(app, (int)argv.size(), argv.data());
    app.parse(v);
  }
};

TEST(Args, MultiLetterShortFlagsAreOneFlag) {
  Parsed r;
  r.parse({"-m", "x.gguf", "-cnv", "-sys", "be brief", "-st", "-ngl", "7", "-fa", "on", "-ub", "64", "-ctk", "q8_0",
           "-dev", "CPU", "-ts", "3,1", "-sm", "layer", "-ot", "exps=CPU"});
  EXPECT_TRUE(r.run.conversation);
  EXPECT_EQ(r.common.n_ctx, 0) << "-cnv must not set -c";
  EXPECT_EQ(r.run.system_prompt, "be brief");
  EXPECT_TRUE(r.run.single_turn);
  EXPECT_EQ(r.common.n_gpu_layers, "7");
  EXPECT_EQ(r.common.flash_attn, "on");
  EXPECT_EQ(r.common.n_ubatch, 64);
  EXPECT_EQ(r.common.cache_type_k, "q8_0");
  EXPECT_EQ(r.common.devices, "CPU");
  EXPECT_EQ(r.common.tensor_split, "3,1");
  ASSERT_EQ(r.common.overrides.size(), 1u);
  EXPECT_EQ(r.common.overrides[0], "exps=CPU");
  r.parse({"-ncmoe", "3"});
  EXPECT_EQ(r.common.n_cpu_moe, 3);
}

TEST(Args, NoConversation) {
  Parsed r;
  r.parse({"-no-cnv", "-p", "hi"});
  EXPECT_TRUE(r.run.no_conversation);
  EXPECT_FALSE(r.run.conversation);
}

TEST(Args, TheLastRepetitionWins) {
  Parsed r;
  r.parse({"-t", "1", "-t", "2", "--temp", "0.5", "--temp", "0", "-ngl", "1", "-ngl", "3"});
  EXPECT_EQ(r.common.n_threads, 2);
  EXPECT_EQ(r.run.sampling.temp, 0.0f);
  EXPECT_EQ(r.common.n_gpu_layers, "3");
}

TEST(Args, RepeatableFlagsCollect) {
  Parsed r;
  r.parse({"-r", "User:", "-r", "-- Q:", "-ot", "a=CPU", "-ot", "b=CPU"});
  EXPECT_EQ(r.run.reverse_prompts, (std::vector<std::string>{"User:", "-- Q:"}));
  EXPECT_EQ(r.common.overrides.size(), 2u);
}

TEST(Args, ValuesMayStartWithADash) {
  Parsed r;
  r.parse({"-ngl", "-1", "-p", "-hello", "--in-prefix", "-x", "-s", "5"});
  EXPECT_EQ(r.common.n_gpu_layers, "-1");
  EXPECT_EQ(r.run.prompt, "-hello");
  EXPECT_EQ(r.run.in_prefix, "-x");
  EXPECT_EQ(r.run.seed, 5);
}

TEST(Args, SeedDefaultsToRandom) {
  Parsed r;
  r.parse({});
  EXPECT_EQ(r.run.seed, -1);
  r.parse({"--seed", "42"});
  EXPECT_EQ(r.run.seed, 42);
}

TEST(Args, DownloadFlagsAreRefusedAsUsage) {
  for (const char* flag : {"-hf", "--hf-repo", "-hfr", "-mu"}) {
    Parsed r;
    try {
      r.parse({flag, "org/model"});
      ADD_FAILURE() << flag << " was accepted";
    } catch (const loom::Error& e) {
      EXPECT_EQ(e.kind(), loom::ErrorKind::usage) << flag;
      EXPECT_NE(std::string(e.what()).find("-m"), std::string::npos) << e.what();
    }
  }
}

TEST(Args, UnknownMultiLetterShortFlagIsAnError) {
  Parsed r;
  EXPECT_THROW(r.parse({"-ngx", "3"}), loom::Error);
  Parsed c;
  EXPECT_THROW(c.parse({"-c2048"}), loom::Error) << "llama.cpp has no -c2048 either";
}

TEST(Args, RefusedLlamaFlagsSayWhy) {
  Parsed r;
  try {
    r.parse({"-np", "2"});
    ADD_FAILURE() << "-np was accepted";
  } catch (const loom::Error& e) {
    EXPECT_EQ(e.kind(), loom::ErrorKind::usage);
    EXPECT_NE(std::string(e.what()).find("-np: not supported: a session runs one sequence"), std::string::npos)
        << e.what();
  }
}

// loom-run takes -tb as llama-cli does; a tool with the shared flags only (loom-bench, loom-train)
// refuses it with the reason rather than "unknown flag".
TEST(Args, ThreadsBatchIsLoomRunsOwn) {
  Parsed r;
  r.parse({"-t", "2", "-tb", "4"});
  EXPECT_EQ(r.common.n_threads, 2);
  ASSERT_TRUE(r.run.n_threads_batch.has_value());
  EXPECT_EQ(*r.run.n_threads_batch, 4);
  r.parse({"--threads-batch", "-1"});
  EXPECT_EQ(*r.run.n_threads_batch, -1) << "-1 is llama.cpp's 'all cores'";
  Parsed none;
  none.parse({"-t", "2"});
  EXPECT_FALSE(none.run.n_threads_batch.has_value()) << "without -tb, batches use -t";

  CLI::App app{"test"};
  loom::tools::CommonOptions common;
  loom::tools::add_common_flags(app, common);
  std::vector<std::string> args = {"loom-bench", "-tb", "4"};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  try {
    (void)loom::tools::normalize_args(app, (int)argv.size(), argv.data());
    ADD_FAILURE() << "-tb was accepted by a tool without it";
  } catch (const loom::Error& e) {
    EXPECT_EQ(e.kind(), loom::ErrorKind::usage);
    EXPECT_NE(std::string(e.what()).find("-tb: not supported: only loom-run"), std::string::npos) << e.what();
  }
}

// loom-bench checks each setting's flags after the previous one ran, when the pool has placed the
// main thread: against that thread's one CPU, `-m A,B -C 0x3 --cpu-strict 1` failed at B.
TEST(Args, CpuPlacementFlagsCheckedAgainstTheProcessNotAPlacedThread) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  if (!CPU_ISSET(0, &allowed) || !CPU_ISSET(1, &allowed)) GTEST_SKIP() << "this process may not run on CPUs 0 and 1";
  std::vector<std::vector<int>> sets;
  std::string error;
  std::thread([&] {
    loom::place_current_thread(loom::ThreadPlacement{{{0}}, 50}, 0);  // as a pool places its caller
    Parsed r;
    r.parse({"-C", "0x3", "--cpu-strict", "1"});
    try {
      sets = loom::tools::cpu_placement(r.common).cpu_sets;
    } catch (const loom::Error& e) {
      error = e.what();
    }
  }).join();
  EXPECT_EQ(error, "");
  EXPECT_EQ(sets, (std::vector<std::vector<int>>{{0}, {1}}));
}

// -C / -Cr / --cpu-strict / --poll as the CPU device's placement, checked before anything runs.
TEST(Args, CpuPlacementFlags) {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  ASSERT_EQ(sched_getaffinity(0, sizeof allowed, &allowed), 0);
  if (!CPU_ISSET(0, &allowed) || !CPU_ISSET(1, &allowed)) GTEST_SKIP() << "this process may not run on CPUs 0 and 1";
  Parsed r;
  r.parse({"-C", "0x2", "-Cr", "0-0", "--poll", "0"});
  loom::ThreadPlacement p = loom::tools::cpu_placement(r.common);
  EXPECT_EQ(p.cpu_sets, (std::vector<std::vector<int>>{{0, 1}})) << "-Cr complements -C";
  EXPECT_EQ(p.poll, 0);
  r.parse({"--cpu-strict", "1"});
  p = loom::tools::cpu_placement(r.common);
  EXPECT_EQ(p.cpu_sets, (std::vector<std::vector<int>>{{0}, {1}})) << "strict: one CPU per thread";
  Parsed none;
  none.parse({});
  EXPECT_TRUE(loom::tools::cpu_placement(none.common).cpu_sets.empty()) << "no flag: the OS places the threads";

  // --numa over a two-node machine (a sysfs of its own: node0 has CPU 0, node1 CPU 1)
  const std::filesystem::path root = std::filesystem::temp_directory_path() / ("loom-numa-" + std::to_string(getpid()));
  for (const char* node : {"node0", "node1"}) std::filesystem::create_directories(root / node);
  std::ofstream(root / "node0" / "cpulist") << "0\n";
  std::ofstream(root / "node1" / "cpulist") << "1\n";
  std::ofstream(root / "possible") << "0-1\n";  // not a node: ignored
  Parsed numa;
  numa.parse({"--numa", "distribute"});
  EXPECT_EQ(loom::tools::numa_node_cpus(root.string()), (std::vector<std::vector<int>>{{0}, {1}}));
  EXPECT_EQ(loom::tools::cpu_placement(numa.common, root.string()).cpu_sets, (std::vector<std::vector<int>>{{0}, {1}}))
      << "thread i on node i % 2";
  numa.parse({"--numa", "isolate"});
  const auto isolated = loom::tools::cpu_placement(numa.common, root.string()).cpu_sets;
  ASSERT_EQ(isolated.size(), 1u);
  EXPECT_EQ(isolated[0].size(), 1u) << "the node the run starts on";
  numa.parse({"--numa", "numactl"});
  EXPECT_EQ(loom::tools::cpu_placement(numa.common, root.string()).cpu_sets, (std::vector<std::vector<int>>{{0, 1}}))
      << "the process's own CPUs";
  EXPECT_EQ(loom::tools::cpu_placement(numa.common, (root / "none").string()).cpu_sets.size(), 1u)
      << "no NUMA information: one set of every CPU";
  std::filesystem::remove_all(root);
  for (std::vector<std::string> bad : std::vector<std::vector<std::string>>{{"-C", "0xg"},
                                                                            {"-C", "0"},
                                                                            {"-C", std::string(300, 'f')},
                                                                            {"-Cr", "2-1"},
                                                                            {"-Cr", "0-"},
                                                                            {"-Cr", "0-4096"},
                                                                            {"--cpu-strict", "2"},
                                                                            {"--poll", "-1"},
                                                                            {"--prio", "4"},
                                                                            {"--numa", "mirror"}}) {
    Parsed b;
    b.parse(bad);
    EXPECT_THROW(loom::tools::validate_common(b.common), loom::Error) << bad[0] << " " << bad[1];
  }
  Parsed batch;
  EXPECT_THROW(batch.parse({"-Cb", "0x1"}), loom::Error) << "one placement serves both counts";
}

TEST(Args, ThreadsMinusOneIsAllCores) {
  Parsed r;
  r.parse({"-t", "-1"});
  EXPECT_EQ(r.common.n_threads, -1);
  EXPECT_NO_THROW(loom::tools::validate_common(r.common));
  r.parse({"-t", "-2"});
  EXPECT_THROW(loom::tools::validate_common(r.common), loom::Error);
  r.parse({"-t", "1025"});
  EXPECT_THROW(loom::tools::validate_common(r.common), loom::Error);
}

TEST(Args, LongNameWithSingleDash) {
  Parsed r;
  r.parse({"-chunks", "3"});  // -NAME is --NAME where the tool has it (-epochs, -pg, ...)
  EXPECT_EQ(r.run.n_chunks, 3);
}

TEST(Args, FlashAttnAcceptsOneAndZero) {
  for (const char* v : {"1", "0", "on", "off", "auto"}) {
    Parsed r;
    r.parse({"-fa", v});
    EXPECT_NO_THROW(loom::tools::validate_common(r.common)) << v;
  }
  Parsed bad;
  bad.parse({"-fa", "maybe"});
  EXPECT_THROW(loom::tools::validate_common(bad.common), loom::Error);
}

TEST(Args, VersionNamesTheCommit) {
  const std::string v = loom::tools::version_string("run");
  EXPECT_EQ(v.rfind("loom-run ", 0), 0u) << v;
  EXPECT_NE(v.find("(commit "), std::string::npos) << v;
  EXPECT_EQ(v.find("(commit )"), std::string::npos) << v;
}

}  // namespace

namespace {

// llama.cpp's escape set: the six letters and \xHH; anything else, and a last backslash, kept
TEST(Args, EscapesAreProcessedAsLlamaCppDoes) {
  using loom::tools::process_escapes;
  EXPECT_EQ(process_escapes(R"(a\nb\rc\td\'e\"f\\g)"), "a\nb\rc\td'e\"f\\g");
  EXPECT_EQ(process_escapes(R"(\x41\x6a\x7A)"), "Ajz");
  EXPECT_EQ(process_escapes(R"(\xG1 \x4)"), R"(\xG1 \x4)");  // not two hex digits: as written
  EXPECT_EQ(process_escapes(R"(\q \0 end\)"), R"(\q \0 end\)");
  EXPECT_EQ(process_escapes(R"(\\n)"), R"(\n)");  // an escaped backslash, then a plain n
  EXPECT_EQ(process_escapes(""), "");
}

TEST(Args, PromptTextEscapesAndDropsTheFilesLastNewline) {
  Parsed r;
  r.parse({"-p", R"(Q:\tA\n)"});
  EXPECT_EQ(loom::tools::prompt_text(r.run), "Q:\tA\n");
  r.parse({"-p", R"(Q:\tA\n)", "--no-escape"});
  EXPECT_EQ(loom::tools::prompt_text(r.run), R"(Q:\tA\n)");

  const std::string path = testing::TempDir() + "loom-args-prompt.txt";
  { std::ofstream(path) << "line\\x21\n\n"; }
  Parsed f;
  f.parse({"-f", path});
  EXPECT_EQ(loom::tools::prompt_text(f.run), "line!\n") << "one trailing newline dropped, as llama.cpp's -f";
  f.parse({"-f", path, "--no-escape"});
  EXPECT_EQ(loom::tools::prompt_text(f.run), "line\\x21\n");
  std::remove(path.c_str());
}

}  // namespace
