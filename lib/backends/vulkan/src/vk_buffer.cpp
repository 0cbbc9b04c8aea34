// Vulkan buffers: one VkBuffer per Buffer over its own allocation. Mapped memory (the pinned host
// type, and device-local memory the host can see on UMA devices like lavapipe) is read and written
// with memcpy; other memory through a host-visible staging buffer and a transfer on the queue.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>

#include "vk_internal.h"
#include "vk_ops.h"

namespace loom::vulkan {

namespace {
std::atomic<uintptr_t> g_next_fake{(uintptr_t)1 << 46};  // bases of unmapped buffers: never dereferenced
}

VulkanBufferType::VulkanBufferType(VulkanDevice& dev, bool host)
    : dev_(dev), host_(host), name_(dev.name() + (host ? "_Host" : "")) {}

size_t VulkanBufferType::alignment() const {
  return std::max<size_t>(64, (size_t)dev_.limits().minStorageBufferOffsetAlignment);
}

size_t VulkanBufferType::max_size() const { return dev_.max_allocation(); }

Device& VulkanBufferType::device() const { return dev_; }

size_t VulkanBufferType::alloc_size(const Tensor* t) const {
  if (host_) return t->nbytes();  // the CPU computes in pinned memory with its own sizes
  const ActScratch s = act_scratch(t);
  return s.used() ? s.end() : t->nbytes();
}

Status VulkanBufferType::alloc(size_t size, std::unique_ptr<Buffer>& out) const {
  Allocation a;
  if (Status st = dev_.allocate(size, host_, a); !st) return st;
  void* base = a.mapped;
  if (!base) base = reinterpret_cast<void*>(g_next_fake.fetch_add((a.size + (1u << 20)) & ~(size_t)0xFFFFF));
  out = std::make_unique<VulkanBuffer>(*this, dev_, a, base);
  return Status::ok();
}

VulkanBuffer::VulkanBuffer(const VulkanBufferType& type, VulkanDevice& dev, Allocation a, void* base)
    : Buffer(type, base, a.size), dev_(dev), alloc_(a) {}

VulkanBuffer::~VulkanBuffer() { dev_.release(alloc_); }

void VulkanBuffer::set(Tensor* t, const void* src, size_t offset, size_t n) {
  const size_t at = (size_t)(static_cast<char*>(t->data) - static_cast<char*>(base_)) + offset;
  LOOM_ASSERT(at + n <= size_, "{}: write past the buffer", dev_.name());
  if (n == 0) return;
  if (alloc_.mapped) {
    std::memcpy(static_cast<char*>(alloc_.mapped) + at, src, n);
    return;
  }
  Allocation staging;
  dev_.allocate(n, true, staging).throw_if_error();
  std::memcpy(staging.mapped, src, n);
  dev_.run_now([&](VkCommandBuffer cb) {
    VkBufferCopy c{0, at, n};
    vkCmdCopyBuffer(cb, staging.buffer, alloc_.buffer, 1, &c);
  });
  dev_.release(staging);
}

void VulkanBuffer::get(const Tensor* t, void* dst, size_t offset, size_t n) const {
  const size_t at = (size_t)(static_cast<const char*>(t->data) - static_cast<const char*>(base_)) + offset;
  LOOM_ASSERT(at + n <= size_, "{}: read past the buffer", dev_.name());
  if (n == 0) return;
  if (alloc_.mapped) {
    std::memcpy(dst, static_cast<const char*>(alloc_.mapped) + at, n);
    return;
  }
  Allocation staging;
  dev_.allocate(n, true, staging).throw_if_error();
  dev_.run_now([&](VkCommandBuffer cb) {
    VkBufferCopy c{at, 0, n};
    vkCmdCopyBuffer(cb, alloc_.buffer, staging.buffer, 1, &c);
  });
  std::memcpy(dst, staging.mapped, n);
  dev_.release(staging);
}

void VulkanBuffer::clear(uint8_t value) {
  if (alloc_.mapped) {
    std::memset(alloc_.mapped, value, size_);
    return;
  }
  const uint32_t word = value * 0x01010101u;
  dev_.run_now([&](VkCommandBuffer cb) { vkCmdFillBuffer(cb, alloc_.buffer, 0, VK_WHOLE_SIZE, word); });
}

}  // namespace loom::vulkan
