// CPU kernels of the matmul family: MUL_MAT, MUL_MAT_ID (experts) and OUT_PROD.
// Threads split the rows of the weights a (MUL_MAT: claimed dynamically from the pool). Per node b is prepared once:
// converted to f32 when it is not already f32 rows, and quantized to int8 blocks for the quantized weight types
// (cpu_vec_dot.h). A small b (decode) is prepared by every thread for itself, so no barrier is
// needed; a larger one is shared, then a barrier. Each weight matrix x set of columns then
// takes one path:
//   dot     - the per-type fused row kernels, up to kMaxDotCols columns per pass over a block of rows;
//   gemm    - blocked products over packed panels and register tiles (simd_gemm.h) from
//             kGemmMinCols columns on levels that have tiles (f32 tiles, or int8 tiles for the
//             quantized types);
//   strided - a transposed float view of a, gathered into f32 rows first, then the f32 dot.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu_repack.h"
#include "cpu_rows.h"
#include "cpu_vec_dot.h"
#include "kernels.h"
#include "loom/core/error.h"
#include "loom/cpu/cpu.h"
#include "simd_gemm.h"
#include "simd_units.h"

namespace loom::cpu {
namespace {

constexpr int64_t kRowBlock = 16;            // rows of a per dot work unit (at most)
constexpr int64_t kGemmMinCols = 16;         // columns of one matrix from which the gemm path is taken
constexpr int64_t kPrivateBElems = 1 << 15;  // b elements up to which every thread prepares b itself
static_assert(kRowBlock % (2 * kRepackRows) == 0, "a dot unit starts a pair of repacked groups");

size_t align64(size_t x) { return (x + 63) / 64 * 64; }
char* scratch_base(const KernelArgs& args) {
  const auto p = reinterpret_cast<uintptr_t>(args.wdata);
  return reinterpret_cast<char*>((p + 63) / 64 * 64);
}

bool unit_stride(const Tensor* t) { return t->nb[0] == dtype_info(t->type).type_size; }

// A whole row of n elements (stride nb0) of a plain float or (unit-stride) quantized type -> f32.
void row_to_f32_fast(DType type, const char* src, size_t nb0, int64_t n, float* dst) {
  if (nb0 == dtype_info(type).type_size || dtype_info(type).block_size > 1) {
    weight_kernels(type)->to_f32(src, dst, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = load_f32(type, src + i * nb0);
}

// Rows of t (all ne1*ne2*ne3 of them) -> contiguous f32 at dst, thread ith of nth doing its share.
void convert_rows(const Tensor* t, float* dst, int ith, int nth) {
  int64_t r0, r1;
  split_rows(t->nrows(), ith, nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    unravel_row(r, t->ne, i1, i2, i3);
    row_to_f32_fast(t->type, row_ptr(t, i1, i2, i3), t->nb[0], t->ne[0], dst + r * t->ne[0]);
  }
}

// ---- plan: path, prepared forms of b and the scratch layout ----------------------------------

enum class Path : uint8_t { dot, gemm_f32, gemm_q8, strided };

Path choose_path(const Tensor* a, int64_t ncols, const GemmKernels* gk) {
  if (a->has_flag(kFlagRepacked)) {  // rows in 8-row groups: the level's rows_dot_r8, or a GEMM packing from them
    LOOM_CHECK(repacked_kernels(a->type), unsupported, "MUL_MAT: {} is repacked for kernels this CPU level lacks",
               a->name);
    return gk && ncols >= kGemmMinCols && gemm_q8_supported(gk, a->type) ? Path::gemm_q8 : Path::dot;
  }
  if (!unit_stride(a)) return Path::strided;
  if (gk && ncols >= kGemmMinCols) return gemm_q8_supported(gk, a->type) ? Path::gemm_q8 : Path::gemm_f32;
  return Path::dot;
}

// Whether a path reads b as f32 columns (else as the weight type's int8 columns).
bool path_reads_f32(Path path, ActType act) {
  return path == Path::strided || path == Path::gemm_f32 || (path == Path::dot && act == ActType::f32);
}

// Rows of a per work unit of a path (whole 32-row tiles for gemm, a multiple of 8 for repacked
// weights, of 16 for those in pairs), shrunk while the units of `matrices` matrices are fewer
// than 4 per thread: units are claimed dynamically, and a thread the shared host slows down then
// leaves at most a small unit to wait for (2 per thread: F32 GEMM 1024^3 ~4% slower on 2
// threads).
int64_t unit_rows(Path path, DType type, int64_t M, int64_t matrices, int64_t K, int nth, uint32_t flags) {
  const bool gemm = path == Path::gemm_f32 || path == Path::gemm_q8;
  int64_t rb = gemm ? gemm_panel_rows(path == Path::gemm_q8 ? gemm_q8_block_bytes(type) : 0, K) : kRowBlock;
  const int64_t min_rb = gemm                         ? 32
                         : flags & kFlagRepackedPairs ? 2 * kRepackRows
                         : flags & kFlagRepacked      ? kRepackRows
                                                      : 1;
  while (rb > min_rb && matrices * ceil_div(M, rb) < 4 * (int64_t)nth) rb = gemm ? rb / 2 / 32 * 32 : rb / 2;
  return std::max(rb, min_rb);
}

// Scratch layout shared by work_size and compute (offsets from the 64-aligned scratch base):
// [shared f32 copy of b][shared int8 columns][shared q8 columns][shared packed b][ids][per-thread
// slices], a slice being [private f32 copy][private int8 columns][private q8 columns][pointer
// arrays][path work].
struct MatmulPlan {
  const WeightKernels* wk = nullptr;
  const GemmKernels* gk = nullptr;
  ActType act = ActType::f32;  // the dot kernels' form of b
  Path path = Path::dot;       // MUL_MAT; MUL_MAT_ID picks per expert (dot below kGemmMinCols columns)
  bool convert_b = false;      // b is not f32 rows, or round_f32: an f32 copy is made
  bool round_f32 = false;      // the f32 copy holds b rounded as the dots' q8k columns round it
  bool need_act = false;       // int8 columns for the dot kernels (act) are made
  bool need_q8 = false;        // 32-value q8 columns for the int8 GEMM are made apart (act is not q8 or not made),
                               // rounded as act rounds: q8k's 256-value blocks split in eight
  bool private_b = false;      // per thread, no barrier
  bool pack_b = false;         // gemm_f32 over one matrix: b packed once for all threads (else per panel)
  size_t f32_off = 0, act_off = 0, q8_off = 0, bpack_off = 0, ids_off = 0, slices_off = 0, slice_stride = 0;
  size_t s_f32 = 0, s_act = 0, s_q8 = 0, s_ptrs = 0, s_work = 0;  // offsets within a slice
  size_t total = 0;
};

// The form of b a path reads.
enum class BForm : uint8_t { f32, act, q8 };
BForm form_of(Path path, ActType act) {
  if (path_reads_f32(path, act)) return BForm::f32;
  return path == Path::gemm_q8 ? BForm::q8 : BForm::act;
}

MatmulPlan plan_mul_mat(const Tensor* node, int nth) {
  const Tensor* a = node->src[0];
  const Tensor* b = node->src[1];
  const bool is_id = node->op == OpKind::MUL_MAT_ID;
  const int64_t K = a->ne[0];
  MatmulPlan p;
  p.wk = weight_kernels(a->type);
  p.gk = gemm_kernels(active_isa());
  // MUL_MAT: columns of one matrix; MUL_MAT_ID: all (n_used x T) columns may land on one expert.
  const int64_t ncols = is_id ? node->ne[1] * node->ne[2] : b->ne[1];
  p.path = choose_path(a, ncols, p.gk);
  p.act = p.wk->act;
  // The forms of b the node reads: its path's, and for experts also the dot path's (sparse ones).
  bool reads[3] = {};
  reads[(int)form_of(p.path, p.act)] = true;
  if (is_id && p.path != Path::strided) reads[(int)form_of(Path::dot, p.act)] = true;
  const bool need_f32 = reads[(int)BForm::f32];
  p.need_act = reads[(int)BForm::act];
  p.need_q8 = reads[(int)BForm::q8] && !(p.need_act && p.act == ActType::q8);  // else the int8 columns serve
  // The i-quants' f32 GEMM reads b rounded to Q8_K's 256-value blocks as their dots do (and
  // llama.cpp's products for every batch): a prompt's numerics are then its decode's.
  p.round_f32 = need_f32 && p.act == ActType::q8k;
  // An f32 copy is also the source of quantization when b is not f32 rows.
  p.convert_b = (!unit_f32_rows(b) || p.round_f32) && (need_f32 || p.need_act || p.need_q8);
  p.private_b = !is_id && b->nelements() <= kPrivateBElems;
  const size_t f32_bytes = p.convert_b ? align64(sizeof(float) * (size_t)b->nelements()) : 0;
  const size_t act_bytes = p.need_act ? align64(act_row_bytes(p.act, K) * (size_t)b->nrows()) : 0;
  const size_t q8_bytes = p.need_q8 ? align64(act_row_bytes(ActType::q8, K) * (size_t)b->nrows()) : 0;
  // Packing b once pays when several panels would each pack it: one matrix whose rows (not
  // columns) are split between the threads, b shared anyway.
  const int64_t M = a->ne[1], batches = b->ne[2] * b->ne[3];
  p.pack_b = !is_id && p.path == Path::gemm_f32 && !p.private_b && batches == 1 &&
             (p.convert_b || b->nb[1] % sizeof(float) == 0) &&
             ceil_div(M, unit_rows(p.path, a->type, M, 1, K, nth, 0)) >= nth;
  const size_t bpack_bytes = p.pack_b ? align64(gemm_f32_packed_bytes(*p.gk, a->type, K, b->ne[1])) : 0;

  size_t off = 0;
  if (!p.private_b) {
    p.f32_off = off;
    off += f32_bytes;
    p.act_off = off;
    off += act_bytes;
    p.q8_off = off;
    off += q8_bytes;
    p.bpack_off = off;
    off += bpack_bytes;
  }
  if (is_id) {  // per expert: count, start, next; then (i, t) pairs
    p.ids_off = off;
    off = align64(off + sizeof(int64_t) * 3 * (size_t)(a->ne[2] + 1) +
                  sizeof(int32_t) * 2 * (size_t)node->ne[1] * (size_t)node->ne[2]);
  }
  size_t s = 0;
  if (p.private_b) {
    p.s_f32 = s;
    s += f32_bytes;
    p.s_act = s;
    s += act_bytes;
    p.s_q8 = s;
    s += q8_bytes;
  }
  p.s_ptrs = s;
  s += align64(2 * sizeof(void*) * (size_t)std::max<int64_t>(ncols, kMaxDotCols));
  p.s_work = s;
  switch (p.path) {
    case Path::strided:
      s += align64(sizeof(float) * (size_t)(kRowBlock * K));
      break;
    case Path::gemm_f32:
      s += align64(gemm_scratch_bytes(0, K, a->ne[1]));
      break;
    case Path::gemm_q8:
      s += align64(gemm_scratch_bytes(gemm_q8_block_bytes(a->type), K, a->ne[1]));
      break;
    default:
      break;
  }
  p.slices_off = off;
  p.slice_stride = align64(s);
  p.total = off + p.slice_stride * (size_t)nth + 64;  // + alignment of the base
  return p;
}

// Prepared views of b: column (i1, i2, i3) as f32 and as int8 blocks.
struct BCols {
  const Tensor* b;
  const char* f32 = nullptr;  // contiguous f32 copy, or nullptr: b itself (f32 rows)
  const char* act = nullptr;
  const char* q8 = nullptr;  // the int8 GEMM's columns (act itself when act is q8)
  size_t f32_row = 0, act_row = 0, q8_row = 0;
  int64_t flat(int64_t i1, int64_t i2, int64_t i3) const { return (i3 * b->ne[2] + i2) * b->ne[1] + i1; }
  const float* f(int64_t i1, int64_t i2, int64_t i3) const {
    return reinterpret_cast<const float*>(f32 ? f32 + flat(i1, i2, i3) * f32_row : row_ptr(b, i1, i2, i3));
  }
  const void* q(int64_t i1, int64_t i2, int64_t i3) const { return act + flat(i1, i2, i3) * act_row; }
  const void* at(BForm form, int64_t i1, int64_t i2, int64_t i3) const {
    if (form == BForm::f32) return f(i1, i2, i3);
    return form == BForm::act ? q(i1, i2, i3) : q8 + flat(i1, i2, i3) * q8_row;
  }
};

// x[0, K) -> 32-value int8 columns holding x as the 256-value blocks (Q8_K) round it: each block's
// d and values split over its eight, their sums counted. The blocks are read from `blocks` (x
// already quantized) or made here by `quant`.
void q8_from_q8k(QuantizeActFn quant, const char* blocks, const float* x, BlockQ8A* out, int64_t K) {
  BlockQ8KA tmp;
  for (int64_t i = 0; i < K; i += 256, out += 8) {
    const BlockQ8KA* k = &tmp;
    if (blocks)
      k = reinterpret_cast<const BlockQ8KA*>(blocks + act_row_bytes(ActType::q8k, i));
    else
      quant(x + i, &tmp, 256);
    for (int j = 0; j < 8; ++j) {
      out[j].d = k->d;
      std::memcpy(out[j].qs, k->qs + 32 * j, 32);
      out[j].sum = k->bsums[2 * j] + k->bsums[2 * j + 1];
    }
  }
}

// x[0, K) -> y: the values its 256-value int8 blocks (Q8_K) stand for, d * q (y may be x). The
// blocks are read from `blocks` or made here by `quant`, as in q8_from_q8k.
void round_q8k(QuantizeActFn quant, const char* blocks, const float* x, float* y, int64_t K) {
  BlockQ8KA tmp;
  for (int64_t i = 0; i < K; i += 256) {
    const BlockQ8KA* k = &tmp;
    if (blocks)
      k = reinterpret_cast<const BlockQ8KA*>(blocks + act_row_bytes(ActType::q8k, i));
    else
      quant(x + i, &tmp, 256);
    for (int j = 0; j < 256; ++j) y[i + j] = k->d * (float)k->qs[j];
  }
}

// Converts / quantizes rows [r0, r1) of b into the views' buffers (row = a flat column index).
void prepare_b(const MatmulPlan& p, const Tensor* b, const BCols& v, int64_t r0, int64_t r1) {
  const QuantizeActFn quant = p.need_act ? quantize_act(p.act) : nullptr;
  const QuantizeActFn quant8 = p.need_q8 && p.act != ActType::q8k ? quantize_act(ActType::q8) : nullptr;
  const QuantizeActFn quant8k =  // q8k blocks the act columns do not already hold
      p.act == ActType::q8k && !p.need_act && (p.need_q8 || p.round_f32) ? quantize_act(ActType::q8k) : nullptr;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    unravel_row(r, b->ne, i1, i2, i3);
    const float* src = reinterpret_cast<const float*>(row_ptr(b, i1, i2, i3));
    if (p.convert_b) {
      float* dst = reinterpret_cast<float*>(const_cast<char*>(v.f32) + r * v.f32_row);
      row_to_f32_fast(b->type, row_ptr(b, i1, i2, i3), b->nb[0], b->ne[0], dst);
      src = dst;
    }
    const char* act_row = p.need_act ? v.act + r * v.act_row : nullptr;
    if (act_row) quant(src, const_cast<char*>(act_row), b->ne[0]);
    if (quant8) quant8(src, const_cast<char*>(v.q8) + r * v.q8_row, b->ne[0]);
    if (p.need_q8 && p.act == ActType::q8k)
      q8_from_q8k(quant8k, act_row, src, reinterpret_cast<BlockQ8A*>(const_cast<char*>(v.q8) + r * v.q8_row), b->ne[0]);
    if (p.round_f32)  // last: the columns above are made from b as it is
      round_q8k(quant8k, act_row, src, reinterpret_cast<float*>(const_cast<char*>(v.f32) + r * v.f32_row), b->ne[0]);
  }
}

// Prepares b as the plan says (private: all of it in this thread's slice; shared: this thread's
// share, then a barrier) and returns the views.
BCols prepare(const MatmulPlan& p, const KernelArgs& args, const Tensor* b, bool barrier_after) {
  char* base = scratch_base(args);
  char* slice = base + p.slices_off + p.slice_stride * (size_t)args.ith;
  BCols v{b};
  v.f32_row = sizeof(float) * (size_t)b->ne[0];
  v.act_row = act_row_bytes(p.act, b->ne[0]);
  v.q8_row = act_row_bytes(ActType::q8, b->ne[0]);
  if (p.convert_b) v.f32 = p.private_b ? slice + p.s_f32 : base + p.f32_off;
  if (p.need_act) v.act = p.private_b ? slice + p.s_act : base + p.act_off;
  v.q8 = p.need_q8 ? (p.private_b ? slice + p.s_q8 : base + p.q8_off) : v.act;
  if (!p.convert_b && !p.need_act && !p.need_q8) return v;
  if (args.b_ready) return v;  // an earlier node's, same plan of the shared part (matmul_b_prepared_by)
  if (p.private_b) {
    prepare_b(p, b, v, 0, b->nrows());
  } else {
    int64_t r0, r1;
    split_rows(b->nrows(), args.ith, args.nth, r0, r1);
    prepare_b(p, b, v, r0, r1);
    if (barrier_after) args.barrier();
  }
  return v;
}

// ---- one weight matrix x a set of columns, rows [r0, r1) ----------------------------------------

struct Matrix {
  const char* a;  // this matrix of a (batch / expert applied)
  size_t nb0, nb1;
  int64_t K;
  bool repacked = false;  // rows in groups of 8 (cpu_repack.h)
  bool pairs = false;     // and those in pairs
};

// bcol(j, form) -> column j of b in that form (const float* or int8 blocks); dcol(j) -> float*
// of dst column j's element 0.
template <class BCol, class DCol>
void matrix_rows(const MatmulPlan& p, char* slice, Path path, const Matrix& m, int64_t r0, int64_t r1, int64_t ncols,
                 BCol bcol, DCol dcol, const float* bpack = nullptr) {
  const BForm form = form_of(path, p.act);
  if (path == Path::gemm_f32 || path == Path::gemm_q8) {
    auto** bp = reinterpret_cast<const void**>(slice + p.s_ptrs);
    auto** dp = reinterpret_cast<float**>(slice + p.s_ptrs + sizeof(void*) * (size_t)ncols);
    for (int64_t j = 0; j < ncols; ++j) {
      bp[j] = bcol(j, form);
      dp[j] = dcol(j);
    }
    const GemmJob job{p.wk, m.a, m.nb1, m.K, r0, r1, ncols, bp, dp, bpack, m.repacked, m.pairs};
    if (path == Path::gemm_q8) return gemm_q8(*p.gk, job, slice + p.s_work);
    return gemm_f32(*p.gk, job, slice + p.s_work);
  }
  const WeightKernels* k = p.wk;
  const char* rows = m.a + r0 * m.nb1;
  size_t lda = m.nb1;
  if (path == Path::strided) {  // gather rows of the transposed view as f32
    auto* y = reinterpret_cast<float*>(slice + p.s_work);
    for (int64_t r = r0; r < r1; ++r) row_to_f32_fast(p.wk->type, m.a + r * m.nb1, m.nb0, m.K, y + (r - r0) * m.K);
    k = weight_kernels(DType::F32);
    rows = reinterpret_cast<const char*>(y);
    lda = sizeof(float) * (size_t)m.K;
  }
  const void* bp[kMaxDotCols];
  float* dp[kMaxDotCols];
  for (int64_t j0 = 0; j0 < ncols; j0 += kMaxDotCols) {
    const int nc = (int)std::min<int64_t>(kMaxDotCols, ncols - j0);
    for (int c = 0; c < nc; ++c) {
      bp[c] = bcol(j0 + c, form);
      dp[c] = dcol(j0 + c) + r0;
    }
    if (m.pairs) {  // (a level without the pairs' kernel, forced after loading: the reference)
      if (const RowsDotFn kernel = rows_dot_pairs(k->type))
        kernel(m.K, rows, lda, r1 - r0, bp, nc, dp);
      else
        rows_dot_r8_ref(k->type, m.K, rows, lda, r1 - r0, bp, nc, dp, true);
      continue;
    }
    (m.repacked ? k->rows_dot_r8 : k->rows_dot)(m.K, rows, lda, r1 - r0, bp, nc, dp);
  }
}

// ---- MUL_MAT ---------------------------------------------------------------------------------

// The source of `add` that is `mm`'s result (itself or a contiguous view of all of it), else -1.
int product_side(const Tensor* mm, const Tensor* add) {
  auto is_mm = [&](const Tensor* s) {
    return s == mm ||
           (s->view_src == mm && s->view_offs == 0 && s->is_contiguous() && s->nelements() == mm->nelements());
  };
  const bool a = is_mm(add->src[0]), b = is_mm(add->src[1]);
  return a == b ? -1 : a ? 0 : 1;
}

// dst's rows [r0, r1) of batch (i2, i3), every column, added to the same rows of `other` into
// `sum` (all three F32 contiguous, as many elements): a product's ADD made where its rows were.
void add_rows(const Tensor* dst, const Tensor* other, Tensor* sum, int64_t i2, int64_t i3, int64_t r0, int64_t r1) {
  for (int64_t j = 0; j < dst->ne[1]; ++j) {
    const size_t off = (size_t)(j * dst->nb[1] + i2 * dst->nb[2] + i3 * dst->nb[3]);
    const float* x = reinterpret_cast<const float*>(static_cast<const char*>(dst->data) + off);
    const float* y = reinterpret_cast<const float*>(static_cast<const char*>(other->data) + off);
    float* z = reinterpret_cast<float*>(static_cast<char*>(sum->data) + off);
    for (int64_t r = r0; r < r1; ++r) z[r] = x[r] + y[r];
  }
}

// a {K, M, a2, a3} any weight type, b {K, N, b2, b3} F32/F16/BF16 -> dst {M, N, b2, b3} F32.
// With `add` (an ADD of dst and another tensor, mul_mat_add_fusable) each thread also adds the
// rows it made.
void mul_mat(const KernelArgs& args, Tensor* dst, Tensor* add = nullptr) {
  const Tensor* a = dst->src[0];
  const Tensor* b = dst->src[1];
  const MatmulPlan p = plan_mul_mat(dst, args.nth);
  const BCols v = prepare(p, args, b, true);
  char* slice = scratch_base(args) + p.slices_off + p.slice_stride * (size_t)args.ith;
  const int64_t K = a->ne[0], M = a->ne[1], N = b->ne[1], b2 = b->ne[2], b3 = b->ne[3];
  float* bpack = nullptr;
  if (p.pack_b) {  // this thread's share of the (K block, column group) items, then a barrier
    bpack = reinterpret_cast<float*>(scratch_base(args) + p.bpack_off);
    const size_t stride = (p.convert_b ? v.f32_row : b->nb[1]) / sizeof(float);  // floats between columns
    int64_t i0, i1;
    split_rows(gemm_f32_pack_items(*p.gk, a->type, K, N), args.ith, args.nth, i0, i1);
    gemm_f32_pack_b(*p.gk, a->type, K, N, v.f(0, 0, 0), stride, bpack, i0, i1);
    args.barrier();
  }

  const int64_t batches = b2 * b3;
  const int64_t rb = unit_rows(p.path, a->type, M, batches, K, args.nth, a->flags);
  const int64_t n_rb = ceil_div(M, rb);
  // Too few row blocks for the threads (small M): split the columns too.
  int64_t col_chunk = N;
  if (batches * n_rb < args.nth) {
    const int64_t chunks = ceil_div(args.nth, batches * n_rb);
    col_chunk = std::max<int64_t>(1, ceil_div(N, chunks));
  }
  const int64_t n_cc = ceil_div(N, col_chunk);

  // Row blocks rbi0 .. rbi1 - 1 of batch bi, columns of chunk cc.
  auto rows = [&](int64_t bi, int64_t rbi0, int64_t rbi1, int64_t cc) {
    const int64_t i2 = bi % b2, i3 = bi / b2;
    const Matrix m{row_ptr(a, 0, i2 / (b2 / a->ne[2]), i3 / (b3 / a->ne[3])),
                   a->nb[0],
                   a->nb[1],
                   K,
                   a->has_flag(kFlagRepacked),
                   a->has_flag(kFlagRepackedPairs)};
    char* db = row_ptr(dst, 0, i2, i3);
    const int64_t j0 = cc * col_chunk, j1 = std::min(N, j0 + col_chunk);
    matrix_rows(
        p, slice, p.path, m, rbi0 * rb, std::min(M, rbi1 * rb), j1 - j0,
        [&](int64_t j, BForm form) { return v.at(form, j0 + j, i2, i3); },
        [&](int64_t j) { return reinterpret_cast<float*>(db + (j0 + j) * dst->nb[1]); }, bpack);
  };
  const Tensor* add_other = add ? add->src[1 - product_side(dst, add)] : nullptr;  // the residual
  if (p.path == Path::dot && n_cc == 1) {
    // The dot kernels take a claimed range of row blocks in one call (per batch): decode of 900
    // MiB models read 1-8 points more of the bandwidth than with a call per block, most where the
    // memory is fastest (docs/DECODE-SPEED.md).
    for_unit_ranges(args, batches * n_rb, [&](int64_t first, int64_t last) {
      for (int64_t u = first; u < last;) {  // the range's part in each batch
        const int64_t bi = u / n_rb, rbi = u % n_rb, n = std::min(last, (bi + 1) * n_rb) - u;
        rows(bi, rbi, rbi + n, 0);
        if (add) add_rows(dst, add_other, add, bi % b2, bi / b2, rbi * rb, std::min(M, (rbi + n) * rb));
        u += n;
      }
    });
    return;
  }
  LOOM_ASSERT(!add, "'{}': its ADD cannot be made by the product's threads", dst->name);
  for_units(args, batches * n_rb * n_cc, [&](int64_t u) {
    const int64_t rbi = (u / n_cc) % n_rb;
    rows(u / (n_cc * n_rb), rbi, rbi + 1, u % n_cc);
  });
}

// Whether mul_mat's dot path makes whole rows of every column in one claimed range (so it can
// add them where they are made).
bool rows_whole(const MatmulPlan& p, const Tensor* dst, int nth) {
  const Tensor* a = dst->src[0];
  const Tensor* b = dst->src[1];
  const int64_t batches = b->ne[2] * b->ne[3];
  const int64_t n_rb = ceil_div(a->ne[1], unit_rows(p.path, a->type, a->ne[1], batches, a->ne[0], nth, a->flags));
  return p.path == Path::dot && batches * n_rb >= nth;
}

// ---- a run of MUL_MATs over one small b, in one phase -----------------------------------------

// Decode's q, k, v (and gate, up) each read the same normed column: as one phase the threads
// quantize it once each, claim row blocks across all the matrices as one range (one forward
// stream per thread over the weights, which lie one after another), and meet at one barrier
// instead of one per matrix.
bool run_member(const MatmulPlan& p, const Tensor* node) {
  const Tensor* a = node->src[0];
  const Tensor* b = node->src[1];
  return node->op == OpKind::MUL_MAT && p.path == Path::dot && p.private_b && a->ne[2] * a->ne[3] == 1 &&
         b->ne[2] * b->ne[3] == 1;
}

}  // namespace

bool mul_mat_joins_run(const Tensor* first, const Tensor* node, int nth) {
  if (first->op != OpKind::MUL_MAT || node->op != OpKind::MUL_MAT || first->src[1] != node->src[1]) return false;
  const MatmulPlan a = plan_mul_mat(first, nth), b = plan_mul_mat(node, nth);
  if (!run_member(a, first) || !run_member(b, node)) return false;
  // Each needs a row block per thread at least (else mul_mat splits its columns), and the same
  // private b: one preparation serves all.
  const int64_t M = node->src[0]->ne[1];
  const int64_t rb = unit_rows(b.path, node->src[0]->type, M, 1, node->src[0]->ne[0], nth, node->src[0]->flags);
  return ceil_div(M, rb) >= nth && a.act == b.act && a.convert_b == b.convert_b && a.need_act == b.need_act &&
         a.need_q8 == b.need_q8 && a.slices_off == b.slices_off && a.s_f32 == b.s_f32 && a.s_act == b.s_act &&
         a.s_q8 == b.s_q8;
}

bool mul_mat_add_fusable(const Tensor* mm, const Tensor* add, int nth) {
  const int side = mm->op == OpKind::MUL_MAT && add->op == OpKind::ADD ? product_side(mm, add) : -1;
  if (side < 0) return false;
  // All four contiguous F32 of one shape up to views: element i of each is element i of mm.
  const Tensor* other = add->src[1 - side];
  if (!is_f32_contiguous(mm) || !is_f32_contiguous(add) || !is_f32_contiguous(other) ||
      !same_shape(*add, *add->src[0]) || !same_shape(*add, *add->src[1]) || add->nelements() != mm->nelements() ||
      !rows_whole(plan_mul_mat(mm, nth), mm, nth))
    return false;
  // A thread writes its rows of the sum while the other may still read b, the weights or other
  // rows of `other`: the sum may only lie exactly over `other` or the product (element i read
  // before it is written, by the same thread).
  auto apart_or_same = [](const Tensor* x, const Tensor* y) { return x->data == y->data || !overlaps(x, y); };
  return !overlaps(add, mm->src[0]) && !overlaps(add, mm->src[1]) && !overlaps(mm, other) &&
         apart_or_same(add, other) && apart_or_same(add, mm);
}

void mul_mat_add(const KernelArgs& args, Tensor* mm, Tensor* add) { mul_mat(args, mm, add); }

void mul_mat_run(const KernelArgs& args, std::span<Tensor* const> run) {
  LOOM_ASSERT(!run.empty() && run.size() <= kMaxProductRun, "a run of {} products", run.size());
  MatmulPlan plans[kMaxProductRun];
  int64_t rbs[kMaxProductRun], starts[kMaxProductRun + 1] = {0};
  for (size_t i = 0; i < run.size(); ++i) {
    const Tensor* a = run[i]->src[0];
    plans[i] = plan_mul_mat(run[i], args.nth);
    rbs[i] = unit_rows(plans[i].path, a->type, a->ne[1], 1, a->ne[0], args.nth, a->flags);
    starts[i + 1] = starts[i] + ceil_div(a->ne[1], rbs[i]);
  }
  const BCols v = prepare(plans[0], args, run[0]->src[1], false);  // private: no barrier
  char* slice = scratch_base(args) + plans[0].slices_off + plans[0].slice_stride * (size_t)args.ith;
  const int64_t N = run[0]->src[1]->ne[1];
  for_unit_ranges(args, starts[run.size()], [&](int64_t first, int64_t last) {
    for (size_t i = 0; i < run.size() && first < last; ++i) {
      if (first >= starts[i + 1]) continue;
      const Tensor* a = run[i]->src[0];
      const Tensor* dst = run[i];
      const int64_t u1 = std::min(last, starts[i + 1]), M = a->ne[1];
      const Matrix m{static_cast<const char*>(a->data), a->nb[0], a->nb[1], a->ne[0], a->has_flag(kFlagRepacked),
                     a->has_flag(kFlagRepackedPairs)};
      matrix_rows(
          plans[i], slice, Path::dot, m, (first - starts[i]) * rbs[i], std::min(M, (u1 - starts[i]) * rbs[i]), N,
          [&](int64_t j, BForm form) { return v.at(form, j, 0, 0); },
          [&](int64_t j) { return reinterpret_cast<float*>(static_cast<char*>(dst->data) + j * dst->nb[1]); });
      first = u1;
    }
  });
}

namespace {

// ---- MUL_MAT_ID ------------------------------------------------------------------------------

// as {K, M, E} any weight type, b {K, bn, T} (bn == n_used or 1), ids I32 {n_used, T}
// -> dst {M, n_used, T}: dst[:, i, t] = as[:, :, ids[i, t]] x b[:, i % bn, t].
void mul_mat_id(const KernelArgs& args, Tensor* dst) {
  const Tensor* as = dst->src[0];
  const Tensor* b = dst->src[1];
  const Tensor* ids = dst->src[2];
  const MatmulPlan p = plan_mul_mat(dst, args.nth);
  char* base = scratch_base(args);
  char* slice = base + p.slices_off + p.slice_stride * (size_t)args.ith;
  const int64_t K = as->ne[0], M = as->ne[1], E = as->ne[2];
  const int64_t n_used = ids->ne[0], T = ids->ne[1], bn = b->ne[1];

  auto* count = reinterpret_cast<int64_t*>(base + p.ids_off);  // [E + 1]: last = invalid ids
  int64_t* start = count + (E + 1);                            // [E + 1]
  int64_t* next = start + (E + 1);                             // [E + 1]: fill positions
  auto* pairs = reinterpret_cast<int32_t*>(next + (E + 1));    // (i, t) grouped by expert

  // Phase 1: prepare b (all threads); group the (i, t) pairs by expert (thread 0).
  const BCols v = prepare(p, args, b, false);
  auto expert_of = [&](int64_t i, int64_t t) {
    const int32_t e =
        *reinterpret_cast<const int32_t*>(static_cast<const char*>(ids->data) + i * ids->nb[0] + t * ids->nb[1]);
    return e >= 0 && e < E ? (int64_t)e : E;
  };
  if (args.ith == 0) {
    std::fill(count, count + E + 1, 0);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < n_used; ++i) ++count[expert_of(i, t)];
    int64_t acc = 0;
    for (int64_t e = 0; e <= E; ++e) {
      start[e] = acc;
      acc += count[e];
    }
    std::copy(start, start + E + 1, next);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t i = 0; i < n_used; ++i) {
        const int64_t at = next[expert_of(i, t)]++;
        pairs[2 * at] = (int32_t)i;
        pairs[2 * at + 1] = (int32_t)t;
      }
    // An id outside [0, E) is a bug upstream (a kernel must not throw): its column reads NaN.
    for (int64_t q = start[E]; q < start[E] + count[E]; ++q) {
      auto* col = reinterpret_cast<float*>(row_ptr(dst, pairs[2 * q], pairs[2 * q + 1]));
      std::fill(col, col + M, std::numeric_limits<float>::quiet_NaN());
    }
  }
  args.barrier();

