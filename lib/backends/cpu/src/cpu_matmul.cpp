// CPU kernels of the matmul family: MUL_MAT, MUL_MAT_ID (experts) and OUT_PROD.
// Work is split over blocks of rows of the weights a, so decode (one column of b) keeps every
// thread busy. A weight row is decoded once per group of kMaxDotCols columns by the per-type
// fused dot (cpu_vec_dot.h); for wider b the rows of a block are decoded once into per-thread
// f32 scratch and reused for every column. b is read in place when it is F32 with unit stride,
// otherwise converted once into shared scratch in a first phase (then a barrier).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu_rows.h"
#include "cpu_vec_dot.h"
#include "kernels.h"

namespace loom::cpu {
namespace {

constexpr int64_t kMaxRowBlock = 16;           // rows of a per work unit (at most)
constexpr int64_t kRowScratchFloats = 1 << 16;  // f32 per thread for decoded rows (256 KiB)

size_t align64(size_t x) { return (x + 63) / 64 * 64; }
char* scratch_base(const KernelArgs& args) {
  const auto p = reinterpret_cast<uintptr_t>(args.wdata);
  return reinterpret_cast<char*>((p + 63) / 64 * 64);
}
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

bool unit_stride(const Tensor* t) { return t->nb[0] == dtype_info(t->type).type_size; }
bool f32_rows(const Tensor* t) { return t->type == DType::F32 && t->nb[0] == sizeof(float); }

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

// ---- the shared core: a block of rows of one weight matrix times a set of f32 columns -------

struct RowSource {
  const WeightKernels* wk;  // kernels of a's type
  DType type;
  const char* a;            // this matrix of a (batch already applied)
  size_t nb0, nb1;          // a's strides
  int64_t K;
  bool decode;              // decode the block's rows into f32 scratch first
  float* scratch;           // kMaxRowBlock * K floats when decode
};

// a rows [r0, r1) (r1 - r0 <= kMaxRowBlock) x columns j < ncols:
// dst(j)[m] = sum_k a[k, m] * bcol(j)[k], for m in [r0, r1). bcol(j): K contiguous floats;
// dcol(j): float* of column j's element 0 (dst rows are contiguous floats).
template <class BCol, class DCol>
void rows_times_cols(const RowSource& s, int64_t r0, int64_t r1, int64_t ncols, BCol bcol, DCol dcol) {
  static const WeightKernels* const f32k = weight_kernels(DType::F32);
  const WeightKernels* k = s.decode ? f32k : s.wk;
  const void* rows[kMaxRowBlock];
  for (int64_t r = r0; r < r1; ++r) {
    const char* src = s.a + r * s.nb1;
    if (s.decode) {
      float* y = s.scratch + (r - r0) * s.K;
      row_to_f32_fast(s.type, src, s.nb0, s.K, y);
      rows[r - r0] = y;
    } else {
      rows[r - r0] = src;
    }
  }
  const float* bp[kMaxDotCols];
  float* dp[kMaxDotCols];
  float out[kMaxDotCols];
  for (int64_t j0 = 0; j0 < ncols; j0 += kMaxDotCols) {
    const int nc = (int)std::min<int64_t>(kMaxDotCols, ncols - j0);
    for (int c = 0; c < nc; ++c) {
      bp[c] = bcol(j0 + c);
      dp[c] = dcol(j0 + c);
    }
    for (int64_t r = r0; r < r1; ++r) {
      k->dot(s.K, rows[r - r0], bp, nc, out);
      for (int c = 0; c < nc; ++c) dp[c][r] = out[c];
    }
  }
}

// Scratch layout shared by work_size and compute (offsets from the 64-aligned scratch base).
struct MatmulPlan {
  bool convert_b = false;  // b -> contiguous f32 at b_off
  bool row_scratch = false;
  size_t b_off = 0, rows_off = 0, rows_stride = 0, ids_off = 0, total = 0;
};

// Rows whose decoded f32 copies fit the per-thread row scratch.
int64_t decoded_rows_max(int64_t K) {
  return std::clamp<int64_t>(kRowScratchFloats / std::max<int64_t>(K, 1), 1, kMaxRowBlock);
}

// Rows of a per unit: as large as allowed, halved while there are too few units to share.
int64_t row_block(int64_t M, int64_t batches, int64_t K, bool decode, int nth) {
  int64_t rb = decode ? decoded_rows_max(K) : kMaxRowBlock;
  while (rb > 1 && batches * ceil_div(M, rb) < 4 * (int64_t)nth) rb /= 2;
  return rb;
}

bool needs_row_scratch(const Tensor* a, int64_t ncols) {
  return !unit_stride(a) || (a->type != DType::F32 && ncols > kMaxDotCols);
}

MatmulPlan plan_mul_mat(const Tensor* node, int nth) {
  const Tensor* a = node->src[0];
  const Tensor* b = node->src[1];
  MatmulPlan p;
  size_t off = 0;
  p.convert_b = !f32_rows(b);
  if (p.convert_b) {
    p.b_off = off;
    off = align64(off + sizeof(float) * (size_t)b->nelements());
  }
  // MUL_MAT_ID: a column count over all experts decides whether any expert may need scratch.
  const int64_t ncols = node->op == OpKind::MUL_MAT_ID ? node->ne[1] * node->ne[2] : b->ne[1];
  p.row_scratch = needs_row_scratch(a, ncols);
  if (p.row_scratch) {
    p.rows_off = off;
    p.rows_stride = align64(sizeof(float) * (size_t)(decoded_rows_max(a->ne[0]) * a->ne[0]));
    off += p.rows_stride * (size_t)nth;
  }
  if (node->op == OpKind::MUL_MAT_ID) {  // per expert: count, start, next; then (i, t) pairs
    p.ids_off = off;
    off = align64(off + sizeof(int64_t) * 3 * (size_t)(a->ne[2] + 1) + sizeof(int32_t) * 2 * (size_t)node->ne[1] *
                                                                           (size_t)node->ne[2]);
  }
  p.total = off + 64;  // + alignment of the base
  return p;
}

// ---- MUL_MAT ---------------------------------------------------------------------------------

// a {K, M, a2, a3} any weight type, b {K, N, b2, b3} F32/F16/BF16 -> dst {M, N, b2, b3} F32
void mul_mat(const KernelArgs& args, Tensor* dst) {
  const Tensor* a = dst->src[0];
  const Tensor* b = dst->src[1];
  const MatmulPlan p = plan_mul_mat(dst, args.nth);
  char* base = scratch_base(args);
  const int64_t K = a->ne[0], M = a->ne[1], N = b->ne[1], b2 = b->ne[2], b3 = b->ne[3];

  const char* bdata = static_cast<const char*>(b->data);
  size_t bnb[4] = {b->nb[0], b->nb[1], b->nb[2], b->nb[3]};
  if (p.convert_b) {
    convert_rows(b, reinterpret_cast<float*>(base + p.b_off), args.ith, args.nth);
    args.barrier();
    bdata = base + p.b_off;
    bnb[1] = sizeof(float) * (size_t)K;
    bnb[2] = bnb[1] * (size_t)N;
    bnb[3] = bnb[2] * (size_t)b2;
  }

  const bool decode = needs_row_scratch(a, N);
  const int64_t batches = b2 * b3;
  const int64_t rb = row_block(M, batches, K, decode, args.nth);
  const int64_t n_rb = ceil_div(M, rb);
  // Too few row blocks for the threads (small M): split the columns too.
  int64_t col_chunk = N;
  if (batches * n_rb < args.nth) {
    const int64_t chunks = ceil_div(args.nth, batches * n_rb);
    col_chunk = std::max<int64_t>(1, ceil_div(N, chunks));
  }
  const int64_t n_cc = ceil_div(N, col_chunk);

  RowSource s{weight_kernels(a->type), a->type, nullptr, a->nb[0], a->nb[1], K, decode,
              p.row_scratch ? reinterpret_cast<float*>(base + p.rows_off + p.rows_stride * args.ith) : nullptr};
  int64_t u0, u1;
  split_rows(batches * n_rb * n_cc, args.ith, args.nth, u0, u1);
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t cc = u % n_cc, rbi = (u / n_cc) % n_rb, bi = u / (n_cc * n_rb);
    const int64_t i2 = bi % b2, i3 = bi / b2;
    s.a = row_ptr(a, 0, i2 / (b2 / a->ne[2]), i3 / (b3 / a->ne[3]));
    const char* bb = bdata + i2 * bnb[2] + i3 * bnb[3];
    char* db = row_ptr(dst, 0, i2, i3);
    const int64_t j0 = cc * col_chunk, j1 = std::min(N, j0 + col_chunk);
    rows_times_cols(
        s, rbi * rb, std::min(M, (rbi + 1) * rb), j1 - j0,
        [&](int64_t j) { return reinterpret_cast<const float*>(bb + (j0 + j) * bnb[1]); },
        [&](int64_t j) { return reinterpret_cast<float*>(db + (j0 + j) * dst->nb[1]); });
  }
}

// ---- MUL_MAT_ID ------------------------------------------------------------------------------

// as {K, M, E} any weight type, b {K, bn, T} (bn == n_used or 1), ids I32 {n_used, T}
// -> dst {M, n_used, T}: dst[:, i, t] = as[:, :, ids[i, t]] x b[:, i % bn, t].
void mul_mat_id(const KernelArgs& args, Tensor* dst) {
  const Tensor* as = dst->src[0];
  const Tensor* b = dst->src[1];
  const Tensor* ids = dst->src[2];
  const MatmulPlan p = plan_mul_mat(dst, args.nth);
  char* base = scratch_base(args);
  const int64_t K = as->ne[0], M = as->ne[1], E = as->ne[2];
  const int64_t n_used = ids->ne[0], T = ids->ne[1], bn = b->ne[1];

  auto* count = reinterpret_cast<int64_t*>(base + p.ids_off);  // [E + 1]: last = invalid ids
  int64_t* start = count + (E + 1);                              // [E + 1]
  int64_t* next = start + (E + 1);                               // [E + 1]: fill positions
  auto* pairs = reinterpret_cast<int32_t*>(next + (E + 1));      // (i, t) grouped by expert

  // Phase 1: b -> f32 (all threads); group the (i, t) pairs by expert (thread 0).
  const char* bdata = static_cast<const char*>(b->data);
  size_t bnb1 = b->nb[1], bnb2 = b->nb[2];
  if (p.convert_b) {
    convert_rows(b, reinterpret_cast<float*>(base + p.b_off), args.ith, args.nth);
    bdata = base + p.b_off;
    bnb1 = sizeof(float) * (size_t)K;
    bnb2 = bnb1 * (size_t)bn;
  }
  auto expert_of = [&](int64_t i, int64_t t) {
    const int32_t e = *reinterpret_cast<const int32_t*>(static_cast<const char*>(ids->data) + i * ids->nb[0] +
                                                        t * ids->nb[1]);
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
  const bool any_decode = p.row_scratch;
  const int64_t rb = row_block(M, std::max<int64_t>(active, 1), K, any_decode, args.nth);
  const int64_t n_rb = ceil_div(M, rb);

  RowSource s{weight_kernels(as->type), as->type, nullptr, as->nb[0], as->nb[1], K, false,
              any_decode ? reinterpret_cast<float*>(base + p.rows_off + p.rows_stride * args.ith) : nullptr};
  int64_t u0, u1;
  split_rows(active * n_rb, args.ith, args.nth, u0, u1);
  int64_t u = 0;  // units of the experts before e
  for (int64_t e = 0; e < E && u < u1; ++e) {
    if (count[e] == 0) continue;
    const int64_t lo = std::max(u0, u), hi = std::min(u1, u + n_rb);
    if (lo < hi) {
      s.a = row_ptr(as, 0, e);
      s.decode = needs_row_scratch(as, count[e]);
      const int32_t* pe = pairs + 2 * start[e];
      for (int64_t rbi = lo - u; rbi < hi - u; ++rbi)
        rows_times_cols(
            s, rbi * rb, std::min(M, (rbi + 1) * rb), count[e],
            [&](int64_t j) {
              return reinterpret_cast<const float*>(bdata + (pe[2 * j] % bn) * bnb1 + pe[2 * j + 1] * bnb2);
            },
            [&](int64_t j) { return reinterpret_cast<float*>(row_ptr(dst, pe[2 * j], pe[2 * j + 1])); });
    }
    u += n_rb;
  }
}

// ---- OUT_PROD --------------------------------------------------------------------------------

size_t out_prod_work(const Tensor* node) {
  const Tensor* a = node->src[0];
  return f32_rows(a) ? 0 : align64(sizeof(float) * (size_t)a->nelements()) + 64;
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
  if (!f32_rows(a)) {
    char* base = scratch_base(args);
    convert_rows(a, reinterpret_cast<float*>(base), args.ith, args.nth);
    args.barrier();
    adata = base;
    anb[1] = sizeof(float) * (size_t)M;
    anb[2] = anb[1] * (size_t)K;
    anb[3] = anb[2] * (size_t)a->ne[2];
  }

  constexpr int64_t kCols = 4, kMBlock = 512;
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
        const float* __restrict ak = reinterpret_cast<const float*>(ab + k * anb[1]);
        for (int64_t c = 0; c < nc; ++c) {
          const float coef = load_f32(b->type, elem_ptr(b, n0 + c, k, i2, i3));
          float* __restrict y = col[c];
          for (int64_t m = m0; m < m1; ++m) y[m] += coef * ak[m];
        }
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
      return is_weight_type(a->type) && (is_plain_float(a->type) || (unit_stride(a) && a->ne[0] % dtype_info(a->type).block_size == 0));
    case OpKind::MUL_MAT_ID:
      return is_weight_type(a->type) && node->src[2] && node->src[2]->type == DType::I32 &&
             (is_plain_float(a->type) || (unit_stride(a) && a->ne[0] % dtype_info(a->type).block_size == 0));
    case OpKind::OUT_PROD: return is_plain_float(a->type);
    default: return false;
  }
}

size_t work_size_matmul(const Tensor* node, int nth) {
  switch (node->op) {
    case OpKind::MUL_MAT:
    case OpKind::MUL_MAT_ID: return plan_mul_mat(node, nth).total;
    case OpKind::OUT_PROD: return out_prod_work(node);
    default: return 0;
  }
}

void compute_matmul(const KernelArgs& args, Tensor* node) {
  switch (node->op) {
    case OpKind::MUL_MAT: return mul_mat(args, node);
    case OpKind::MUL_MAT_ID: return mul_mat_id(args, node);
    case OpKind::OUT_PROD: return out_prod(args, node);
    default: return;
  }
}

}  // namespace loom::cpu
