// Shared parts of the backend seam.
#include "loom/backend/device.h"

#include <cstring>
#include <vector>

namespace loom {

const char* device_kind_name(DeviceKind kind) {
  switch (kind) {
    case DeviceKind::cpu: return "cpu";
    case DeviceKind::sim: return "sim";
    case DeviceKind::gpu: return "gpu";
    case DeviceKind::remote: return "remote";
    case DeviceKind::meta: return "meta";
  }
  return "?";
}

Status Buffer::init_tensor(Tensor* t, size_t offset) {
  if (t->view_src) return Status::error(ErrorKind::internal, "init_tensor on a view: '" + t->name + "'");
  const size_t need = type_.alloc_size(t);
  if (need < t->nbytes()) return Status::error(ErrorKind::internal, "alloc_size below natural size: " + t->name);
  if (need > t->nbytes() && !op_alloc_size_may_expand(t->op))
    return Status::error(ErrorKind::internal, fmt::format("buffer type {} expands '{}' ({}) whose op may not expand",
                                                          type_.name(), t->name, op_name(t->op)));
  if (offset > size_ || need > size_ - offset)
    return Status::error(ErrorKind::out_of_memory, fmt::format("tensor '{}' ({} bytes at offset {}) exceeds buffer of {} bytes",
                                                               t->name, need, offset, size_));
  t->buffer = this;
  t->data = static_cast<char*>(base_) + offset;
  return Status::ok();
}

Status copy_tensor(const Tensor* src, Tensor* dst) {
  const size_t n = src->nbytes();
  if (n != dst->nbytes())
    return Status::error(ErrorKind::internal, fmt::format("copy '{}' -> '{}': {} vs {} bytes", src->name, dst->name, n,
                                                          dst->nbytes()));
  const bool src_host = !src->buffer || src->buffer->type().is_host();
  const bool dst_host = !dst->buffer || dst->buffer->type().is_host();
  if (src_host && dst_host) {
    std::memcpy(dst->data, src->data, n);
  } else if (src_host) {
    dst->buffer->set(dst, src->data, 0, n);
  } else if (dst_host) {
    src->buffer->get(src, dst->data, 0, n);
  } else {
    std::vector<uint8_t> staging(n);
    src->buffer->get(src, staging.data(), 0, n);
    dst->buffer->set(dst, staging.data(), 0, n);
  }
  return Status::ok();
}

void BufferType::upload_weight(Tensor* t, const void* src, bool) const { t->buffer->set(t, src, 0, t->nbytes()); }

Status Stream::copy(const Tensor* src, Tensor* dst) { return copy_tensor(src, dst); }

}  // namespace loom
