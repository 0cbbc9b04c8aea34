// Pieces of a transformer layer's graph that the inference forward (lib/model/src/forward.cpp)
// and the training forward (lib/train) build the same way: RMS norm times weight, the RoPE
// parameters of an architecture, the q/k/v projections up to RoPE, and the dense SwiGLU FFN.
#pragma once

#include <cstdint>

#include "loom/graph/ops.h"
#include "loom/model/model.h"

namespace loom {

// rms_norm(x) * w
Tensor* norm_mul(Context& c, Tensor* x, Tensor* w, float eps);

// RoPE over the whole head, in the architecture's mode (neox or normal).
ops::RopeParams rope_params(const HParams& hp);

struct QkvHeads {
  Tensor* q;  // {head_dim, n_head, T}, normed (qwen3) and roped
  Tensor* k;  // {head_dim, n_head_kv, T}, normed (qwen3) and roped
  Tensor* v;  // {head_dim * n_head_kv, T}
};
// The attention inputs of layer l from its normed input cur {n_embd, T}: projections, biases
// (qwen2), per-head q/k norms (qwen3), RoPE at positions.
QkvHeads project_qkv(Context& c, const HParams& hp, const LayerWeights& l, Tensor* cur, int64_t n_head,
                     int64_t n_head_kv, Tensor* positions, const ops::RopeParams& rope_p);

// down(silu(gate x) * up x)
Tensor* dense_ffn(Context& c, const LayerWeights& l, Tensor* x);

}  // namespace loom
