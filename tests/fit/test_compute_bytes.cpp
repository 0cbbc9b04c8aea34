// The planned compute bytes of a full ubatch stay at the floor of the graph's live set: the
// logits step holds its input (the final norm, F32 {n_embd, ubatch}) and the logits (F32
// {n_vocab, ubatch}) at once, and nothing else may be left alive beside them (the step inputs
// are free after their last reader, the final residual add and norm reuse bytes in place at the
// bottom of the buffer). A regression above this figure is memory llama.cpp does not spend
// (docs/FIT-PARAMS.md, "Compute buffer").
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "loom/model/model.h"
#include "loom/model/model_file.h"
#include "loom/model/session.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

size_t planned_compute_bytes(Arch arch, int64_t n_ctx, HParams* hp_out) {
  const fs::path dir = fs::temp_directory_path() / ("loom-compute-bytes-" + std::to_string(getpid()));
  fs::create_directories(dir);
  NewModelOptions o;
  o.hparams = preset_hparams(arch, "small");
  o.type = DType::Q4_0;
  o.header_only = true;
  o.output = (dir / "model.gguf").string();
  make_random_model(o);
  ModelLoadOptions lo;
  lo.need_data = false;
  auto model = Model::load(o.output, lo);
  *hp_out = model->hparams();
  SessionParams sp;
  sp.n_ctx = n_ctx;
  sp.plan_only = true;
  Session session(*model, sp);
  const auto mb = session.memory_breakdown();
  fs::remove_all(dir);
  EXPECT_EQ(mb.size(), 1u);
  return mb.empty() ? 0 : mb[0].compute_bytes;
}

// llama small Q4_0 (291M) at -c 4096 and qwen3 small at -c 2048, default -ub 512 and flash
// attention: 64.5 MiB each (72.5 and 68.5 before the step inputs were freed after their last
// reader and ADD could take over its second operand).
TEST(ComputeBytes, FullUbatchNeedsOnlyTheLogitsAndTheirInput) {
  for (auto [arch, n_ctx] : {std::pair{Arch::llama, 4096}, std::pair{Arch::qwen3, 2048}}) {
    HParams hp;
    const size_t bytes = planned_compute_bytes(arch, n_ctx, &hp);
    const size_t ub = 512;
    const size_t floor = (size_t)(hp.n_vocab + hp.n_embd) * ub * sizeof(float);
    EXPECT_EQ(bytes, floor) << arch_name(arch) << " -c " << n_ctx << ": " << bytes / 1048576.0 << " MiB, floor "
                            << floor / 1048576.0 << " MiB";
  }
}

}  // namespace
}  // namespace loom
