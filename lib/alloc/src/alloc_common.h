// Private helpers shared by the allocators: alignment, the checked alloc_size of a tensor, and
// the view root of a tensor.
#pragma once

#include <cstddef>

#include "loom/backend/device.h"

namespace loom::alloc::detail {

inline size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// The tensor whose memory t uses (t itself unless it is a view).
inline Tensor* root_of(Tensor* t) { return t->view_src ? t->view_src : t; }

// bt.alloc_size(t), checked: never below the natural size, above it only for ops listed by
// op_alloc_size_may_expand(). Throws loom::Error(internal) naming the buffer type and tensor.
size_t checked_alloc_size(const BufferType& bt, const Tensor* t);

}  // namespace loom::alloc::detail
