// Best-fit free list with merging of adjacent blocks (see free_list.h).
#include "free_list.h"

#include <algorithm>

#include "loom/core/error.h"

namespace loom::alloc::detail {

size_t FreeList::alloc(size_t size) {
  size_t best = free_.size();
  for (size_t i = 0; i < free_.size(); ++i)
    if (free_[i].size >= size && (best == free_.size() || free_[i].size < free_[best].size)) best = i;
  if (best != free_.size()) {
    Block& b = free_[best];
    const size_t offset = b.offset;
    b.offset += size;
    b.size -= size;
    if (b.size == 0) free_.erase(free_.begin() + (std::ptrdiff_t)best);
    return offset;
  }
  // Nothing fits: grow the arena, starting inside a free block that touches its end.
  if (!free_.empty() && free_.back().offset + free_.back().size == end_) {
    const size_t offset = free_.back().offset;
    free_.pop_back();
    end_ = offset + size;
    return offset;
  }
  const size_t offset = end_;
  end_ += size;
  return offset;
}

void FreeList::free(size_t offset, size_t size) {
  if (size == 0) return;
  LOOM_ASSERT(offset + size <= end_, "free of [{}, {}) beyond the arena end {}", offset, offset + size, end_);
  auto next = std::lower_bound(free_.begin(), free_.end(), offset,
                               [](const Block& b, size_t off) { return b.offset < off; });
  LOOM_ASSERT(next == free_.end() || offset + size <= next->offset, "double free at offset {}", offset);
  if (next != free_.begin()) {
    auto prev = next - 1;
    LOOM_ASSERT(prev->offset + prev->size <= offset, "double free at offset {}", offset);
    if (prev->offset + prev->size == offset) {  // merge into the previous block (and maybe the next)
      prev->size += size;
      if (next != free_.end() && prev->offset + prev->size == next->offset) {
        prev->size += next->size;
        free_.erase(next);
      }
      return;
    }
  }
  if (next != free_.end() && offset + size == next->offset) {
    next->offset = offset;
    next->size += size;
    return;
  }
  free_.insert(next, Block{offset, size});
}

}  // namespace loom::alloc::detail
