// The Vulkan stream: one queue per device. compute() turns a split into units (nodes or fused
// groups), records their dispatches with a barrier only where a unit touches memory an earlier
// unit since the last barrier wrote (or writes what it read), and submits; the command buffer is
// kept and resubmitted while the split (graph uid, nodes, their memory) is unchanged. A timeline
// semaphore counts submissions: events are its values, synchronize() waits for the last one.
#include <fmt/format.h>

#include <algorithm>
#include <list>
#include <unordered_map>

#include "vk_ops.h"

namespace loom::vulkan {

namespace {

// The recording of one split.
struct Recording {
  VkCommandBuffer cb = VK_NULL_HANDLE;
  VkDescriptorPool pool = VK_NULL_HANDLE;
  uint64_t submitted = 0;  // timeline value of its last submission
  int barriers = 0;
};

uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}

// Identity of a split's work: the graph, the nodes, their shapes, parameters and memory.
uint64_t split_key(const Graph& g, std::span<Tensor* const> nodes) {
  uint64_t h = mix(g.uid(), nodes.size());
  for (const Tensor* n : nodes) {
    h = mix(h, (uint64_t)(uintptr_t)n);
    h = mix(h, (uint64_t)(uintptr_t)n->data);
    for (int i = 0; i < 4; ++i) h = mix(h, (uint64_t)n->ne[i] * 31 + n->nb[i]);
    for (int32_t p : n->op_params) h = mix(h, (uint32_t)p);
    for (const Tensor* s : n->src)
      if (s) h = mix(mix(h, (uint64_t)(uintptr_t)s->data), (uint64_t)s->ne[1] * 7 + s->nb[1]);
  }
  return h;
}

class VulkanEvent final : public Event {
 public:
  VulkanEvent(VulkanDevice& dev, VkSemaphore sem, uint64_t value) : dev_(dev), sem_(sem), value_(value) {}
  void synchronize() override {
    VkSemaphoreWaitInfo wi{VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO};
    wi.semaphoreCount = 1;
    wi.pSemaphores = &sem_;
    wi.pValues = &value_;
    LOOM_VK_CHECK(vkWaitSemaphores(dev_.vk(), &wi, UINT64_MAX), dev_.name() + ": wait for event");
  }
  bool is_complete() override {
    uint64_t v = 0;
    vkGetSemaphoreCounterValue(dev_.vk(), sem_, &v);
    return v >= value_;
  }
  const VulkanDevice& device() const { return dev_; }

 private:
  VulkanDevice& dev_;
  VkSemaphore sem_;
  uint64_t value_;
};

class VulkanStream final : public Stream {
 public:
  explicit VulkanStream(VulkanDevice& dev) : dev_(dev) {
    VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
    pci.flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT;
    pci.queueFamilyIndex = dev.queue_family();
    LOOM_VK_CHECK(vkCreateCommandPool(dev.vk(), &pci, nullptr, &pool_), dev.name() + ": command pool");
    VkSemaphoreTypeCreateInfo tci{VK_STRUCTURE_TYPE_SEMAPHORE_TYPE_CREATE_INFO};
    tci.semaphoreType = VK_SEMAPHORE_TYPE_TIMELINE;
    VkSemaphoreCreateInfo sci{VK_STRUCTURE_TYPE_SEMAPHORE_CREATE_INFO};
    sci.pNext = &tci;
    LOOM_VK_CHECK(vkCreateSemaphore(dev.vk(), &sci, nullptr, &timeline_), dev.name() + ": timeline semaphore");
  }

  ~VulkanStream() override {
    try {
      wait_value(value_);
    } catch (const Error&) {
    }
    for (auto& [key, r] : cache_) free_recording(r);
    vkDestroySemaphore(dev_.vk(), timeline_, nullptr);
    vkDestroyCommandPool(dev_.vk(), pool_, nullptr);
  }

  Status compute(const Graph& graph, std::span<Tensor* const> nodes) override {
    try {
      submit_cached(split_key(graph, nodes), [&] { return record(graph, nodes); });
    } catch (const Error& e) {
      return Status::error(e.kind(), e.what());
    }
    return Status::ok();
  }

