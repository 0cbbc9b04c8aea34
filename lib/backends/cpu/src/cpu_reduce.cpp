// CPU kernels of the reduction family: SUM, SUM_ROWS, MEAN, ARGMAX, ARGSORT, TOP_K, COUNT_EQUAL.
// Row-wise ops split rows across threads. SUM and COUNT_EQUAL reduce everything: each thread
// writes a partial into wdata, then after a barrier thread 0 adds the partials in thread order.
// Ordering ops put NaN after every number (so comparators stay strict weak orders).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "cpu_rows.h"
#include "kernels.h"

namespace loom::cpu {

namespace {

constexpr size_t kPartialStride = 64;  // one cache line per thread's partial result

// ---- SUM / SUM_ROWS / MEAN -------------------------------------------------------------------

// a float {n0, n1, n2, n3} -> F32 {1}: sum of every element (double partials per thread).
// wdata: nth partials, then per-thread scratch of n0 floats.
void sum_all(const KernelArgs& args, Tensor* dst) {
  const Tensor* a = dst->src[0];
  const size_t partials = kPartialStride * (size_t)args.nth;
  float* tmp = thread_scratch(args, (size_t)a->ne[0] * sizeof(float), partials);
  double s = 0;
  int64_t r0, r1;
  split_rows(a->nrows(), args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    unravel_row(r, a->ne, i1, i2, i3);
    s += sum_f32(row_as_f32(a, i1, i2, i3, tmp), a->ne[0]);
  }
  char* base = static_cast<char*>(args.wdata);
  *reinterpret_cast<double*>(base + kPartialStride * args.ith) = s;
  args.barrier();
  if (args.ith != 0) return;
  double total = 0;
  for (int t = 0; t < args.nth; ++t) total += *reinterpret_cast<const double*>(base + kPartialStride * t);
  *static_cast<float*>(dst->data) = (float)total;
}

// a float {n0, n1, n2, n3} -> F32 {1, n1, n2, n3}: sum (or mean) of each row.
void sum_rows(const KernelArgs& args, Tensor* dst, bool mean) {
  const Tensor* a = dst->src[0];
  float* tmp = thread_scratch(args, (size_t)a->ne[0] * sizeof(float));
  float* out = static_cast<float*>(dst->data);
  const int64_t n0 = a->ne[0];
  int64_t r0, r1;
  split_rows(a->nrows(), args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    unravel_row(r, a->ne, i1, i2, i3);
    const double s = sum_f32(row_as_f32(a, i1, i2, i3, tmp), n0);
    out[r] = (float)(mean ? s / (double)n0 : s);
  }
}

// ---- ARGMAX / ARGSORT / TOP_K ------------------------------------------------------------------

// NaN-last orders on values (for stable sorting) ...
inline bool less_nan_last(float x, float y) { return !std::isnan(x) && (std::isnan(y) || x < y); }
inline bool greater_nan_last(float x, float y) { return !std::isnan(x) && (std::isnan(y) || x > y); }

// a F32 {n0, n1} -> I32 {n1}: index of the largest value of each row, the first one on ties.
void argmax(const KernelArgs& args, Tensor* dst) {
  const Tensor* a = dst->src[0];
  float* tmp = thread_scratch(args, (size_t)a->ne[0] * sizeof(float));
  int32_t* out = static_cast<int32_t*>(dst->data);
  int64_t r0, r1;
  split_rows(a->ne[1], args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    const float* x = row_as_f32(a, r, 0, 0, tmp);
    int64_t best = 0;
    for (int64_t i = 1; i < a->ne[0]; ++i)
      if (greater_nan_last(x[i], x[best])) best = i;
    out[r] = (int32_t)best;
  }
}

// a F32 {n0, ..} -> I32 {n0, ..}: per row, the permutation sorting it (stable: equal values keep
// index order), ascending or descending by op param 0.
void argsort(const KernelArgs& args, Tensor* dst) {
  const Tensor* a = dst->src[0];
  const bool descending = dst->param_i32(0) == 1;
  const int64_t n0 = a->ne[0];
  float* tmp = thread_scratch(args, (size_t)n0 * sizeof(float));
  int64_t r0, r1;
  split_rows(a->nrows(), args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    unravel_row(r, a->ne, i1, i2, i3);
    const float* x = row_as_f32(a, i1, i2, i3, tmp);
    int32_t* idx = static_cast<int32_t*>(dst->data) + r * n0;
    std::iota(idx, idx + n0, 0);
    if (descending) {
      std::stable_sort(idx, idx + n0, [x](int32_t i, int32_t j) { return greater_nan_last(x[i], x[j]); });
    } else {
      std::stable_sort(idx, idx + n0, [x](int32_t i, int32_t j) { return less_nan_last(x[i], x[j]); });
    }
  }
}

// a F32 {n0, ..} -> I32 {k, ..}: indices of the k largest values of each row, largest first;
// equal values by ascending index. Scratch per thread: n0 floats + n0 indices.
void top_k(const KernelArgs& args, Tensor* dst) {
  const Tensor* a = dst->src[0];
  const int64_t n0 = a->ne[0], k = dst->ne[0];
  float* tmp = thread_scratch(args, (size_t)n0 * (sizeof(float) + sizeof(int32_t)));
  int32_t* idx = reinterpret_cast<int32_t*>(tmp + n0);
  int64_t r0, r1;
  split_rows(a->nrows(), args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    unravel_row(r, a->ne, i1, i2, i3);
    const float* x = row_as_f32(a, i1, i2, i3, tmp);
    std::iota(idx, idx + n0, 0);
    // A strict total order, so the k selected and their order are unique.
    std::partial_sort(idx, idx + k, idx + n0, [x](int32_t i, int32_t j) {
      if (greater_nan_last(x[i], x[j])) return true;
      if (greater_nan_last(x[j], x[i])) return false;
      return i < j;
    });
    std::copy(idx, idx + k, static_cast<int32_t*>(dst->data) + r * k);
  }
}

// ---- COUNT_EQUAL ------------------------------------------------------------------------------

// a, b I32 same shape -> I32 {1}: number of positions where a == b. wdata: nth partial counts.
void count_equal(const KernelArgs& args, Tensor* dst) {
  const Tensor* a = dst->src[0];
  const Tensor* b = dst->src[1];
  int64_t count = 0;
  int64_t r0, r1;
  split_rows(a->nrows(), args.ith, args.nth, r0, r1);
  const bool unit = a->nb[0] == sizeof(int32_t) && b->nb[0] == sizeof(int32_t);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    unravel_row(r, a->ne, i1, i2, i3);
    const char* pa = row_ptr(a, i1, i2, i3);
    const char* pb = row_ptr(b, i1, i2, i3);
    if (unit) {
      const int32_t* x = reinterpret_cast<const int32_t*>(pa);
      const int32_t* y = reinterpret_cast<const int32_t*>(pb);
      for (int64_t i = 0; i < a->ne[0]; ++i) count += x[i] == y[i];
    } else {
      for (int64_t i = 0; i < a->ne[0]; ++i)
        count += *reinterpret_cast<const int32_t*>(pa + i * a->nb[0]) ==
                 *reinterpret_cast<const int32_t*>(pb + i * b->nb[0]);
    }
  }
  char* base = static_cast<char*>(args.wdata);
  *reinterpret_cast<int64_t*>(base + kPartialStride * args.ith) = count;
  args.barrier();
  if (args.ith != 0) return;
  int64_t total = 0;
  for (int t = 0; t < args.nth; ++t) total += *reinterpret_cast<const int64_t*>(base + kPartialStride * t);
  *static_cast<int32_t*>(dst->data) = (int32_t)total;
}

}  // namespace

