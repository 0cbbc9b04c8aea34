// A Graph is the ordered list of nodes (tensors with an op) needed to compute some outputs,
// in a topological order, plus the leaves they read. It never owns tensors (the Context does)
// and carries a uid from a global atomic counter so backends can cache per-graph work.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "loom/graph/tensor.h"

namespace loom {

// A fresh id, unique in this process.
uint64_t next_graph_uid();

class Graph {
 public:
  Graph() : uid_(next_graph_uid()) {}

  // Appends t and every tensor it depends on not yet in the graph (depth first, sources in order).
  void build_forward(Tensor* t);

  const std::vector<Tensor*>& nodes() const { return nodes_; }
  const std::vector<Tensor*>& leafs() const { return leafs_; }
  size_t n_nodes() const { return nodes_.size(); }
  Tensor* node(size_t i) const { return nodes_[i]; }
  bool contains(const Tensor* t) const { return index_.count(t) != 0; }

  // Number of nodes in this graph that read t as a source (computed on demand, cached).
  int use_count(const Tensor* t) const;
  uint64_t uid() const { return uid_; }
  // Call after editing nodes by hand: drops caches and takes a new uid.
  void invalidate();

 private:
  void visit(Tensor* t);
  std::vector<Tensor*> nodes_;
  std::vector<Tensor*> leafs_;
  std::unordered_map<const Tensor*, int> index_;
  mutable std::unordered_map<const Tensor*, int> use_counts_;
  mutable bool use_counts_valid_ = false;
  uint64_t uid_;
};

}  // namespace loom
