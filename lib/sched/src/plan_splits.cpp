// Splits, mirrors and input copies. A split is a maximal run of computing nodes on one device
// (views in between compute nothing and ride along). For each computing node the plan creates
// a mirror: the same op with each source replaced by the tensor that is local to the node's
// device: its mirror there, a view of a local root, or an input copy. Copies are made once
// per device and reused by later splits until their source is written again. Each device
// gets a Graph of its mirrors in execution order, in which every copy source stays alive
// until the copy runs (a view of it is placed at that point), for the graph allocator.
#include <algorithm>
#include <map>
#include <unordered_set>

#include "plan_internal.h"

namespace loom::sched::detail {

namespace {

class Builder {
 public:
  Builder(const Graph& g, const Assignment& a, const PlanPolicy& policy, ExecutionPlan& p)
      : g_(g), a_(a), policy_(policy), p_(p), devices_(p.devices) {}

  void run() {
    find_output_roots();
    make_splits();
    for (Tensor* t : g_.leafs())
      if (leaf_info(t).host_input && !t->view_src) host_mirror(t);
    for (size_t k = 0; k < p_.splits.size(); ++k) build_split((int)k);
    make_ring_clones();
  }

 private:
  Context& ctx() { return *p_.ctx; }
  Graph& graph(int d) { return p_.device_plans[(size_t)d].graph; }

  LeafInfo leaf_info(const Tensor* r) const {
    if (auto it = a_.leafs.find(r); it != a_.leafs.end()) return it->second;
    const int d = fixed_device(r, devices_, policy_, a_.host);
    return d >= 0 ? LeafInfo{d, false} : LeafInfo{a_.host, true};
  }
  int home(const Tensor* r) const { return a_.is_node(r) ? a_.device_of_node(r) : leaf_info(r).device; }
  bool reads_host(int d) const {
    return a_.host >= 0 && devices_[(size_t)d]->supports_buffer_type(devices_[(size_t)a_.host]->buffer_type());
  }

  // A plan tensor with t's type, shape, strides, op, parameters, flags and name (no sources).
  Tensor* clone_meta(const Tensor* t) {
    Tensor* m = ctx().new_tensor(t->type, kMaxDims, t->ne, t->name);
    for (int i = 0; i < kMaxDims; ++i) m->nb[i] = t->nb[i];
    m->op = t->op;
    std::copy(std::begin(t->op_params), std::end(t->op_params), m->op_params);
    m->flags = t->flags;
    return m;
  }

  // A VIEW of root with like's type, shape and strides at byte offset offs.
  Tensor* make_view(Tensor* root, const Tensor& like, size_t offs, std::string name) {
    LOOM_ASSERT(offs + like.nbytes() <= root->nbytes(), "view '{}' past its root '{}'", name, root->name);
    Tensor* v = clone_meta(&like);
    v->name = std::move(name);
    v->op = OpKind::VIEW;
    v->flags = 0;
    v->src[0] = root;
    v->view_src = root;
    v->view_offs = offs;
    return v;
  }

  // Roots of output views must survive the whole graph, like outputs.
  void find_output_roots() {
    for (Tensor* t : g_.nodes())
      if (t->view_src && t->has_flag(kFlagOutput)) output_roots_.insert(t->view_src);
  }

  // Splits: boundaries where the device of computing nodes changes.
  void make_splits() {
    const int n = (int)g_.n_nodes();
    for (int i = 0; i < n; ++i) {
      if (is_pure_view(g_.node((size_t)i))) continue;
      const int d = a_.device[(size_t)i];
      if (!p_.splits.empty() && p_.splits.back().device == d) continue;
      if (!p_.splits.empty()) p_.splits.back().n_nodes = i - p_.splits.back().first_node;
      Split s;
      s.id = (int)p_.splits.size();
      s.device = d;
      s.first_node = p_.splits.empty() ? 0 : i;
      s.n_nodes = 0;
      s.uid = split_uid(g_.uid(), s.id);
      p_.splits.push_back(std::move(s));
    }
    if (!p_.splits.empty()) p_.splits.back().n_nodes = n - p_.splits.back().first_node;
    for (const Split& s : p_.splits)
      for (int i = s.first_node; i < s.first_node + s.n_nodes; ++i) p_.nodes[(size_t)i].split = s.id;
  }

  static uint64_t split_uid(uint64_t graph_uid, int index) {  // splitmix64 of (uid, index)
    uint64_t x = graph_uid * 0x9E3779B97F4A7C15ull + (uint64_t)index + 1;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
  }

