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
  bool barrier_before = false;  // reads what the unit's previous dispatch wrote
  std::array<Binding, kBindings> bindings{};
  std::array<uint32_t, kPushBytes / 4> push{};
  uint32_t groups[3] = {1, 1, 1};
};

// MUL_MAT / MUL_MAT_ID whose activations are rounded as the CPU's kernels round them
// (loom::cpu::matmul_activations; act_quant.comp writes them, the mat-mul reads them instead of
// b). The rounded columns live after the result's bytes, which the buffer type's alloc_size
// declares (MUL_MAT and MUL_MAT_ID may expand). Codes: 0 f32, 1 bf16, 32 / 256 int8 blocks.
struct ActScratch {
  uint32_t first = 0, second = 0;  // rounding of every column, or (mix_from > 0) of the experts below mix_from columns / from there
  uint32_t mix_from = 0;
  size_t offset = 0;      // from the result's start
  size_t form_bytes = 0;  // one rounding of every column (0: b is read as it is)
  bool used() const { return form_bytes > 0; }
  size_t end() const { return offset + form_bytes * (mix_from ? 2 : 1); }
};
ActScratch act_scratch(const Tensor* n);
// act_scratch of a node placed in memory that has it: device-local memory (the pinned host type
// keeps natural sizes, since the CPU computes in it with its own plan). A node elsewhere (a
// result pinned to host memory) reads its activations unrounded.
ActScratch placed_act_scratch(const Tensor* n);

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
