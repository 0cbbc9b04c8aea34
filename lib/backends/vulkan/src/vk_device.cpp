// Vulkan devices: the shared instance, one logical device and compute queue per physical
// device, memory (VK_EXT_memory_budget where present), and the pipelines of the embedded shaders.
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>

#include "vk_internal.h"

namespace loom::vulkan {

const char* vk_result_name(VkResult r) {
  switch (r) {
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    default: return "VkResult";
  }
}

void vk_fail(VkResult r, const std::string& what) {
  const ErrorKind kind = r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY
                             ? ErrorKind::out_of_memory
                             : ErrorKind::internal;
  fail(kind, "[vulkan] {}: {} ({})", what, vk_result_name(r), (int)r);
}

Instance& instance() {
  static Instance inst = [] {
    Instance i;
    VkApplicationInfo app{VK_STRUCTURE_TYPE_APPLICATION_INFO};
    app.pApplicationName = "loom";
    app.apiVersion = VK_API_VERSION_1_2;
    VkInstanceCreateInfo ci{VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO};
    ci.pApplicationInfo = &app;
    const VkResult r = vkCreateInstance(&ci, nullptr, &i.instance);
    if (r != VK_SUCCESS) {
      i.instance = VK_NULL_HANDLE;
      i.error = fmt::format("no Vulkan loader or driver ({})", vk_result_name(r));
    }
    return i;
  }();
  return inst;
}

namespace {

bool has_extension(VkPhysicalDevice phys, const char* name) {
  uint32_t n = 0;
  vkEnumerateDeviceExtensionProperties(phys, nullptr, &n, nullptr);
  std::vector<VkExtensionProperties> exts(n);
  vkEnumerateDeviceExtensionProperties(phys, nullptr, &n, exts.data());
  for (const auto& e : exts)
    if (std::strcmp(e.extensionName, name) == 0) return true;
  return false;
}

// Index of a memory type with all of `want` (and preferably all of `prefer`), or -1.
int find_memory_type(const VkPhysicalDeviceMemoryProperties& mp, uint32_t bits, VkMemoryPropertyFlags want,
                     VkMemoryPropertyFlags prefer) {
  int best = -1;
  for (uint32_t i = 0; i < mp.memoryTypeCount; ++i) {
    if (!(bits & (1u << i)) || (mp.memoryTypes[i].propertyFlags & want) != want) continue;
    if ((mp.memoryTypes[i].propertyFlags & prefer) == prefer) return (int)i;
    if (best < 0) best = (int)i;
  }
  return best;
}


}  // namespace

VulkanDevice::VulkanDevice(int index, VkPhysicalDevice phys, uint32_t queue_family)
    : name_(fmt::format("Vulkan{}", index)),
      phys_(phys),
      family_(queue_family),
      buffer_type_(*this, false),
      host_buffer_type_(*this, true) {
  VkPhysicalDeviceProperties props;
  vkGetPhysicalDeviceProperties(phys, &props);
  limits_ = props.limits;
  if (const char* cap = std::getenv("LOOM_VULKAN_MAX_BINDING")) {  // (testing) pretend to bind less
    const uint64_t c = std::strtoull(cap, nullptr, 10);
    if (c >= 4096 && c < limits_.maxStorageBufferRange) limits_.maxStorageBufferRange = (uint32_t)c;
  }
  software_ = props.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;
  vkGetPhysicalDeviceMemoryProperties(phys, &mem_props_);
  has_budget_ = has_extension(phys, VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  VkPhysicalDeviceMaintenance3Properties m3{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MAINTENANCE_3_PROPERTIES};
  VkPhysicalDeviceProperties2 p2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2};
  p2.pNext = &m3;
  vkGetPhysicalDeviceProperties2(phys, &p2);
  max_alloc_ = (size_t)m3.maxMemoryAllocationSize;
  const char* type = props.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU     ? "discrete"
                     : props.deviceType == VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU ? "integrated"
                     : software_                                                  ? "cpu"
                                                                                  : "other";
  description_ = fmt::format("{} ({})", props.deviceName, type);

  // Timeline semaphores are core in 1.2 but must be enabled.
  VkPhysicalDeviceVulkan12Features f12{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_VULKAN_1_2_FEATURES};
  f12.timelineSemaphore = VK_TRUE;
  const float priority = 1.0f;
  VkDeviceQueueCreateInfo qci{VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO};
  qci.queueFamilyIndex = family_;
  qci.queueCount = 1;
  qci.pQueuePriorities = &priority;
  std::vector<const char*> exts;
  if (has_budget_) exts.push_back(VK_EXT_MEMORY_BUDGET_EXTENSION_NAME);
  VkDeviceCreateInfo dci{VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO};
  dci.pNext = &f12;
  dci.queueCreateInfoCount = 1;
  dci.pQueueCreateInfos = &qci;
  dci.enabledExtensionCount = (uint32_t)exts.size();
  dci.ppEnabledExtensionNames = exts.data();
  LOOM_VK_CHECK(vkCreateDevice(phys, &dci, nullptr, &device_), name_ + ": vkCreateDevice");
  vkGetDeviceQueue(device_, family_, 0, &queue_);

  VkCommandPoolCreateInfo pci{VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO};
  pci.flags = VK_COMMAND_POOL_CREATE_TRANSIENT_BIT;
  pci.queueFamilyIndex = family_;
  LOOM_VK_CHECK(vkCreateCommandPool(device_, &pci, nullptr, &oneoff_pool_), name_ + ": command pool");

  std::array<VkDescriptorSetLayoutBinding, kSetBindings> b{};
  for (int i = 0; i < kSetBindings; ++i) {
    b[(size_t)i].binding = (uint32_t)i;
    b[(size_t)i].descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER;
    b[(size_t)i].descriptorCount = 1;
    b[(size_t)i].stageFlags = VK_SHADER_STAGE_COMPUTE_BIT;
  }
  VkDescriptorSetLayoutCreateInfo lci{VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO};
  lci.bindingCount = kSetBindings;
  lci.pBindings = b.data();
  LOOM_VK_CHECK(vkCreateDescriptorSetLayout(device_, &lci, nullptr, &set_layout_), name_ + ": set layout");
  VkPushConstantRange pc{VK_SHADER_STAGE_COMPUTE_BIT, 0, kPushBytes};
  VkPipelineLayoutCreateInfo plci{VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO};
  plci.setLayoutCount = 1;
  plci.pSetLayouts = &set_layout_;
  plci.pushConstantRangeCount = 1;
  plci.pPushConstantRanges = &pc;
  LOOM_VK_CHECK(vkCreatePipelineLayout(device_, &plci, nullptr, &pipeline_layout_), name_ + ": pipeline layout");
  allocate(256, false, dummy_).throw_if_error();
  upload_codes();
}

namespace {
// The codebooks in iq.glsl's order (its IQ_CODES_AT offsets). A storage buffer rather than constant
// arrays in the shaders: lavapipe compiled a 2048-entry constant array for 150 s per pipeline.
constexpr uint32_t kIqCodes[] = {
#include "iq2xxs.inc"
    ,
#include "iq2xs.inc"
    ,
#include "iq2s.inc"
    ,
#include "iq3xxs.inc"
    ,
#include "iq3s.inc"
    ,
#include "iq1s.inc"
};
static_assert(sizeof(kIqCodes) / 4 == 256 + 512 + 1024 + 256 + 512 + 2048);
static_assert(sizeof(kIqCodes) <= 65536);  // one vkCmdUpdateBuffer
}  // namespace

void VulkanDevice::upload_codes() {
  allocate(sizeof(kIqCodes), false, codes_).throw_if_error();
  run_now([&](VkCommandBuffer cb) { vkCmdUpdateBuffer(cb, codes_.buffer, 0, sizeof(kIqCodes), kIqCodes); });
}

VulkanDevice::~VulkanDevice() {
  if (!device_) return;
  vkDeviceWaitIdle(device_);
  release(dummy_);
  release(codes_);
  for (VkPipeline p : pipelines_)
    if (p) vkDestroyPipeline(device_, p, nullptr);
  vkDestroyPipelineLayout(device_, pipeline_layout_, nullptr);
  vkDestroyDescriptorSetLayout(device_, set_layout_, nullptr);
  vkDestroyCommandPool(device_, oneoff_pool_, nullptr);
  vkDestroyDevice(device_, nullptr);
}

MemoryInfo VulkanDevice::memory() const {
  // The largest device-local heap: its budget where the driver reports one, else its size.
  VkPhysicalDeviceMemoryBudgetPropertiesEXT budget{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_BUDGET_PROPERTIES_EXT};
  VkPhysicalDeviceMemoryProperties2 mp2{VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_MEMORY_PROPERTIES_2};
  if (has_budget_) mp2.pNext = &budget;
  vkGetPhysicalDeviceMemoryProperties2(phys_, &mp2);
  MemoryInfo info;
  for (uint32_t h = 0; h < mp2.memoryProperties.memoryHeapCount; ++h) {
    const VkMemoryHeap& heap = mp2.memoryProperties.memoryHeaps[h];
    if (!(heap.flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) || heap.size <= info.total) continue;
    info.total = (size_t)heap.size;
    if (has_budget_) {
      const size_t b = (size_t)budget.heapBudget[h], u = (size_t)budget.heapUsage[h];
      info.free = b > u ? b - u : 0;
    } else {
      const size_t u = used_.load();
      info.free = info.total > u ? info.total - u : 0;
    }
  }
  if (const char* cap = std::getenv("LOOM_VULKAN_MEMORY")) {  // (testing) pretend to have less
    const size_t c = (size_t)std::strtoull(cap, nullptr, 10);
    if (c > 0 && c < info.total) {
      info.total = c;
      info.free = c > used_.load() ? c - used_.load() : 0;
    }
  }
  return info;
}

DeviceCaps VulkanDevice::caps() const { return {.async = true, .events = true, .host_buffer = true}; }

Status VulkanDevice::allocate(size_t size, bool host, Allocation& out) {
  size = (std::max<size_t>(size, 16) + 15) / 16 * 16;
  auto oom = [&](const std::string& why) {
    return Status::error(ErrorKind::out_of_memory,
                         fmt::format("{}: cannot allocate {} bytes ({:.2f} MiB) of {} memory: {}", name_, size,
                                     (double)size / (1024.0 * 1024.0), host ? "pinned host" : "device", why));
  };
  if (size > max_alloc_) return oom(fmt::format("more than one allocation may hold ({} bytes)", max_alloc_));
  if (!host) {
    const MemoryInfo m = memory();
    if (size > m.free) return oom(fmt::format("{} bytes free of {}", m.free, m.total));
  }
  VkBufferCreateInfo bci{VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO};
  bci.size = size;
  bci.usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT | VK_BUFFER_USAGE_TRANSFER_DST_BIT;
  bci.sharingMode = VK_SHARING_MODE_EXCLUSIVE;
  Allocation a;
  a.size = size;
  if (VkResult r = vkCreateBuffer(device_, &bci, nullptr, &a.buffer); r != VK_SUCCESS) return oom(vk_result_name(r));
  VkMemoryRequirements req;
  vkGetBufferMemoryRequirements(device_, a.buffer, &req);
  const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
  const int type = host ? find_memory_type(mem_props_, req.memoryTypeBits, hv, VK_MEMORY_PROPERTY_HOST_CACHED_BIT)
                        : find_memory_type(mem_props_, req.memoryTypeBits, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, hv);
  if (type < 0) {
    vkDestroyBuffer(device_, a.buffer, nullptr);
    return oom("no suitable memory type");
  }
  VkMemoryAllocateInfo mai{VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO};
  mai.allocationSize = req.size;
  mai.memoryTypeIndex = (uint32_t)type;
  if (VkResult r = vkAllocateMemory(device_, &mai, nullptr, &a.memory); r != VK_SUCCESS) {
    vkDestroyBuffer(device_, a.buffer, nullptr);
    return oom(vk_result_name(r));
  }
  vkBindBufferMemory(device_, a.buffer, a.memory, 0);
  if ((mem_props_.memoryTypes[type].propertyFlags & hv) == hv)
    if (vkMapMemory(device_, a.memory, 0, VK_WHOLE_SIZE, 0, &a.mapped) != VK_SUCCESS) a.mapped = nullptr;
  if (!host) used_ += size;
  out = a;
  return Status::ok();
}

void VulkanDevice::release(Allocation& a) {
  if (!a.buffer) return;
  if (a.mapped) vkUnmapMemory(device_, a.memory);
  vkDestroyBuffer(device_, a.buffer, nullptr);
  vkFreeMemory(device_, a.memory, nullptr);
  a = Allocation{};
}

void VulkanDevice::run_now(const std::function<void(VkCommandBuffer)>& fill) {
  std::lock_guard lock(queue_mutex_);
  VkCommandBufferAllocateInfo ai{VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO};
  ai.commandPool = oneoff_pool_;
  ai.level = VK_COMMAND_BUFFER_LEVEL_PRIMARY;
  ai.commandBufferCount = 1;
  VkCommandBuffer cb;
  LOOM_VK_CHECK(vkAllocateCommandBuffers(device_, &ai, &cb), name_ + ": command buffer");
  VkCommandBufferBeginInfo bi{VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO};
  bi.flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT;
  vkBeginCommandBuffer(cb, &bi);
  VkMemoryBarrier mb{VK_STRUCTURE_TYPE_MEMORY_BARRIER};  // after everything queued before
  mb.srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT | VK_ACCESS_HOST_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT;
  vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_ALL_COMMANDS_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT, 0, 1, &mb, 0, nullptr, 0,
                       nullptr);
  fill(cb);
  mb.srcAccessMask = VK_ACCESS_TRANSFER_WRITE_BIT;
  mb.dstAccessMask = VK_ACCESS_HOST_READ_BIT | VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT;
  vkCmdPipelineBarrier(cb, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT,
                       0, 1, &mb, 0, nullptr, 0, nullptr);
  vkEndCommandBuffer(cb);
  VkFenceCreateInfo fci{VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
  VkFence fence;
  LOOM_VK_CHECK(vkCreateFence(device_, &fci, nullptr, &fence), name_ + ": fence");
  VkSubmitInfo si{VK_STRUCTURE_TYPE_SUBMIT_INFO};
  si.commandBufferCount = 1;
  si.pCommandBuffers = &cb;
  LOOM_VK_CHECK(vkQueueSubmit(queue_, 1, &si, fence), name_ + ": submit");
  LOOM_VK_CHECK(vkWaitForFences(device_, 1, &fence, VK_TRUE, UINT64_MAX), name_ + ": wait");
  vkDestroyFence(device_, fence, nullptr);
  vkFreeCommandBuffers(device_, oneoff_pool_, 1, &cb);
}

VkPipeline VulkanDevice::pipeline(Shader s) {
  std::lock_guard lock(pipeline_mutex_);
  VkPipeline& p = pipelines_[(size_t)s];
  if (p) return p;
  const std::span<const uint32_t> code = shader_code(s);
  VkShaderModuleCreateInfo mci{VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO};
  mci.codeSize = code.size() * sizeof(uint32_t);
  mci.pCode = code.data();
  VkShaderModule mod;
  LOOM_VK_CHECK(vkCreateShaderModule(device_, &mci, nullptr, &mod), fmt::format("{}: shader {}", name_, shader_name(s)));
  VkComputePipelineCreateInfo cci{VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO};
  cci.stage = {VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO};
  cci.stage.stage = VK_SHADER_STAGE_COMPUTE_BIT;
  cci.stage.module = mod;
  cci.stage.pName = "main";
  cci.layout = pipeline_layout_;
  const VkResult r = vkCreateComputePipelines(device_, VK_NULL_HANDLE, 1, &cci, nullptr, &p);
  vkDestroyShaderModule(device_, mod, nullptr);
  LOOM_VK_CHECK(r, fmt::format("{}: pipeline {}", name_, shader_name(s)));
  return p;
}

bool VulkanDevice::locate(const Tensor* t, TensorLoc& out) const {
  const auto* b = dynamic_cast<const VulkanBuffer*>(t->buffer);
  if (!b || &b->vk_device() != this || !t->data) return false;
  out.alloc = &b->allocation();
  out.offset = (size_t)(static_cast<const char*>(t->data) - static_cast<const char*>(b->base()));
  return out.offset <= out.alloc->size;
}

Binding VulkanDevice::bind(const Allocation& a, size_t offset, size_t bytes, uint32_t& rel) const {
  const size_t align = std::max<size_t>(4, (size_t)limits_.minStorageBufferOffsetAlignment);
  Binding b;
  b.buffer = a.buffer;
  b.offset = offset / align * align;
  const size_t max_range = (size_t)limits_.maxStorageBufferRange / 4 * 4;
  b.range = std::min<size_t>(a.size - (size_t)b.offset, max_range);
  rel = (uint32_t)(offset - (size_t)b.offset);
  LOOM_ASSERT(offset - (size_t)b.offset + bytes <= (size_t)b.range, "{}: {} bytes at {} exceed one binding", name_,
              bytes, offset);
  return b;
}

// ---- device enumeration -----------------------------------------------------------------------

std::vector<std::unique_ptr<Device>> make_devices(std::string& note) {
  std::vector<std::unique_ptr<Device>> out;
  std::vector<int> keep;
  if (const char* env = std::getenv("LOOM_VULKAN_DEVICES"); env && *env) {
    std::string s(env);
    size_t start = 0;
    while (start <= s.size()) {
      const size_t comma = s.find(',', start);
      const std::string item = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      char* end = nullptr;
      const long v = std::strtol(item.c_str(), &end, 10);
      LOOM_CHECK(!item.empty() && end && *end == '\0' && v >= 0 && v < 64, usage,
                 "LOOM_VULKAN_DEVICES='{}': expected physical device indices, e.g. 0,2", s);
      keep.push_back((int)v);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  Instance& inst = instance();
  if (!inst.instance) {
    note = inst.error;
    return out;
  }
  uint32_t n = 0;
  vkEnumeratePhysicalDevices(inst.instance, &n, nullptr);
  std::vector<VkPhysicalDevice> phys(n);
  vkEnumeratePhysicalDevices(inst.instance, &n, phys.data());
  for (uint32_t i = 0; i < n; ++i) {
    if (!keep.empty() && std::find(keep.begin(), keep.end(), (int)i) == keep.end()) continue;
    VkPhysicalDeviceProperties props;
    vkGetPhysicalDeviceProperties(phys[i], &props);
    if (props.apiVersion < VK_API_VERSION_1_2) continue;  // timeline semaphores
    uint32_t nq = 0;
    vkGetPhysicalDeviceQueueFamilyProperties(phys[i], &nq, nullptr);
    std::vector<VkQueueFamilyProperties> qf(nq);
    vkGetPhysicalDeviceQueueFamilyProperties(phys[i], &nq, qf.data());
    int family = -1;
    for (uint32_t q = 0; q < nq && family < 0; ++q)
      if (qf[q].queueFlags & VK_QUEUE_COMPUTE_BIT) family = (int)q;
    if (family < 0) continue;
    out.push_back(std::make_unique<VulkanDevice>((int)out.size(), phys[i], (uint32_t)family));
  }
  if (out.empty()) note = n == 0 ? "no Vulkan device" : "no Vulkan 1.2 device with a compute queue";
  return out;
}

}  // namespace loom::vulkan
