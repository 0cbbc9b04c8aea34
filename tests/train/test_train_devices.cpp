// Training through the scheduler on a simulated device (SIM0: the CPU kernels behind a non-host
// arena, async streams and copies) gives the CPU's results bit for bit: the losses, gradient
// norms and trained weights of every step, with all layers there or some, and a checkpoint
// written on one device resumes on the other. Weights, gradient sums and optimizer state really
// live there, and a device too small for them is out_of_memory.
#include <gtest/gtest.h>

#include <cstring>

#include "loom/cpu/cpu.h"
#include "loom/sim/sim.h"
#include "loom/train/checkpoint.h"
#include "loom/train/dataset.h"
#include "loom/train/trainer.h"
#include "train_test_util.h"

namespace loom::test {
namespace {

using namespace loom::train;

struct TrainRun {
  std::vector<double> losses;  // per physical batch
  std::vector<float> grad_norms;
  std::vector<std::vector<float>> weights;
  std::vector<double> eval_losses;
};

constexpr int64_t kCtx = 16;

TrainerConfig config() {
  TrainerConfig cfg;
  cfg.n_ctx = kCtx;
  cfg.n_batch = 4;
  cfg.n_ubatch = 2;  // two physical batches summed per step
  cfg.opt.lr = 3e-3f;
  cfg.opt.wd = 0.01f;
  cfg.opt.grad_clip = 0.5f;
  return cfg;
}

// Steps [from, to) of a fixed window sequence, then one evaluation.
void steps(TrainModel& tm, Trainer& tr, int from, int to, TrainRun& out) {
  DatasetOptions dopt;
  dopt.n_ctx = kCtx;
  dopt.val_split = 0;
  Dataset data(tm.tokenizer().tokenize(sample_text(1500, 4), false, false), dopt);
  auto window = [&](int64_t i, bool tg) { return tg ? data.train_targets(i % data.n_train()) : data.train_inputs(i % data.n_train()); };
  for (int s = from; s < to; ++s) {
    std::vector<const int32_t*> in, tg;
    for (int64_t w = 0; w < 4; ++w) {
      in.push_back(window(4 * s + w, false));
      tg.push_back(window(4 * s + w, true));
    }
    const StepResult r = tr.step(in, tg, 3e-3f, s + 1);
    for (const BatchResult& b : r.batches) out.losses.push_back(b.loss);
    out.grad_norms.push_back(r.grad_norm);
  }
  std::vector<const int32_t*> in, tg;
  for (int64_t w = 0; w < 3; ++w) {  // 2 + a smaller last batch
    in.push_back(window(w, false));
    tg.push_back(window(w, true));
  }
  for (const BatchResult& b : tr.evaluate(in, tg)) out.eval_losses.push_back(b.loss);
  out.weights = snapshot(tm);
}

class TrainDevices : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = scratch_dir(); }
  // -dev SIM0 -ngl n_gpu_layers (-1: every layer and the output), or the CPU alone.
  PlacementParams placement(bool sim, int64_t n_gpu_layers = -1) {
    PlacementParams p;
    p.devices = sim ? std::vector<Device*>{&sim_, &cpu_} : std::vector<Device*>{&cpu_};
    p.n_gpu_layers = n_gpu_layers;
    return p;
  }
  std::unique_ptr<TrainModel> open(const std::string& path, const PlacementParams& p,
                                   std::optional<std::vector<std::pair<std::string, DType>>> trainable = {}) {
    TrainModelOptions mo;
    mo.placement = p;
    mo.trainable = std::move(trainable);
    return TrainModel::open(path, mo);
  }
  TrainRun train(const std::string& path, const PlacementParams& p, int n_steps) {
    auto tm = open(path, p);
    Trainer tr(*tm, config());
    TrainRun r;
    steps(*tm, tr, 0, n_steps, r);
    return r;
  }
  fs::path dir_;
  sim::SimDevice sim_{0, size_t(256) << 20, 2};
  cpu::CpuDevice cpu_{2};
};

void expect_same(const TrainRun& a, const TrainRun& b) {
  EXPECT_EQ(a.losses, b.losses);
  EXPECT_EQ(a.grad_norms, b.grad_norms);
  EXPECT_EQ(a.eval_losses, b.eval_losses);
  ASSERT_EQ(a.weights.size(), b.weights.size());
  for (size_t i = 0; i < a.weights.size(); ++i)
    EXPECT_EQ(std::memcmp(a.weights[i].data(), b.weights[i].data(), a.weights[i].size() * sizeof(float)), 0)
        << "tensor " << i;
}

