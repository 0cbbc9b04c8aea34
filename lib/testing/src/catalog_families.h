// The catalog's family files (catalog_<family>.cpp) and helpers they share for naming cases.
#pragma once

#include <string>
#include <vector>

#include "loom/core/dtype.h"
#include "loom/graph/ops.h"
#include "loom/testing/op_case.h"

namespace loom::testing::detail {

void add_copy_cases(std::vector<OpCase>& out);         // CPY DUP CONT CONCAT REPEAT(_BACK) GET_ROWS(_BACK) SET_ROWS
void add_elementwise_cases(std::vector<OpCase>& out);  // binary, unary, scalar, SWIGLU, SILU_BACK, ADD_ID
void add_norm_reduce_cases(std::vector<OpCase>& out);  // norms, SUM.., ARGMAX, ARGSORT, TOP_K, COUNT_EQUAL
void add_matmul_cases(std::vector<OpCase>& out);       // MUL_MAT MUL_MAT_ID OUT_PROD
void add_attention_cases(std::vector<OpCase>& out);    // ROPE(_BACK) SOFT_MAX(_BACK) FLASH_ATTN_EXT
void add_train_cases(std::vector<OpCase>& out);        // CROSS_ENTROPY_LOSS(_BACK) OPT_STEP_*
void add_fusion_cases(std::vector<OpCase>& out);       // RMS_NORM_MUL TOPK_MOE

inline const char* tn(DType t) { return dtype_name(t); }

// Every type a weight can have: the plain floats and each quantized type.
inline constexpr DType kWeightTypes[] = {DType::F32,    DType::F16,     DType::BF16,   DType::Q8_0,  DType::Q4_0,
                                         DType::Q4_K,   DType::Q6_K,    DType::Q4_1,   DType::Q5_0,  DType::Q5_1,
                                         DType::IQ4_NL, DType::MXFP4,   DType::Q2_K,   DType::Q3_K,  DType::Q5_K,
                                         DType::IQ4_XS, DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS,
                                         DType::IQ3_S,  DType::IQ1_S,   DType::IQ1_M};

// Adds a case and returns it for further settings.
inline OpCase& add_case(std::vector<OpCase>& out, std::string op, std::string params, uint32_t modes,
                        std::function<void(CaseBuilder&)> build) {
  OpCase c;
  c.op = std::move(op);
  c.params = std::move(params);
  c.modes = modes;
  c.build = std::move(build);
  out.push_back(std::move(c));
  return out.back();
}

// A view of `t` with dims 0 and 1 swapped and made non-contiguous: a leaf {ne1, ne0, ...}
// transposed, so the op reads it through strides.
inline Tensor* transposed_input(CaseBuilder& b, DType type, int64_t ne0, int64_t ne1, int64_t ne2 = 1,
                                int64_t ne3 = 1, LeafInit init = {}) {
  Tensor* leaf = b.input(type, {ne1, ne0, ne2, ne3}, init);
  return ops::transpose(b.ctx(), leaf);
}

// A view selecting every other row of a leaf {ne0, 2 ne1, ne2, ne3}: contiguous rows, strided dim 1.
inline Tensor* strided_rows_input(CaseBuilder& b, DType type, int64_t ne0, int64_t ne1, int64_t ne2 = 1,
                                  int64_t ne3 = 1, LeafInit init = {}) {
  Tensor* leaf = b.input(type, {ne0, 2 * ne1, ne2, ne3}, init);
  return ops::view_4d(b.ctx(), leaf, ne0, ne1, ne2, ne3, 2 * leaf->nb[1], leaf->nb[2], leaf->nb[3], leaf->nb[1]);
}

}  // namespace loom::testing::detail