  // A graph input without memory: a plan leaf in the host device's graph, bound back later.
  Tensor* host_mirror(Tensor* leaf) {
    if (auto it = host_mirrors_.find(leaf); it != host_mirrors_.end()) return it->second;
    Tensor* m = clone_meta(leaf);
    host_mirrors_.emplace(leaf, m);
    graph(a_.host).build_forward(m);
    p_.binds.emplace_back(leaf, m);
    return m;
  }

  // A weight placed by PlanPolicy::leaf_devices has no memory. Its stand-in gets a fake address
  // (unique, never dereferenced) so the graph allocator skips it and memory ranges stay
  // distinct; the plan is then marked plan-only.
  Tensor* stand_in(Tensor* leaf) {
    if (auto it = stand_ins_.find(leaf); it != stand_ins_.end()) return it->second;
    Tensor* s = clone_meta(leaf);
    s->data = reinterpret_cast<void*>(next_fake_address_);
    next_fake_address_ += (leaf->nbytes() + 4096) / 4096 * 4096;
    stand_ins_.emplace(leaf, s);
    p_.plan_only = true;
    return s;
  }

  // The tensor on d holding root r's bytes (r readable on d).
  Tensor* local_root(Tensor* r, int d) {
    if (a_.is_node(r)) {
      LOOM_ASSERT(a_.device_of_node(r) == d, "root '{}' is not on device {}", r->name, d);
      return mirrors_.at(r);
    }
    if (leaf_info(r).host_input) return host_mirror(r);
    return has_fixed_memory(r) ? r : stand_in(r);
  }

  bool needs_copy(const Tensor* s, int d) const {
    const Tensor* r = root_of(s);
    if (a_.is_node(r)) return a_.device_of_node(r) != d;
    const LeafInfo li = leaf_info(r);
    if (li.host_input) return !reads_host(d);
    return !can_read_fixed(r, d, devices_, policy_, a_.host);
  }

  // What a node on device d, in split k, reads in place of source s.
  Tensor* local(Tensor* s, int d, int k) {
    if (a_.is_node(s) && !is_pure_view(s) && a_.device_of_node(s) == d) return mirrors_.at(s);
    if (needs_copy(s, d)) return copy_for(s, d, k);
    Tensor* r = root_of(s);
    if (s == r) return local_root(r, d);
    const auto key = std::make_pair(s, d);
    if (auto it = local_views_.find(key); it != local_views_.end()) return it->second;
    Tensor* v = make_view(local_root(r, d), *s, s->view_offs, s->name);
    local_views_.emplace(key, v);
    return v;
  }

  int last_write(const Tensor* r) const {
    auto it = write_seq_.find(r);
    return it == write_seq_.end() ? -1 : it->second;
  }

  // The local replacement of s on d through an input copy: the copy made earlier for d if its
  // source was not written since, otherwise a new copy issued before split k.
  Tensor* copy_for(Tensor* s, int d, int k) {
    Tensor* r = root_of(s);
    const auto key = std::make_pair(s, d);
    if (auto it = copy_memo_.find(key); it != copy_memo_.end()) {
      const int c = it->second;
      if (last_write(r) < p_.copies[(size_t)c].split) {
        std::vector<int>& reused = p_.splits[(size_t)k].reused;
        if (p_.copies[(size_t)c].split != k && std::find(reused.begin(), reused.end(), c) == reused.end())
          reused.push_back(c);
        return copy_locals_[(size_t)c];
      }
    }
    const int from = home(r);
    Tensor* src_root = a_.is_node(r) ? mirrors_.at(r) : local_root(r, from);
    const size_t bytes = s->nbytes();
    Tensor like;  // the bytes as a contiguous tensor: s itself, or a span of 2- or 4-byte units
    if (s->is_contiguous()) {
      like.type = s->type;
      std::copy(std::begin(s->ne), std::end(s->ne), like.ne);
    } else {
      LOOM_CHECK(bytes % 2 == 0, unsupported, "[plan] cannot copy the {} odd bytes spanned by view '{}'", bytes,
                 s->name);
      like.type = bytes % 4 == 0 ? DType::I32 : DType::F16;
      like.ne[0] = (int64_t)(bytes / dtype_info(like.type).type_size);
    }
    set_contiguous_strides(like);
    CopyPlan cp{s, from, d, k, bytes, make_view(src_root, like, offset_in_root(s), s->name + "-src"), {}};
    for (int c = 0; c < p_.n_copies; ++c) {
      Tensor* dst = ctx().new_tensor(like.type, kMaxDims, like.ne,
                                     fmt::format("{}#{}#{}", devices_[(size_t)d]->name(), s->name, c));
      dst->flags |= kFlagInput;
      cp.ring.push_back(dst);
      graph(d).build_forward(dst);
    }
    graph(from).build_forward(cp.source);  // keeps the source alive on `from` until here
    Tensor* stand_in = s->is_contiguous() ? cp.ring[0] : make_view(cp.ring[0], *s, 0, s->name);
    const int c = (int)p_.copies.size();
    p_.copies.push_back(std::move(cp));
    copy_locals_.push_back(stand_in);
    copy_memo_[key] = c;
    p_.splits[(size_t)k].inputs.push_back(c);
    return stand_in;
  }