  // Between two buffers of this device (device memory and its pinned host type, where the host
  // device computes): a transfer on the queue, after the work before it, with no host wait; the
  // event recorded after it tells others when it is done. Otherwise: wait for the queue, then
  // move the bytes through mapped memory or staging.
  Status copy(const Tensor* src, Tensor* dst) override {
    try {
      TensorLoc s, d;
      if (dev_.locate(src, s) && dev_.locate(dst, d) && src->is_contiguous() && dst->is_contiguous() &&
          src->nbytes() == dst->nbytes() && s.offset + src->nbytes() <= s.alloc->size &&
          d.offset + dst->nbytes() <= d.alloc->size) {
        enqueue_copy(s, d, src->nbytes());
        return Status::ok();
      }
      synchronize();
      return copy_tensor(src, dst);
    } catch (const Error& e) {
      return Status::error(e.kind(), e.what());
    }
  }

  std::unique_ptr<Event> record() override { return std::make_unique<VulkanEvent>(dev_, timeline_, value_); }

  void wait(Event& e) override {
    // One queue per device and a full barrier at the start of every command buffer: work of
    // this device is already ordered; other devices' events are waited for on the host.
    if (auto* ve = dynamic_cast<VulkanEvent*>(&e); ve && &ve->device() == &dev_) return;
    e.synchronize();
  }

  void synchronize() override { wait_value(value_); }

  void optimize_graph(std::vector<Tensor*>& nodes) override {
    Graph g;
    for (Tensor* n : nodes) g.build_forward(n);
    optimize_order(g, nodes);
  }

  int count_barriers(const std::vector<Tensor*>& nodes) override {
    Graph g;
    for (Tensor* n : nodes) g.build_forward(n);
    return vulkan::count_barriers(g, nodes);
  }

 private:
  uint64_t completed() {
    uint64_t v = 0;
    vkGetSemaphoreCounterValue(dev_.vk(), timeline_, &v);
    return v;
  }

  void wait_value(uint64_t v) {
    if (v == 0 || completed() >= v) return;
    ++dev_.stats().host_waits;
    VkSemaphoreWaitInfo wi{VK_STRUCTURE_TYPE_SEMAPHORE_WAIT_INFO};
    wi.semaphoreCount = 1;
    wi.pSemaphores = &timeline_;
    wi.pValues = &v;
    LOOM_VK_CHECK(vkWaitSemaphores(dev_.vk(), &wi, UINT64_MAX), dev_.name() + ": wait for the queue");
  }

  void submit(VkCommandBuffer cb) {
    const uint64_t next = value_ + 1;
    VkTimelineSemaphoreSubmitInfo ts{VK_STRUCTURE_TYPE_TIMELINE_SEMAPHORE_SUBMIT_INFO};
    ts.signalSemaphoreValueCount = 1;
    ts.pSignalSemaphoreValues = &next;
    VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
    si.pNext = &ts;
    si.commandBufferCount = 1;
    si.pCommandBuffers = &cb;
    si.signalSemaphoreCount = 1;
    si.pSignalSemaphores = &timeline_;
    {
      std::lock_guard lock(dev_.queue_mutex());
      LOOM_VK_CHECK(vkQueueSubmit(dev_.queue(), 1, &si, VK_NULL_HANDLE), dev_.name() + ": submit");
    }
    value_ = next;
    ++dev_.stats().submits;
  }

