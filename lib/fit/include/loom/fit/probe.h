// The real probe: plan a run of a model file for one candidate Config without allocating
// anything, through the same Model/Session code loom-run allocates with, and return the exact
// bytes per device. Also the -ot rules that express a Config's expert placement.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/fit/planner.h"
#include "loom/model/model.h"
#include "loom/model/session.h"

namespace loom::fit {

// -ot rules ("REGEX=CPU") for the experts a Config moves, grouped by mode, layers compressed
// into character classes: blk\.(1[0-5]|3[02])\.ffn_(up|down|gate)_exps=CPU.
std::vector<std::string> expert_overrides(const std::vector<ExpertMode>& experts, const std::string& cpu_name);

class ModelProbe {
 public:
  // placement: the user's (-sm, -mg, -ot, -cmoe); -ngl/-ts come from each Config.
  // session: the user's (-ub, -b, -ctk, -ctv, -fa, pipeline copies); n_ctx from each Config.
  // kv_overrides: --override-kv, adapters: --lora, control_vectors: --control-vector*, applied at
  // every load.
  ModelProbe(std::string model_path, const PlacementParams& placement, const SessionParams& session,
             std::vector<KvOverride> kv_overrides = {}, std::vector<LoraAdapterSpec> adapters = {},
             ControlVectorOptions control_vectors = {});
  ModelProbe(const ModelProbe&) = delete;
  ModelProbe& operator=(const ModelProbe&) = delete;

  ProbeResult operator()(const Config& c);
  const HParams& hparams() const { return model_->hparams(); }
  bool has_experts() const;

 private:
  std::string path_;
  PlacementParams placement_;
  SessionParams session_;
  std::vector<KvOverride> kv_overrides_;
  std::vector<LoraAdapterSpec> adapters_;
  ControlVectorOptions control_vectors_;
  std::unique_ptr<Model> model_;  // placed as placed_ says (n_ctx unused)
  Config placed_;
};

}  // namespace loom::fit