TEST_F(TrainDevices, Sim0EqualsTheCpuForEveryArchitecture) {
  for (Arch arch : kTrainedArchs) {
    SCOPED_TRACE(arch_name(arch));
    const std::string path = write_model(dir_, small_hparams(arch, 2), 13);
    const TrainRun cpu = train(path, placement(false), 3);
    const TrainRun sim = train(path, placement(true), 3);
    expect_same(cpu, sim);
    EXPECT_LT(cpu.losses.back(), cpu.losses.front());  // it did train
  }
}

// The layer split: one layer on SIM0 (-ngl 1), the rest on the CPU.
TEST_F(TrainDevices, SomeLayersOnSim0EqualTheCpu) {
  for (Arch arch : kTrainedArchs) {
    SCOPED_TRACE(arch_name(arch));
    const std::string path = write_model(dir_, small_hparams(arch, 2), 14);
    expect_same(train(path, placement(false), 3), train(path, placement(true, 1), 3));
  }
}

TEST_F(TrainDevices, WeightsGradientsAndOptimizerStateLiveOnTheDevice) {
  const std::string path = write_model(dir_, small_hparams(Arch::llama, 2), 15);
  auto tm = open(path, placement(true));
  Trainer tr(*tm, config());
  int on_sim = 0;
  for (const ParamState& p : tr.params()) {
    const std::string dev = p.param->buffer->type().device().name();
    EXPECT_EQ(p.grad_acc->buffer->type().device().name(), dev) << p.param->name;
    EXPECT_EQ(p.m->buffer->type().device().name(), dev) << p.param->name;
    EXPECT_EQ(p.v->buffer->type().device().name(), dev) << p.param->name;
    on_sim += dev == "SIM0";
    if (p.param->name.rfind("blk.", 0) == 0) {
      EXPECT_EQ(dev, "SIM0") << p.param->name;
    }
  }
  EXPECT_GE(on_sim, 9 * 2);  // every layer tensor
}

TEST_F(TrainDevices, ACheckpointResumesOnTheOtherDeviceBitExact) {
  const std::string path = write_model(dir_, small_hparams(Arch::qwen3moe, 1), 16);
  const TrainRun whole = train(path, placement(false), 5);
  for (bool first_on_sim : {true, false}) {
    SCOPED_TRACE(first_on_sim ? "SIM0 then CPU" : "CPU then SIM0");
    const std::string ck = (dir_ / "ck.gguf").string();
    {
      auto tm = open(path, placement(first_on_sim));
      Trainer tr(*tm, config());
      TrainRun r;
      steps(*tm, tr, 0, 2, r);
      TrainState st;
      st.step = 2;
      st.n_ctx = kCtx;
      st.n_batch = 4;
      st.n_ubatch = 2;
      st.optimizer = "adamw";
      for (const TrainTensor& t : tm->tensors())
        if (t.trainable) st.trainable.emplace_back(t.spec.name, t.source_type);
      save_checkpoint(ck, *tm, tr.params(), st);
    }
    auto file = gguf::File::open(ck);
    const TrainState st = read_train_state(*file);
    auto tm = open(ck, placement(!first_on_sim), st.trainable);
    Trainer tr(*tm, config());
    load_optimizer_state(*file, tr.params());
    TrainRun r;
    steps(*tm, tr, 2, 5, r);
    EXPECT_EQ(r.grad_norms, std::vector<float>(whole.grad_norms.begin() + 2, whole.grad_norms.end()));
    EXPECT_EQ(r.eval_losses, whole.eval_losses);
    for (size_t i = 0; i < whole.weights.size(); ++i)
      EXPECT_EQ(std::memcmp(whole.weights[i].data(), r.weights[i].data(), r.weights[i].size() * sizeof(float)), 0)
          << "tensor " << i;
  }
}

TEST_F(TrainDevices, ADeviceTooSmallForTheWeightsIsOutOfMemory) {
  const std::string path = write_model(dir_, small_hparams(Arch::llama, 2), 17);
  sim::SimDevice tiny(0, size_t(64) << 10);
  TrainModelOptions mo;
  mo.placement.devices = {&tiny, &cpu_};
  try {
    TrainModel::open(path, mo);
    FAIL() << "opened";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::out_of_memory) << e.what();
    EXPECT_NE(std::string(e.what()).find("SIM0"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace loom::test