  static void barrier(VkCommandBuffer cb, VkPipelineStageFlags src, VkAccessFlags src_access) {
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = src_access;
    mb.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
    vkCmdPipelineBarrier(cb, src, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
  }

  Recording record(const Graph& graph, std::span<Tensor* const> nodes) {
    const std::vector<FusedGroup> groups = find_fusions(graph, nodes);
    const std::vector<Unit> units = make_units(&dev_, nodes, groups);
    std::vector<std::vector<Dispatch>> per_unit(units.size());
    size_t n_dispatch = 0;
    for (size_t i = 0; i < units.size(); ++i) {
      encode(dev_, units[i], per_unit[i]);
      n_dispatch += per_unit[i].size();
    }
    Recording r;
    VkDescriptorPoolSize ps{VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                            (uint32_t)std::max<size_t>(1, n_dispatch * kSetBindings)};
    VkDescriptorPoolCreateInfo dpi{VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO};
    dpi.maxSets = (uint32_t)std::max<size_t>(1, n_dispatch);
    dpi.poolSizeCount = 1;
    dpi.pPoolSizes = &ps;
    LOOM_VK_CHECK(vkCreateDescriptorPool(dev_.vk(), &dpi, nullptr, &r.pool), dev_.name() + ": descriptor pool");
    r.cb = begin_commands();
    // Earlier submissions and host writes (inputs, copies) before anything of this split.
    barrier(r.cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_HOST_BIT,
            VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_HOST_WRITE_BIT);
    std::vector<const Unit*> since;  // units recorded since the last barrier
    const Allocation& dummy = dev_.dummy();
    for (size_t i = 0; i < units.size(); ++i) {
      bool hazard = false;
      for (const Unit* s : since) hazard = hazard || conflicts(*s, units[i]);
      if (hazard) {
        barrier(r.cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT);
        ++r.barriers;
        since.clear();
      }
      since.push_back(&units[i]);
      for (Dispatch& d : per_unit[i]) {
        if (d.barrier_before) {
          barrier(r.cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT, VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT);
          ++r.barriers;
        }
        VkDescriptorSetAllocateInfo sai{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO};
        sai.descriptorPool = r.pool;
        sai.descriptorSetCount = 1;
        VkDescriptorSetLayout layout = dev_.set_layout();
        sai.pSetLayouts = &layout;
        VkDescriptorSet set;
        LOOM_VK_CHECK(vkAllocateDescriptorSets(dev_.vk(), &sai, &set), dev_.name() + ": descriptor set");
        std::array<VkDescriptorBufferInfo, kSetBindings> infos{};
        std::array<VkWriteDescriptorSet, kSetBindings> writes{};
        for (int b = 0; b < kSetBindings; ++b) {
          const Binding& bd =
              b == kCodesBinding ? Binding{dev_.codes().buffer, 0, VK_WHOLE_SIZE} : d.bindings[(size_t)b];
          infos[(size_t)b] = bd.buffer ? VkDescriptorBufferInfo{bd.buffer, bd.offset, bd.range}
                                       : VkDescriptorBufferInfo{dummy.buffer, 0, VK_WHOLE_SIZE};
          writes[(size_t)b] = {VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET};
          writes[(size_t)b].dstSet = set;
          writes[(size_t)b].dstBinding = (uint32_t)b;
          writes[(size_t)b].descriptorCount = 1;
          writes[(size_t)b].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
          writes[(size_t)b].pBufferInfo = &infos[(size_t)b];
        }
        vkUpdateDescriptorSets(dev_.vk(), kSetBindings, writes.data(), 0, nullptr);
        vkCmdBindPipeline(r.cb, VK_PIPELINE_BIND_POINT_COMPUTE, d.pipeline);
        vkCmdBindDescriptorSets(r.cb, VK_PIPELINE_BIND_POINT_COMPUTE, dev_.pipeline_layout(), 0, 1, &set, 0, nullptr);
        vkCmdPushConstants(r.cb, dev_.pipeline_layout(), VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes, d.push.data());
        vkCmdDispatch(r.cb, d.groups[0], d.groups[1], d.groups[2]);
      }
    }
    // Results visible to the host and to transfers (reads after the queue is waited for).
    VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};
    mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT;
    mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT;
    vkCmdPipelineBarrier(r.cb, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                         VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0, nullptr, 0, nullptr);
    LOOM_VK_CHECK(vkEndCommandBuffer(r.cb), dev_.name() + ": record");
    ++dev_.stats().recordings;
    dev_.stats().barriers += (uint64_t)r.barriers;
    return r;
  }

  // A primary command buffer from the stream's pool, recording.
  VkCommandBuffer begin_commands() {
    VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
    ai.commandPool = pool_;
    ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
    ai.commandBufferCount = 1;
    VkCommandBuffer cb = VK_NULL_HANDLE;
    LOOM_VK_CHECK(vkAllocateCommandBuffers(dev_.vk(), &ai, &cb), dev_.name() + ": command buffer");
    VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
    vkBeginCommandBuffer(cb, &bi);
    return cb;
  }

