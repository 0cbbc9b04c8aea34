// Multi-device runs on simulated devices: layers split across SIM devices (with and without
// pipeline copies) give the same logits as the CPU alone; worst-case reserve means no
// reallocation later; a model that does not fit fails cleanly naming the device; -ncmoe places
// the first layers' experts on the CPU.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>

#include "cpu_features.h"  // wide_512: whether weights are repacked in pairs
#include "loom/backend/registry.h"
#include "loom/core/error.h"
#include "loom/model/model_file.h"
#include "loom/model/placement.h"
#include "loom/model/quantize.h"
#include "loom/model/session.h"
#include "loom/sim/sim.h"

namespace loom {
namespace {

// tied: no output.weight (token_embd is the output matrix too, as in Llama 3.2 1B)
std::string make_model(Arch arch, const std::string& tag, DType type = DType::F32, bool tied = false) {
  NewModelOptions o;
  o.type = type;
  o.hparams = preset_hparams(arch, "tiny");
  o.hparams.tied_embeddings = o.hparams.tied_embeddings || tied;
  o.seed = 11;
  o.output =
      (std::filesystem::temp_directory_path() / ("loom-md-" + std::to_string(getpid()) + "-" + tag + ".gguf")).string();
  make_random_model(o);
  return o.output;
}

const std::vector<int32_t> kPrompt = {3, 14, 15, 92, 65, 35, 89, 79};

// Logits of the prompt then 6 greedy steps; also returns the greedy tokens.
// kv_offload false (-nkvo): the KV cache on the host; checks that no device but the CPU holds it.
std::vector<std::vector<float>> run(Model& m, int n_copies, std::vector<int32_t>& tokens, bool kv_offload = true) {
  SessionParams sp;
  sp.kv_offload = kv_offload;
  sp.n_ctx = 64;
  sp.n_ubatch = 4;
  sp.n_threads = 2;
  sp.type_k = sp.type_v = DType::F32;
  sp.n_copies = n_copies;
  Session s(m, sp);
  if (!kv_offload) {
    for (const MemoryBreakdown& b : s.memory_breakdown()) EXPECT_EQ(b.context_bytes > 0, b.device == "CPU") << b.device;
  }
  std::vector<std::vector<float>> out;
  s.decode(kPrompt);
  for (int i = 0; i < 6; ++i) {
    std::span<const float> l = s.logits(0);
    out.emplace_back(l.begin(), l.end());
    int32_t best = (int32_t)(std::max_element(l.begin(), l.end()) - l.begin());
    tokens.push_back(best);
    s.decode(std::span<const int32_t>(&best, 1));
  }
  return out;
}

class MultiDevice : public ::testing::TestWithParam<Arch> {};

TEST_P(MultiDevice, LayerSplitOverThreeSimDevicesEqualsCpu) {
  const std::string path = make_model(GetParam(), arch_name(GetParam()));
  std::vector<int32_t> cpu_tokens;
  auto cpu_model = Model::load(path);
  auto want = run(*cpu_model, 1, cpu_tokens);
  for (int n_copies : {1, 2, 0}) {  // 0: one copy, the KV cache on the host (-nkvo)
    DeviceSet set = make_devices("3x64MiB", 2);
    ModelLoadOptions lo;
    lo.placement.devices = set.all;
    lo.placement.tensor_split = {1, 1, 1};
    auto model = Model::load(path, lo);
    // every layer and the output live on a SIM device
    for (int d : model->placement().layer_device) EXPECT_LT(d, 3);
    EXPECT_EQ(model->placement().output_device, 2);
    std::vector<int32_t> tokens;
    auto got = run(*model, std::max(n_copies, 1), tokens, n_copies > 0);
    EXPECT_EQ(tokens, cpu_tokens) << "pipeline copies " << n_copies;
    for (size_t i = 0; i < want.size(); ++i) {
      double err = 0, den = 0;
      for (size_t j = 0; j < want[i].size(); ++j) {
        err = std::max(err, (double)std::abs(got[i][j] - want[i][j]));
        den = std::max(den, (double)std::abs(want[i][j]));
      }
      EXPECT_LT(err / den, 1e-5) << "step " << i << " pipeline copies " << n_copies;
    }
    // weights really moved: each SIM holds some, the CPU keeps only the embeddings
    for (int d = 0; d < 3; ++d) EXPECT_GT(model->device_bytes()[(size_t)d], 0u);
  }
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Archs, MultiDevice,
                         ::testing::Values(Arch::llama, Arch::qwen3moe, Arch::gemma2, Arch::gemma3, Arch::phi3,
                                           Arch::gpt_oss, Arch::granite, Arch::gemma, Arch::glm4moe, Arch::qwen2moe,
                                           Arch::smollm3, Arch::glm4, Arch::command_r, Arch::cohere2, Arch::olmo2,
                                           Arch::granitemoe, Arch::olmoe, Arch::ernie4_5, Arch::exaone4, Arch::seed_oss,
                                           Arch::ernie4_5_moe, Arch::mistral3, Arch::llama4),
                         [](const auto& info) {
                           std::string name = arch_name(info.param);
                           std::replace(name.begin(), name.end(), '-', '_');  // "gpt-oss"
                           return name;
                         });

// --no-op-offload: a device that asks to run products of weights in host memory (a SIM with an
// offload filter, as a GPU takes a big batch's products in llama.cpp) gets them only while op
// offload is on; the logits are the same either way.
TEST(MultiDevice, NoOpOffloadKeepsHostWeightOpsOnTheHost) {
  const std::string path = make_model(Arch::llama, "nopo");
  DeviceSet set = make_devices("64MiB", 2);
  static_cast<sim::SimDevice*>(set.all[0])->set_offload_filter([](const Tensor* t) {
    return t->op == OpKind::MUL_MAT;
  });
  ModelLoadOptions lo;
  lo.placement.devices = set.all;
  lo.placement.n_gpu_layers = 0;  // every weight in host memory
  auto model = Model::load(path, lo);
  auto offloaded = [&](bool op_offload, std::vector<float>& logits) {
    SessionParams sp;
    sp.n_ctx = 64;
    sp.type_k = sp.type_v = DType::F32;
    sp.op_offload = op_offload;
    Session s(*model, sp);
    s.decode(kPrompt);
    logits.assign(s.logits(0).begin(), s.logits(0).end());
    const Session::StepPlan step = s.plan_step(false);
    int n = 0;
    for (const sched::NodePlan& np : step.plan.nodes) n += np.cause == sched::Cause::offload;
    return n;
  };
  std::vector<float> on, off;
  EXPECT_GT(offloaded(true, on), 0) << "the SIM asked for the products";
  EXPECT_EQ(offloaded(false, off), 0) << "--no-op-offload";
  ASSERT_EQ(on.size(), off.size());
  for (size_t j = 0; j < on.size(); ++j) ASSERT_NEAR(on[j], off[j], 1e-4f) << j;
  std::filesystem::remove(path);
}

// A device that cannot multiply by a weight's type (as CUDA with the i-quants) does not hold that
// weight: it stays in host memory, where its products run, instead of crossing to the host at
// every step; the device keeps the layer's other tensors, and the logits are the CPU's.
TEST(MultiDevice, WeightsADeviceCannotMultiplyStayOnTheHost) {
  const std::string path = make_model(Arch::llama, "nomul", DType::Q4_0);
  DeviceSet set = make_devices("64MiB", 2);
  static_cast<sim::SimDevice*>(set.all[0])->set_op_filter([](const Tensor* t) {
    return !((t->op == OpKind::MUL_MAT || t->op == OpKind::MUL_MAT_ID) && t->src[0]->type == DType::Q4_0);
  });
  ModelLoadOptions lo;
  lo.placement.devices = set.all;
  lo.placement.n_gpu_layers = -1;
  auto model = Model::load(path, lo);
  const WeightPlacement& pl = model->placement();
  const int cpu = (int)pl.devices.size() - 1;
  EXPECT_EQ(pl.tensor_device.at("blk.0.attn_q.weight"), cpu);
  EXPECT_EQ(pl.tensor_device.at("blk.1.ffn_down.weight"), cpu);
  EXPECT_EQ(pl.tensor_device.at("blk.0.attn_norm.weight"), 0) << "the layer's F32 tensors stay on the SIM";
  std::vector<int32_t> tokens, want_tokens;
  const auto got = run(*model, 1, tokens);
  ModelLoadOptions cpu_only;
  auto ref = Model::load(path, cpu_only);
  const auto want = run(*ref, 1, want_tokens);
  EXPECT_EQ(tokens, want_tokens);
  for (size_t i = 0; i < want.size(); ++i)
    for (size_t j = 0; j < want[i].size(); ++j) ASSERT_NEAR(got[i][j], want[i][j], 1e-4f) << i << " " << j;
  std::filesystem::remove(path);
}

TEST(MultiDeviceReserve, PromptDecodePromptNeedsNoReallocation) {
  const std::string path = make_model(Arch::llama, "norealloc");
  setenv("LOOM_SCHED_NO_REALLOC", "1", 1);
  {
    DeviceSet set = make_devices("2x64MiB", 2);
    ModelLoadOptions lo;
    lo.placement.devices = set.all;
    auto model = Model::load(path, lo);
    SessionParams sp;
    sp.n_ctx = 64;
    sp.n_ubatch = 8;
    Session s(*model, sp);
    EXPECT_NO_THROW(s.decode(kPrompt));
    int32_t t = 5;
    EXPECT_NO_THROW(s.decode(std::span<const int32_t>(&t, 1)));
    s.clear();
    EXPECT_NO_THROW(s.decode(kPrompt, true));
  }
  unsetenv("LOOM_SCHED_NO_REALLOC");
  std::filesystem::remove(path);
}

TEST(MultiDeviceReserve, ModelTooBigForDeviceIsOutOfMemoryNamingIt) {
  const std::string path = make_model(Arch::llama, "toobig");
  DeviceSet set = make_devices("1MiB", 2);
  ModelLoadOptions lo;
  lo.placement.devices = set.all;
  try {
    auto model = Model::load(path, lo);
    FAIL() << "a 5 MiB model fitted in 1 MiB";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::out_of_memory);
    EXPECT_NE(std::string(e.what()).find("SIM0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("MiB"), std::string::npos) << e.what();
  }
  std::filesystem::remove(path);
}

// CPU weights: loaded into a CPU buffer by default (outside the file mapping, with progress
// reports), used in place with mmap = true; both give the same logits.
TEST(CpuWeights, LoadedByDefaultMappedWithMmap) {
  const std::string path = make_model(Arch::llama, "mmap");
  auto inside_file = [](const Model& m, const Tensor* t) {
    const uint8_t* first = m.file().tensor_data(m.file().tensors().front());
    const uint8_t* p = static_cast<const uint8_t*>(t->data);
    return p >= first && p < first + m.file().data_size();
  };
  std::vector<std::pair<size_t, size_t>> calls;
  ModelLoadOptions copy;
  copy.progress = [&](size_t done, size_t total) { calls.emplace_back(done, total); };
  auto loaded = Model::load(path, copy);
  ASSERT_FALSE(calls.empty());
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_GT(calls[i].first, calls[i - 1].first);
  EXPECT_EQ(calls.back().first, calls.back().second);
  EXPECT_EQ(calls.back().second, loaded->file().tensor_bytes_total());
  calls.clear();
  ModelLoadOptions lo;
  lo.placement.mmap = true;
  lo.progress = copy.progress;
  auto mapped = Model::load(path, lo);
  EXPECT_TRUE(calls.empty());  // nothing copied, nothing reported
  EXPECT_FALSE(loaded->cpu_weights_mapped());
  EXPECT_TRUE(mapped->cpu_weights_mapped());
  for (const Tensor* t : loaded->weight_tensors()) EXPECT_FALSE(inside_file(*loaded, t)) << t->name;
  for (const Tensor* t : mapped->weight_tensors()) EXPECT_TRUE(inside_file(*mapped, t)) << t->name;
  EXPECT_EQ(mapped->device_bytes().back(), mapped->file().tensor_bytes_total());
  EXPECT_GE(loaded->device_bytes().back(), loaded->file().tensor_bytes_total());
  std::vector<int32_t> a, b;
  EXPECT_EQ(run(*loaded, 1, a), run(*mapped, 1, b));
  EXPECT_EQ(a, b);
  std::filesystem::remove(path);
}

// A tiny llama in `type`: written so (Q8_0 / Q4_0 / Q4_K), or quantized with --pure from F32 (the
// types `loom-gguf new` does not write).
std::string make_model_of_type(DType type, const std::string& tag, bool tied = false) {
  if (type == DType::Q8_0 || type == DType::Q4_0 || type == DType::Q4_K)
    return make_model(Arch::llama, tag, type, tied);
  const std::string f32 = make_model(Arch::llama, tag + "-f32", DType::F32, tied);
  QuantizeOptions o;
  o.input = f32;
  o.output = f32.substr(0, f32.size() - 9) + ".gguf";  // without "-f32.gguf"
  o.type = type == DType::MXFP4 ? "MXFP4_MOE" : dtype_name(type);
  o.pure = true;
  o.n_threads = 2;
  o.log = nullptr;
  quantize_model(o);
  std::filesystem::remove(f32);
  return o.output;
}

// Matrices repacked for the CPU kernels (the default where the CPU level has them), in groups and
// in pairs of groups (where every type's two groups are taken), give the logits of the file's
// layout (--no-repack) to float rounding, through both the decode rows (one column) and the GEMMs
// (a 40-token prompt); token embeddings are repacked only where they are the output matrix too
// (every other type's model is tied), GET_ROWS then reading the repacked rows.
TEST(CpuWeights, RepackedMatricesGiveTheFileLayoutsLogits) {
  int types_without = 0;
  const DType types[] = {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q5_K, DType::Q3_K,   DType::IQ4_XS,
                         DType::Q2_K, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::MXFP4};
  for (size_t k = 0; k < std::size(types); ++k)
    for (bool pairs : {false, true}) {
      const DType type = types[k];
      const bool tied = k % 2 == 1;
      SCOPED_TRACE(std::string(dtype_name(type)) + (pairs ? " pairs" : "") + (tied ? " tied" : ""));
      const std::string path = make_model_of_type(type, std::string("repack-") + dtype_name(type), tied);
      struct RemoveAtExit {  // also when the type has no repacked kernels or an assertion fails
        std::string path;
        ~RemoveAtExit() { std::filesystem::remove(path); }
      } remove_at_exit{path};
      ModelLoadOptions plain;
      plain.placement.repack = false;
      const cpu::Wide512 was = cpu::force_wide_512(pairs ? cpu::kWide512All : cpu::Wide512{});
      auto repacked = Model::load(path);
      cpu::force_wide_512(was);
      auto file_layout = Model::load(path, plain);
      int n_pairs = 0;
      for (const Tensor* t : repacked->weight_tensors()) n_pairs += t->has_flag(kFlagRepackedPairs);
      if (!pairs) {
        EXPECT_EQ(n_pairs, 0);
      }
      int n_repacked = 0;
      for (const Tensor* t : repacked->weight_tensors()) n_repacked += t->has_flag(kFlagRepacked);
      for (const Tensor* t : file_layout->weight_tensors()) EXPECT_FALSE(t->has_flag(kFlagRepacked)) << t->name;
      EXPECT_EQ(repacked->output == repacked->tok_embd, tied);
      EXPECT_EQ(repacked->tok_embd->has_flag(kFlagRepacked), tied && n_repacked > 0);
      if (n_repacked == 0) {  // this CPU level has no repacked kernels for the type
        types_without += !pairs;
        continue;
      }
      // in pairs: every matrix of the type where the level has its two-group kernel
      if (pairs && cpu::active_isa() == cpu::Isa::avx512) {
        EXPECT_GT(n_pairs, 0);
      }
      // Per type (a Q4_K file keeps some matrices in Q6_K, as llama.cpp's Q4_K_M does), all of its
      // matrices but the token embeddings repacked, or none (no kernels for it at this level).
      std::map<DType, std::pair<int, int>> matrices;  // type -> (matrices, repacked)
      for (const Tensor* t : repacked->weight_tensors())
        if (t->ne[1] > 1 && (t != repacked->tok_embd || tied)) {
          matrices[t->type].first++;
          matrices[t->type].second += t->has_flag(kFlagRepacked);
        }
      for (const auto& [t, n] : matrices) EXPECT_TRUE(n.second == 0 || n.second == n.first) << dtype_name(t);
      EXPECT_EQ(matrices[type].second, matrices[type].first);
      if (dtype_info(type).block_size == 32) {  // no fallbacks: every matrix in the type
        EXPECT_EQ(n_repacked, 7 * (int)repacked->layers.size() + 1);  // and the output (tied or not)
      }
      auto logits = [](Model& m, std::vector<int32_t>& tokens) {
        SessionParams sp;
        sp.n_ctx = 96;
        sp.n_ubatch = 64;
        sp.n_threads = 2;
        Session s(m, sp);
        std::vector<int32_t> prompt;
        for (int i = 0; i < 40; ++i) prompt.push_back((7 * i + 3) % 200);
        s.decode(prompt);
        std::vector<std::vector<float>> out;
        for (int i = 0; i < 6; ++i) {
          std::span<const float> l = s.logits(0);
          out.emplace_back(l.begin(), l.end());
          const int32_t best = (int32_t)(std::max_element(l.begin(), l.end()) - l.begin());
          tokens.push_back(best);
          s.decode(std::span<const int32_t>(&best, 1));
        }
        return out;
      };
      std::vector<int32_t> ta, tb;
      const auto a = logits(*repacked, ta), b = logits(*file_layout, tb);
      EXPECT_EQ(ta, tb);
      // Per step, the largest difference relative to the step's largest logit. The prompt's GEMMs
      // decode the same values in the same order: float rounding only. The decode steps' repacked
      // kernels add in another order, and a rounding difference that moves an activation across
      // an int8 rounding boundary moves logits by ~1/127 of their scale (a wrong layout: by O(1)).
      for (size_t i = 0; i < a.size(); ++i) {
        float scale = 1e-1f;
        double worst = 0;
        for (float v : b[i]) scale = std::max(scale, std::abs(v));
        for (size_t j = 0; j < a[i].size(); ++j) worst = std::max(worst, (double)std::abs(a[i][j] - b[i][j]) / scale);
        EXPECT_LE(worst, i == 0 ? 1e-5 : 2e-2) << "step " << i;
      }
    }
  if (types_without == (int)std::size(types)) GTEST_SKIP() << "this CPU level has no repacked kernels";
}

}  // namespace
}  // namespace loom

namespace loom {
namespace {

// -ncmoe N as llama.cpp: the expert tensors of layers 0 .. N-1 stay on the CPU, the rest of those
// layers (and the later layers' experts) go where -ngl puts them; an -ot rule wins over it.
TEST(MoePlacement, NCpuMoeKeepsTheFirstLayersExpertsOnTheCpu) {
  const HParams hp = preset_hparams(Arch::qwen3moe, "tiny");
  ASSERT_GE(hp.n_layer, 2);
  std::vector<std::string> names;
  for (const TensorSpec& t : arch_tensors(hp)) names.push_back(t.name);
  DeviceSet set = make_devices("1x64MiB", 2);
  PlacementParams p;
  p.devices = set.all;  // SIM0, then the CPU
  const int sim = 0, cpu = 1;
  p.n_cpu_moe = 1;
  WeightPlacement w = place_weights(hp, names, p);
  for (const char* part : {"up", "down", "gate"}) {
    EXPECT_EQ(w.tensor_device.at(fmt::format("blk.0.ffn_{}_exps.weight", part)), cpu) << part;
    EXPECT_EQ(w.tensor_device.at(fmt::format("blk.1.ffn_{}_exps.weight", part)), sim) << part;
  }
  EXPECT_EQ(w.tensor_device.at("blk.0.attn_q.weight"), sim);
  EXPECT_EQ(w.tensor_device.at("blk.0.ffn_gate_inp.weight"), sim) << "the router is not an expert tensor";
  p.overrides = {R"(blk\.0\.ffn_down_exps=SIM0)"};
  w = place_weights(hp, names, p);
  EXPECT_EQ(w.tensor_device.at("blk.0.ffn_down_exps.weight"), sim);
  EXPECT_EQ(w.tensor_device.at("blk.0.ffn_up_exps.weight"), cpu);
  p.overrides.clear();
  p.n_cpu_moe = 1000;  // more than the layers: every expert tensor
  w = place_weights(hp, names, p);
  EXPECT_EQ(w.tensor_device.at(fmt::format("blk.{}.ffn_up_exps.weight", hp.n_layer - 1)), cpu);
  p.n_cpu_moe = -1;
  EXPECT_THROW(place_weights(hp, names, p), Error);
}

}  // namespace
}  // namespace loom