  int64_t active = 0;
  for (int64_t e = 0; e < E; ++e) active += count[e] > 0;
  const bool repacked = as->has_flag(kFlagRepacked), in_pairs = as->has_flag(kFlagRepackedPairs);
  const int64_t rb = unit_rows(p.path, as->type, M, std::max<int64_t>(active, 1), K, args.nth, as->flags);
  const int64_t n_rb = ceil_div(M, rb);
  // Experts with few columns take the dot path in row blocks of kRowBlock; sub-units keep the
  // unit count independent of the expert's path.
  int64_t u0, u1;
  split_rows(active * n_rb, args.ith, args.nth, u0, u1);
  int64_t u = 0;  // units of the experts before e
  for (int64_t e = 0; e < E && u < u1; ++e) {
    if (count[e] == 0) continue;
    const int64_t lo = std::max(u0, u), hi = std::min(u1, u + n_rb);
    if (lo < hi) {
      const Matrix m{row_ptr(as, 0, e), as->nb[0], as->nb[1], K, repacked, in_pairs};
      const Path path = count[e] < kGemmMinCols && p.path != Path::strided ? Path::dot : p.path;
      const int32_t* pe = pairs + 2 * start[e];
      auto bcol = [&](int64_t j, BForm form) { return v.at(form, pe[2 * j] % bn, pe[2 * j + 1], 0); };
      auto dcol = [&](int64_t j) { return reinterpret_cast<float*>(row_ptr(dst, pe[2 * j], pe[2 * j + 1])); };
      const int64_t r0 = (lo - u) * rb, r1 = std::min(M, (hi - u) * rb);
      if (path == Path::dot || path == Path::strided) {
        for (int64_t r = r0; r < r1; r += kRowBlock)
          matrix_rows(p, slice, path, m, r, std::min(r1, r + kRowBlock), count[e], bcol, dcol);
      } else {
        matrix_rows(p, slice, path, m, r0, r1, count[e], bcol, dcol);
      }
    }
    u += n_rb;
  }
}

// ---- OUT_PROD --------------------------------------------------------------------------------

size_t out_prod_work(const Tensor* node) {
  const Tensor* a = node->src[0];
  return unit_f32_rows(a) ? 0 : align64(sizeof(float) * (size_t)a->nelements()) + 64;
}

// a {M, K, a2, a3}, b {N, K, b2, b3} -> dst {M, N, b2, b3}: dst[m, n] = sum_k a[m, k] * b[n, k].
// Each unit owns a group of up to 4 columns n of dst over a chunk of m and accumulates
// b[n, k] * a[:, k] over k (axpy, contiguous in m).
void out_prod(const KernelArgs& args, Tensor* dst) {
  const Tensor* a = dst->src[0];
  const Tensor* b = dst->src[1];
  const int64_t M = a->ne[0], K = a->ne[1], N = b->ne[0], b2 = b->ne[2], b3 = b->ne[3];
  const char* adata = static_cast<const char*>(a->data);
  size_t anb[4] = {a->nb[0], a->nb[1], a->nb[2], a->nb[3]};
  if (!unit_f32_rows(a)) {
    char* base = scratch_base(args);
    convert_rows(a, reinterpret_cast<float*>(base), args.ith, args.nth);
    args.barrier();
    adata = base;
    anb[1] = sizeof(float) * (size_t)M;
    anb[2] = anb[1] * (size_t)K;
    anb[3] = anb[2] * (size_t)a->ne[2];
  }

  constexpr int64_t kCols = 4, kMBlock = 512;
  const WeightKernels* f32k = weight_kernels(DType::F32);
  const int64_t batches = b2 * b3, n_cg = ceil_div(N, kCols);
  int64_t m_chunk = M;
  if (batches * n_cg < 2 * (int64_t)args.nth) {
    const int64_t chunks = ceil_div(2 * (int64_t)args.nth, batches * n_cg);
    m_chunk = std::max<int64_t>(16, ceil_div(M, chunks));
  }
  const int64_t n_mc = ceil_div(M, m_chunk);
  int64_t u0, u1;
  split_rows(batches * n_cg * n_mc, args.ith, args.nth, u0, u1);
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t mc = u % n_mc, cg = (u / n_mc) % n_cg, bi = u / (n_mc * n_cg);
    const int64_t i2 = bi % b2, i3 = bi / b2;
    const char* ab = adata + (i2 / (b2 / a->ne[2])) * anb[2] + (i3 / (b3 / a->ne[3])) * anb[3];
    const int64_t n0 = cg * kCols, nc = std::min(kCols, N - n0);
    float* col[kCols];
    for (int64_t c = 0; c < nc; ++c) col[c] = reinterpret_cast<float*>(row_ptr(dst, n0 + c, i2, i3));
    for (int64_t m0 = mc * m_chunk; m0 < std::min(M, (mc + 1) * m_chunk); m0 += kMBlock) {
      const int64_t m1 = std::min({M, m0 + kMBlock, (mc + 1) * m_chunk});
      for (int64_t c = 0; c < nc; ++c) std::fill(col[c] + m0, col[c] + m1, 0.0f);
      for (int64_t k = 0; k < K; ++k) {
        const float* ak = reinterpret_cast<const float*>(ab + k * anb[1]);
        for (int64_t c = 0; c < nc; ++c)
          f32k->axpy(m1 - m0, load_f32(b->type, elem_ptr(b, n0 + c, k, i2, i3)), ak + m0, col[c] + m0);
      }
    }
  }
}

