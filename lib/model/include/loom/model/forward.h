// The forward graph of every supported architecture, from one builder with per-arch switches:
// inference steps through a KV cache (lib/model's Session) and training batches of independent
// windows without one (lib/train), the same layers either way.
#pragma once

#include "loom/graph/context.h"
#include "loom/graph/graph.h"
#include "loom/model/model.h"

namespace loom {

struct KvCache {
  std::vector<Tensor*> k;  // per layer {n_embd_kv, kv_size}
  std::vector<Tensor*> v;
  int64_t size = 0;
};

struct ForwardInputs {
  Tensor* tokens = nullptr;   // I32 {T}
  Tensor* positions = nullptr;  // I32 {T}
  Tensor* kv_slots = nullptr;   // I32 {T}: cache rows written by this batch (windows: none)
  Tensor* mask = nullptr;       // F32 {n_kv, T} (windows: {n_kv, n_kv}, shared by every window)
  Tensor* mask_swa = nullptr;   // the sliding-window layers' mask, same shape (null without them)
  Tensor* attn_temp = nullptr;  // F32 {1, 1, T}: mistral3's query multipliers per position (null without)
  Tensor* out_rows = nullptr;   // I32 {n_out}: rows whose logits are computed (nullptr: all)
  Tensor* logits = nullptr;     // F32 {n_vocab, n_out}: the output (tensor parallel: this member's rows; may be null)
  Tensor* last = nullptr;       // the graph's final node (logits, or the final norm when a member has no rows)
  std::vector<Tensor*> all_reduces;  // tensor parallel: the ALL_REDUCE (all_gather_rows) nodes, in order
  // Visited before the logits when building the graph, so that groups a backend fuses stay
  // consecutive in node order (the MoE router's softmax -> top-k -> weights of each layer; each
  // layer's q, k and v products, which the CPU computes in one phase).
  std::vector<Tensor*> expand_first;
};

// The graph of one step: expand_first in order, then everything the logits need.
void build_graph(Graph& g, const ForwardInputs& in);

struct ForwardShape {
  int64_t n_tokens = 1;
  int64_t n_kv = 1;       // cache rows attended to (n_past + n_tokens)
  int64_t n_outputs = 1;  // n_tokens (all logits) or 1 (last)
  bool flash_attn = true;
  // Without a KV cache (training): the batch is n_seq windows of n_kv tokens each (n_tokens =
  // n_seq * n_kv), each attending causally within itself. 0: a step through the cache.
  int64_t n_seq = 0;
};

// What the graph builder reads: the whole model, or one tensor-parallel member's shard.
struct ForwardModel {
  const HParams* hp = nullptr;
  int64_t n_head = 0;     // query heads computed here
  int64_t n_head_kv = 0;  // KV heads computed (and cached) here
  Tensor* tok_embd = nullptr;
  Tensor* output_norm = nullptr;
  Tensor* output = nullptr;  // null: no logits here (a member without vocabulary rows)
  std::span<const LoraLink> output_lora;  // --lora pairs of output
  Tensor* rope_freqs = nullptr;  // RoPE divisors on this member's device (Llama 3), or null
  Tensor* rope_long = nullptr;   // phi3
  Tensor* rope_short = nullptr;
  const std::vector<LayerWeights>* layers = nullptr;
  // Tensor parallel: this member computes rows of each matrix product; the members' rows are
  // joined (all_gather_rows) before the next product, its rows starting at `first`.
  bool tensor_parallel = false;
  TpRowStarts first;
};
ForwardModel forward_model(const Model& model);
ForwardModel forward_model(const Model& model, const TpShard& shard);

// Writes in.mask (and in.mask_swa) of a step through the cache: row i (position n_past + i) sees
// cache rows j <= n_past + i, the sliding-window mask only those with n_past + i - j < n_swa
// (llama.cpp's rule).
void fill_masks(const ForwardInputs& in, const HParams& hp, int64_t n_past, int64_t n_tokens, int64_t n_kv);
// Writes in.attn_temp (where the graph has it) from the positions already in in.positions.
void fill_attn_temp(const ForwardInputs& in, const HParams& hp);

// Builds the graph in ctx for one ubatch; inputs are created (flagged kFlagInput), not filled.
// shape.n_seq > 0: windows without a cache (kv is not read; give an empty one).
ForwardInputs build_forward(Context& ctx, const ForwardModel& model, const KvCache& kv, const ForwardShape& shape);
inline ForwardInputs build_forward(Context& ctx, const Model& model, const KvCache& kv, const ForwardShape& shape) {
  return build_forward(ctx, forward_model(model), kv, shape);
}

// Flags the step's inputs (tokens, positions, cache slots, masks, temperatures, output rows) kFlagRefilled:
// for a caller that fills them before every compute and never reads them after one (Session),
// so that the graph allocator reuses their bytes once their last reader has run.
void mark_inputs_refilled(const ForwardInputs& in);

}  // namespace loom
