// The training forward graph: lib/model's forward (the same layers as inference) over a batch of
// n_seq independent windows of n_ctx tokens without a KV cache, each attending causally within
// itself through the plain attention path (every op has a gradient rule), then cross-entropy
// against the next tokens and an accuracy count.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/graph/context.h"
#include "loom/graph/graph.h"
#include "loom/model/forward.h"
#include "loom/model/model.h"

namespace loom::train {

struct BatchShape {
  int64_t n_ctx = 0;  // tokens per window
  int64_t n_seq = 1;  // windows per physical batch
  int64_t n_tokens() const { return n_ctx * n_seq; }
};

// Inputs are created flagged kFlagInput (filled by the caller with fill_inputs once memory is
// bound), outputs flagged kFlagOutput.
struct ForwardGraph {
  ForwardInputs in;             // tokens, positions (0..n_ctx-1 per window), causal masks {n_ctx, n_ctx}
  const HParams* hp = nullptr;  // the model's (the masks' sliding window)
  Tensor* targets = nullptr;    // F32 {n_vocab, T}: one-hot next tokens
  Tensor* target_ids = nullptr; // I32 {T}
  Tensor* logits = nullptr;     // F32 {n_vocab, T}
  Tensor* loss = nullptr;       // F32 {1}: mean cross-entropy over the T tokens (kFlagLoss)
  Tensor* n_correct = nullptr;  // I32 {1}: tokens whose argmax is the target
};

ForwardGraph build_train_forward(Context& ctx, const Model& model, const BatchShape& shape);
// Adds the forward's nodes to g in the inference forward's order, then the loss and the count.
void build_train_graph(Graph& g, const ForwardGraph& fg);

// Writes the inputs of one physical batch into host memory: tokens[w] and next[w] are the n_ctx
// inputs and targets of window w.
void fill_inputs(const ForwardGraph& g, const BatchShape& shape, const std::vector<const int32_t*>& tokens,
                 const std::vector<const int32_t*>& next);

}  // namespace loom::train
