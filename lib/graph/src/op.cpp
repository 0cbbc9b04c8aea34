// The op table. Order must follow the OpKind enum (checked at compile time).
#include "loom/graph/op.h"

#include <array>

namespace loom {
namespace {

using K = OpKind;
// kind, name, n_src, is_view, may_inplace, alloc_may_expand
constexpr OpInfo kOps[] = {
    {K::NONE, "NONE", 0, false, false, true},  // weights: a device may pad rows (e.g. quant tiles)
    {K::VIEW, "VIEW", 1, true, false, false},
    {K::RESHAPE, "RESHAPE", 1, true, false, false},
    {K::PERMUTE, "PERMUTE", 1, true, false, false},
    {K::TRANSPOSE, "TRANSPOSE", 1, true, false, false},
    {K::CPY, "CPY", 2, false, false, false},
    {K::DUP, "DUP", 1, false, false, false},
    {K::CONT, "CONT", 1, false, false, false},
    {K::CONCAT, "CONCAT", 2, false, false, false},
    {K::REPEAT, "REPEAT", 1, false, false, false},
    {K::REPEAT_BACK, "REPEAT_BACK", 1, false, false, false},
    {K::GET_ROWS, "GET_ROWS", 2, false, false, false},
    {K::GET_ROWS_BACK, "GET_ROWS_BACK", 2, false, false, false},
    {K::SET_ROWS, "SET_ROWS", 3, false, false, false},
    {K::ADD, "ADD", 2, false, true, false},
    {K::SUB, "SUB", 2, false, true, false},
    {K::MUL, "MUL", 2, false, true, false},
    {K::DIV, "DIV", 2, false, true, false},
    {K::ADD_ID, "ADD_ID", 3, false, true, false},
    {K::SCALE, "SCALE", 1, false, true, false},
    {K::CLAMP, "CLAMP", 1, false, true, false},
    {K::SILU, "SILU", 1, false, true, false},
    {K::GELU, "GELU", 1, false, true, false},
    {K::TANH, "TANH", 1, false, true, false},
    {K::SIGMOID, "SIGMOID", 1, false, true, false},
    {K::SOFTPLUS, "SOFTPLUS", 1, false, true, false},
    {K::EXP, "EXP", 1, false, true, false},
    {K::LOG, "LOG", 1, false, true, false},
    {K::SQR, "SQR", 1, false, true, false},
    {K::SQRT, "SQRT", 1, false, true, false},
    {K::SWIGLU, "SWIGLU", 2, false, true, false},
    {K::SWIGLU_OAI, "SWIGLU_OAI", 2, false, true, false},
    {K::SILU_BACK, "SILU_BACK", 2, false, true, false},
    {K::RMS_NORM, "RMS_NORM", 1, false, true, false},
    {K::NORM, "NORM", 1, false, true, false},
    {K::RMS_NORM_BACK, "RMS_NORM_BACK", 2, false, false, false},
    {K::SUM, "SUM", 1, false, false, false},
    {K::SUM_ROWS, "SUM_ROWS", 1, false, false, false},
    {K::MEAN, "MEAN", 1, false, false, false},
    {K::ARGMAX, "ARGMAX", 1, false, false, false},
    {K::ARGSORT, "ARGSORT", 1, false, false, false},
    {K::TOP_K, "TOP_K", 1, false, false, false},
    {K::COUNT_EQUAL, "COUNT_EQUAL", 2, false, false, false},
    {K::MUL_MAT, "MUL_MAT", 2, false, false, true},  // devices may keep rounded activations
    {K::MUL_MAT_ID, "MUL_MAT_ID", 3, false, false, true},  // devices may keep per-expert scratch
    {K::OUT_PROD, "OUT_PROD", 2, false, false, false},
    {K::ROPE, "ROPE", 2, false, true, false},
    {K::ROPE_BACK, "ROPE_BACK", 2, false, true, false},
    {K::SOFT_MAX, "SOFT_MAX", 1, false, true, false},
    {K::SOFT_MAX_BACK, "SOFT_MAX_BACK", 2, false, false, false},
    {K::FLASH_ATTN_EXT, "FLASH_ATTN_EXT", 3, false, false, true},  // devices may pad the output
    {K::CROSS_ENTROPY_LOSS, "CROSS_ENTROPY_LOSS", 2, false, false, false},
    {K::CROSS_ENTROPY_LOSS_BACK, "CROSS_ENTROPY_LOSS_BACK", 3, false, false, false},
    {K::OPT_STEP_ADAMW, "OPT_STEP_ADAMW", 5, false, false, false},
    {K::OPT_STEP_SGD, "OPT_STEP_SGD", 3, false, false, false},
    {K::ALL_REDUCE, "ALL_REDUCE", 1, false, false, false},
};
static_assert(std::size(kOps) == kOpCount, "op table must list every OpKind");

constexpr bool table_in_order() {
  for (int i = 0; i < kOpCount; ++i)
    if (static_cast<int>(kOps[i].kind) != i) return false;
  return true;
}
static_assert(table_in_order(), "op table order must follow the OpKind enum");

}  // namespace

const OpInfo& op_info(OpKind kind) { return kOps[static_cast<int>(kind)]; }

std::optional<OpKind> op_from_name(std::string_view name) {
  for (const OpInfo& info : kOps)
    if (name == info.name) return info.kind;
  return std::nullopt;
}

}  // namespace loom
