// Private helpers shared by the op builder files.
#pragma once

#include "loom/core/error.h"
#include "loom/graph/ops.h"

namespace loom::ops::detail {

inline Tensor* make(Context& c, OpKind op, DType type, const int64_t ne[4], std::initializer_list<Tensor*> srcs) {
  Tensor* t = c.new_tensor(type, 4, ne);
  t->op = op;
  int i = 0;
  for (Tensor* s : srcs) t->src[i++] = s;
  return t;
}

inline bool can_broadcast(const Tensor* a, const Tensor* b) {  // b repeats to a's shape
  for (int i = 0; i < kMaxDims; ++i)
    if (b->ne[i] == 0 || a->ne[i] % b->ne[i] != 0) return false;
  return true;
}

inline void check_type(const char* op, const Tensor* t, DType want, const char* what) {
  LOOM_CHECK(t->type == want, invalid_input, "[{}] {} must be {}, got {}", op, what, dtype_name(want), describe(*t));
}

inline void check_float(const char* op, const Tensor* t, const char* what) {
  LOOM_CHECK(dtype_info(t->type).is_float, invalid_input, "[{}] {} must be f32, f16 or bf16, got {}", op, what,
             describe(*t));
}

// A KV cache operand: plain floats, or a quantized type (-ctk/-ctv q8_0...) read in whole
// blocks, so rows have unit stride in dim 0 and hold a whole number of blocks.
inline void check_cache_type(const char* op, const Tensor* t, const char* what) {
  const DTypeInfo& info = dtype_info(t->type);
  const bool blocks = info.is_quantized && info.to_float && t->nb[0] == info.type_size && t->ne[0] % info.block_size == 0;
  LOOM_CHECK(info.is_float || blocks, invalid_input, "[{}] {} must be f32, f16, bf16 or whole quantized blocks, got {}",
             op, what, describe(*t));
}

}  // namespace loom::ops::detail
