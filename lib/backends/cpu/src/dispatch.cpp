// OpKind -> kernel family. The only place that knows which family owns an op.
#include "dispatch.h"

namespace loom::cpu {

namespace {
enum class Family { none, view, copy, elementwise, norm, reduce, matmul, attention, train };

Family family_of(OpKind op) {
  switch (op) {
    case OpKind::NONE: return Family::none;
    case OpKind::VIEW:
    case OpKind::RESHAPE:
    case OpKind::PERMUTE:
    case OpKind::TRANSPOSE: return Family::view;
    case OpKind::CPY:
    case OpKind::DUP:
    case OpKind::CONT:
    case OpKind::CONCAT:
    case OpKind::REPEAT:
    case OpKind::REPEAT_BACK:
    case OpKind::GET_ROWS:
    case OpKind::GET_ROWS_BACK:
    case OpKind::SET_ROWS:
    case OpKind::ALL_REDUCE: return Family::copy;
    case OpKind::ADD:
    case OpKind::SUB:
    case OpKind::MUL:
    case OpKind::DIV:
    case OpKind::ADD_ID:
    case OpKind::SCALE:
    case OpKind::CLAMP:
    case OpKind::SILU:
    case OpKind::GELU:
    case OpKind::TANH:
    case OpKind::SIGMOID:
    case OpKind::SOFTPLUS:
    case OpKind::EXP:
    case OpKind::LOG:
    case OpKind::SQR:
    case OpKind::SQRT:
    case OpKind::SWIGLU:
    case OpKind::SWIGLU_OAI:
    case OpKind::SILU_BACK: return Family::elementwise;
    case OpKind::RMS_NORM:
    case OpKind::NORM:
    case OpKind::RMS_NORM_BACK: return Family::norm;
    case OpKind::SUM:
    case OpKind::SUM_ROWS:
    case OpKind::MEAN:
    case OpKind::ARGMAX:
    case OpKind::ARGSORT:
    case OpKind::TOP_K:
    case OpKind::COUNT_EQUAL: return Family::reduce;
    case OpKind::MUL_MAT:
    case OpKind::MUL_MAT_ID:
    case OpKind::OUT_PROD: return Family::matmul;
    case OpKind::ROPE:
    case OpKind::ROPE_BACK:
    case OpKind::SOFT_MAX:
    case OpKind::SOFT_MAX_BACK:
    case OpKind::FLASH_ATTN_EXT: return Family::attention;
    case OpKind::CROSS_ENTROPY_LOSS:
    case OpKind::CROSS_ENTROPY_LOSS_BACK:
    case OpKind::OPT_STEP_ADAMW:
    case OpKind::OPT_STEP_SGD: return Family::train;
    case OpKind::COUNT: break;
  }
  return Family::none;
}
}  // namespace

// A repacked weight (cpu_repack.h) is read whole by MUL_MAT / MUL_MAT_ID as their weights and
// by GET_ROWS (a tied token embedding), by nothing else.
bool reads_repacked_wrongly(const Tensor* node) {
  for (int i = 0; i < kMaxSrc; ++i) {
    const Tensor* s = node->src[i];
    if (!s) continue;
    const bool repacked = s->has_flag(kFlagRepacked) || (s->view_src && s->view_src->has_flag(kFlagRepacked));
    const bool reader = node->op == OpKind::MUL_MAT || node->op == OpKind::MUL_MAT_ID || node->op == OpKind::GET_ROWS;
    if (repacked && !(reader && i == 0 && !s->is_view())) return true;
  }
  return false;
}

bool supports_node(const Tensor* node) {
  const Family family = family_of(node->op);
  if (family != Family::none && family != Family::view && reads_repacked_wrongly(node)) return false;
  switch (family) {
    case Family::none:
    case Family::view: return true;
    case Family::copy: return supports_copy(node);
    case Family::elementwise: return supports_elementwise(node);
    case Family::norm: return supports_norm(node);
    case Family::reduce: return supports_reduce(node);
    case Family::matmul: return supports_matmul(node);
    case Family::attention: return supports_attention(node);
    case Family::train: return supports_train(node);
  }
  return false;
}

size_t work_size(const Tensor* node, int nth) {
  switch (family_of(node->op)) {
    case Family::none:
    case Family::view: return 0;
    case Family::copy: return work_size_copy(node, nth);
    case Family::elementwise: return work_size_elementwise(node, nth);
    case Family::norm: return work_size_norm(node, nth);
    case Family::reduce: return work_size_reduce(node, nth);
    case Family::matmul: return work_size_matmul(node, nth);
    case Family::attention: return work_size_attention(node, nth);
    case Family::train: return work_size_train(node, nth);
  }
  return 0;
}

void compute_node(const KernelArgs& args, Tensor* node) {
  switch (family_of(node->op)) {
    case Family::none:
    case Family::view: return;
    case Family::copy: return compute_copy(args, node);
    case Family::elementwise: return compute_elementwise(args, node);
    case Family::norm: return compute_norm(args, node);
    case Family::reduce: return compute_reduce(args, node);
    case Family::matmul: return compute_matmul(args, node);
    case Family::attention: return compute_attention(args, node);
    case Family::train: return compute_train(args, node);
  }
}

}  // namespace loom::cpu
