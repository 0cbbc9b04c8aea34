// The op table of the Vulkan backend: which nodes (and fused groups) it runs, and each one as
// dispatches (pipeline, bindings, push constants, grid) with the memory it reads and writes.
#pragma once

#include <vector>

#include "vk_internal.h"

namespace loom::vulkan {

// A byte range [begin, end) in the process's address space of tensor data (device buffers have
// unique fake or mapped addresses), or of a tensor's identity when it has no memory yet.
struct Range {
  uintptr_t begin = 0, end = 0;
};
Range range_of(const Tensor* t);
inline bool overlaps(const Range& a, const Range& b) { return a.begin < b.end && b.begin < a.end; }

struct Dispatch {
  VkPipeline pipeline = VK_NULL_HANDLE;
  std::array<Binding, kBindings> bindings{};
  std::array<uint32_t, kPushBytes / 4> push{};
  uint32_t groups[3] = {1, 1, 1};
};

// One unit of work in a split: a node or a fused group, with what it touches.
struct Unit {
  size_t first = 0, last = 0;  // positions in the node list (last: the group's root)
  const Tensor* node = nullptr;      // the node (unfused)
  const FusedGroup* group = nullptr;  // or the group
  std::vector<Range> reads, writes;
};

// Units of `nodes` (views and leaves skipped), fusing the groups in `groups` that dev supports
// (every group when dev is null: optimize_graph keeps groups whole).
std::vector<Unit> make_units(const VulkanDevice* dev, std::span<Tensor* const> nodes,
                             const std::vector<FusedGroup>& groups);
// Whether b must stay after a (their memory conflicts: one writes what the other touches).
bool conflicts(const Unit& a, const Unit& b);
// The dispatches of a unit (throws Error(unsupported/internal) for what the device cannot bind).
void encode(VulkanDevice& dev, const Unit& u, std::vector<Dispatch>& out);

}  // namespace loom::vulkan
