// Reverse-mode differentiation from a table of gradient rules, one per op. build_backward adds
// the backward nodes to a Context; the caller builds a Graph over forward + backward.
#pragma once

#include <unordered_map>
#include <vector>

#include "loom/graph/context.h"
#include "loom/graph/graph.h"

namespace loom {

// A leaf the backward graph reads whose values the caller must upload after allocating it
// (flagged kFlagInput; F32, contiguous, values in element order). Today: identity matrices that
// turn expert ids into one-hot rows for the gradients of 3-D get_rows and mul_mat_id.
struct GradConstant {
  Tensor* tensor = nullptr;
  std::vector<float> values;
};

struct Gradients {
  // d loss / d t for every tensor on a path from a kFlagParam tensor to the loss; each is a
  // contiguous F32 tensor of t's shape (possibly a view, e.g. of a scatter into zeros).
  std::unordered_map<const Tensor*, Tensor*> grad;
  std::vector<GradConstant> constants;
  Tensor* of(const Tensor* t) const {
    auto it = grad.find(t);
    return it == grad.end() ? nullptr : it->second;
  }
};

// True when op has a gradient rule with respect to at least one of its float sources.
bool op_has_grad_rule(OpKind op);

// Builds d loss / d p for every tensor p flagged kFlagParam that the loss depends on, with the
// loss (a scalar {1} F32, usually kFlagLoss) seeded with 1. fwd must contain loss. Throws
// loom::Error(unsupported) naming the op and tensor when a needed rule is missing.
// In-place ops (CPY, SET_ROWS) are differentiated as the functions they compute: the result's
// gradient flows to the written values, and the overwritten ones get none.
Gradients build_backward(Context& ctx, const Graph& fwd, Tensor* loss);

}  // namespace loom