bool is_weight_type(DType t) { return weight_kernels(t) != nullptr; }

}  // namespace

bool supports_matmul(const Tensor* node) {
  const Tensor* a = node->src[0];
  const Tensor* b = node->src[1];
  if (!a || !b || node->type != DType::F32 || node->nb[0] != sizeof(float)) return false;
  if (!is_plain_float(b->type)) return false;
  switch (node->op) {
    case OpKind::MUL_MAT:
      // block types need whole blocks per row, read in place
      return is_weight_type(a->type) &&
             (is_plain_float(a->type) || (unit_stride(a) && a->ne[0] % dtype_info(a->type).block_size == 0));
    case OpKind::MUL_MAT_ID:
      return is_weight_type(a->type) && node->src[2] && node->src[2]->type == DType::I32 &&
             (is_plain_float(a->type) || (unit_stride(a) && a->ne[0] % dtype_info(a->type).block_size == 0));
    case OpKind::OUT_PROD:
      return is_plain_float(a->type);
    default:
      return false;
  }
}

MatmulActivations matmul_activations(DType type, int64_t K) {
  const WeightKernels* wk = weight_kernels(type);
  if (!wk) return {};
  auto rounding = [](ActType act) {
    return act == ActType::q8 ? ActRounding::q8_32 : act == ActType::q8k ? ActRounding::q8_256 : ActRounding::none;
  };
  MatmulActivations m;
  m.small = m.large = rounding(wk->act);  // the dot path (choose_path for unit-stride rows)
  if (const GemmKernels* gk = gemm_kernels(active_isa())) {
    // gemm_q8's columns hold b rounded as the dots do, and so do the i-quants' f32 columns
    // (round_f32); bf16 pairs; the f32 GEMM of plain floats reads b as it is
    m.large = gemm_q8_supported(gk, type) || wk->act == ActType::q8k ? m.small
              : gemm_bf16_pairs(*gk, type, K)                        ? ActRounding::bf16
                                                                     : ActRounding::none;
    m.large_from = kGemmMinCols;
  }
  return m;
}

