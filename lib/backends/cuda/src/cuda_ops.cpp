// Node -> kernel. Support is decided per node from types, strides and parameters; parameters a
// kernel does not read must be zero, so an op that grows a variant later falls back to the CPU
// instead of running the wrong maths here.
#include "cuda_ops.h"

#include <algorithm>
#include <cstring>

#include "../kernels/act_round.h"
#include "../kernels/kernels.h"
#include "cublas_lib.h"
#include "loom/core/error.h"
#include "loom/cpu/cpu.h"
#include "loom/graph/ops.h"

namespace loom::cuda {

namespace {

using k::TView;

TView view_of(const Tensor* t) {
  TView v{};
  if (!t) return v;
  v.data = static_cast<char*>(t->data);
  for (int i = 0; i < 4; ++i) {
    v.ne[i] = t->ne[i];
    v.nb[i] = (int64_t)t->nb[i];
  }
  v.type = (int)t->type;
  return v;
}

bool plain(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
bool kernel_type(DType t) { return plain(t) || k::block_shape((int)t).elems > 0; }
bool block_type(DType t) { return dtype_info(t).block_size > 1; }
bool f32(const Tensor* t) { return t && t->type == DType::F32; }
bool unit(const Tensor* t) { return t && t->nb[0] == dtype_info(t->type).type_size; }
// Rows readable by the kernels: plain types by stride, block types with dim 0 contiguous.
bool rows_ok(const Tensor* t) { return t && kernel_type(t->type) && (!block_type(t->type) || unit(t)); }
bool params_zero_from(const Tensor* n, int first) {
  for (int i = first; i < kMaxOpParams; ++i)
    if (n->op_params[i] != 0) return false;
  return true;
}
bool broadcasts(const Tensor* a, const Tensor* b) {
  for (int i = 0; i < kMaxDims; ++i)
    if (b->ne[i] == 0 || a->ne[i] % b->ne[i] != 0) return false;
  return true;
}
bool cublas_ready(const Tensor* a) {  // a usable by cuBLAS in place (plain, unit stride, aligned rows)
  return plain(a->type) && unit(a) && a->nb[1] % dtype_info(a->type).type_size == 0;
}

// Columns of b up to which the mat-vec kernel is used; beyond, cuBLAS (quantized a dequantized).
constexpr int64_t kMatVecMaxCols = 32;
size_t align256(size_t x) { return (x + 255) / 256 * 256; }

bool matmul_via_cublas(const Tensor* n) {
  const Tensor* a = n->src[0];
  return n->src[1]->ne[1] > kMatVecMaxCols && (cublas_ready(a) || (block_type(a->type) && a->is_contiguous()));
}

void check_blas(cublasStatus_t st, const char* what) {
  LOOM_CHECK(st == CUBLAS_STATUS_SUCCESS, internal, "CUDA: {} failed (cuBLAS status {})", what, (int)st);
}

cudaDataType blas_type(DType t) { return t == DType::F32 ? CUDA_R_32F : t == DType::F16 ? CUDA_R_16F : CUDA_R_16BF; }

// dst {M, N, b2, b3} = a^T b through cuBLAS, batch by batch (a broadcast over b's dims 2, 3).
void mul_mat_blas(const OpContext& c, Tensor* n) {
  const Tensor* a = n->src[0];
  const Tensor* b = n->src[1];
  const int64_t K = a->ne[0], M = a->ne[1], N = b->ne[1];
  const int64_t r2 = b->ne[2] / a->ne[2], r3 = b->ne[3] / a->ne[3];
  char* scratch = c.scratch;
  // a: in place when cuBLAS reads it, else dequantized to F16 (every batch matrix, contiguous)
  const void* a_data = a->data;
  DType at = a->type;
  int64_t lda = cublas_ready(a) ? (int64_t)(a->nb[1] / dtype_info(a->type).type_size) : K;
  size_t a_batch = cublas_ready(a) ? a->nb[2] : (size_t)(K * M) * 2;
  size_t a_batch3 = cublas_ready(a) ? a->nb[3] : a_batch * (size_t)a->ne[2];
  if (!cublas_ready(a)) {
    k::dequantize(c.stream, view_of(a), scratch, true);
    a_data = scratch;
    at = DType::F16;
    scratch += align256((size_t)(K * M * a->ne[2] * a->ne[3]) * 2);
  }
  // b: F32 in place for an F32 a, else converted to a's type (contiguous)
  const void* b_data = b->data;
  int64_t ldb = (int64_t)(b->nb[1] / sizeof(float));
  size_t b_batch = b->nb[2], b_batch3 = b->nb[3];
  if (at != DType::F32) {
    TView bv = view_of(b);
    TView conv{};
    conv.data = scratch;
    conv.type = (int)at;
    for (int i = 0; i < 4; ++i) conv.ne[i] = b->ne[i];
    conv.nb[0] = 2;
    for (int i = 1; i < 4; ++i) conv.nb[i] = conv.nb[i - 1] * conv.ne[i - 1];
    k::convert(c.stream, bv, conv);
    b_data = scratch;
    ldb = K;
    b_batch = (size_t)conv.nb[2];
    b_batch3 = (size_t)conv.nb[3];
  }
  const float one = 1.0f, zero = 0.0f;
  check_blas(cublas().set_stream(c.blas, c.stream), "cublasSetStream");
  for (int64_t i3 = 0; i3 < b->ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < b->ne[2]; ++i2) {
      const char* ap = static_cast<const char*>(a_data) + (i2 / r2) * a_batch + (i3 / r3) * a_batch3;
      const char* bp = static_cast<const char*>(b_data) + i2 * b_batch + i3 * b_batch3;
      char* cp = static_cast<char*>(n->data) + i2 * n->nb[2] + i3 * n->nb[3];
      check_blas(cublas().gemm_ex(c.blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)M, (int)N, (int)K, &one, ap, blas_type(at),
                                  (int)lda, bp, blas_type(at == DType::F32 ? DType::F32 : at), (int)ldb, &zero, cp,
                                  CUDA_R_32F, (int)(n->nb[1] / sizeof(float)), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
    }
}

// How the mat-vec kernels round b for a's type: as the CPU's kernels do for the same columns
// (cpu::matmul_activations). MUL_MAT_ID rounds for the columns one expert can meet at most (one
// per token): exact below `large_from` tokens, as in decode and short prompts.
int act_mode(const Tensor* a, int64_t cols) {
  static_assert((int)cpu::ActRounding::none == k::kActNone && (int)cpu::ActRounding::bf16 == k::kActBf16 &&
                (int)cpu::ActRounding::q8_32 == k::kActQ8_32 && (int)cpu::ActRounding::q8_256 == k::kActQ8_256);
  const cpu::MatmulActivations m = cpu::matmul_activations(a->type, a->ne[0]);
  return (int)(cols < m.large_from ? m.small : m.large);
}

// The rounding of a mat-vec product's activations: MUL_MAT by b's columns, MUL_MAT_ID by the
// columns one expert can meet (one per token).
int product_act_mode(const Tensor* n) {
  return act_mode(n->src[0], n->op == OpKind::MUL_MAT_ID ? n->src[2]->ne[1] : n->src[1]->ne[1]);
}

// The element-wise ops without parameters.
k::Unary plain_unary(OpKind op) {
  switch (op) {
    case OpKind::SILU:
      return k::Unary::silu;
    case OpKind::GELU:
      return k::Unary::gelu;
    case OpKind::TANH:
      return k::Unary::tanh;
    case OpKind::SIGMOID:
      return k::Unary::sigmoid;
    case OpKind::SOFTPLUS:
      return k::Unary::softplus;
    case OpKind::EXP:
      return k::Unary::exp;
    case OpKind::LOG:
      return k::Unary::log;
    case OpKind::SQR:
      return k::Unary::sqr;
    default:
      return k::Unary::sqrt;  // SQRT (run_op passes no other op)
  }
}

// ROPE's parameters as the CPU reads them (the YaRN ramp from ops::rope_ramp, as there).
k::RopeArgs rope_args(const Tensor* n) {
  const ops::RopeRamp ramp = ops::rope_ramp(n);
  k::RopeArgs r{};
  r.n_dims = n->param_i32(0);
  r.mode = n->param_i32(1);
  r.freq_base = n->param_f32(3);
  r.freq_scale = n->param_f32(4);
  r.mscale = ramp.mscale;
  r.ext_factor = n->param_f32(6);
  r.lo = ramp.lo;
  r.hi = ramp.hi;
  r.backward = n->op == OpKind::ROPE_BACK;
  return r;
}

void copy_bytes(const OpContext& c, void* dst, const void* src, size_t n) {
  if (dst != src && n) check_cuda(cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, c.stream), "copy");
}

// The local value of an ALL_REDUCE: a itself, or a's rows among zeros (all_gather_rows).
void place_rows(const OpContext& c, Tensor* n, const Tensor* a) {
  if (a->ne[0] == n->ne[0]) return copy_bytes(c, n->data, a->data, n->nbytes());
  check_cuda(cudaMemsetAsync(n->data, 0, n->nbytes(), c.stream), "zero");
  const size_t begin = (size_t)n->param_i32(0) * sizeof(float), width = (size_t)a->ne[0] * sizeof(float);
  check_cuda(cudaMemcpy2DAsync(static_cast<char*>(n->data) + begin, n->nb[1], a->data, a->nb[1], width,
                               (size_t)a->nrows(), cudaMemcpyDeviceToDevice, c.stream),
             "place rows");
}

}  // namespace

void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  (void)cudaGetLastError();  // clear a sticky non-fatal error
  if (e == cudaErrorMemoryAllocation) fail(ErrorKind::out_of_memory, "CUDA: {}: {}", what, cudaGetErrorString(e));
  fail(ErrorKind::internal, "CUDA: {}: {}", what, cudaGetErrorString(e));
}

bool op_supported(const Tensor* n) {
  const Tensor* a = n->src[0];
  const Tensor* b = n->src[1];
  if (op_info(n->op).is_view || n->op == OpKind::NONE) return true;
  if (!a) return false;
  switch (n->op) {
    case OpKind::ADD:
    case OpKind::SUB:
    case OpKind::MUL:
    case OpKind::DIV:
      return f32(n) && plain(a->type) && b && plain(b->type) && same_shape(*n, *a) && broadcasts(a, b) &&
             params_zero_from(n, 0);
    case OpKind::SCALE:
    case OpKind::CLAMP:
      return f32(n) && plain(a->type) && same_shape(*n, *a) && params_zero_from(n, 2);
    case OpKind::SILU:
    case OpKind::GELU:
    case OpKind::TANH:
    case OpKind::SIGMOID:
    case OpKind::SOFTPLUS:
    case OpKind::EXP:
    case OpKind::LOG:
    case OpKind::SQR:
    case OpKind::SQRT:
      return f32(n) && plain(a->type) && same_shape(*n, *a) && params_zero_from(n, 0);
    case OpKind::REPEAT:
      return f32(n) && plain(a->type) && broadcasts(n, a) && params_zero_from(n, 0);
    case OpKind::SWIGLU:
    case OpKind::SWIGLU_OAI:  // params: alpha, limit
      return f32(n) && plain(a->type) && b && plain(b->type) && same_shape(*a, *b) && same_shape(*n, *a) &&
             params_zero_from(n, n->op == OpKind::SWIGLU ? 0 : 2);
    case OpKind::ADD_ID: {
      const Tensor* ids = n->src[2];
      return f32(n) && plain(a->type) && b && plain(b->type) && ids && ids->type == DType::I32 && a->ne[3] == 1 &&
             b->ne[0] == a->ne[0] && ids->ne[0] == a->ne[1] && ids->ne[1] == a->ne[2] && same_shape(*n, *a);
    }
    case OpKind::CPY:
    case OpKind::DUP:
    case OpKind::CONT: {
      const Tensor* dst = n->op == OpKind::CPY ? b : n;
      if (!dst || dst->nelements() != a->nelements() || n->type != dst->type) return false;
      if (a->type == dst->type && a->is_contiguous() && dst->is_contiguous()) return true;  // bytes
      const auto elem = [](DType t) { return plain(t) || t == DType::I32; };
      return elem(a->type) && elem(dst->type) && (a->type == DType::I32) == (dst->type == DType::I32);
    }
    case OpKind::ALL_REDUCE:  // all_gather_rows: a's rows at column param 0 of n's
      return f32(a) && a->is_contiguous() && f32(n) && n->is_contiguous() && n->param_i32(0) >= 0 &&
             n->param_i32(0) + a->ne[0] <= n->ne[0] && a->nrows() == n->nrows();
    case OpKind::GET_ROWS:
      return f32(n) && rows_ok(a) && b && b->type == DType::I32;
    case OpKind::SET_ROWS: {
      const Tensor* ids = n->src[2];
      return plain(n->type) && f32(b) && ids && ids->type == DType::I32 && ids->ne[3] == 1;
    }
    case OpKind::RMS_NORM:
    case OpKind::NORM:
      return f32(n) && plain(a->type) && same_shape(*n, *a) && params_zero_from(n, 1);
    case OpKind::ROPE:
    case OpKind::ROPE_BACK: {
      const int mode = n->param_i32(1);
      return f32(n) && f32(a) && same_shape(*n, *a) && b && b->type == DType::I32 &&
             (mode == ops::kRopeNormal || mode == ops::kRopeNeox) && (!n->src[2] || f32(n->src[2])) &&
             n->param_i32(0) <= a->ne[0] && (n->param_f32(6) == 0.0f || n->param_i32(2) > 0) &&
             params_zero_from(n, 9) && !n->src[3];
    }
    case OpKind::SOFT_MAX:
      return f32(n) && f32(a) && same_shape(*n, *a) && (!b || b->type == DType::F32 || b->type == DType::F16) &&
             (!n->src[2] || (f32(n->src[2]) && unit(n->src[2]) && n->src[2]->nelements() >= a->ne[2])) &&
             params_zero_from(n, 2);
    case OpKind::FLASH_ATTN_EXT: {
      const Tensor* kk = n->src[1];
      const Tensor* v = n->src[2];
      const Tensor* m = n->src[3];
      const Tensor* sinks = n->src[4];
      return f32(n) && f32(a) && kk && v && plain(kk->type) && plain(v->type) && a->ne[0] <= k::max_head_dim() &&
             v->ne[0] <= k::max_head_dim() && (!m || m->type == DType::F32 || m->type == DType::F16) &&
             (!sinks || (f32(sinks) && unit(sinks) && sinks->nelements() >= a->ne[2])) && params_zero_from(n, 3);
    }
    case OpKind::MUL_MAT:
      return f32(n) && unit(n) && rows_ok(a) && f32(b) && unit(b) && params_zero_from(n, 0);
    case OpKind::MUL_MAT_ID: {
      const Tensor* ids = n->src[2];
      return f32(n) && rows_ok(a) && f32(b) && unit(b) && ids && ids->type == DType::I32 && params_zero_from(n, 0);
    }
    case OpKind::OUT_PROD:
      return f32(n) && plain(a->type) && b && plain(b->type);
    case OpKind::ARGSORT:
    case OpKind::TOP_K:
      return n->type == DType::I32 && plain(a->type) && a->ne[0] <= k::max_sort_row() && params_zero_from(n, 1);
    case OpKind::ARGMAX:
      return n->type == DType::I32 && plain(a->type) && a->ne[2] == 1 && a->ne[3] == 1;
    case OpKind::SUM_ROWS:
    case OpKind::MEAN:
      return f32(n) && plain(a->type);
    case OpKind::CROSS_ENTROPY_LOSS:
      return f32(n) && f32(a) && f32(b);
    case OpKind::CROSS_ENTROPY_LOSS_BACK:
      return f32(n) && plain(a->type) && f32(b) && f32(n->src[2]);
    case OpKind::OPT_STEP_ADAMW:
      for (int i = 0; i < 5; ++i)
        if (!f32(n->src[i]) || !n->src[i]->is_contiguous()) return false;
      return true;
    case OpKind::OPT_STEP_SGD:
      for (int i = 0; i < 3; ++i)
        if (!f32(n->src[i]) || !n->src[i]->is_contiguous()) return false;
      return true;
    default:
      return false;
  }
}

size_t op_scratch(const Tensor* n) {
  if (n->op == OpKind::CROSS_ENTROPY_LOSS) return sizeof(double) * (size_t)n->src[0]->nrows();
  if (n->op != OpKind::MUL_MAT && n->op != OpKind::MUL_MAT_ID) return 0;
  const Tensor* a = n->src[0];
  const Tensor* b = n->src[1];
  if (n->op == OpKind::MUL_MAT_ID || !matmul_via_cublas(n))  // the mat-vec kernels: b's columns rounded
    return k::act_scratch_bytes(b->ne[0], b->nelements() / b->ne[0], product_act_mode(n));
  size_t bytes = 0;
  if (!cublas_ready(a)) bytes += align256((size_t)a->nelements() * 2);
  if (!cublas_ready(a) || a->type != DType::F32) bytes += align256((size_t)b->nelements() * 2);
  return bytes;
}

void run_op(const OpContext& c, Tensor* n) {
  if (op_info(n->op).is_view || n->op == OpKind::NONE || n->nelements() == 0) return;
  const Tensor* a = n->src[0];
  const Tensor* b = n->src[1];
  const cudaStream_t s = c.stream;
  const TView va = view_of(a), vb = view_of(b), vd = view_of(n);
  switch (n->op) {
    case OpKind::ADD:
      k::binary(s, k::Binary::add, va, vb, vd);
      break;
    case OpKind::SUB:
      k::binary(s, k::Binary::sub, va, vb, vd);
      break;
    case OpKind::MUL:
      k::binary(s, k::Binary::mul, va, vb, vd);
      break;
    case OpKind::DIV:
      k::binary(s, k::Binary::div, va, vb, vd);
      break;
    case OpKind::SCALE:
      k::unary(s, k::Unary::scale, va, vd, n->param_f32(0), n->param_f32(1));
      break;
    case OpKind::CLAMP:
      k::unary(s, k::Unary::clamp, va, vd, n->param_f32(0), n->param_f32(1));
      break;
    case OpKind::SILU:
    case OpKind::GELU:
    case OpKind::TANH:
    case OpKind::SIGMOID:
    case OpKind::SOFTPLUS:
    case OpKind::EXP:
    case OpKind::LOG:
    case OpKind::SQR:
    case OpKind::SQRT:
      k::unary(s, plain_unary(n->op), va, vd, 0, 0);
      break;
    case OpKind::REPEAT:
      k::unary(s, k::Unary::tile, va, vd, 0, 0);
      break;
    case OpKind::SWIGLU:
      k::swiglu(s, va, vb, vd);
      break;
    case OpKind::SWIGLU_OAI:
      k::swiglu(s, va, vb, vd, true, n->param_f32(0), n->param_f32(1));
      break;
    case OpKind::ADD_ID:
      k::add_id(s, va, vb, view_of(n->src[2]), vd);
      break;
    case OpKind::CPY:
    case OpKind::DUP:
    case OpKind::CONT: {
      const Tensor* dst = n->op == OpKind::CPY ? b : n;
      if (a->type == dst->type && a->is_contiguous() && dst->is_contiguous())
        copy_bytes(c, n->data, a->data, n->nbytes());
      else
        k::convert(s, va, view_of(n));
      break;
    }
    case OpKind::ALL_REDUCE:
      place_rows(c, n, a);
      break;
    case OpKind::GET_ROWS:
      k::get_rows(s, va, vb, vd);
      break;
    case OpKind::SET_ROWS:
      k::set_rows(s, vb, view_of(n->src[2]), vd);
      break;
    case OpKind::RMS_NORM:
      k::rms_norm(s, va, TView{}, vd, n->param_f32(0));
      break;
    case OpKind::NORM:
      k::norm(s, va, vd, n->param_f32(0));
      break;
    case OpKind::ROPE:
    case OpKind::ROPE_BACK: {
      k::rope(s, va, vb, view_of(n->src[2]), vd, rope_args(n));
      break;
    }
    case OpKind::SOFT_MAX:
      k::soft_max(s, va, vb, view_of(n->src[2]), vd, n->param_f32(0), n->param_f32(1));
      break;
    case OpKind::FLASH_ATTN_EXT:
      k::flash_attn(s, va, vb, view_of(n->src[2]), view_of(n->src[3]), view_of(n->src[4]), vd, n->param_f32(0),
                    n->param_f32(1), n->param_f32(2));
      break;
    case OpKind::MUL_MAT:
      if (matmul_via_cublas(n))
        mul_mat_blas(c, n);
      else
        k::mul_mat_q(s, va, vb, vd, product_act_mode(n), reinterpret_cast<float*>(c.scratch));
      break;
    case OpKind::MUL_MAT_ID:
      k::mul_mat_id(s, va, vb, view_of(n->src[2]), vd, product_act_mode(n), reinterpret_cast<float*>(c.scratch));
      break;
    case OpKind::OUT_PROD:
      k::out_prod(s, va, vb, vd);
      break;
    case OpKind::ARGSORT:
      k::argsort(s, va, vd, n->param_i32(0) == (int32_t)ops::SortOrder::descending, (int)a->ne[0]);
      break;
    case OpKind::TOP_K:
      k::argsort(s, va, vd, true, (int)n->ne[0]);
      break;
    case OpKind::ARGMAX:
      k::argmax(s, va, vd);
      break;
    case OpKind::SUM_ROWS:
      k::sum_rows(s, va, vd, false);
      break;
    case OpKind::MEAN:
      k::sum_rows(s, va, vd, true);
      break;
    case OpKind::CROSS_ENTROPY_LOSS:
      k::cross_entropy(s, va, vb, vd, reinterpret_cast<double*>(c.scratch));
      break;
    case OpKind::CROSS_ENTROPY_LOSS_BACK:
      k::cross_entropy_back(s, va, vb, view_of(n->src[2]), vd);
      break;
    case OpKind::OPT_STEP_ADAMW:
      k::adamw(s, va, vb, view_of(n->src[2]), view_of(n->src[3]), view_of(n->src[4]));
      break;
    case OpKind::OPT_STEP_SGD:
      k::sgd(s, va, vb, view_of(n->src[2]));
      break;
    default:
      fail(ErrorKind::unsupported, "CUDA has no kernel for {} '{}'", op_name(n->op), n->name);
  }
  check_cuda(cudaGetLastError(), op_name(n->op));
}

namespace {
bool overlaps(const Tensor* x, const Tensor* y) {
  const char* a0 = static_cast<const char*>(x->data);
  const char* b0 = static_cast<const char*>(y->data);
  return a0 < b0 + y->nbytes() && b0 < a0 + x->nbytes();
}
}  // namespace

bool fused_supported(const FusedGroup& g) {
  switch (g.kind) {
    case FusionKind::rms_norm_mul: {
      const Tensor* x = g.inputs[0];
      const Tensor* w = g.inputs[1];
      const Tensor* y = g.outputs[0];
      return plain(x->type) && plain(w->type) && f32(y) && same_shape(*x, *y) && broadcasts(y, w);
    }
    case FusionKind::topk_moe: {
      const Tensor* logits = g.inputs[0];
      const Tensor* bias = g.inputs.size() > 1 ? g.inputs[1] : nullptr;
      const Tensor* w = g.outputs[0];
      const Tensor* ids = g.outputs[1];
      if (!f32(logits) || !unit(logits) || g.n_expert > k::max_sort_row() || g.k > g.n_expert) return false;
      if (bias && (!f32(bias) || bias->nelements() != g.n_expert)) return false;
      if (!f32(w) || !w->is_contiguous() || ids->type != DType::I32 || !ids->is_contiguous()) return false;
      return !overlaps(w, logits) && !overlaps(ids, logits) && !overlaps(w, ids);
    }
  }
  return false;
}

void run_fused(const OpContext& c, const FusedGroup& g) {
  switch (g.kind) {
    case FusionKind::rms_norm_mul:
      k::rms_norm(c.stream, view_of(g.inputs[0]), view_of(g.inputs[1]), view_of(g.outputs[0]), g.eps);
      break;
    case FusionKind::topk_moe: {
      const k::TopkMoeArgs a{g.gating == MoeGating::sigmoid,
                             g.normalize,
                             g.has_scale,
                             g.gate_scale,
                             g.scale,
                             g.scale_bias,
                             (int)g.n_expert,
                             (int)g.k,
                             (int)g.n_tokens};
      k::topk_moe(c.stream, view_of(g.inputs[0]), view_of(g.inputs.size() > 1 ? g.inputs[1] : nullptr),
                  static_cast<float*>(g.outputs[0]->data), static_cast<int32_t*>(g.outputs[1]->data), a);
      break;
    }
  }
  check_cuda(cudaGetLastError(), fusion_name(g.kind));
}

}  // namespace loom::cuda
