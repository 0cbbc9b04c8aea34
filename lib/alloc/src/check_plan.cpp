// check_plan: verifies a memory plan from first principles (own liveness computation, pairwise
// overlap test), so that it can catch bugs in the planner rather than repeat them.
#include <algorithm>
#include <climits>
#include <unordered_map>
#include <unordered_set>

#include "loom/alloc/check.h"

namespace loom::alloc {

namespace {

constexpr int kForever = INT_MAX;

struct Life {
  const Placement* p;
  int first;  // step it is written at (-1: before node 0)
  int last;   // last step it must hold its bytes (kForever: never reused)
};

template <typename... Args>
Status violation(fmt::format_string<Args...> f, Args&&... args) {
  return Status::error(ErrorKind::internal, "[check_plan] " + fmt::format(f, std::forward<Args>(args)...));
}

const Tensor* root(const Tensor* t) { return t->view_src ? t->view_src : t; }

}  // namespace

Status check_plan(const Graph& graph, const BufferType& bt, const MemoryPlan& plan, const PlanOptions& opt) {
  std::unordered_map<const Tensor*, int> node_index;
  for (size_t i = 0; i < graph.n_nodes(); ++i) node_index.emplace(graph.node(i), (int)i);
  const std::unordered_set<const Tensor*> leafs(graph.leafs().begin(), graph.leafs().end());
  std::unordered_set<const Tensor*> output_roots;
  for (const Tensor* t : graph.leafs())
    if (t->has_flag(kFlagOutput)) output_roots.insert(root(t));
  for (const Tensor* t : graph.nodes())
    if (t->has_flag(kFlagOutput)) output_roots.insert(root(t));

  // Exactly the right tensors, each once, with the right size, aligned, inside total.
  std::unordered_map<const Tensor*, size_t> placed;
  for (size_t k = 0; k < plan.placements.size(); ++k) {
    const Placement& p = plan.placements[k];
    const Tensor* t = p.tensor;
    if (!t) return violation("placement {} has no tensor", k);
    if (!placed.emplace(t, k).second) return violation("'{}' is placed twice", t->name);
    if (!node_index.count(t) && !leafs.count(t)) return violation("'{}' is not in the graph", t->name);
    if (t->is_view()) return violation("'{}' is a view but has a placement", t->name);
    if (t->data) return violation("'{}' already has data but has a placement", t->name);
    const size_t need = bt.alloc_size(t);
    if (p.size != need) return violation("'{}' placed with {} bytes, alloc_size is {}", t->name, p.size, need);
    if (need < t->nbytes()) return violation("'{}' alloc_size {} < natural size {}", t->name, need, t->nbytes());
    if (need > t->nbytes() && !op_alloc_size_may_expand(t->op))
      return violation("'{}' ({}) expanded to {} bytes from {}, but its op may not expand", t->name,
                       op_name(t->op), need, t->nbytes());
    if (p.offset % bt.alignment() != 0)
      return violation("'{}' at offset {} is not aligned to {}", t->name, p.offset, bt.alignment());
    if (p.offset > plan.total || p.size > plan.total - p.offset)
      return violation("'{}' [{}, {}) exceeds total {}", t->name, p.offset, p.offset + p.size, plan.total);
  }
  auto must_place = [&](const Tensor* t) {
    return !t->is_view() && !t->data && !placed.count(t) ? violation("'{}' has no placement", t->name) : Status::ok();
  };
  for (const Tensor* t : graph.leafs())
    if (Status st = must_place(t); !st) return st;
  for (const Tensor* t : graph.nodes())
    if (Status st = must_place(t); !st) return st;

  // Lifetimes: from the step that writes a tensor to the last step that reads it or a view of it.
  std::vector<Life> lives;
  std::unordered_map<const Tensor*, size_t> life_of;
  for (const Placement& p : plan.placements) {
    const Tensor* t = p.tensor;
    const bool pinned = leafs.count(t) || t->has_flag(kFlagInput);
    const int first = pinned ? -1 : node_index.at(t);
    const bool refilled = t->has_flag(kFlagInput) && t->has_flag(kFlagRefilled);
    const bool keep = (pinned && !refilled) || output_roots.count(t);
    life_of.emplace(t, lives.size());
    lives.push_back({&p, first, keep ? kForever : first});
  }
  auto touch = [&](const Tensor* t, int i) {
    auto it = life_of.find(root(t));
    if (it != life_of.end() && lives[it->second].last != kForever)
      lives[it->second].last = std::max(lives[it->second].last, i);
  };
  for (size_t i = 0; i < graph.n_nodes(); ++i) {
    const Tensor* n = graph.node(i);
    for (const Tensor* s : n->src)
      if (s) touch(s, (int)i);
    if (n->is_view()) touch(n, (int)i);
  }

  // The in-place rule: `later` is a node written over its src[0] `earlier` (or its src[1], for
  // ADD SUB MUL DIV) at the step that last reads it.
  auto inplace_allowed = [&](const Life& earlier, const Life& later) {
    const Tensor* s = earlier.p->tensor;
    const Tensor* n = later.p->tensor;
    const int i = later.first;
    const bool binary = n->op == OpKind::ADD || n->op == OpKind::SUB || n->op == OpKind::MUL || n->op == OpKind::DIV;
    const int operand = n->src[0] == s ? 0 : binary && n->src[1] == s ? 1 : -1;
    if (!opt.allow_inplace || i < 0 || !op_info(n->op).may_inplace || operand < 0) return false;
    if (earlier.last != i || earlier.p->offset != later.p->offset) return false;
    if (leafs.count(s) || s->has_flag(kFlagInput) || s->has_flag(kFlagOutput) || output_roots.count(s)) return false;
    for (int k = 0; k < kMaxSrc; ++k)
      if (k != operand && n->src[k] && root(n->src[k]) == s) return false;
    return s->is_contiguous() && n->is_contiguous() && s->type == n->type && s->nbytes() == n->nbytes();
  };

  // Every pair sharing a byte while both are live must be an allowed in-place pair.
  std::vector<size_t> order(lives.size());
  for (size_t k = 0; k < order.size(); ++k) order[k] = k;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return lives[a].p->offset != lives[b].p->offset ? lives[a].p->offset < lives[b].p->offset : a < b;
  });
  for (size_t x = 0; x < order.size(); ++x) {
    const Life& a = lives[order[x]];
    if (a.p->size == 0) continue;
    for (size_t y = x + 1; y < order.size(); ++y) {
      const Life& b = lives[order[y]];
      if (b.p->offset >= a.p->offset + a.p->size) break;
      if (b.p->size == 0 || a.first > b.last || b.first > a.last) continue;
      const bool ok = a.first < b.first ? inplace_allowed(a, b) : b.first < a.first && inplace_allowed(b, a);
      if (!ok)
        return violation("'{}' [{}, {}) live at steps [{}, {}] overlaps '{}' [{}, {}) live at steps [{}, {}]",
                         a.p->tensor->name, a.p->offset, a.p->offset + a.p->size, a.first, a.last,
                         b.p->tensor->name, b.p->offset, b.p->offset + b.p->size, b.first, b.last);
    }
  }
  return Status::ok();
}

}  // namespace loom::alloc
