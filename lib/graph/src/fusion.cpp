// Fusion matching: the chain check, the pattern matcher (bind from the root, check every edge and
// every use count), and the two patterns loom fuses, RMS_NORM+MUL and the topk-moe router with
// its variants (softmax/sigmoid gating, exp_probs_b bias, renormalization, final SCALE).
#include "loom/graph/fusion.h"

#include <algorithm>

namespace loom {

namespace {

bool is_view_op(const Tensor* t) { return op_info(t->op).is_view; }

bool shape_is(const Tensor* t, int64_t n0, int64_t n1, int64_t n2 = 1, int64_t n3 = 1) {
  return t->ne[0] == n0 && t->ne[1] == n1 && t->ne[2] == n2 && t->ne[3] == n3;
}

}  // namespace

bool can_fuse(const Graph& g, std::span<Tensor* const> nodes, size_t i, std::initializer_list<OpKind> ops) {
  if (ops.size() == 0 || i + ops.size() > nodes.size()) return false;
  size_t k = 0;
  for (OpKind op : ops) {
    const Tensor* t = nodes[i + k];
    if (t->op != op) return false;
    if (k > 0) {
      const Tensor* prev = nodes[i + k - 1];
      if (std::find(std::begin(t->src), std::end(t->src), prev) == std::end(t->src)) return false;
    }
    if (k + 1 < ops.size() && (g.use_count(t) != 1 || t->has_flag(kFlagOutput) || t->is_view())) return false;
    ++k;
  }
  return true;
}

bool can_fuse(const Graph& g, size_t i, std::initializer_list<OpKind> ops) {
  return can_fuse(g, std::span<Tensor* const>(g.nodes().data(), g.nodes().size()), i, ops);
}

namespace {
bool op_matches(const PatternNode& pn, const Tensor* t) {
  return t->op == pn.op || (pn.any_view && op_info(t->op).is_view);
}
}  // namespace

std::optional<PatternMatch> match_pattern(const Graph& g, const Pattern& p, Tensor* root) {
  const int n = (int)p.nodes.size();
  if (n == 0 || !root || !op_matches(p.nodes.back(), root)) return std::nullopt;
  PatternMatch m;
  m.nodes.assign((size_t)n, nullptr);
  m.nodes.back() = root;
  auto bound_index = [&](const Tensor* t) {
    for (int j = 0; j < n; ++j)
      if (m.nodes[(size_t)j] == t) return j;
    return -1;
  };
  for (int i = n - 1; i >= 0; --i) {
    Tensor* t = m.nodes[(size_t)i];
    if (!t) return std::nullopt;  // not reachable from the root
    const PatternNode& pn = p.nodes[(size_t)i];
    for (int s = 0; s < (int)pn.src.size(); ++s) {
      Tensor* src = t->src[s];
      const int want = pn.src[(size_t)s];
      if (want >= 0) {
        if (want >= i || !src || !op_matches(p.nodes[(size_t)want], src)) return std::nullopt;
        Tensor*& slot = m.nodes[(size_t)want];
        if (!slot) {
          if (bound_index(src) >= 0) return std::nullopt;  // one tensor, one pattern node
          slot = src;
        } else if (slot != src) {
          return std::nullopt;
        }
      } else if (want == kPatternInput) {
        if (!src) return std::nullopt;
      } else if (want == kPatternNone) {
        if (src) return std::nullopt;
      }
    }
  }
  for (int i = 0; i < n; ++i)  // external sources, in pattern order
    for (size_t s = 0; s < p.nodes[(size_t)i].src.size(); ++s) {
      const int want = p.nodes[(size_t)i].src[s];
      if (want != kPatternInput && want != kPatternAny) continue;
      Tensor* src = m.nodes[(size_t)i]->src[s];
      if (src && bound_index(src) >= 0) return std::nullopt;  // an "outside" edge that comes from inside
      m.inputs.push_back(src);
    }
  for (int i = 0; i < n; ++i) {
    if (std::find(p.outputs.begin(), p.outputs.end(), i) != p.outputs.end()) continue;
    const Tensor* t = m.nodes[(size_t)i];
    if (t->has_flag(kFlagOutput)) return std::nullopt;
    int reads = 0;
    for (const Tensor* u : m.nodes)
      for (const Tensor* s : u->src) reads += s == t;
    if (g.use_count(t) != reads) return std::nullopt;  // read by a node outside the match
  }
  return m;
}

const char* fusion_name(FusionKind kind) {
  switch (kind) {
    case FusionKind::rms_norm_mul: return "RMS_NORM_MUL";
    case FusionKind::topk_moe: return "TOPK_MOE";
  }
  return "?";
}

namespace {

// ---- RMS_NORM + MUL ------------------------------------------------------------------------------

std::optional<FusedGroup> match_rms_norm_mul(const Graph& g, Tensor* root) {
  static const Pattern p{{{OpKind::RMS_NORM, {kPatternInput, kPatternNone, kPatternNone, kPatternNone}},
                          {OpKind::MUL, {0, kPatternInput, kPatternNone, kPatternNone}}},
                         {1}};
  auto m = match_pattern(g, p, root);
  if (!m) return std::nullopt;
  Tensor* norm = m->nodes[0];
  if (norm->is_view() || root->is_view() || !root->is_contiguous()) return std::nullopt;
  FusedGroup grp{FusionKind::rms_norm_mul};
  grp.nodes = m->nodes;
  grp.outputs = {root};
  grp.inputs = {m->inputs[0], m->inputs[1]};
  grp.eps = norm->param_f32(0);
  return grp;
}

// ---- topk-moe ------------------------------------------------------------------------------------

enum class MoeNorm { none, loom_form, llama_form };

struct MoeVariant {
  MoeGating gating;
  bool bias;
  MoeNorm norm;
  bool scale;
  Pattern pattern;
  // pattern node indices
  int gate, add, topk, probs3, rows, sum, div, scl;
};

// loom form of renormalization:   w / reshape(sum_rows(reshape(w, {k, T})), {1, 1, T})  -> {1, k, T}
// llama.cpp form:   r = reshape(w, {k, T}); r / sum_rows(r)                            -> {k, T}
MoeVariant make_variant(MoeGating gating, bool bias, MoeNorm norm, bool scale) {
  MoeVariant v{gating, bias, norm, scale, {}, -1, -1, -1, -1, -1, -1, -1, -1};
  std::vector<PatternNode>& n = v.pattern.nodes;
  auto add = [&](OpKind op, std::array<int, 4> src) {
    n.push_back({op, src, op == OpKind::RESHAPE});
    return (int)n.size() - 1;
  };
  constexpr int I = kPatternInput, N = kPatternNone;
  v.gate = gating == MoeGating::softmax ? add(OpKind::SOFT_MAX, {I, N, N, N}) : add(OpKind::SIGMOID, {I, N, N, N});
  int sel = v.gate;
  if (bias) sel = v.add = add(OpKind::ADD, {v.gate, I, N, N});
  v.topk = add(OpKind::TOP_K, {sel, N, N, N});
  v.probs3 = add(OpKind::RESHAPE, {v.gate, N, N, N});
  v.rows = add(OpKind::GET_ROWS, {v.probs3, v.topk, N, N});
  int w = v.rows;
  if (norm != MoeNorm::none) {
    const int flat = add(OpKind::RESHAPE, {v.rows, N, N, N});
    v.sum = add(OpKind::SUM_ROWS, {flat, N, N, N});
    if (norm == MoeNorm::loom_form) {
      const int sum3 = add(OpKind::RESHAPE, {v.sum, N, N, N});
      w = v.div = add(OpKind::DIV, {v.rows, sum3, N, N});
    } else {
      w = v.div = add(OpKind::DIV, {flat, v.sum, N, N});
    }
  }
  if (scale) w = v.scl = add(OpKind::SCALE, {w, N, N, N});
  v.pattern.outputs = {w, v.topk};
  return v;
}

// Every variant (a root heads at most one: see pick_variant).
const std::vector<MoeVariant>& moe_variants() {
  static const std::vector<MoeVariant> all = [] {
    std::vector<MoeVariant> out;
    for (bool scale : {true, false})
      for (MoeNorm norm : {MoeNorm::loom_form, MoeNorm::llama_form, MoeNorm::none})
        for (bool bias : {true, false})
          for (MoeGating gating : {MoeGating::softmax, MoeGating::sigmoid})
            out.push_back(make_variant(gating, bias, norm, scale));
    return out;
  }();
  return all;
}

// A view node standing for a reshape: the same bytes as its source, contiguous.
bool is_reshape(const Tensor* t) {
  const Tensor* s = t->src[0];
  if (!s || !t->is_contiguous() || !s->is_contiguous() || t->nelements() != s->nelements() || t->type != s->type)
    return false;
  const Tensor* root = s->view_src ? s->view_src : s;
  return t->view_src == root && t->view_offs == (s->view_src ? s->view_offs : 0);
}

// Shapes and parameters the fused kernels assume (edges were checked by the matcher).
bool moe_shapes_ok(const MoeVariant& v, const PatternMatch& m, FusedGroup& grp) {
  auto node = [&](int i) { return m.nodes[(size_t)i]; };
  for (size_t i = 0; i < v.pattern.nodes.size(); ++i)
    if (v.pattern.nodes[i].any_view && !is_reshape(m.nodes[i])) return false;
  const Tensor* gate = node(v.gate);
  const Tensor* logits = gate->src[0];
  if (logits->type != DType::F32 || logits->ne[2] != 1 || logits->ne[3] != 1) return false;
  const int64_t E = logits->ne[0], T = logits->ne[1];
  if (v.gating == MoeGating::softmax && gate->param_f32(1) != 0.0f) return false;  // no ALiBi
  const Tensor* bias = v.add >= 0 ? node(v.add)->src[1] : nullptr;
  if (bias && (bias->type != DType::F32 || bias->nelements() != E || bias->ne[0] != E || !bias->is_contiguous()))
    return false;
  const Tensor* topk = node(v.topk);
  const int64_t k = topk->ne[0];
  if (!shape_is(topk, k, T) || !topk->is_contiguous()) return false;
  if (!shape_is(node(v.probs3), 1, E, T) || !shape_is(node(v.rows), 1, k, T)) return false;
  if (v.norm != MoeNorm::none) {
    const Tensor* flat = node(v.sum)->src[0];
    if (!shape_is(flat, k, T) || !shape_is(node(v.sum), 1, T)) return false;
    if (v.norm == MoeNorm::loom_form && !shape_is(node(v.div)->src[1], 1, 1, T)) return false;
  }
  const Tensor* out = m.nodes.back();
  if (out->type != DType::F32 || !out->is_contiguous() || out->nelements() != k * T) return false;
  for (const Tensor* t : m.nodes)
    if (!is_view_op(t) && t->is_view()) return false;  // computing nodes own their memory
  grp.gating = v.gating;
  grp.gate_scale = v.gating == MoeGating::softmax ? gate->param_f32(0) : 1.0f;
  grp.normalize = v.norm != MoeNorm::none;
  grp.has_scale = v.scale;
  if (v.scale) {
    grp.scale = out->param_f32(0);
    grp.scale_bias = out->param_f32(1);
  }
  grp.n_expert = E;
  grp.k = k;
  grp.n_tokens = T;
  grp.inputs = {const_cast<Tensor*>(logits), const_cast<Tensor*>(bias)};
  grp.outputs = {m.nodes.back(), m.nodes[(size_t)v.topk]};
  return true;
}

// The one variant a root can head, read off the graph's structure (nullptr: none): SCALE on top,
// DIV for renormalization (its numerator the gathered weights: loom form, or a view of them:
// llama.cpp form), GET_ROWS with ids from TOP_K, ADD before TOP_K for a bias, and the gate op.
const MoeVariant* pick_variant(const Tensor* root) {
  const Tensor* t = root;
  const bool scale = t->op == OpKind::SCALE;
  if (scale) t = t->src[0];
  MoeNorm norm = MoeNorm::none;
  if (t && t->op == OpKind::DIV) {
    t = t->src[0];
    norm = t && op_info(t->op).is_view ? MoeNorm::llama_form : MoeNorm::loom_form;
    if (norm == MoeNorm::llama_form) t = t->src[0];
  }
  if (!t || t->op != OpKind::GET_ROWS || !t->src[0] || !t->src[1] || t->src[1]->op != OpKind::TOP_K) return nullptr;
  const Tensor* gate = t->src[0]->src[0];
  const Tensor* sel = t->src[1]->src[0];
  if (!gate || !sel) return nullptr;
  const bool bias = sel->op == OpKind::ADD;
  MoeGating gating;
  if (gate->op == OpKind::SOFT_MAX) {
    gating = MoeGating::softmax;
  } else if (gate->op == OpKind::SIGMOID) {
    gating = MoeGating::sigmoid;
  } else {
    return nullptr;
  }
  for (const MoeVariant& v : moe_variants())
    if (v.gating == gating && v.bias == bias && v.norm == norm && v.scale == scale) return &v;
  return nullptr;
}

std::optional<FusedGroup> match_topk_moe(const Graph& g, Tensor* root) {
  const MoeVariant* v = pick_variant(root);
  if (!v) return std::nullopt;
  auto m = match_pattern(g, v->pattern, root);
  if (!m) return std::nullopt;
  FusedGroup grp{FusionKind::topk_moe};
  if (!moe_shapes_ok(*v, *m, grp)) return std::nullopt;
  grp.nodes = m->nodes;
  return grp;
}

}  // namespace

std::vector<FusedGroup> find_fusions(const Graph& g, std::span<Tensor* const> nodes) {
  std::vector<FusedGroup> out;
  std::vector<bool> claimed(nodes.size(), false);
  for (size_t p = nodes.size(); p-- > 0;) {
    Tensor* root = nodes[p];
    if (claimed[p] || root->op == OpKind::NONE || is_view_op(root)) continue;
    std::optional<FusedGroup> grp;
    switch (root->op) {
      case OpKind::MUL:
        if (root->src[0] && root->src[0]->op == OpKind::RMS_NORM) grp = match_rms_norm_mul(g, root);
        break;
      case OpKind::SCALE:
      case OpKind::DIV:
      case OpKind::GET_ROWS: grp = match_topk_moe(g, root); break;
      default: break;
    }
    if (!grp) continue;
    // The group's other computing nodes must be the computing nodes right before the root.
    std::vector<const Tensor*> rest;
    for (const Tensor* t : grp->nodes)
      if (t != root && !is_view_op(t)) rest.push_back(t);
    size_t q = p;
    bool ok = true;
    for (size_t need = rest.size(); need > 0 && ok;) {
      if (q == 0) {
        ok = false;
        break;
      }
      const Tensor* t = nodes[--q];
      if (is_view_op(t)) continue;
      auto it = std::find(rest.begin(), rest.end(), t);
      if (claimed[q] || it == rest.end()) {
        ok = false;
        break;
      }
      rest.erase(it);
      --need;
    }
    if (!ok) continue;
    grp->first = q;
    grp->last = p;
    for (size_t i = q; i <= p; ++i) claimed[i] = true;
    out.push_back(std::move(*grp));
  }
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<FusedGroup> find_fusions(const Graph& g) {
  return find_fusions(g, std::span<Tensor* const>(g.nodes().data(), g.nodes().size()));
}

}  // namespace loom
