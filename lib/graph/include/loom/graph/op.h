// The closed set of operations (one enum) and one table describing each: name, how many
// sources it needs, whether it is a view, whether it may run in place, whether a backend may
// need more bytes than its natural size. Backends dispatch on OpKind in their own switch.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace loom {

enum class OpKind : uint8_t {
  NONE,  // leaf: weight, input or constant
  // views (no compute)
  VIEW, RESHAPE, PERMUTE, TRANSPOSE,
  // data movement
  CPY, DUP, CONT, CONCAT, REPEAT, REPEAT_BACK, GET_ROWS, GET_ROWS_BACK, SET_ROWS,
  // element-wise binary (broadcast b over a)
  ADD, SUB, MUL, DIV, ADD_ID,
  // element-wise unary and scalar
  SCALE, CLAMP, SILU, GELU, TANH, SIGMOID, SOFTPLUS, EXP, LOG, SQR, SQRT, SWIGLU, SWIGLU_OAI, SILU_BACK,
  // normalization over rows
  RMS_NORM, NORM, RMS_NORM_BACK,
  // reductions and selection
  SUM, SUM_ROWS, MEAN, ARGMAX, ARGSORT, TOP_K, COUNT_EQUAL,
  // matrix products
  MUL_MAT, MUL_MAT_ID, OUT_PROD,
  // attention
  ROPE, ROPE_BACK, SOFT_MAX, SOFT_MAX_BACK, FLASH_ATTN_EXT,
  // training
  CROSS_ENTROPY_LOSS, CROSS_ENTROPY_LOSS_BACK, OPT_STEP_ADAMW, OPT_STEP_SGD,
  // collectives (tensor parallelism)
  ALL_REDUCE,
  COUNT
};

inline constexpr int kOpCount = static_cast<int>(OpKind::COUNT);

struct OpInfo {
  OpKind kind;
  const char* name;          // upper case, as printed by loom-bench-ops ("MUL_MAT")
  int n_src;                 // required sources (optional ones not counted)
  bool is_view;              // result aliases src[0]'s memory; no compute
  bool may_inplace;          // element-wise: result may reuse src[0]'s memory
  bool alloc_may_expand;     // a backend may need more than the natural byte size
};

const OpInfo& op_info(OpKind kind);
inline const char* op_name(OpKind kind) { return op_info(kind).name; }
std::optional<OpKind> op_from_name(std::string_view name);
// The single list of ops whose tensors a backend may allocate larger than their natural size.
inline bool op_alloc_size_may_expand(OpKind kind) { return op_info(kind).alloc_may_expand; }

}  // namespace loom
