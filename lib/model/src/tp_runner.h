// Tensor-parallel sessions: one member per shard, each with its KV heads, its graph, plan and
// executor; the members meet in AllReduce nodes through a Communicator.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "loom/model/forward.h"
#include "loom/meta/comm.h"
#include "loom/model/session.h"
#include "loom/sched/executor.h"

namespace loom {

class TpRunner {
 public:
  TpRunner(Model& model, const SessionParams& params, bool plan_only);
  ~TpRunner();

  // Evaluates one ubatch at positions n_past.. on every local member; appends the n_outputs
  // rows of full logits (gathered from the members' vocabulary rows) to logits when want_logits.
  void decode(std::span<const int32_t> tokens, int64_t n_past, int64_t n_outputs, bool all_logits, bool want_logits,
              std::vector<float>& logits);
  void clear();
  Session::StepPlan plan_step(int64_t n_tokens, int64_t n_ctx) const;
  // Per device of model.devices(): KV bytes and compute bytes.
  std::vector<size_t> kv_bytes() const;
  std::vector<size_t> compute_bytes() const;
  uint64_t n_all_reduce() const;
  size_t all_reduce_bytes() const;
  // The KV columns this process holds: per member, its K/V tensor of each layer and the first
  // column of its heads in a whole row; and the communicator that reaches the other ranks
  // (null when every member is local).
  struct KvColumns {
    const KvCache* kv;
    int64_t col_begin;
    int rank;
  };
  std::vector<KvColumns> kv_columns() const;
  Communicator* remote_comm() const;
  int n_members() const { return model_.tp_layout().n_members; }

 private:
  struct Member;
  Model& model_;
  SessionParams params_;
  bool plan_only_;
  std::unique_ptr<meta::InProcessGroup> group_;
  std::vector<std::unique_ptr<Member>> members_;
};

}  // namespace loom
