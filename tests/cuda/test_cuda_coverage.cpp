// Every node of every architecture's prompt and decode graphs has a CUDA kernel. op_supported is
// host code, so this runs without a GPU (CI): a node the table refuses would run on the CPU at
// each step, costing a split, two copies and a wait per occurrence per token on a GPU.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include "cuda_ops.h"
#include "loom/graph/op.h"
#include "loom/model/model.h"
#include "loom/model/model_file.h"
#include "loom/model/session.h"

namespace loom {
namespace {

struct Case {
  Arch arch;
  DType type;
};
void PrintTo(const Case& c, std::ostream* os) { *os << arch_name(c.arch) << " " << dtype_name(c.type); }

class CudaCoverage : public ::testing::TestWithParam<Case> {};

// Nodes of the step's graph that the CUDA table refuses, as "OP name" lines.
std::string refused(const Session& s, bool decode) {
  const Session::StepPlan step = s.plan_step(decode);
  std::string out;
  for (const Tensor* n : step.graph->nodes())
    if (!op_info(n->op).is_view && !cuda::op_supported(n)) out += std::string(op_name(n->op)) + " " + n->name + "\n";
  return out;
}

TEST_P(CudaCoverage, EveryNodeOfThePromptAndDecodeGraphsHasAKernel) {
  NewModelOptions o;
  o.hparams = preset_hparams(GetParam().arch, "tiny");
  o.type = GetParam().type;
  o.header_only = true;  // planning needs shapes only
  o.output = (std::filesystem::temp_directory_path() /
              ("loom-cuda-cov-" + std::to_string(getpid()) + "-" + arch_name(GetParam().arch) + "-" +
               dtype_name(GetParam().type) + ".gguf"))
                 .string();
  make_random_model(o);
  {
    ModelLoadOptions lo;
    lo.need_data = false;
    auto m = Model::load(o.output, lo);
    for (bool fa : {true, false}) {
      SessionParams sp;
      sp.n_ctx = 256;
      sp.n_ubatch = 64;
      sp.flash_attn = fa;
      sp.plan_only = true;
      Session s(*m, sp);
      EXPECT_EQ(refused(s, true), "") << "decode, flash attention " << fa;
      EXPECT_EQ(refused(s, false), "") << "prompt, flash attention " << fa;
    }
  }
  std::filesystem::remove(o.output);
}

std::vector<Case> cases() {
  std::vector<Case> out;
  // clang-format off
  for (Arch a : {Arch::llama, Arch::qwen2, Arch::qwen3, Arch::qwen3moe, Arch::gemma2, Arch::gemma3, Arch::phi3,
                 Arch::gpt_oss, Arch::glm4moe, Arch::qwen2moe, Arch::smollm3, Arch::glm4, Arch::command_r,
                 Arch::cohere2, Arch::olmo2, Arch::granitemoe, Arch::olmoe, Arch::ernie4_5, Arch::exaone4,
                 Arch::seed_oss, Arch::ernie4_5_moe, Arch::mistral3, Arch::llama4})
    // clang-format on
    for (DType t : {DType::F16, DType::Q8_0, DType::Q4_K}) out.push_back({a, t});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Archs, CudaCoverage, ::testing::ValuesIn(cases()), [](const auto& info) {
  std::string n = std::string(arch_name(info.param.arch)) + "_" + dtype_name(info.param.type);
  for (char& c : n)
    if (c == '-') c = '_';
  return n;
});

}  // namespace
}  // namespace loom