  // The mirror of computing node t (on device d, split k).
  Tensor* mirror(Tensor* t, int d, int k) {
    Tensor* srcs[kMaxSrc] = {};
    for (int j = 0; j < kMaxSrc; ++j)
      if (t->src[j]) srcs[j] = local(t->src[j], d, k);
    Tensor* vroot = nullptr;
    if (t->view_src) {
      LOOM_CHECK(!needs_copy(t->view_src, d), unsupported,
                 "[plan] {} '{}' on {} writes into '{}', which it cannot access", op_name(t->op), t->name,
                 devices_[(size_t)d]->name(), t->view_src->name);
      vroot = local_root(t->view_src, d);
    }
    Tensor* m = clone_meta(t);
    std::copy(std::begin(srcs), std::end(srcs), m->src);
    m->view_src = vroot;
    m->view_offs = t->view_offs;
    if (!t->view_src && has_fixed_memory(t)) {
      m->data = t->data;
      m->buffer = t->buffer;
    }
    if (output_roots_.count(t)) m->flags |= kFlagOutput;
    mirrors_.emplace(t, m);
    if (!t->view_src) p_.binds.emplace_back(t, m);
    return m;
  }

  void build_split(int k) {
    Split& s = p_.splits[(size_t)k];
    std::vector<Tensor*> list;
    for (int i = s.first_node; i < s.first_node + s.n_nodes; ++i) {
      Tensor* t = g_.node((size_t)i);
      if (!is_pure_view(t)) list.push_back(mirror(t, s.device, k));
    }
    for (Tensor* m : list) graph(s.device).build_forward(m);
    for (int i = s.first_node; i < s.first_node + s.n_nodes; ++i)
      if (!is_pure_view(g_.node((size_t)i))) write_seq_[root_of(g_.node((size_t)i))] = k;
    p_.splits[(size_t)k].nodes = {std::move(list)};
  }

  // Pipeline copies 1..n-1: clones of every plan tensor that depends on an input copy, reading
  // that pipeline copy's ring entry instead. Same memory as copy 0 except the ring entries.
  void make_ring_clones() {
    const size_t n0 = ctx().size();
    for (int c = 1; c < p_.n_copies; ++c) {
      std::unordered_map<const Tensor*, Tensor*> map;
      for (const CopyPlan& cp : p_.copies) map.emplace(cp.ring[0], cp.ring[(size_t)c]);
      auto mapped = [&](Tensor* t) {
        auto it = t ? map.find(t) : map.end();
        return it == map.end() ? t : it->second;
      };
      for (size_t i = 0; i < n0; ++i) {
        Tensor* t = ctx().at(i);
        if (map.count(t)) continue;
        bool depends = mapped(t->view_src) != t->view_src;
        for (Tensor* s : t->src) depends = depends || mapped(s) != s;
        if (!depends) continue;
        Tensor* cl = clone_meta(t);
        for (int j = 0; j < kMaxSrc; ++j) cl->src[j] = mapped(t->src[j]);
        cl->view_src = mapped(t->view_src);
        cl->view_offs = t->view_offs;
        map.emplace(t, cl);
        p_.clones.emplace_back(t, cl);
      }
      for (Split& s : p_.splits) {
        std::vector<Tensor*> list;
        for (Tensor* m : s.nodes[0]) list.push_back(mapped(m));
        s.nodes.push_back(std::move(list));
      }
    }
  }

  const Graph& g_;
  const Assignment& a_;
  const PlanPolicy& policy_;
  ExecutionPlan& p_;
  const std::vector<Device*>& devices_;
  std::unordered_set<const Tensor*> output_roots_;
  std::unordered_map<const Tensor*, Tensor*> mirrors_;
  std::unordered_map<const Tensor*, Tensor*> host_mirrors_;
  std::unordered_map<const Tensor*, Tensor*> stand_ins_;
  uintptr_t next_fake_address_ = uintptr_t{1} << 44;
  std::map<std::pair<const Tensor*, int>, Tensor*> local_views_;
  std::map<std::pair<const Tensor*, int>, int> copy_memo_;
  std::vector<Tensor*> copy_locals_;
  std::unordered_map<const Tensor*, int> write_seq_;
};

}  // namespace

void build_splits(const Graph& g, const Assignment& a, const PlanPolicy& policy, ExecutionPlan& p) {
  Builder(g, a, policy, p).run();
}

}  // namespace loom::sched::detail
