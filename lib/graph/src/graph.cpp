// Graph construction (iterative depth-first topological order) and per-graph use counts.
#include "loom/graph/graph.h"

#include <atomic>

namespace loom {

uint64_t next_graph_uid() {
  static std::atomic<uint64_t> counter{1};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

void Graph::build_forward(Tensor* t) {
  visit(t);
  use_counts_valid_ = false;
}

// Iterative DFS so deep graphs (hundreds of layers) cannot overflow the stack.
void Graph::visit(Tensor* root) {
  if (index_.count(root)) return;
  struct Frame {
    Tensor* t;
    int next_src;
  };
  std::vector<Frame> stack{{root, 0}};
  while (!stack.empty()) {
    Frame& f = stack.back();
    if (f.next_src < kMaxSrc) {
      Tensor* s = f.t->src[f.next_src++];
      if (s && !index_.count(s)) {
        index_[s] = -2;  // on the stack: marks it visited
        stack.push_back({s, 0});
      }
      continue;
    }
    Tensor* t = f.t;
    stack.pop_back();
    if (t->op == OpKind::NONE) {
      index_[t] = -1;
      leafs_.push_back(t);
    } else {
      index_[t] = (int)nodes_.size();
      nodes_.push_back(t);
    }
  }
}

int Graph::use_count(const Tensor* t) const {
  if (!use_counts_valid_) {
    use_counts_.clear();
    for (const Tensor* n : nodes_)
      for (const Tensor* s : n->src)
        if (s) ++use_counts_[s];
    use_counts_valid_ = true;
  }
  auto it = use_counts_.find(t);
  return it == use_counts_.end() ? 0 : it->second;
}

void Graph::invalidate() {
  use_counts_valid_ = false;
  uid_ = next_graph_uid();
}

}  // namespace loom
