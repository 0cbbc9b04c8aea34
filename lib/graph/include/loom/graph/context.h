// A Context owns tensor metadata (never tensor bytes): weights, inputs and the nodes that op
// builders create. Pointers stay valid for the Context's life.
#pragma once

#include <cstdint>
#include <deque>
#include <initializer_list>
#include <string>
#include <vector>

#include "loom/graph/tensor.h"

namespace loom {

class Context {
 public:
  Context() = default;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // A new contiguous tensor; ne lists 1 to 4 dims, fastest first.
  Tensor* new_tensor(DType type, std::initializer_list<int64_t> ne, std::string name = {});
  Tensor* new_tensor(DType type, int n_dims, const int64_t* ne, std::string name = {});
  // A tensor with a's type and shape (no data).
  Tensor* new_like(const Tensor* a, std::string name = {});
  // A view of a's memory (a may itself be a view): ne/nb in bytes, offset in bytes from a's start.
  Tensor* new_view(Tensor* a, int n_dims, const int64_t* ne, const size_t* nb, size_t offset);

  size_t size() const { return tensors_.size(); }
  Tensor* at(size_t i) { return &tensors_[i]; }
  Tensor* find(const std::string& name);
  std::deque<Tensor>& tensors() { return tensors_; }

 private:
  std::deque<Tensor> tensors_;
};

}  // namespace loom