bool matmul_b_prepared_by(const Tensor* prev, const Tensor* node, int nth) {
  if (!prev || prev->op != node->op || (node->op != OpKind::MUL_MAT && node->op != OpKind::MUL_MAT_ID) ||
      prev->src[1] != node->src[1])
    return false;
  const MatmulPlan a = plan_mul_mat(prev, nth), b = plan_mul_mat(node, nth);
  return !a.private_b && !b.private_b && (b.convert_b || b.need_act || b.need_q8) && a.convert_b == b.convert_b &&
         a.round_f32 == b.round_f32 && a.need_act == b.need_act && a.need_q8 == b.need_q8 &&
         (!(b.need_act || b.need_q8) || a.act == b.act) && a.f32_off == b.f32_off && a.act_off == b.act_off &&
         a.q8_off == b.q8_off;
}

size_t work_size_matmul(const Tensor* node, int nth) {
  switch (node->op) {
    case OpKind::MUL_MAT:
    case OpKind::MUL_MAT_ID:
      return plan_mul_mat(node, nth).total;
    case OpKind::OUT_PROD:
      return out_prod_work(node);
    default:
      return 0;
  }
}

void compute_matmul(const KernelArgs& args, Tensor* node) {
  switch (node->op) {
    case OpKind::MUL_MAT:
      return mul_mat(args, node);
    case OpKind::MUL_MAT_ID:
      return mul_mat_id(args, node);
    case OpKind::OUT_PROD:
      return out_prod(args, node);
    default:
      return;
  }
}

}  // namespace loom::cpu
