// Internal parts of the Vulkan backend shared by its files: the device (instance, queue,
// limits, pipelines), buffers and the op recorder.
#pragma once

#include <vulkan/vulkan.h>

#include <array>
#include <functional>
#include <atomic>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "loom/graph/fusion.h"
#include "loom/vulkan/vulkan.h"

namespace loom::vulkan {

#define LOOM_VK_CHECK(expr, what)                                                                      \
  do {                                                                                                 \
    const VkResult r_ = (expr);                                                                        \
    if (r_ != VK_SUCCESS) ::loom::vulkan::vk_fail(r_, what);                                           \
  } while (0)
[[noreturn]] void vk_fail(VkResult r, const std::string& what);
const char* vk_result_name(VkResult r);

inline constexpr int kBindings = 6;           // storage buffers per dispatch (sources and results)
inline constexpr int kCodesBinding = kBindings;  // and after them the i-quants' codebooks (iq.glsl)
inline constexpr int kSetBindings = kBindings + 1;  // the descriptor set's bindings
inline constexpr uint32_t kPushBytes = 128;  // the guaranteed minimum of maxPushConstantsSize

// The shared instance (created on first use; never destroyed before exit).
struct Instance {
  VkInstance instance = VK_NULL_HANDLE;
  std::string error;  // why there is none
};
Instance& instance();

class VkDevice_;
class VulkanDevice;

// A compute pipeline of one shader variant.
struct Pipeline {
  VkPipeline pipeline = VK_NULL_HANDLE;
};

// One storage-buffer binding: a buffer, the aligned byte offset it starts at and its range.
struct Binding {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceSize offset = 0;
  VkDeviceSize range = 0;
};

// Memory of one Buffer: a VkBuffer over its own allocation, mapped when host-visible.
struct Allocation {
  VkBuffer buffer = VK_NULL_HANDLE;
  VkDeviceMemory memory = VK_NULL_HANDLE;
  void* mapped = nullptr;
  size_t size = 0;
};

// A tensor's place in its buffer, for a binding: which VkBuffer, and its byte offset there.
struct TensorLoc {
  const Allocation* alloc = nullptr;
  size_t offset = 0;
};

}  // namespace loom::vulkan

namespace loom::vulkan {

class VulkanDevice;

// Device-local memory (or, with host = true, the pinned host buffer type: host-visible memory
// the CPU computes in directly and the device binds without a copy).
class VulkanBufferType final : public BufferType {
 public:
  VulkanBufferType(VulkanDevice& dev, bool host);
  const char* name() const override { return name_.c_str(); }
  size_t alignment() const override;
  size_t max_size() const override;
  bool is_host() const override { return host_; }
  Status alloc(size_t size, std::unique_ptr<Buffer>& out) const override;
  Device& device() const override;
  // MUL_MAT / MUL_MAT_ID results that round their activations carry the rounded columns after
  // their bytes (act_scratch in vk_ops.h).
  size_t alloc_size(const Tensor* t) const override;
  bool host() const { return host_; }

 private:
  VulkanDevice& dev_;
  bool host_;
  std::string name_;
};

class VulkanBuffer final : public Buffer {
 public:
  VulkanBuffer(const VulkanBufferType& type, VulkanDevice& dev, Allocation a, void* base);
  ~VulkanBuffer() override;
  void set(Tensor* t, const void* src, size_t offset, size_t n) override;
  void get(const Tensor* t, void* dst, size_t offset, size_t n) const override;
  void clear(uint8_t value) override;
  const Allocation& allocation() const { return alloc_; }
  VulkanDevice& vk_device() const { return dev_; }

 private:
  VulkanDevice& dev_;
  Allocation alloc_;
};

// Shader variants, one pipeline each (created on first use). The weight types of mul_mat_* and
// get_rows_* follow CMakeLists.txt's list and typed() in src/vk_ops.cpp.
enum class Shader : int {
  elementwise,
  copy,
  set_rows,
  norm,
  soft_max,
  rope,
  flash_attn,
  argsort,
  topk_moe,
  opt_step,
  out_prod,
  train_rows,
  act_quant,
  mul_mat_f32,
  mul_mat_f16,
  mul_mat_bf16,
  mul_mat_q8_0,
  mul_mat_q4_0,
  mul_mat_q4_k,
  mul_mat_q6_k,
  mul_mat_q4_1,
  mul_mat_q5_0,
  mul_mat_q5_1,
  mul_mat_q2_k,
  mul_mat_q3_k,
  mul_mat_q5_k,
  mul_mat_iq4_nl,
  mul_mat_iq4_xs,
  mul_mat_mxfp4,
  mul_mat_iq2_xxs,
  mul_mat_iq2_xs,
  mul_mat_iq2_s,
  mul_mat_iq3_xxs,
  mul_mat_iq3_s,
  mul_mat_iq1_s,
  mul_mat_iq1_m,
  get_rows_f32,
  get_rows_f16,
  get_rows_bf16,
  get_rows_q8_0,
  get_rows_q4_0,
  get_rows_q4_k,
  get_rows_q6_k,
  get_rows_q4_1,
  get_rows_q5_0,
  get_rows_q5_1,
  get_rows_q2_k,
  get_rows_q3_k,
  get_rows_q5_k,
  get_rows_iq4_nl,
  get_rows_iq4_xs,
  get_rows_mxfp4,
  get_rows_iq2_xxs,
  get_rows_iq2_xs,
  get_rows_iq2_s,
  get_rows_iq3_xxs,
  get_rows_iq3_s,
  get_rows_iq1_s,
  get_rows_iq1_m,
  count
};
// The embedded SPIR-V of a variant (generated at build time from shaders/*.comp).
std::span<const uint32_t> shader_code(Shader s);
const char* shader_name(Shader s);

class VulkanDevice final : public Device {
 public:
  std::string details() const override { return describe(*this); }
  VulkanDevice(int index, VkPhysicalDevice phys, uint32_t queue_family);
  ~VulkanDevice() override;

