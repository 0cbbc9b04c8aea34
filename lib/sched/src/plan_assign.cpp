// Device assignment, in numbered passes (each pass only fills nodes still unassigned):
//  1 pinned    a node whose memory already exists (KV-cache view, set_rows into a cache) or a
//              policy pin runs on that memory's device;
//  2 weights   a node reading a weight runs where its largest weight source lives (or, weights in
//              host memory, on a device whose offload_op asks for it);
//  3 expand    unassigned nodes take the device of the previous assigned node (down), then of the
//              next one (up): first for non-host devices only, then for all; leftovers go to the
//              first device that supports them;
//  4 support   a node whose device cannot run it (a weight's device, a pin) moves to the next
//              device in order that can; a pinned node only to one that can write its memory;
//  5 views     views, and ops writing into a view, go with their source's device.
// Views that only alias memory (no compute) take part in no pass but the last.
#include <algorithm>

#include "plan_internal.h"

namespace loom::sched::detail {

namespace {

int device_index(std::span<Device* const> devices, const Device* d) {
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i] == d) return (int)i;
  return -1;
}

int device_of_buffer_type(const BufferType& bt, const Tensor* t, std::span<Device* const> devices, int host) {
  if (const int i = device_index(devices, &bt.device()); i >= 0) return i;
  if (bt.is_host() && host >= 0) return host;
  fail(ErrorKind::usage, "[plan] tensor '{}' lives in {} memory, which none of the planned devices owns", t->name,
       bt.name());
}

class Assigner {
 public:
  Assigner(const Graph& g, std::span<Device* const> devices, const PlanPolicy& policy)
      : g_(g), devices_(devices), policy_(policy) {}

  Assignment run() {
    const size_t n = g_.n_nodes();
    a_.device.assign(n, -1);
    a_.cause.assign(n, Cause::fallback);
    for (size_t i = 0; i < devices_.size(); ++i)
      if (devices_[i]->buffer_type().is_host()) a_.host = (int)i;
    for (size_t i = 0; i < n; ++i) a_.node_index.emplace(g_.node(i), (int)i);
    classify_leafs();
    pass1_pinned();
    pass2_weights();
    pass3_expand();
    pass4_support();
    pass5_views();
    return std::move(a_);
  }

 private:
  Tensor* node(size_t i) const { return g_.node(i); }
  bool supports(int d, const Tensor* t) const { return devices_[(size_t)d]->supports_op(t); }
  void set(size_t i, int d, Cause c) {
    a_.device[i] = d;
    a_.cause[i] = c;
  }
  // Nodes that take part in passes 2-4: everything but views (pinned views do take part).
  bool computes(size_t i) const { return !node(i)->is_view(); }
  bool takes_part(size_t i) const { return computes(i) || (a_.cause[i] == Cause::pinned && a_.device[i] >= 0); }

  void classify_leafs() {
    for (Tensor* t : g_.leafs()) {
      const int d = fixed_device(root_of(t), devices_, policy_, a_.host);
      if (d >= 0) {
        a_.leafs.emplace(t, LeafInfo{d, false});
        continue;
      }
      LOOM_CHECK(!t->view_src, unsupported, "[plan] leaf view '{}' of '{}' has no memory", t->name, t->view_src->name);
      LOOM_CHECK(a_.host >= 0, usage,
                 "[plan] graph input '{}' has no memory and no host device (CPU) is planned to hold it", t->name);
      a_.leafs.emplace(t, LeafInfo{a_.host, true});
    }
  }

  // The device of a leaf root (roots reached only through a view's view_src included).
  int leaf_device(const Tensor* r) const {
    if (auto it = a_.leafs.find(r); it != a_.leafs.end()) return it->second.device;
    const int d = fixed_device(r, devices_, policy_, a_.host);
    return d >= 0 ? d : a_.host;
  }

  // 1. Pinned: policy pins, then nodes whose root already has memory.
  void pass1_pinned() {
    for (size_t i = 0; i < g_.n_nodes(); ++i) {
      Tensor* t = node(i);
      if (auto it = policy_.pins.find(t); it != policy_.pins.end()) {
        const int d = device_index(devices_, it->second);
        LOOM_CHECK(d >= 0, usage, "[plan] node '{}' is pinned to a device that is not planned", t->name);
        set(i, d, Cause::pinned);
        continue;
      }
      const int d = fixed_device(root_of(t), devices_, policy_, a_.host);
      if (d >= 0) set(i, d, Cause::pinned);
    }
  }

  // 2. Weights: the device of the largest source whose root has memory.
  void pass2_weights() {
    for (size_t i = 0; i < g_.n_nodes(); ++i) {
      if (a_.device[i] >= 0 || !computes(i)) continue;
      Tensor* t = node(i);
      int w = -1;
      size_t best = 0;
      for (const Tensor* s : t->src) {
        if (!s) continue;
        const int d = fixed_device(root_of(s), devices_, policy_, a_.host);
        if (d >= 0 && (w < 0 || s->nbytes() > best)) w = d, best = s->nbytes();
      }
      if (w < 0) continue;
      if (policy_.offload && w == a_.host)
        for (size_t d = 0; d < devices_.size(); ++d)
          if ((int)d != a_.host && devices_[d]->offload_op(t) && supports((int)d, t)) {
            set(i, (int)d, Cause::offload);
            break;
          }
      if (a_.device[i] < 0) set(i, w, Cause::weight);  // pass 4 moves it on if w cannot run it
    }
  }

