// The arena behind plan_graph: a growing range [0, end) whose free blocks are kept sorted by
// offset and merged when adjacent. Allocation is best fit (smallest block that fits, lowest
// offset on ties); when nothing fits the arena grows at its end (reusing a free tail block).
#pragma once

#include <cstddef>
#include <vector>

namespace loom::alloc::detail {

class FreeList {
 public:
  // Returns the offset of size bytes (size a multiple of the alignment the caller uses).
  size_t alloc(size_t size);
  // Returns [offset, offset + size) to the free blocks; it must not overlap a free block.
  void free(size_t offset, size_t size);
  // Largest end ever reached: the bytes a buffer needs for everything allocated so far.
  size_t high_water() const { return end_; }

 private:
  struct Block {
    size_t offset;
    size_t size;
  };
  std::vector<Block> free_;  // sorted by offset, never adjacent, all inside [0, end_)
  size_t end_ = 0;
};

}  // namespace loom::alloc::detail
