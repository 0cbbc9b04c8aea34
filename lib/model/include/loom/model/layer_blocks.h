// Pieces of a transformer layer's graph that the inference forward (lib/model/src/forward.cpp)
// and the training forward (lib/train) build the same way: RMS norm times weight, the RoPE
// parameters of an architecture, the q/k/v projections up to RoPE, the dense FFN, soft-capping.
#pragma once

#include <cstdint>
#include <functional>

#include "loom/graph/ops.h"
#include "loom/model/model.h"

namespace loom {

// rms_norm(x) * w
Tensor* norm_mul(Context& c, Tensor* x, Tensor* w, float eps);
// The architecture's norm times w: rms_norm, or Cohere's layer norm (mean removed, no bias).
Tensor* arch_norm(Context& c, const HParams& hp, Tensor* x, Tensor* w);

// RoPE over the whole head, in the architecture's mode (neox or normal), with its scaling; a
// sliding-window layer rotates with the local base and scale.
ops::RopeParams rope_params(const HParams& hp, bool swa_layer = false);

struct QkvHeads {
  Tensor* q;  // {head_dim, n_head, T}, normed (qwen3) and roped
  Tensor* k;  // {head_dim, n_head_kv, T}, normed (qwen3) and roped
  Tensor* v;  // {head_dim * n_head_kv, T}
  // The separate q, k, v products (null for phi3's fused one), for the graph to compute one after
  // another: the CPU runs such a run of products of one input as one phase (cpu_matmul.cpp).
  Tensor* products[3] = {};
  Tensor* joins[2] = {};  // olmo2 under -sm tensor: the joined q and k (WholeQkRows)
};

// olmo2 under -sm tensor: a member holds some heads of q and k while their norms span all of them.
// join gathers the members' rows of q (is_k false) or k; the member norms the whole vector and
// takes its own rows back (those from q_first, k_first).
struct WholeQkRows {
  std::function<Tensor*(Tensor* part, bool is_k)> join;
  int64_t q_first = 0, k_first = 0;
};
// The attention inputs of layer l from its normed input cur {n_embd, T}: projections (phi3's
// fused q|k|v), biases (qwen2, gpt-oss), per-head q/k norms (qwen3, gemma3; a weight row per head in
// Command R+; olmo2's over the whole q and k, joined first where `whole` is given), RoPE at positions
// with the per-pair divisors rope_factors (Llama 3, phi3) or none; rotate false: no RoPE at all
// (smollm3's NoPE layers).
QkvHeads project_qkv(Context& c, const HParams& hp, const LayerWeights& l, Tensor* cur, int64_t n_head,
                     int64_t n_head_kv, Tensor* positions, const ops::RopeParams& rope_p,
                     Tensor* rope_factors = nullptr, bool rotate = true, const WholeQkRows* whole = nullptr);

// down(silu(gate x) * up x); gemma: down(gelu(gate x) * up x); phi3 (no ffn_gate): gate and up
// are the two halves of ffn_up's rows.
Tensor* dense_ffn(Context& c, const LayerWeights& l, Tensor* x, bool gelu_gate = false);
// The part before down: silu(gate x) * up x (gemma: gelu), {n_ff, T}.
Tensor* dense_ffn_hidden(Context& c, const LayerWeights& l, Tensor* x, bool gelu_gate = false);

// gemma2's soft-capping: cap * tanh(x / cap) (x itself when cap is 0).
Tensor* logit_softcap(Context& c, Tensor* x, float cap);

}  // namespace loom
