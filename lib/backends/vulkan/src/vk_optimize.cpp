// optimize_graph for Vulkan: barriers come from memory hazards between units (nodes or fused
// groups) recorded since the last barrier, so units that touch unrelated memory can share one.
// The greedy reorder builds one "epoch" (units between two barriers) at a time: walking the
// remaining units in order, a unit joins when it conflicts neither with a unit of the epoch nor
// with an earlier remaining unit it would overtake. Conflicts are memory overlaps (one side
// writes), so sources stay before their users and the allocator's reuse of memory stays safe.
#include <algorithm>
#include <functional>
#include <unordered_set>

#include "vk_ops.h"

namespace loom::vulkan {

namespace {

constexpr size_t kWindow = 64;  // how far ahead a unit may be pulled (keeps the pass linear)

// Computing units of a node list (views left out: they compute nothing and are placed next to
// their users afterwards), every known fusion group kept whole.
std::vector<Unit> all_units(const Graph& g, std::span<Tensor* const> nodes, std::vector<FusedGroup>& groups) {
  groups = find_fusions(g, nodes);
  return make_units(nullptr, nodes, groups);
}

int barriers_in_order(const std::vector<Unit>& units) {
  int barriers = 0;
  std::vector<const Unit*> since;
  for (const Unit& u : units) {
    bool hazard = false;
    for (const Unit* s : since) hazard = hazard || conflicts(*s, u);
    if (hazard) {
      ++barriers;
      since.clear();
    }
    since.push_back(&u);
  }
  return barriers;
}

}  // namespace

int count_barriers(const Graph& g, const std::vector<Tensor*>& nodes) {
  std::vector<FusedGroup> groups;
  return barriers_in_order(all_units(g, nodes, groups));
}

void optimize_order(const Graph& g, std::vector<Tensor*>& nodes) {
  std::vector<FusedGroup> groups;
  const std::vector<Unit> units = all_units(g, nodes, groups);
  std::vector<bool> done(units.size(), false);
  std::vector<size_t> order;
  order.reserve(units.size());
  size_t head = 0;
  while (head < units.size()) {
    std::vector<size_t> epoch, skipped;
    for (size_t i = head; i < units.size() && i < head + kWindow; ++i) {
      if (done[i]) continue;
      bool ok = true;
      for (size_t s : skipped) ok = ok && !conflicts(units[s], units[i]);
      for (size_t e : epoch) ok = ok && !conflicts(units[e], units[i]);
      (ok ? epoch : skipped).push_back(i);
    }
    for (size_t e : epoch) {
      done[e] = true;
      order.push_back(e);
    }
    while (head < units.size() && done[head]) ++head;
  }
  // Rebuild the list: each view right before the first unit that reads it (after its own source
  // views), views nobody in the split reads at the end, in their original order.
  std::unordered_set<const Tensor*> in_units;
  for (const Unit& u : units)
    for (size_t j = u.first; j <= u.last; ++j) in_units.insert(nodes[j]);
  std::unordered_set<const Tensor*> pending;
  for (Tensor* n : nodes)
    if (!in_units.count(n)) pending.insert(n);
  std::vector<Tensor*> out;
  out.reserve(nodes.size());
  std::function<void(Tensor*)> emit_view = [&](Tensor* v) {
    if (!pending.erase(v)) return;
    for (Tensor* s : v->src)
      if (s) emit_view(s);
    out.push_back(v);
  };
  for (size_t u : order)
    for (size_t j = units[u].first; j <= units[u].last; ++j) {
      for (Tensor* s : nodes[j]->src)
        if (s) emit_view(s);
      out.push_back(nodes[j]);
    }
  for (Tensor* n : nodes) emit_view(n);
  nodes = std::move(out);
}

}  // namespace loom::vulkan
