// Tensor shape helpers.
#include "loom/graph/tensor.h"

#include <fmt/format.h>

namespace loom {

size_t Tensor::nbytes() const {
  for (int i = 0; i < kMaxDims; ++i)
    if (ne[i] <= 0) return 0;
  const DTypeInfo& info = dtype_info(type);
  size_t bytes;
  if (info.block_size == 1) {  // dim 0 may be strided (a permuted view)
    bytes = info.type_size;
    for (int i = 0; i < kMaxDims; ++i) bytes += (size_t)(ne[i] - 1) * nb[i];
  } else {
    bytes = (size_t)(ne[0] / info.block_size) * info.type_size;
    for (int i = 1; i < kMaxDims; ++i) bytes += (size_t)(ne[i] - 1) * nb[i];
  }
  return bytes;
}

int Tensor::n_dims() const {
  for (int i = kMaxDims - 1; i >= 1; --i)
    if (ne[i] > 1) return i + 1;
  return 1;
}

bool Tensor::is_contiguous() const {
  const DTypeInfo& info = dtype_info(type);
  size_t expect = info.type_size;
  if (nb[0] != expect) return false;
  expect *= (size_t)(ne[0] / info.block_size);
  for (int i = 1; i < kMaxDims; ++i) {
    if (ne[i] != 1 && nb[i] != expect) return false;
    expect *= (size_t)ne[i];
  }
  return true;
}

void set_contiguous_strides(Tensor& t) {
  const DTypeInfo& info = dtype_info(t.type);
  t.nb[0] = info.type_size;
  t.nb[1] = info.type_size * (size_t)(t.ne[0] / info.block_size);
  for (int i = 2; i < kMaxDims; ++i) t.nb[i] = t.nb[i - 1] * (size_t)t.ne[i - 1];
}

bool same_shape(const Tensor& a, const Tensor& b) {
  for (int i = 0; i < kMaxDims; ++i)
    if (a.ne[i] != b.ne[i]) return false;
  return true;
}

std::string describe(const Tensor& t) {
  return fmt::format("{} [{}, {}, {}, {}]", dtype_name(t.type), t.ne[0], t.ne[1], t.ne[2], t.ne[3]);
}

}  // namespace loom
