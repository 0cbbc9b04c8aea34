// The Vulkan backend: devices Vulkan0.. from the loader (every physical device with a compute
// queue, in the loader's order; LOOM_VULKAN_DEVICES="0,2" keeps only those indices), each with
// device-local buffers, a pinned host buffer type, one queue as its stream, and compute shaders
// compiled from lib/backends/vulkan/shaders at build time. Software implementations (Mesa's
// lavapipe) are listed and run when named (-dev Vulkan0), never chosen by default.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/backend/device.h"

namespace loom::vulkan {

// The devices the loader reports; `note` says why there are none (no loader, no device, a
// bad LOOM_VULKAN_DEVICES). Never throws for a missing driver: a machine without Vulkan simply
// has no Vulkan devices. Throws Error(usage) for a malformed LOOM_VULKAN_DEVICES.
std::vector<std::unique_ptr<Device>> make_devices(std::string& note);

// Counters of one device's streams since start (for tests and loom-run --json).
struct StreamStats {
  uint64_t submits = 0;         // command buffers submitted
  uint64_t recordings = 0;      // command buffers recorded
  uint64_t reuse_hits = 0;      // submissions of a command buffer recorded for an earlier call
  uint64_t barriers = 0;        // barriers recorded
  uint64_t host_waits = 0;      // waits of the host for the queue
  uint64_t async_copies = 0;    // copies queued without a host wait (device <-> pinned host memory)
};
// The stats of a Vulkan device (false if d is not one).
bool stream_stats(const Device& d, StreamStats& out);

// Barriers one split's node list needs as ordered (nodes: computing nodes of one device split,
// views allowed); used by loom-split-inspect to report optimize_graph's effect.
int count_barriers(const Graph& g, const std::vector<Tensor*>& nodes);
// The Vulkan stream's reordering (greedy: ready independent nodes first, fusion groups kept whole).
void optimize_order(const Graph& g, std::vector<Tensor*>& nodes);

}  // namespace loom::vulkan

namespace loom::vulkan {
// True for a Vulkan device that is a software implementation (VK_PHYSICAL_DEVICE_TYPE_CPU).
bool is_software(const Device& d);
}  // namespace loom::vulkan

namespace loom::vulkan {
// "llvmpipe (LLVM 15.0.6, 256 bits) (cpu), software, maxStorageBufferRange 128 MiB" for a Vulkan device; "" otherwise.
std::string describe(const Device& d);
}  // namespace loom::vulkan