  // 3. Expansion from assigned neighbours (ggml's order: non-host devices first).
  void expand(bool down, bool host_too) {
    const long n = (long)g_.n_nodes();
    int cur = -1;
    for (long k = 0; k < n; ++k) {
      const size_t i = (size_t)(down ? k : n - 1 - k);
      if (!takes_part(i)) continue;
      if (a_.device[i] >= 0) {
        cur = (!host_too && a_.device[i] == a_.host) ? -1 : a_.device[i];
      } else if (cur >= 0 && supports(cur, node(i))) {
        set(i, cur, down ? Cause::neighbour_down : Cause::neighbour_up);
      }
    }
  }

  void pass3_expand() {
    expand(true, false);
    expand(false, false);
    expand(true, true);
    expand(false, true);
    for (size_t i = 0; i < g_.n_nodes(); ++i)
      if (a_.device[i] < 0 && computes(i)) set(i, first_supporting(node(i), 0, -1), Cause::fallback);
  }

  // The first device at or after `start` (wrapping) that runs t and, if need_bt, reads that memory.
  int first_supporting(const Tensor* t, size_t start, int skip, const BufferType* need_bt = nullptr) const {
    for (size_t k = 0; k < devices_.size(); ++k) {
      const size_t d = (start + k) % devices_.size();
      if ((int)d == skip || !supports((int)d, t)) continue;
      if (need_bt && !devices_[d]->supports_buffer_type(*need_bt)) continue;
      return (int)d;
    }
    fail(ErrorKind::unsupported, "[plan] no device can run {} '{}' ({}){}", op_name(t->op), t->name, describe(*t),
         need_bt ? fmt::format(" writing into {} memory", need_bt->name()) : std::string());
  }

  // 4. Op support: move to the next device in order that runs the op.
  void pass4_support() {
    for (size_t i = 0; i < g_.n_nodes(); ++i) {
      Tensor* t = node(i);
      if (!computes(i) && !(t->is_view() && !is_pure_view(t) && a_.device[i] >= 0)) continue;
      const int d = a_.device[i];
      if (d < 0 || supports(d, t)) continue;
      if (a_.cause[i] == Cause::pinned) {
        LOOM_CHECK(!policy_.pins.count(t), unsupported, "[plan] node '{}' ({}) is pinned to {}, which cannot run it",
                   t->name, op_name(t->op), devices_[(size_t)d]->name());
        // Its memory is fixed: only a device that can write there may take it over.
        const Tensor* r = root_of(t);
        const BufferType& bt = r->buffer ? r->buffer->type() : devices_[(size_t)d]->buffer_type();
        set(i, first_supporting(t, (size_t)d + 1, d, &bt), Cause::fallback);
      } else {
        set(i, first_supporting(t, (size_t)d + 1, d), Cause::fallback);
      }
    }
  }

  // 5. Views (and CPY/SET_ROWS into views) go with their root's device.
  void pass5_views() {
    for (size_t i = 0; i < g_.n_nodes(); ++i) {
      Tensor* t = node(i);
      if (!t->is_view() || (a_.cause[i] == Cause::pinned && a_.device[i] >= 0)) continue;
      const Tensor* r = t->view_src;
      const int d = a_.is_node(r) ? a_.device_of_node(r) : leaf_device(r);
      LOOM_ASSERT(d >= 0, "view root '{}' of '{}' has no device", r->name, t->name);
      LOOM_CHECK(is_pure_view(t) || supports(d, t), unsupported,
                 "[plan] {} '{}' writes into '{}' on {}, which cannot run it", op_name(t->op), t->name, r->name,
                 devices_[(size_t)d]->name());
      set(i, d, Cause::view);
    }
  }

  const Graph& g_;
  std::span<Device* const> devices_;
  const PlanPolicy& policy_;
  Assignment a_;
};

}  // namespace

int fixed_device(const Tensor* r, std::span<Device* const> devices, const PlanPolicy& policy, int host) {
  if (has_fixed_memory(r)) {
    if (r->buffer) return device_of_buffer_type(r->buffer->type(), r, devices, host);
    LOOM_CHECK(host >= 0, usage, "[plan] tensor '{}' is in host memory but no host device (CPU) is planned", r->name);
    return host;
  }
  if (auto it = policy.leaf_devices.find(r); it != policy.leaf_devices.end()) {
    const int d = device_index(devices, it->second);
    LOOM_CHECK(d >= 0, usage, "[plan] leaf '{}' is placed on a device that is not planned", r->name);
    return d;
  }
  return -1;
}

bool can_read_fixed(const Tensor* r, int d, std::span<Device* const> devices, const PlanPolicy& policy, int host) {
  const Device& dev = *devices[(size_t)d];
  if (has_fixed_memory(r)) {
    if (r->buffer) return dev.supports_buffer_type(r->buffer->type());
    return host >= 0 && dev.supports_buffer_type(devices[(size_t)host]->buffer_type());
  }
  const int ld = fixed_device(r, devices, policy, host);
  return ld >= 0 && dev.supports_buffer_type(devices[(size_t)ld]->buffer_type());
}

Assignment assign_devices(const Graph& g, std::span<Device* const> devices, const PlanPolicy& policy) {
  return Assigner(g, devices, policy).run();
}

}  // namespace loom::sched::detail
