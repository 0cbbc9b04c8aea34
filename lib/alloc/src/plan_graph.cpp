// plan_graph: places a graph's tensors in one buffer by liveness, in numbered passes
// (1 what to place, 2 last use through views, 3 what is never reused, 4 pinned tensors first,
// 5 walk the nodes: place each, in place where safe, then free what is dead), and apply_plan.
#include <cstdlib>
#include <unordered_map>

#include "alloc_common.h"
#include "free_list.h"
#include "loom/alloc/alloc.h"

namespace loom::alloc {

using detail::align_up;
using detail::root_of;

size_t detail::checked_alloc_size(const BufferType& bt, const Tensor* t) {
  const size_t need = bt.alloc_size(t);
  LOOM_CHECK(need >= t->nbytes(), internal, "[alloc] buffer type {} gives '{}' ({}) {} bytes, below its {} bytes",
             bt.name(), t->name, op_name(t->op), need, t->nbytes());
  LOOM_CHECK(need == t->nbytes() || op_alloc_size_may_expand(t->op), internal,
             "[alloc] buffer type {} expands '{}' to {} bytes ({} natural), but {} may not expand", bt.name(),
             t->name, need, t->nbytes(), op_name(t->op));
  return need;
}

namespace {

// ADD SUB MUL DIV: with equal byte sizes b is not broadcast, so the result may take over either
// operand (the kernels read element i of both before writing element i).
bool op_inplace_either_operand(OpKind op) {
  return op == OpKind::ADD || op == OpKind::SUB || op == OpKind::MUL || op == OpKind::DIV;
}

// An input the caller fills before every compute: its bytes are free after its last reader.
bool refilled_input(const Tensor* t) { return t->has_flag(kFlagInput) && t->has_flag(kFlagRefilled); }

struct Slot {
  Tensor* tensor;
  size_t size = 0;         // alloc_size
  size_t block = 0;        // bytes reserved in the arena (aligned, at least one alignment unit)
  size_t offset = 0;
  int last_use = -1;       // index of the last node that reads it (itself for nodes)
  bool pinned = false;     // leaf or input: placed before node 0
  bool protect = false;    // never freed: pinned (unless refilled), output, or root of an output view
  bool owns = false;       // currently holds its block (not yet freed or handed over)
};

class Planner {
 public:
  Planner(const Graph& g, const BufferType& bt, const PlanOptions& opt) : g_(g), bt_(bt), opt_(opt) {}

  MemoryPlan run() {
    collect();
    find_last_uses();
    find_protected();
    place_pinned();
    for (size_t i = 0; i < g_.n_nodes(); ++i) step((int)i);
    plan_.total = arena_.high_water();
    if (debug_ > 0) print_peak();
    return std::move(plan_);
  }

 private:
  Slot* slot(const Tensor* t) {
    auto it = index_.find(t);
    return it == index_.end() ? nullptr : &slots_[it->second];
  }

  void add(Tensor* t, bool pinned, int at) {
    Slot s{t};
    s.size = detail::checked_alloc_size(bt_, t);
    s.block = align_up(s.size == 0 ? 1 : s.size, bt_.alignment());
    s.pinned = pinned;
    s.protect = pinned && !refilled_input(t);
    s.last_use = at;
    index_.emplace(t, (int)slots_.size());
    slots_.push_back(s);
  }

  // 1. What to place: leaves and nodes that are not views and have no data.
  void collect() {
    for (Tensor* t : g_.leafs()) {
      if (t->is_view()) {
        if (!t->data) plan_.views.push_back(t);
      } else if (!t->data) {
        add(t, true, -1);
      }
    }
    for (size_t i = 0; i < g_.n_nodes(); ++i) {
      Tensor* t = g_.node(i);
      if (t->is_view()) {
        if (!t->data) plan_.views.push_back(t);
      } else if (!t->data) {
        add(t, t->has_flag(kFlagInput), (int)i);
      }
    }
  }

  // 2. Last use: a node uses the roots of its sources, and its own root when it is a view
  //    (a CPY or SET_ROWS writes there), so readers of views keep their root alive.
  void find_last_uses() {
    for (size_t i = 0; i < g_.n_nodes(); ++i) {
      Tensor* n = g_.node(i);
      for (Tensor* s : n->src)
        if (s)
          if (Slot* r = slot(root_of(s))) r->last_use = (int)i;
      if (n->is_view())
        if (Slot* r = slot(root_of(n))) r->last_use = (int)i;
    }
  }

  // 3. Never reused: outputs, and roots of output views.
  void find_protected() {
    auto mark = [&](Tensor* t) {
      if (t->has_flag(kFlagOutput))
        if (Slot* r = slot(root_of(t))) r->protect = true;
    };
    for (Tensor* t : g_.leafs()) mark(t);
    for (Tensor* t : g_.nodes()) mark(t);
  }

  // 4. Leaves and inputs: the caller fills them before node 0 runs.
  void place_pinned() {
    for (Slot& s : slots_)
      if (s.pinned) place(s, arena_.alloc(s.block));
  }

  void place(Slot& s, size_t offset) {
    s.offset = offset;
    s.owns = true;
    plan_.placements.push_back({s.tensor, offset, s.size});
  }

