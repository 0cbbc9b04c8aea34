// CPU kernels of the copy family: CPY DUP CONT ALL_REDUCE (type conversion, strided views, reshaping in
// logical order), CONCAT, REPEAT, REPEAT_BACK, GET_ROWS, GET_ROWS_BACK and SET_ROWS
// (quantizing rows on write). Work is split over destination rows; every kernel writes each
// destination row from one thread only, so results do not depend on the thread count.
#include <algorithm>
#include <cstring>
#include <limits>

#include "cpu_repack.h"
#include "cpu_rows.h"
#include "kernels.h"

namespace loom::cpu {

namespace {

inline int32_t load_i32(const Tensor* t, int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) {
  return *reinterpret_cast<const int32_t*>(elem_ptr(t, i0, i1, i2, i3));
}

// ---- CPY / DUP / CONT --------------------------------------------------------------------------
// src any shape, dst any shape with the same element count: element k in logical order
// (ne0 fastest) of src goes to element k of dst.

// Rows [r0, r1) of dst (unit-stride dim 0) from a src whose dim 1 has unit stride (a transposed
// view): tiles of kRows dst rows x kCols columns, so each src cache line serves kRows rows.
template <typename T>
void copy_transposed(const Tensor* src, Tensor* dst, int64_t r0, int64_t r1) {
  constexpr int64_t kRows = 16, kCols = 64;
  const int64_t ne0 = dst->ne[0], ne1 = dst->ne[1];
  for (int64_t r = r0; r < r1;) {
    int64_t i1, i2, i3;
    unravel_row(r, dst->ne, i1, i2, i3);
    const int64_t rows = std::min({kRows, r1 - r, ne1 - i1});  // stay in one (i2, i3) plane
    const char* s = row_ptr(src, i1, i2, i3);
    T* d[kRows];
    for (int64_t k = 0; k < rows; ++k) d[k] = reinterpret_cast<T*>(row_ptr(dst, i1 + k, i2, i3));
    for (int64_t c0 = 0; c0 < ne0; c0 += kCols) {
      const int64_t c1 = std::min(ne0, c0 + kCols);
      for (int64_t i0 = c0; i0 < c1; ++i0) {
        const T* col = reinterpret_cast<const T*>(s + i0 * src->nb[0]);  // src[i0, i1 .. i1 + rows)
        for (int64_t k = 0; k < rows; ++k) d[k][i0] = col[k];
      }
    }
    r += rows;
  }
}

// Same type: bytes move unchanged, one unit (element or quant block) at a time.
void copy_same_type(const KernelArgs& args, const Tensor* src, Tensor* dst) {
  const DTypeInfo& info = dtype_info(dst->type);
  const size_t unit = info.type_size;
  if (src->is_contiguous() && dst->is_contiguous()) {  // one flat memcpy, split in 64-byte chunks
    const size_t bytes = row_size(dst->type, dst->nelements());
    const int64_t chunks = (int64_t)((bytes + 63) / 64);
    int64_t c0, c1;
    split_rows(chunks, args.ith, args.nth, c0, c1);
    const size_t b0 = std::min(bytes, (size_t)c0 * 64), b1 = std::min(bytes, (size_t)c1 * 64);
    if (b1 > b0) std::memcpy(static_cast<char*>(dst->data) + b0, static_cast<const char*>(src->data) + b0, b1 - b0);
    return;
  }
  int64_t r0, r1;
  split_rows(dst->nrows(), args.ith, args.nth, r0, r1);
  const int64_t units = dst->ne[0] / info.block_size;
  if (same_shape(*src, *dst)) {  // (rows) row r of src -> row r of dst
    if (info.block_size == 1 && src->nb[0] != unit && src->nb[1] == unit && dst->nb[0] == unit) {
      if (unit == 4) return copy_transposed<uint32_t>(src, dst, r0, r1);
      if (unit == 2) return copy_transposed<uint16_t>(src, dst, r0, r1);
    }
    for (int64_t r = r0; r < r1; ++r) {
      int64_t i1, i2, i3;
      unravel_row(r, dst->ne, i1, i2, i3);
      copy_units(row_ptr(src, i1, i2, i3), src->nb[0], row_ptr(dst, i1, i2, i3), dst->nb[0], units, unit);
    }
    return;
  }
  // Different shapes: flat unit index -> src coordinates, unit by unit.
  const int64_t src_units = src->ne[0] / info.block_size;
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    unravel_row(r, dst->ne, i1, i2, i3);
    char* out = row_ptr(dst, i1, i2, i3);
    for (int64_t u = 0; u < units; ++u) {
      const int64_t k = r * units + u;
      int64_t j1, j2, j3;
      unravel_row(k / src_units, src->ne, j1, j2, j3);
      std::memcpy(out + u * dst->nb[0], row_ptr(src, j1, j2, j3) + (k % src_units) * src->nb[0], unit);
    }
  }
}

// n consecutive logical elements of t starting at flat index start -> out. row_tmp holds one
// converted row of t (ne0 floats); block-type rows are converted whole.
void gather_flat_f32(const Tensor* t, int64_t start, int64_t n, float* out, float* row_tmp) {
  const int64_t ne0 = t->ne[0];
  while (n > 0) {
    int64_t i1, i2, i3;
    unravel_row(start / ne0, t->ne, i1, i2, i3);
    const int64_t off = start % ne0;
    const int64_t take = std::min(n, ne0 - off);
    const float* row = row_as_f32(t, i1, i2, i3, row_tmp);
    std::memcpy(out, row + off, (size_t)take * sizeof(float));
    out += take;
    start += take;
    n -= take;
  }
}

// Different types: each dst row is assembled in f32, then converted (quantized) in one call.
// Scratch per thread: dst.ne0 + src.ne0 floats.
void copy_convert(const KernelArgs& args, const Tensor* src, Tensor* dst) {
  const int64_t ne0 = dst->ne[0];
  float* row = thread_scratch(args, (size_t)(ne0 + src->ne[0]) * sizeof(float));
  float* src_tmp = row + ne0;
  const bool same = same_shape(*src, *dst);
  int64_t r0, r1;
  split_rows(dst->nrows(), args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    unravel_row(r, dst->ne, i1, i2, i3);
    const float* x;
    if (same) {
      x = row_as_f32(src, i1, i2, i3, row);
    } else {
      gather_flat_f32(src, r * ne0, ne0, row, src_tmp);
      x = row;
    }
    row_from_f32(dst->type, x, row_ptr(dst, i1, i2, i3), dst->nb[0], ne0);
  }
}

bool supports_cpy(const Tensor* src, const Tensor* dst) {
  const DTypeInfo& si = dtype_info(src->type);
  const DTypeInfo& di = dtype_info(dst->type);
  if ((si.block_size > 1 && !dim0_contiguous(src)) || (di.block_size > 1 && !dim0_contiguous(dst))) return false;
  if (src->type == dst->type) return true;
  return rows_readable(src) && rows_writable(dst);
}

void compute_cpy(const KernelArgs& args, const Tensor* src, Tensor* dst) {
  if (src->type == dst->type) {
    copy_same_type(args, src, dst);
  } else {
    copy_convert(args, src, dst);
  }
}

// ---- ALL_REDUCE -------------------------------------------------------------------------------
// The local value (the executor then sums it over the group): src itself, or, for
// all_gather_rows, src's rows at column begin of a zero row.
void compute_all_reduce_local(const KernelArgs& args, Tensor* dst) {
  const Tensor* src = dst->src[0];
  if (src->ne[0] == dst->ne[0]) return compute_cpy(args, src, dst);
  const int64_t begin = dst->param_i32(0), n = src->ne[0];
  int64_t r0, r1;
  split_rows(dst->nrows(), args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    auto* out = reinterpret_cast<float*>(static_cast<char*>(dst->data) + r * dst->nb[1]);
    const auto* in = reinterpret_cast<const float*>(static_cast<const char*>(src->data) + r * src->nb[1]);
    std::fill(out, out + begin, 0.0f);
    std::copy(in, in + n, out + begin);
    std::fill(out + begin + n, out + dst->ne[0], 0.0f);
  }
}

// ---- CONCAT ------------------------------------------------------------------------------------
// a {..}, b {..} same type, equal except in dim: dst = [a, b] along dim.
void compute_concat(const KernelArgs& args, Tensor* dst) {
  const Tensor* a = dst->src[0];
  const Tensor* b = dst->src[1];
  const int dim = dst->param_i32(0);
  const DTypeInfo& info = dtype_info(dst->type);
  const size_t unit = info.type_size;
  int64_t r0, r1;
  split_rows(dst->nrows(), args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i[4] = {0, 0, 0, 0};
    unravel_row(r, dst->ne, i[1], i[2], i[3]);
    char* out = row_ptr(dst, i[1], i[2], i[3]);
    if (dim == 0) {
      const int64_t ua = a->ne[0] / info.block_size, ub = b->ne[0] / info.block_size;
      copy_units(row_ptr(a, i[1], i[2], i[3]), a->nb[0], out, dst->nb[0], ua, unit);
      copy_units(row_ptr(b, i[1], i[2], i[3]), b->nb[0], out + ua * dst->nb[0], dst->nb[0], ub, unit);
      continue;
    }
    const Tensor* s = a;
    if (i[dim] >= a->ne[dim]) {
      s = b;
      i[dim] -= a->ne[dim];
    }
    copy_units(row_ptr(s, i[1], i[2], i[3]), s->nb[0], out, dst->nb[0], dst->ne[0] / info.block_size, unit);
  }
}

// ---- REPEAT / REPEAT_BACK ------------------------------------------------------------------------

// a {n0, n1, n2, n3} -> dst F32 {k0 n0, k1 n1, k2 n2, k3 n3}: dst[i] = a[i mod a.ne].
// Scratch per thread: a.ne0 floats.
void compute_repeat(const KernelArgs& args, Tensor* dst) {
  const Tensor* a = dst->src[0];
  float* tmp = thread_scratch(args, (size_t)a->ne[0] * sizeof(float));
  const int64_t n0 = a->ne[0], tiles = dst->ne[0] / n0;
  int64_t r0, r1;
  split_rows(dst->nrows(), args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    unravel_row(r, dst->ne, i1, i2, i3);
    const float* x = row_as_f32(a, i1 % a->ne[1], i2 % a->ne[2], i3 % a->ne[3], tmp);
    float* y = reinterpret_cast<float*>(row_ptr(dst, i1, i2, i3));
    for (int64_t t = 0; t < tiles; ++t) std::memcpy(y + t * n0, x, (size_t)n0 * sizeof(float));
  }
}

// a {k0 n0, ..} -> dst F32 {n0, n1, n2, n3}: dst[i] = sum of a over every tile position of i.
// Scratch per thread: a.ne0 floats.
void compute_repeat_back(const KernelArgs& args, Tensor* dst) {
  const Tensor* a = dst->src[0];
  float* tmp = thread_scratch(args, (size_t)a->ne[0] * sizeof(float));
  const int64_t n0 = dst->ne[0];
  const int64_t k0 = a->ne[0] / n0, k1 = a->ne[1] / dst->ne[1], k2 = a->ne[2] / dst->ne[2],
                k3 = a->ne[3] / dst->ne[3];
  int64_t r0, r1;
  split_rows(dst->nrows(), args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t j1, j2, j3;
    unravel_row(r, dst->ne, j1, j2, j3);
    float* y = reinterpret_cast<float*>(row_ptr(dst, j1, j2, j3));
    std::fill(y, y + n0, 0.0f);
    for (int64_t t3 = 0; t3 < k3; ++t3)
      for (int64_t t2 = 0; t2 < k2; ++t2)
        for (int64_t t1 = 0; t1 < k1; ++t1) {
          const float* x =
              row_as_f32(a, j1 + t1 * dst->ne[1], j2 + t2 * dst->ne[2], j3 + t3 * dst->ne[3], tmp);
          for (int64_t t0 = 0; t0 < k0; ++t0)
            for (int64_t i = 0; i < n0; ++i) y[i] += x[t0 * n0 + i];
        }
  }
}

// ---- GET_ROWS / GET_ROWS_BACK / SET_ROWS ---------------------------------------------------------

// a {n0, rows, a2, a3} any type, ids I32 {n, a2, a3} -> dst F32 {n0, n, a2, a3}:
// dst[:, i, j, k] = a[:, ids[i, j, k], j, k]. An id outside [0, rows) yields a row of NaN.
// A repacked a (a tied token embedding, cpu_repack.h) has each row gathered into scratch first.
void compute_get_rows(const KernelArgs& args, Tensor* dst) {
  const Tensor* a = dst->src[0];
  const Tensor* ids = dst->src[1];
  const int64_t n0 = a->ne[0];
  const bool repacked = a->has_flag(kFlagRepacked);
  char* gathered = repacked ? thread_scratch<char>(args, a->nb[1]) : nullptr;
  int64_t r0, r1;
  split_rows(dst->nrows(), args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i, j, k;
    unravel_row(r, dst->ne, i, j, k);
    const int64_t id = load_i32(ids, i, j, k);
    float* y = reinterpret_cast<float*>(row_ptr(dst, i, j, k));
    if (id < 0 || id >= a->ne[1]) {
      std::fill(y, y + n0, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    if (repacked) unpack_tensor_row(*a, id, j, gathered);
    row_to_f32(a->type, repacked ? gathered : row_ptr(a, id, j, k), a->nb[0], n0, y);
  }
}

// grad {n0, n} float, ids I32 {n} -> dst F32 {n0, rows}: dst[:, r] = sum_{i: ids[i] == r} grad[:, i],
// summed in ascending i. Each thread owns a range of dst rows and scans all ids.
// Scratch per thread: n0 floats.
void compute_get_rows_back(const KernelArgs& args, Tensor* dst) {
  const Tensor* grad = dst->src[0];
  const Tensor* ids = dst->src[1];
  const int64_t n0 = dst->ne[0];
  float* tmp = thread_scratch(args, (size_t)n0 * sizeof(float));
  int64_t r0, r1;
  split_rows(dst->ne[1], args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    float* y = reinterpret_cast<float*>(row_ptr(dst, r));
    std::fill(y, y + n0, 0.0f);
  }
  for (int64_t i = 0; i < ids->ne[0]; ++i) {
    const int64_t r = load_i32(ids, i);
    if (r < r0 || r >= r1) continue;
    const float* g = row_as_f32(grad, i, 0, 0, tmp);
    float* y = reinterpret_cast<float*>(row_ptr(dst, r));
    for (int64_t e = 0; e < n0; ++e) y[e] += g[e];
  }
}

// dst {n0, rows, d2, d3} (the node, a view of src[0]), src F32 {n0, n, d2, d3}, ids I32 {n, i1, i2}:
// dst[:, ids[i, j % i1, k % i2], j, k] = src[:, i, j, k], quantized on write. Each thread owns a
// range of dst rows (by row index) and writes in ascending i, so a repeated id keeps the last
// source row. Ids outside [0, rows) are skipped. Scratch per thread: n0 floats.
void compute_set_rows(const KernelArgs& args, Tensor* dst) {
  const Tensor* src = dst->src[1];
  const Tensor* ids = dst->src[2];
  const int64_t n0 = dst->ne[0];
  float* tmp = unit_f32_rows(src) ? nullptr : thread_scratch(args, (size_t)n0 * sizeof(float));
  int64_t r0, r1;
  split_rows(dst->ne[1], args.ith, args.nth, r0, r1);
  if (r0 >= r1) return;
  for (int64_t k = 0; k < dst->ne[3]; ++k)
    for (int64_t j = 0; j < dst->ne[2]; ++j)
      for (int64_t i = 0; i < src->ne[1]; ++i) {
        const int64_t r = load_i32(ids, i, j % ids->ne[1], k % ids->ne[2]);
        if (r < r0 || r >= r1) continue;
        const float* x = row_as_f32(src, i, j, k, tmp);
        row_from_f32(dst->type, x, row_ptr(dst, r, j, k), dst->nb[0], n0);
      }
}

// Result types fixed by the builders; kernels that write dst through plain row pointers need it contiguous.
bool f32_out(const Tensor* node) { return is_f32_contiguous(node); }

}  // namespace

bool supports_copy(const Tensor* node) {
  const Tensor* a = node->src[0];
  const Tensor* b = node->src[1];
  if (!a) return false;
  switch (node->op) {
    case OpKind::CPY: return b && node->type == b->type && supports_cpy(a, node);
    case OpKind::DUP:
    case OpKind::CONT: return node->type == a->type && node->is_contiguous() && supports_cpy(a, node);
    case OpKind::ALL_REDUCE:
      return is_f32_contiguous(a) && f32_out(node) && node->param_i32(0) >= 0 &&
             node->param_i32(0) + a->ne[0] <= node->ne[0] && a->ne[1] == node->ne[1] && a->ne[2] == node->ne[2] &&
             a->ne[3] == node->ne[3];
    case OpKind::CONCAT: {
      if (!b || a->type != b->type || node->type != a->type || !node->is_contiguous()) return false;
      const int dim = node->param_i32(0);
      if (dim < 0 || dim > 3) return false;
      if (dtype_info(a->type).block_size > 1) return dim0_contiguous(a) && dim0_contiguous(b);
      return true;
    }
    case OpKind::REPEAT: return f32_out(node) && rows_readable(a);
    case OpKind::REPEAT_BACK: return f32_out(node) && is_plain_float(a->type);
    case OpKind::GET_ROWS:
      return f32_out(node) && b && b->type == DType::I32 && rows_readable(a);
    case OpKind::GET_ROWS_BACK:
      return f32_out(node) && b && b->type == DType::I32 && is_plain_float(a->type) && a->ne[2] == 1 &&
             a->ne[3] == 1 && b->nelements() == b->ne[0] && node->ne[2] == 1 && node->ne[3] == 1;
    case OpKind::SET_ROWS: {
      const Tensor* ids = node->src[2];
      return b && ids && b->type == DType::F32 && ids->type == DType::I32 && ids->ne[3] == 1 &&
             node->type == a->type && rows_writable(node);
    }
    default: return false;
  }
}

size_t work_size_copy(const Tensor* node, int nth) {
  const Tensor* a = node->src[0];
  if (!a) return 0;
  switch (node->op) {
    case OpKind::CPY:
    case OpKind::DUP:
    case OpKind::CONT:
      if (a->type == node->type) return 0;
      return scratch_bytes((size_t)(node->ne[0] + a->ne[0]) * sizeof(float), nth);
    case OpKind::REPEAT:
    case OpKind::REPEAT_BACK: return scratch_bytes((size_t)a->ne[0] * sizeof(float), nth);
    case OpKind::GET_ROWS:
      return a->has_flag(kFlagRepacked) ? scratch_bytes(a->nb[1], nth) : 0;
    case OpKind::GET_ROWS_BACK:
      return scratch_bytes((size_t)node->ne[0] * sizeof(float), nth);
    // f32 rows go straight to the writer: no scratch, so the K/V cache writes between the Q/K/V
    // projections leave their quantized input in place (matmul_b_prepared_by)
    case OpKind::SET_ROWS:
      return unit_f32_rows(node->src[1]) ? 0 : scratch_bytes((size_t)node->ne[0] * sizeof(float), nth);
    default: return 0;
  }
}

void compute_copy(const KernelArgs& args, Tensor* node) {
  switch (node->op) {
    case OpKind::CPY:
    case OpKind::DUP:
    case OpKind::CONT: compute_cpy(args, node->src[0], node); break;
    case OpKind::ALL_REDUCE: compute_all_reduce_local(args, node); break;  // the local value; the executor sums
    case OpKind::CONCAT: compute_concat(args, node); break;
    case OpKind::REPEAT: compute_repeat(args, node); break;
    case OpKind::REPEAT_BACK: compute_repeat_back(args, node); break;
    case OpKind::GET_ROWS: compute_get_rows(args, node); break;
    case OpKind::GET_ROWS_BACK: compute_get_rows_back(args, node); break;
    case OpKind::SET_ROWS: compute_set_rows(args, node); break;
    default: break;
  }
}

}  // namespace loom::cpu