  const std::string& name() const override { return name_; }
  DeviceKind kind() const override { return DeviceKind::gpu; }
  MemoryInfo memory() const override;
  DeviceCaps caps() const override;
  bool supports_op(const Tensor* node) const override;
  bool supports_buffer_type(const BufferType& bt) const override {
    return &bt == &buffer_type_ || &bt == &host_buffer_type_;
  }
  const BufferType& buffer_type() const override { return buffer_type_; }
  // The host device computes in it (the executor's choice), so copies to and from it are transfers on the queue.
  const BufferType* host_buffer_type() const override { return &host_buffer_type_; }
  std::vector<Counter> counters() const override;
  std::unique_ptr<Stream> create_stream() override;

  const std::string& description() const { return description_; }  // "llvmpipe (LLVM 15.0.6, 256 bits), cpu"
  VkDevice vk() const { return device_; }
  VkQueue queue() const { return queue_; }
  uint32_t queue_family() const { return family_; }
  std::mutex& queue_mutex() { return queue_mutex_; }
  const VkPhysicalDeviceLimits& limits() const { return limits_; }
  size_t max_allocation() const { return max_alloc_; }
  bool software() const { return software_; }

  // Allocates size bytes (host: pinned host-visible memory); out_of_memory names the device.
  Status allocate(size_t size, bool host, Allocation& out);
  void release(Allocation& a);
  // Runs fill(cmd) in a one-off command buffer and waits (staging copies).
  void run_now(const std::function<void(VkCommandBuffer)>& fill);

  VkPipeline pipeline(Shader s);
  VkPipelineLayout pipeline_layout() const { return pipeline_layout_; }
  VkDescriptorSetLayout set_layout() const { return set_layout_; }
  const Allocation& dummy() const { return dummy_; }
  const Allocation& codes() const { return codes_; }
  // Where t's bytes are: false when t is not in memory this device can bind.
  bool locate(const Tensor* t, TensorLoc& out) const;
  // A binding covering [offset, offset + bytes) of a; the byte offset of `offset` within it.
  Binding bind(const Allocation& a, size_t offset, size_t bytes, uint32_t& rel) const;

  StreamStats& stats() { return stats_; }

 private:
  void upload_codes();

  std::string name_, description_;
  VkPhysicalDevice phys_;
  VkDevice device_ = VK_NULL_HANDLE;
  VkQueue queue_ = VK_NULL_HANDLE;
  uint32_t family_;
  VkPhysicalDeviceLimits limits_{};
  VkPhysicalDeviceMemoryProperties mem_props_{};
  bool has_budget_ = false;
  bool software_ = false;
  size_t max_alloc_ = 0;
  std::atomic<size_t> used_{0};
  std::mutex queue_mutex_;
  std::mutex pipeline_mutex_;
  VkCommandPool oneoff_pool_ = VK_NULL_HANDLE;
  VkDescriptorSetLayout set_layout_ = VK_NULL_HANDLE;
  VkPipelineLayout pipeline_layout_ = VK_NULL_HANDLE;
  std::array<VkPipeline, (size_t)Shader::count> pipelines_{};
  Allocation dummy_;
  Allocation codes_;  // the i-quants' codebooks, bound to every dispatch at kCodesBinding
  StreamStats stats_;
  VulkanBufferType buffer_type_;
  VulkanBufferType host_buffer_type_;
};

// Records one split: dispatches with barriers where memory hazards require them.
struct Recorder;
// The op table: whether the device runs `node` (not fused), and recording it.
bool op_supported(const VulkanDevice& dev, const Tensor* node);
bool fusion_supported(const VulkanDevice& dev, const FusedGroup& g);

}  // namespace loom::vulkan