  // The source whose block node n (at step i) may take over, or nullptr: src[0], or for a
  // same-shape binary op either operand, the one lower in the arena (keeps the live set low).
  Slot* inplace_source(const Tensor* n, const Slot& ns, int i) {
    if (!opt_.allow_inplace || !op_info(n->op).may_inplace) return nullptr;
    Slot* best = nullptr;
    for (int k = 0; k < (op_inplace_either_operand(n->op) ? 2 : 1); ++k)
      if (Slot* ss = inplace_candidate(n, k, ns, i); ss && (!best || ss->offset < best->offset)) best = ss;
    return best;
  }

  Slot* inplace_candidate(const Tensor* n, int k, const Slot& ns, int i) {
    const Tensor* s = n->src[k];
    if (!s || s->is_view()) return nullptr;
    Slot* ss = slot(s);
    if (!ss || !ss->owns || ss->protect || ss->last_use != i) return nullptr;
    if (s->has_flag(kFlagInput) || s->has_flag(kFlagOutput)) return nullptr;
    for (int j = 0; j < kMaxSrc; ++j)
      if (j != k && n->src[j] && root_of(n->src[j]) == s) return nullptr;
    if (!s->is_contiguous() || !n->is_contiguous() || s->type != n->type || s->nbytes() != n->nbytes())
      return nullptr;
    if (ns.block > ss->block) return nullptr;
    return ss;
  }

  void release(Slot& s) {
    arena_.free(s.offset, s.block);
    s.owns = false;
  }

  // 5. Node i: place it (in place if allowed), then free every root whose last use this was.
  void step(int i) {
    Tensor* n = g_.node((size_t)i);
    Slot* ns = slot(n);
    if (ns && !ns->pinned) {
      if (Slot* from = inplace_source(n, *ns, i)) {
        from->owns = false;  // n takes over the block; its size stays the source's block
        ns->block = from->block;
        place(*ns, from->offset);
      } else {
        place(*ns, arena_.alloc(ns->block));
      }
    }
    if (debug_ > 0 && arena_.high_water() > peak_) note_peak(i);
    for (Tensor* s : n->src)
      if (s)
        if (Slot* r = slot(root_of(s)); r && r->owns && !r->protect && r->last_use == i) release(*r);
    if (Slot* r = slot(root_of(n)); r && r->owns && !r->protect && r->last_use == i) release(*r);
  }

  // LOOM_ALLOC_DEBUG=1 prints (stderr) the tensors live when the high-water mark was last
  // raised (after placing that node, before freeing its dead sources); =2 also every placement.
  void note_peak(int i) {
    peak_ = arena_.high_water();
    peak_node_ = i;
    peak_live_.clear();
    for (const Slot& s : slots_)
      if (s.owns) peak_live_.push_back(&s - slots_.data());
  }
  void print_peak() const {
    fmt::print(stderr, "[alloc] {} nodes, peak {} bytes ({:.2f} MiB) at node {} '{}'; live:\n", g_.n_nodes(), peak_,
               peak_ / 1048576.0, peak_node_, peak_node_ >= 0 ? g_.node((size_t)peak_node_)->name : "");
    for (size_t k : peak_live_) {
      const Slot& s = slots_[k];
      fmt::print(stderr, "  {:>10} @ {:>10}  {} {} '{}'{}\n", s.block, s.offset, op_name(s.tensor->op),
                 describe(*s.tensor), s.tensor->name, s.pinned ? " (pinned)" : s.protect ? " (protected)" : "");
    }
    if (debug_ >= 2)
      for (const Placement& p : plan_.placements)
        fmt::print(stderr, "  placed {:>10} @ {:>10}  {} '{}'\n", p.size, p.offset, op_name(p.tensor->op),
                   p.tensor->name);
  }

  const int debug_ = [] {
    const char* v = std::getenv("LOOM_ALLOC_DEBUG");
    return v ? std::atoi(v) : 0;
  }();
  size_t peak_ = 0;
  int peak_node_ = -1;
  std::vector<size_t> peak_live_;
  const Graph& g_;
  const BufferType& bt_;
  const PlanOptions& opt_;
  std::vector<Slot> slots_;
  std::unordered_map<const Tensor*, int> index_;
  detail::FreeList arena_;
  MemoryPlan plan_;
};

}  // namespace

MemoryPlan plan_graph(const Graph& graph, const BufferType& bt, const PlanOptions& opt) {
  return Planner(graph, bt, opt).run();
}

Status apply_plan(const MemoryPlan& plan, Buffer& buf) {
  if (plan.total > buf.size())
    return Status::error(ErrorKind::out_of_memory, fmt::format("[apply_plan] plan needs {} bytes, buffer {} has {}",
                                                               plan.total, buf.type().name(), buf.size()));
  size_t bound = 0;
  auto unbind = [&] {
    for (size_t k = 0; k < bound; ++k) {
      plan.placements[k].tensor->data = nullptr;
      plan.placements[k].tensor->buffer = nullptr;
    }
  };
  for (const Placement& p : plan.placements) {
    Status st = buf.init_tensor(p.tensor, p.offset);
    if (!st) {
      unbind();
      return st;
    }
    ++bound;
  }
  for (Tensor* v : plan.views) {
    Tensor* root = v->view_src;
    if (!root->data) {
      unbind();
      for (Tensor* w : plan.views) w->data = nullptr, w->buffer = nullptr;
      return Status::error(ErrorKind::internal,
                           fmt::format("[apply_plan] view '{}' of '{}': its root has no memory (not in the plan)",
                                       v->name, root->name));
    }
    v->data = static_cast<char*>(root->data) + v->view_offs;
    v->buffer = root->buffer;
  }
  return Status::ok();
}

}  // namespace loom::alloc
