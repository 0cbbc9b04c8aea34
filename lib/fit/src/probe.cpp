// The real probe (a plan-only Model + Session per candidate) and the -ot rules for experts.
#include "loom/fit/probe.h"

#include <fmt/format.h>

#include <map>

#include "loom/core/error.h"

namespace loom::fit {

namespace {

// {0,1,2,3,12,30,31,32} -> "[0-3]|12|3[0-2]": consecutive runs inside one decade as a class.
std::string number_alternation(const std::vector<int64_t>& ns) {
  std::string out;
  for (size_t i = 0; i < ns.size();) {
    size_t j = i;
    while (j + 1 < ns.size() && ns[j + 1] == ns[j] + 1 && ns[j + 1] / 10 == ns[i] / 10) ++j;
    const std::string prefix = ns[i] >= 10 ? std::to_string(ns[i] / 10) : "";
    const int64_t a = ns[i] % 10, b = ns[j] % 10;
    std::string part;
    if (i == j)
      part = std::to_string(ns[i]);
    else if (b == a + 1)
      part = fmt::format("{}[{}{}]", prefix, a, b);
    else
      part = fmt::format("{}[{}-{}]", prefix, a, b);
    out += (out.empty() ? "" : "|") + part;
    i = j + 1;
  }
  return out;
}

}  // namespace

std::vector<std::string> expert_overrides(const std::vector<ExpertMode>& experts, const std::string& cpu_name) {
  std::map<ExpertMode, std::vector<int64_t>> by_mode;
  for (size_t l = 0; l < experts.size(); ++l)
    if (experts[l] != ExpertMode::with_layer) by_mode[experts[l]].push_back((int64_t)l);
  std::vector<std::string> rules;
  for (ExpertMode mode : {ExpertMode::cpu, ExpertMode::keep_up, ExpertMode::keep_up_gate}) {
    auto it = by_mode.find(mode);
    if (it == by_mode.end()) continue;
    const char* which = mode == ExpertMode::cpu       ? "(up|down|gate)"
                        : mode == ExpertMode::keep_up ? "(gate|down)"
                                                      : "down";
    rules.push_back(fmt::format("blk\\.({})\\.ffn_{}_exps={}", number_alternation(it->second), which, cpu_name));
  }
  return rules;
}

namespace {

// Places a plan-only model for other placement params. Reloading re-reads the file and rebuilds
// the tokenizer (most of a probe's time on 128k+ vocabularies); Model::set_placement, where the
// model library offers it, re-places the weights alone.
template <typename M>
void place_model(std::unique_ptr<M>& model, const std::string& path, const ModelLoadOptions& lo) {
  if constexpr (requires(M & m) { m.set_placement(lo.placement); }) {
    if (model) {
      model->set_placement(lo.placement);
      return;
    }
  }
  model = M::load(path, lo);
}

}  // namespace

ModelProbe::ModelProbe(std::string model_path, const PlacementParams& placement, const SessionParams& session,
                       std::vector<KvOverride> kv_overrides, std::vector<LoraAdapterSpec> adapters,
                       ControlVectorOptions control_vectors)
    : path_(std::move(model_path)),
      placement_(placement),
      session_(session),
      kv_overrides_(std::move(kv_overrides)),
      adapters_(std::move(adapters)),
      control_vectors_(std::move(control_vectors)) {
  session_.plan_only = true;
  ModelLoadOptions lo;
  lo.need_data = false;
  lo.kv_overrides = kv_overrides_;
  lo.adapters = adapters_;
  lo.control_vectors = control_vectors_;
  lo.placement = placement_;
  place_model(model_, path_, lo);
  placed_ = Config{0, placement_.n_gpu_layers, placement_.tensor_split, {}};
}

bool ModelProbe::has_experts() const { return model_->hparams().n_expert > 0; }

ProbeResult ModelProbe::operator()(const Config& c) {
  LOOM_ASSERT(c.n_ctx > 0, "probe with context {}", c.n_ctx);
  const Config key{0, c.n_gpu_layers, c.tensor_split, c.experts};
  if (!(key == placed_)) {  // the context alone changes nothing in the weights' placement
    ModelLoadOptions lo;
    lo.need_data = false;
    lo.kv_overrides = kv_overrides_;
    lo.adapters = adapters_;
    lo.control_vectors = control_vectors_;
    lo.placement = placement_;
    lo.placement.n_gpu_layers = c.n_gpu_layers;
    lo.placement.tensor_split = c.tensor_split;
    const std::string cpu = placement_.devices.back()->name();
    for (const std::string& rule : expert_overrides(c.experts, cpu)) lo.placement.overrides.push_back(rule);
    place_model(model_, path_, lo);
    placed_ = key;
  }
  SessionParams sp = session_;
  sp.n_ctx = c.n_ctx;
  const Session session(*model_, sp);
  ProbeResult r;
  for (const MemoryBreakdown& m : session.memory_breakdown())
    r.usage.push_back(Usage{m.model_bytes, m.context_bytes, m.compute_bytes});
  r.layer_device = model_->placement().layer_device;
  return r;
}

}  // namespace loom::fit
