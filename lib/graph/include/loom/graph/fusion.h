// Fusion: groups of graph nodes a backend may run as one kernel. can_fuse checks a simple chain
// (each intermediate read once, not an output, not a view); match_pattern matches a small
// subgraph with several outputs and explicit edge checks; find_fusions lists the groups of the
// patterns loom knows (RMS_NORM+MUL, topk-moe) so backends and loom-split-inspect agree on them.
#pragma once

#include <array>
#include <cstddef>
#include <initializer_list>
#include <optional>
#include <span>
#include <vector>

#include "loom/graph/graph.h"

namespace loom {

// Nodes i, i+1, ... of `nodes` (a run of g's nodes) have the ops `ops` in order, each reads the
// one before it, and each but the last is read by no other node of g (use count 1), is not
// kFlagOutput and is not a view.
bool can_fuse(const Graph& g, std::span<Tensor* const> nodes, size_t i, std::initializer_list<OpKind> ops);
bool can_fuse(const Graph& g, size_t i, std::initializer_list<OpKind> ops);  // over g.nodes()

// ---- subgraph patterns -------------------------------------------------------------------------
inline constexpr int kPatternInput = -1;  // the source comes from outside the pattern (must exist)
inline constexpr int kPatternNone = -2;   // the source slot must be empty
inline constexpr int kPatternAny = -3;    // not checked (absent or from outside)

struct PatternNode {
  OpKind op;
  // Per source slot: the index of an earlier pattern node, or kPatternInput/None/Any.
  std::array<int, 4> src = {kPatternAny, kPatternAny, kPatternAny, kPatternAny};
  // Matches any view op, not only `op` (a planner may turn a RESHAPE into a VIEW of the same bytes).
  bool any_view = false;
};

struct Pattern {
  std::vector<PatternNode> nodes;  // sources before users; the last node is the root
  std::vector<int> outputs;        // nodes whose values may be read outside the match
};

struct PatternMatch {
  std::vector<Tensor*> nodes;   // the tensor bound to each pattern node
  std::vector<Tensor*> inputs;  // external sources, in (pattern node, slot) order, nullptr for absent kPatternAny
};

// Matches p with its root at `root`, binding pattern nodes by walking sources from the root.
// Checks every edge: each op, each slot's kind (inside, outside, empty), one tensor per pattern
// node, and that each node not listed in outputs is read only by nodes of the match (its use
// count in g equals its reads inside the match) and is not kFlagOutput.
std::optional<PatternMatch> match_pattern(const Graph& g, const Pattern& p, Tensor* root);

// ---- the fusions loom knows ---------------------------------------------------------------------
enum class FusionKind : uint8_t {
  rms_norm_mul,  // y = rms_norm(x, eps) * w (w broadcast over y)
  topk_moe,      // MoE router: gating -> top-k -> weights (optional renormalization, scale)
};
const char* fusion_name(FusionKind kind);  // "RMS_NORM_MUL", "TOPK_MOE"

enum class MoeGating : uint8_t { softmax, sigmoid };

struct FusedGroup {
  FusionKind kind;
  size_t first = 0;            // position of its first computing node in the node list searched
  size_t last = 0;             // position of its last node (the root); views between are skipped
  std::vector<Tensor*> nodes;  // every node of the group (views included), sources first
  // rms_norm_mul: {y}. topk_moe: {weights F32 {1, k, T} or {k, T}, expert ids I32 {k, T}}.
  std::vector<Tensor*> outputs;
  // rms_norm_mul: {x, w}. topk_moe: {logits F32 {n_expert, T}, exp_probs_b F32 {n_expert} or nullptr}.
  std::vector<Tensor*> inputs;
  // rms_norm_mul
  float eps = 0.0f;
  // topk_moe: weights = scale * renorm(gate(logits * gate_scale)[ids]) + scale_bias,
  // ids = top_k(gate(logits * gate_scale) + exp_probs_b)
  MoeGating gating = MoeGating::softmax;
  float gate_scale = 1.0f;  // SOFT_MAX's scale
  bool normalize = false;
  bool has_scale = false;
  float scale = 1.0f, scale_bias = 0.0f;
  int64_t n_expert = 0, k = 0, n_tokens = 0;
};

// Fused groups among `nodes` (a run of g's nodes in order, e.g. one split; view nodes may be
// absent). A group's computing nodes are consecutive in `nodes` once views are skipped, so a
// backend runs it at `first` and skips the rest up to `last`. Groups never overlap.
std::vector<FusedGroup> find_fusions(const Graph& g, std::span<Tensor* const> nodes);
std::vector<FusedGroup> find_fusions(const Graph& g);  // over g.nodes()

}  // namespace loom
