// The training forward graph: the same math as lib/model's inference forward (same ops in the
// same order) without a KV cache: n_seq independent windows of n_ctx tokens, full causal
// attention inside each window through the unfused path (mul_mat + soft_max + mul_mat, so
// every op has a gradient rule), then cross-entropy against the next tokens and an accuracy count.
#pragma once

#include <cstdint>
#include <vector>

#include "loom/graph/context.h"
#include "loom/model/arch.h"
#include "loom/model/model.h"

namespace loom::train {

// The weights a forward pass reads (trainable copies or frozen file tensors).
struct ModelWeights {
  HParams hp;
  Tensor* tok_embd = nullptr;
  Tensor* output_norm = nullptr;
  Tensor* output = nullptr;  // == tok_embd when tied
  Tensor* rope_freqs = nullptr;  // llama 3's RoPE divisors, or null
  Tensor* rope_long = nullptr;   // phi3 (not trainable: loading refuses phi3)
  Tensor* rope_short = nullptr;
  std::vector<LayerWeights> layers;
};

struct BatchShape {
  int64_t n_ctx = 0;  // tokens per window
  int64_t n_seq = 1;  // windows per physical batch
  int64_t n_tokens() const { return n_ctx * n_seq; }
};

// Inputs are created flagged kFlagInput (filled by the caller with fill_inputs), outputs
// flagged kFlagOutput.
struct ForwardGraph {
  Tensor* tokens = nullptr;     // I32 {T}: window w's tokens at [w n_ctx, (w + 1) n_ctx)
  Tensor* positions = nullptr;  // I32 {T}: 0..n_ctx-1 per window
  Tensor* mask = nullptr;       // F32 {n_ctx, n_ctx}: causal (0 / -inf), shared by every window and head
  Tensor* targets = nullptr;    // F32 {n_vocab, T}: one-hot next tokens
  Tensor* target_ids = nullptr; // I32 {T}
  Tensor* logits = nullptr;     // F32 {n_vocab, T}
  Tensor* loss = nullptr;       // F32 {1}: mean cross-entropy over the T tokens (kFlagLoss)
  Tensor* n_correct = nullptr;  // I32 {1}: tokens whose argmax is the target
};

ForwardGraph build_train_forward(Context& ctx, const ModelWeights& w, const BatchShape& shape);

// Writes the inputs of one physical batch: tokens[w] and next[w] are the n_ctx inputs and
// targets of window w (host memory; tensors must be allocated).
void fill_inputs(const ForwardGraph& g, const BatchShape& shape, const std::vector<const int32_t*>& tokens,
                 const std::vector<const int32_t*>& next);

}  // namespace loom::train
