// A Session runs a Model on one token sequence: it owns the KV cache and evaluates batches of
// tokens (prompt processing in ubatches, single-token decode), returning logits.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "loom/backend/comm.h"
#include "loom/model/imatrix.h"
#include "loom/model/model.h"
#include "loom/sched/plan.h"

namespace loom {

struct SessionParams {
  int64_t n_ctx = 0;      // 0 = the model's training context
  int64_t n_batch = 2048;
  int64_t n_ubatch = 512;
  int n_threads = 0;      // 0 = all cores
  // CPU threads for ubatches of more than one token, as llama.cpp's -tb (0: n_threads for all)
  int n_threads_batch = 0;
  DType type_k = DType::F16;
  DType type_v = DType::F16;
  bool flash_attn = true;
  // false (llama.cpp's -nkvo): every layer's KV cache in host memory, its attention on the CPU
  bool kv_offload = true;
  // false (llama.cpp's --no-op-offload): no op moves off the host to a device that asks for it
  // (Device::offload_op) because its weights are in host memory
  bool op_offload = true;
  int n_copies = 1;         // pipeline parallelism: input copies per split (a ring)
  bool plan_only = false;   // size everything, allocate nothing (also implied by a model without data)
  // split mode tensor across processes: this process's member talks to the others through it
  // (not owned; e.g. registry().collectives().mpi_world()). Null: all members in this process (in-process group).
  Communicator* comm = nullptr;
  // split mode tensor: AllReduce tensors of at least this many elements travel as BF16 (0: all)
  size_t reduce_bf16_min = SIZE_MAX;
  // llama-imatrix's statistics of every step's products are added to it (not owned; one member:
  // not with split mode tensor). Null: none.
  ImatrixCollector* imatrix = nullptr;
};

// KV cache types (-ctk/-ctv), as llama.cpp offers them: f32, f16, bf16, q8_0, q4_0, q4_1, q5_0,
// q5_1 (those this build's core has). A quantized V cache needs flash attention.
std::optional<DType> kv_cache_type(std::string_view name);
std::string kv_cache_type_names();  // "f32, f16, ..." for messages

// Bytes a run needs, per device, from planning (not guessing).
struct MemoryBreakdown {
  std::string device;
  size_t model_bytes = 0;
  size_t context_bytes = 0;  // KV cache
  size_t compute_bytes = 0;  // activations of the largest graph
};

class Session {
 public:
  Session(Model& model, const SessionParams& params);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Appends tokens at the next positions and evaluates them. all_logits: logits for every
  // token (perplexity); otherwise for the last one only. Throws invalid_input when the
  // context would overflow (no context shift).
  void decode(std::span<const int32_t> tokens, bool all_logits = false);
  // Logits of the i-th output row of the last decode (n_vocab floats).
  std::span<const float> logits(int64_t i = 0) const;
  int64_t n_outputs() const { return n_outputs_; }
  int64_t n_past() const { return n_past_; }
  int64_t n_ctx() const { return params_.n_ctx; }
  void clear();  // empties the KV cache
  // Keeps the first n tokens' KV (a prompt cache's common prefix); later ones are written over.
  void keep_first(int64_t n);

  const SessionParams& params() const { return params_; }

  // The plan of one worst-case step (a full ubatch over the whole context, or one token),
  // with the graph it was made for. Plans only.
  struct StepPlan {
    std::unique_ptr<Context> ctx;
    std::unique_ptr<Graph> graph;
    sched::ExecutionPlan plan;
  };
  StepPlan plan_step(bool decode) const;
  std::vector<MemoryBreakdown> memory_breakdown() const;
  Model& model() { return model_; }
  const Model& model() const { return model_; }
  // Sequence state: the KV rows written so far, in one layout for every split mode (whole rows,
  // all heads), so a state saved under -sm tensor loads on one device and the other way round.
  // Under --comm mpi every rank calls both (save gathers the other ranks' heads).
  std::vector<uint8_t> save_state() const;
  // Throws invalid_input when the state belongs to another model shape or cache type, or does not fit.
  void load_state(std::span<const uint8_t> state);

  // Steps (ubatches) that ran the previous step's graph and plan again (same shape) instead of
  // building and planning a new one; every split mode (tensor parallelism included).
  uint64_t n_graphs_reused() const;
  // Times the host waited for an asynchronous device's stream so far (all members): per token,
  // the executor waits only where the plan's memory ranges require it.
  uint64_t n_syncs() const;
  // Tensor parallelism: AllReduce operations this process's first member has run so far.
  uint64_t n_all_reduce() const;
  size_t all_reduce_bytes() const;  // what those sent (BF16: 2 bytes an element)

  struct Impl;

 private:
  Model& model_;
  SessionParams params_;
  int64_t n_past_ = 0;
  int64_t n_outputs_ = 0;
  std::vector<float> logits_;
  std::unique_ptr<Impl> impl_;
};

}  // namespace loom
