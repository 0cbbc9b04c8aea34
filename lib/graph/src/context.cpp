// Context: owner of tensor metadata.
#include "loom/graph/context.h"

#include "loom/core/error.h"

namespace loom {

Tensor* Context::new_tensor(DType type, int n_dims, const int64_t* ne, std::string name) {
  LOOM_CHECK(n_dims >= 1 && n_dims <= kMaxDims, invalid_input, "[new_tensor] {} dims (1 to 4 allowed)", n_dims);
  Tensor& t = tensors_.emplace_back();
  t.type = type;
  for (int i = 0; i < n_dims; ++i) {
    LOOM_CHECK(ne[i] >= 0, invalid_input, "[new_tensor] negative size {} in dim {}", ne[i], i);
    t.ne[i] = ne[i];
  }
  LOOM_CHECK(t.ne[0] % dtype_info(type).block_size == 0, invalid_input,
             "[new_tensor] row of {} elements is not a multiple of the {} block size {}", t.ne[0],
             dtype_name(type), dtype_info(type).block_size);
  set_contiguous_strides(t);
  t.name = std::move(name);
  t.id = (int32_t)tensors_.size() - 1;
  return &t;
}

Tensor* Context::new_tensor(DType type, std::initializer_list<int64_t> ne, std::string name) {
  return new_tensor(type, (int)ne.size(), ne.begin(), std::move(name));
}

Tensor* Context::new_like(const Tensor* a, std::string name) {
  return new_tensor(a->type, kMaxDims, a->ne, std::move(name));
}

Tensor* Context::new_view(Tensor* a, int n_dims, const int64_t* ne, const size_t* nb, size_t offset) {
  Tensor& t = tensors_.emplace_back();
  t.type = a->type;
  for (int i = 0; i < n_dims; ++i) t.ne[i] = ne[i];
  t.nb[0] = dtype_info(a->type).type_size;
  for (int i = 1; i < n_dims; ++i) t.nb[i] = nb[i - 1];
  for (int i = n_dims; i < kMaxDims; ++i) t.nb[i] = t.nb[i - 1] * (size_t)t.ne[i - 1];
  Tensor* root = a->view_src ? a->view_src : a;
  t.view_src = root;
  t.view_offs = (a->view_src ? a->view_offs : 0) + offset;
  LOOM_CHECK(t.view_offs + t.nbytes() <= root->nbytes(), invalid_input,
             "[view] view of {} bytes at offset {} exceeds '{}' ({} bytes)", t.nbytes(), t.view_offs, root->name,
             root->nbytes());
  if (root->data) t.data = static_cast<char*>(root->data) + t.view_offs;
  t.buffer = root->buffer;
  t.id = (int32_t)tensors_.size() - 1;
  return &t;
}

Tensor* Context::find(const std::string& name) {
  for (Tensor& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace loom
