// Weights: tensors packed in order into buffers of at most bt.max_size() bytes each (a tensor
// starts a new buffer when it would not fit in the current one), then bound; views last.
#include <unordered_set>

#include "alloc_common.h"
#include "loom/alloc/alloc.h"

namespace loom::alloc {

namespace {

struct Group {
  std::vector<Placement> placements;
  size_t size = 0;  // end of the last tensor
};

// Packs every tensor without data that is not a view (each once, in order).
std::vector<Group> pack(std::span<Tensor* const> tensors, const BufferType& bt) {
  std::vector<Group> groups;
  std::unordered_set<const Tensor*> seen;
  const size_t max_size = bt.max_size();
  for (Tensor* t : tensors) {
    if (t->is_view() || t->data || !seen.insert(t).second) continue;
    const size_t size = detail::checked_alloc_size(bt, t);
    size_t offset = groups.empty() ? 0 : detail::align_up(groups.back().size, bt.alignment());
    if (groups.empty() || (!groups.back().placements.empty() && (offset > max_size || size > max_size - offset))) {
      groups.emplace_back();
      offset = 0;
    }
    groups.back().placements.push_back({t, offset, size});
    groups.back().size = offset + size;
  }
  return groups;
}

}  // namespace

size_t tensors_size(std::span<Tensor* const> tensors, const BufferType& bt) {
  size_t total = 0;
  for (const Group& g : pack(tensors, bt)) total += g.size;
  return total;
}

Status alloc_tensors(std::span<Tensor* const> tensors, const BufferType& bt,
                     std::vector<std::unique_ptr<Buffer>>& out) {
  std::vector<Group> groups;
  try {
    groups = pack(tensors, bt);
  } catch (const Error& e) {
    return Status::error(e.kind(), e.what());
  }
  std::unordered_set<const Tensor*> placed;
  for (const Group& g : groups) {
    for (const Placement& p : g.placements) placed.insert(p.tensor);
    if (g.size > bt.max_size()) {
      const Tensor* t = g.placements.front().tensor;
      return Status::error(ErrorKind::out_of_memory,
                           fmt::format("[alloc_tensors] tensor '{}' ({}) needs {} bytes, more than the largest {} "
                                       "buffer ({} bytes)",
                                       t->name, describe(*t), g.size, bt.name(), bt.max_size()));
    }
  }
  for (Tensor* t : tensors)
    if (t->is_view() && !t->data && !t->view_src->data && !placed.count(t->view_src))
      return Status::error(ErrorKind::internal,
                           fmt::format("[alloc_tensors] view '{}' of '{}': its root is neither allocated nor listed",
                                       t->name, t->view_src->name));

  std::vector<std::unique_ptr<Buffer>> buffers(groups.size());
  for (size_t i = 0; i < groups.size(); ++i)
    if (Status st = bt.alloc(groups[i].size, buffers[i]); !st) return st;

  std::vector<Tensor*> bound;
  auto unbind = [&] {
    for (Tensor* t : bound) t->data = nullptr, t->buffer = nullptr;
  };
  for (size_t i = 0; i < groups.size(); ++i)
    for (const Placement& p : groups[i].placements) {
      if (Status st = buffers[i]->init_tensor(p.tensor, p.offset); !st) {
        unbind();
        return st;
      }
      bound.push_back(p.tensor);
    }
  for (Tensor* t : tensors)
    if (t->is_view() && !t->data) {
      t->data = static_cast<char*>(t->view_src->data) + t->view_offs;
      t->buffer = t->view_src->buffer;
    }
  for (auto& b : buffers) out.push_back(std::move(b));
  return Status::ok();
}

}  // namespace loom::alloc
