// The forward graph of every supported architecture, from one builder with per-arch switches.
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
  Tensor* kv_slots = nullptr;   // I32 {T}: cache rows written by this batch
  Tensor* mask = nullptr;       // F32 {n_kv, T}
  Tensor* out_rows = nullptr;   // I32 {n_out}: rows whose logits are computed (nullptr: all)
  Tensor* logits = nullptr;     // F32 {n_vocab, n_out}: the output
  // Visited before the logits when building the graph, so that groups a backend fuses stay
  // consecutive in node order (the MoE router's softmax -> top-k -> weights of each layer).
  std::vector<Tensor*> expand_first;
};

// The graph of one step: expand_first in order, then everything the logits need.
void build_graph(Graph& g, const ForwardInputs& in);

struct ForwardShape {
  int64_t n_tokens = 1;
  int64_t n_kv = 1;       // cache rows attended to (n_past + n_tokens)
  int64_t n_outputs = 1;  // n_tokens (all logits) or 1 (last)
  bool flash_attn = true;
};

// Builds the graph in ctx for one ubatch; inputs are created (flagged kFlagInput), not filled.
ForwardInputs build_forward(Context& ctx, const Model& model, const KvCache& kv, const ForwardShape& shape);

}  // namespace loom
