// Tensor parallelism across processes: `mpirun -np N loom-run ... -sm tensor --comm mpi` (one
// shard per rank, rank 0 prints) gives the text of one process. Skips, saying why, when
// mpirun is not installed or the build has no MPI.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "../e2e/tool_runner.h"
#include "loom/meta/comm.h"
#include "loom/model/model_file.h"
#include "loom/model/session.h"
#include "loom/backend/registry.h"

namespace loom {
namespace {

using Out = test::ToolResult;

// A shell command line with stdout and stderr captured (tool_runner.h, in a scratch folder).
Out sh(const std::string& cmd) {
  const std::filesystem::path dir = test::scratch_dir("loom-tp-mpi");
  Out r = test::run_command(cmd, dir);
  test::remove_scratch(dir);
  return r;
}

// As CI runs it (as root, more ranks than cores); no single-copy (CMA) transfers, which
// containers without ptrace rights refuse; a time limit so that nothing can hang the suite.
const std::string kMpirun =
    "timeout 120 mpirun --allow-run-as-root --oversubscribe --mca btl_vader_single_copy_mechanism none -np ";

class TensorParallelMpi : public ::testing::Test {
 protected:
  void SetUp() override {
    if (sh("command -v mpirun").rc != 0)
      GTEST_SKIP() << "mpirun is not installed (scripts/setup-deps.sh installs OpenMPI)";
    if (!meta::mpi_available()) GTEST_SKIP() << "this build has no MPI (LOOM_MPI=OFF or no MPI found by CMake)";
    NewModelOptions o;
    o.hparams = preset_hparams(Arch::llama, "tiny");
    o.hparams.n_head_kv = 2;  // 3 ranks: one gets no KV head
    o.seed = 3;
    model_ = (std::filesystem::temp_directory_path() / ("loom-tp-mpi-" + std::to_string(getpid()) + ".gguf")).string();
    o.output = model_;
    make_random_model(o);
  }
  void TearDown() override {
    if (!model_.empty()) std::filesystem::remove(model_);
  }
  std::string run_args() const { return " -m " + model_ + " -p 'hello world' -n 16 --temp 0 -t 1"; }
  std::string model_;
};

TEST_F(TensorParallelMpi, RanksGiveTheTextOfOneProcess) {
  const std::string bin = std::string(LOOM_BIN_DIR) + "/loom-run";
  const Out one = sh(bin + run_args());
  ASSERT_EQ(one.rc, 0) << one.err;
  for (const std::string ranks : {"2", "3"}) {
    const std::string split = ranks == "3" ? " -ts 2,1,1" : "";
    const Out mp = sh(kMpirun + ranks + " " + bin + run_args() + " -sm tensor --comm mpi" + split);
    ASSERT_EQ(mp.rc, 0) << mp.err;
    EXPECT_EQ(mp.out, one.out) << ranks << " ranks";
  }
}

TEST_F(TensorParallelMpi, Bf16ReductionMatchesTheInProcessGroup) {
  // both round every contribution to BF16 and sum in rank order: the same bits, the same text
  const std::string bin = std::string(LOOM_BIN_DIR) + "/loom-run";
  const Out in = sh(bin + run_args() + " -sm tensor --sim-devices 2x64MiB -ts 1,1 --reduce-bf16 0");
  ASSERT_EQ(in.rc, 0) << in.err;
  const Out mp = sh(kMpirun + "2 " + bin + run_args() + " -sm tensor --comm mpi --reduce-bf16 0");
  ASSERT_EQ(mp.rc, 0) << mp.err;
  EXPECT_EQ(mp.out, in.out);
}

TEST_F(TensorParallelMpi, AFailingRankEndsTheJobWithItsExitCode) {
  // 3 proportions for 2 ranks: a usage error on every rank, and no rank left waiting
  const Out r =
      sh(kMpirun + "2 " + std::string(LOOM_BIN_DIR) + "/loom-run" + run_args() + " -sm tensor --comm mpi -ts 1,1,1");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("-ts has 3 values for 2"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(TensorParallelMpi, CommMpiNeedsTensorSplitMode) {
  const Out r = sh(std::string(LOOM_BIN_DIR) + "/loom-run" + run_args() + " --comm mpi");
  EXPECT_EQ(r.rc, 2) << r.err;
  EXPECT_NE(r.err.find("--comm"), std::string::npos) << r.err;
}

// Runs inside `mpirun -np 2 test-tp --gtest_filter=MpiRank.*` (started by the test below):
// library-level sessions across ranks, logits and saved sequence states equal to one process.
TEST(MpiRank, SessionsAcrossRanksMatchOneProcess) {
  if (!meta::launched_by_mpi() || !meta::mpi_available())
    GTEST_SKIP() << "runs under mpirun (see RanksRunTheLibraryTest)";
  Communicator& world = meta::mpi_world();
  NewModelOptions o;
  o.hparams = preset_hparams(Arch::qwen3moe, "tiny");
  o.hparams.n_head_kv = 2;
  o.seed = 9;
  o.output = (std::filesystem::temp_directory_path() / ("loom-tp-rank-" + std::to_string(getpid()) + ".gguf")).string();
  make_random_model(o);
  SessionParams sp;
  sp.n_ctx = 32;
  sp.n_ubatch = 4;
  sp.n_threads = 1;
  sp.type_k = sp.type_v = DType::F32;
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 9, 10};
  auto single = Model::load(o.output);
  Session one(*single, sp);
  one.decode(prompt);
  const std::vector<uint8_t> want_state = one.save_state();
  const std::vector<float> want(one.logits(0).begin(), one.logits(0).end());

  DeviceSet set = make_devices("", 1);
  ModelLoadOptions lo;
  lo.placement.devices = set.all;
  lo.placement.split_mode = SplitMode::tensor;
  lo.placement.tp_members = {set.cpu};
  lo.placement.tp_rank = world.rank();
  lo.placement.tp_size = world.size();
  auto m = Model::load(o.output, lo);
  std::filesystem::remove(o.output);
  sp.comm = &world;
  Session s(*m, sp);
  s.decode(prompt);
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(s.logits(0)[i], want[i]) << "rank " << world.rank();  // same bits
  EXPECT_EQ(s.n_all_reduce(), 4u * (uint64_t)m->hparams().n_layer * 2);  // 4 joins a layer; ubatches of 4 and 2 tokens
  const std::vector<uint8_t> got_state = s.save_state();                 // gathers the other rank's heads
  ASSERT_EQ(got_state.size(), want_state.size());
  for (size_t i = 48; i + 4 <= got_state.size(); i += 4) {
    float a, b;
    std::memcpy(&a, got_state.data() + i, 4);
    std::memcpy(&b, want_state.data() + i, 4);
    ASSERT_NEAR(a, b, 1e-4) << "byte " << i;
  }
  // restore the single process's state on the ranks and continue
  s.load_state(want_state);
  one.decode(std::span<const int32_t>(&prompt[0], 1));
  s.decode(std::span<const int32_t>(&prompt[0], 1));
  for (size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(s.logits(0)[i], one.logits(0)[i], 1e-4);
}

TEST_F(TensorParallelMpi, RanksRunTheLibraryTest) {
  const Out r = sh(kMpirun + "2 " + std::string(LOOM_BIN_DIR) + "/test-tp --gtest_filter=MpiRank.* --gtest_color=no");
  EXPECT_EQ(r.rc, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("[  PASSED  ] 1 test"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace loom
