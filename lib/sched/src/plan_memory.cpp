// Memory and sync. Each device's graph gets a memory plan from the graph allocator (offsets
// only). Every job (an input copy or a split) then has the memory ranges it reads and writes:
// compute buffers by device and offset, fixed memory (weights, caches, caller buffers) by
// address. A job waits for the latest earlier job on each other stream that wrote what it
// reads, or read or wrote what it writes; vector clocks drop waits already implied. This
// catches a split with no inputs that reuses memory a copy on another stream still reads.
#include <algorithm>

#include "plan_internal.h"

namespace loom::sched::detail {

namespace {

struct Range {
  int64_t space;  // >= 0: compute buffer of that device; -1: addresses; < -1: a leaf without memory
  uint64_t lo, hi;
  bool operator<(const Range& o) const { return space != o.space ? space < o.space : lo < o.lo; }
};

using Ranges = std::vector<Range>;

void normalize(Ranges& r) {
  std::sort(r.begin(), r.end());
  Ranges out;
  for (const Range& x : r) {
    if (!out.empty() && out.back().space == x.space && x.lo <= out.back().hi)
      out.back().hi = std::max(out.back().hi, x.hi);
    else
      out.push_back(x);
  }
  r = std::move(out);
}

bool overlaps(const Ranges& a, const Ranges& b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const Range &x = a[i], &y = b[j];
    if (x.space != y.space) {
      (x.space < y.space ? i : j)++;
    } else if (x.hi <= y.lo) {
      ++i;
    } else if (y.hi <= x.lo) {
      ++j;
    } else {
      return true;
    }
  }
  return false;
}

class MemoryPass {
 public:
  MemoryPass(const PlanPolicy& policy, ExecutionPlan& p) : policy_(policy), p_(p) {}

  void run() {
    plan_devices();
    make_jobs();
    derive_syncs();
  }

 private:
  void plan_devices() {
    alloc::PlanOptions opt;
    opt.allow_inplace = policy_.allow_inplace;
    for (size_t d = 0; d < p_.devices.size(); ++d) {
      DevicePlan& dp = p_.device_plans[d];
      if (dp.graph.n_nodes() == 0 && dp.graph.leafs().empty()) continue;
      dp.memory = alloc::plan_graph(dp.graph, p_.devices[d]->buffer_type(), opt);
      for (const alloc::Placement& pl : dp.memory.placements)
        where_.emplace(pl.tensor, std::make_pair((int)d, pl.offset));
    }
  }

  void add(Ranges& out, const Tensor* t) {
    const size_t n = t->nbytes();
    if (n == 0) return;
    const Tensor* r = root_of(t);
    const uint64_t offs = offset_in_root(t);
    if (auto it = where_.find(r); it != where_.end()) {
      out.push_back({it->second.first, it->second.second + offs, it->second.second + offs + n});
    } else if (r->data) {
      const auto base = (uint64_t)(uintptr_t)r->data;
      out.push_back({-1, base + offs, base + offs + n});
    } else {
      auto [it, fresh] = unplaced_.emplace(r, -2 - (int64_t)unplaced_.size());
      out.push_back({it->second, offs, offs + n});
    }
  }

  void make_jobs() {
    for (const Split& s : p_.splits) {
      for (int c : s.inputs) {
        const CopyPlan& cp = p_.copies[(size_t)c];
        p_.jobs.push_back({JobKind::copy, c, cp.to, {}, false});
        Ranges r, w;
        add(r, cp.source);
        add(w, cp.ring[0]);
        push_access(std::move(r), std::move(w));
      }
      p_.jobs.push_back({JobKind::compute, s.id, s.device, {}, false});
      Ranges r, w;
      for (const Tensor* m : s.nodes[0]) {
        add(w, m);
        for (const Tensor* src : m->src)
          if (src) add(r, src);
      }
      push_access(std::move(r), std::move(w));
    }
  }

  void push_access(Ranges r, Ranges w) {
    normalize(r);
    normalize(w);
    reads_.push_back(std::move(r));
    writes_.push_back(std::move(w));
  }

  // Earlier job i must finish before job j starts.
  bool conflict(size_t i, size_t j) const {
    return overlaps(writes_[j], reads_[i]) || overlaps(writes_[j], writes_[i]) || overlaps(reads_[j], writes_[i]);
  }

  void derive_syncs() {
    const size_t n_streams = p_.devices.size();
    std::vector<std::vector<int>> clock(p_.jobs.size());
    std::vector<int> last(n_streams, -1);
    std::vector<std::vector<int>> on_stream(n_streams);
    for (size_t j = 0; j < p_.jobs.size(); ++j) {
      Job& job = p_.jobs[j];
      const size_t s = (size_t)job.device;
      std::vector<int> vc = last[s] >= 0 ? clock[(size_t)last[s]] : std::vector<int>(n_streams, -1);
      for (size_t t = 0; t < n_streams; ++t) {
        if (t == s) continue;
        for (auto it = on_stream[t].rbegin(); it != on_stream[t].rend() && *it > vc[t]; ++it) {
          if (!conflict((size_t)*it, j)) continue;
          job.waits.push_back(*it);
          p_.jobs[(size_t)*it].signals = true;
          const std::vector<int>& other = clock[(size_t)*it];
          for (size_t u = 0; u < n_streams; ++u) vc[u] = std::max(vc[u], other[u]);
          break;
        }
      }
      std::sort(job.waits.begin(), job.waits.end());
      vc[s] = (int)j;
      clock[j] = std::move(vc);
      last[s] = (int)j;
      on_stream[s].push_back((int)j);
    }
  }

  const PlanPolicy& policy_;
  ExecutionPlan& p_;
  std::unordered_map<const Tensor*, std::pair<int, size_t>> where_;
  std::unordered_map<const Tensor*, int64_t> unplaced_;
  std::vector<Ranges> reads_, writes_;
};

}  // namespace

void plan_memory_and_sync(const Assignment& a, const PlanPolicy& policy, ExecutionPlan& p) {
  (void)a;
  MemoryPass(policy, p).run();
}

}  // namespace loom::sched::detail