  // A buffer-to-buffer transfer, recorded once per (source, destination, size) and resubmitted.
  void enqueue_copy(const TensorLoc& s, const TensorLoc& d, size_t n) {
    uint64_t key = mix(0xc09c09ull, (uint64_t)(uintptr_t)s.alloc->buffer);
    key = mix(mix(mix(mix(key, s.offset), (uint64_t)(uintptr_t)d.alloc->buffer), d.offset), n);
    submit_cached(key, [&] {
      Recording r;
      r.cb = begin_commands();
      VkMemoryBarrier before{VK_STRUCTURE_TYPE_MEMORY_BARRIER};  // earlier dispatches, transfers, host writes
      before.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT |
                             VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_HOST_WRITE_BIT;
      before.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
      vkCmdPipelineBarrier(r.cb,
                           VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_HOST_BIT,
                           VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &before, 0, nullptr, 0, nullptr);
      const VkBufferCopy region{s.offset, d.offset, n};
      vkCmdCopyBuffer(r.cb, s.alloc->buffer, d.alloc->buffer, 1, &region);
      VkMemoryBarrier after{VK_STRUCTURE_TYPE_MEMORY_BARRIER};  // for later dispatches, transfers, host reads
      after.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
      after.dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                            VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_HOST_READ_BIT;
      vkCmdPipelineBarrier(r.cb, VK_PIPELINE_STAGE_TRANSFER_BIT,
                           VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT | VK_PIPELINE_STAGE_HOST_BIT,
                           0, 1, &after, 0, nullptr, 0, nullptr);
      LOOM_VK_CHECK(vkEndCommandBuffer(r.cb), dev_.name() + ": record copy");
      ++dev_.stats().recordings;
      return r;
    });
    ++dev_.stats().async_copies;
  }

  // Submits the recording cached under key, recording it with make() the first time.
  template <typename Make>
  void submit_cached(uint64_t key, Make&& make) {
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      ++dev_.stats().reuse_hits;
      touch(key);
    } else {
      it = cache_.emplace(key, make()).first;
      lru_.push_front(key);
      evict();
    }
    Recording& r = it->second;
    if (r.submitted > completed()) wait_value(r.submitted);  // still pending from the last call
    submit(r.cb);
    r.submitted = value_;
  }

  void free_recording(Recording& r) {
    if (r.cb) vkFreeCommandBuffers(dev_.vk(), pool_, 1, &r.cb);
    if (r.pool) vkDestroyDescriptorPool(dev_.vk(), r.pool, nullptr);
    r = Recording{};
  }

  void touch(uint64_t key) {
    lru_.remove(key);
    lru_.push_front(key);
  }

  // Keeps the most recently used recordings (a model's splits for a prompt and a decode step).
  void evict() {
    while (lru_.size() > kMaxRecordings) {
      const uint64_t key = lru_.back();
      lru_.pop_back();
      Recording& r = cache_.at(key);
      wait_value(r.submitted);
      free_recording(r);
      cache_.erase(key);
    }
  }

  static constexpr size_t kMaxRecordings = 64;
  VulkanDevice& dev_;
  VkCommandPool pool_ = VK_NULL_HANDLE;
  VkSemaphore timeline_ = VK_NULL_HANDLE;
  uint64_t value_ = 0;  // last value signalled by a submission
  std::unordered_map<uint64_t, Recording> cache_;
  std::list<uint64_t> lru_;
};

}  // namespace

std::unique_ptr<Stream> VulkanDevice::create_stream() { return std::make_unique<VulkanStream>(*this); }

bool VulkanDevice::supports_op(const Tensor* node) const { return op_supported(*this, node); }

std::vector<Device::Counter> VulkanDevice::counters() const {
  const StreamStats& s = const_cast<VulkanDevice*>(this)->stats();
  return {{"submits", s.submits},       {"recordings", s.recordings}, {"reuse_hits", s.reuse_hits},
          {"barriers", s.barriers},     {"host_waits", s.host_waits}, {"async_copies", s.async_copies}};
}

bool stream_stats(const Device& d, StreamStats& out) {
  const auto* v = dynamic_cast<const VulkanDevice*>(&d);
  if (!v) return false;
  out = const_cast<VulkanDevice*>(v)->stats();
  return true;
}

}  // namespace loom::vulkan

namespace loom::vulkan {
bool is_software(const Device& d) {
  const auto* v = dynamic_cast<const VulkanDevice*>(&d);
  return v && v->software();
}
}  // namespace loom::vulkan

namespace loom::vulkan {
std::string describe(const Device& d) {
  const auto* v = dynamic_cast<const VulkanDevice*>(&d);
  if (!v) return "";
  return fmt::format("{}{}, max binding {} MiB, max allocation {} MiB", v->description(), v->software() ? ", software (used only when named)" : "",
                     v->limits().maxStorageBufferRange >> 20, v->max_allocation() >> 20);
}
}  // namespace loom::vulkan