bool supports_reduce(const Tensor* node) {
  const Tensor* a = node->src[0];
  if (!a || !node->is_contiguous()) return false;
  switch (node->op) {
    case OpKind::SUM: return node->type == DType::F32 && is_plain_float(a->type) && node->nelements() == 1;
    case OpKind::SUM_ROWS:
    case OpKind::MEAN:
      return node->type == DType::F32 && is_plain_float(a->type) && node->ne[0] == 1 && node->ne[1] == a->ne[1] &&
             node->ne[2] == a->ne[2] && node->ne[3] == a->ne[3];
    case OpKind::ARGMAX:
      return node->type == DType::I32 && a->type == DType::F32 && a->ne[0] > 0 && a->ne[2] == 1 && a->ne[3] == 1 &&
             node->nelements() == a->ne[1];
    case OpKind::ARGSORT: return node->type == DType::I32 && a->type == DType::F32 && same_shape(*node, *a);
    case OpKind::TOP_K:
      return node->type == DType::I32 && a->type == DType::F32 && node->ne[0] <= a->ne[0] &&
             node->ne[1] == a->ne[1] && node->ne[2] == a->ne[2] && node->ne[3] == a->ne[3];
    case OpKind::COUNT_EQUAL: {
      const Tensor* b = node->src[1];
      return node->type == DType::I32 && node->nelements() == 1 && a->type == DType::I32 && b &&
             b->type == DType::I32 && same_shape(*a, *b);
    }
    default: return false;
  }
}

size_t work_size_reduce(const Tensor* node, int nth) {
  if (!node->src[0]) return 0;
  const size_t n0 = (size_t)node->src[0]->ne[0];
  switch (node->op) {
    case OpKind::SUM: return kPartialStride * (size_t)nth + scratch_bytes(n0 * sizeof(float), nth);
    case OpKind::COUNT_EQUAL: return kPartialStride * (size_t)nth;
    case OpKind::TOP_K: return scratch_bytes(n0 * (sizeof(float) + sizeof(int32_t)), nth);
    default: return scratch_bytes(n0 * sizeof(float), nth);
  }
}

void compute_reduce(const KernelArgs& args, Tensor* node) {
  switch (node->op) {
    case OpKind::SUM: return sum_all(args, node);
    case OpKind::SUM_ROWS: return sum_rows(args, node, false);
    case OpKind::MEAN: return sum_rows(args, node, true);
    case OpKind::ARGMAX: return argmax(args, node);
    case OpKind::ARGSORT: return argsort(args, node);
    case OpKind::TOP_K: return top_k(args, node);
    case OpKind::COUNT_EQUAL: return count_equal(args, node);
    default: return;
  }
}

}  // namespace loom::cpu
