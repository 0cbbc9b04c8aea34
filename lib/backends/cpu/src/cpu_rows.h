// Strided row access shared by the CPU kernel families: addresses from ne/nb, f32 loads and
// stores of the plain float types, whole-row conversion to and from f32 for every type with a
// dtype-table conversion (quantized rows block by block), and per-thread scratch carved from
// KernelArgs::wdata. Kernels keep their contiguous-F32 fast paths and call these otherwise.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "cpu_vec_dot.h"
#include "kernels.h"
#include "loom/core/dtype.h"
#include "loom/core/fp16.h"

namespace loom::cpu {

// ---- addresses ---------------------------------------------------------------------------------

inline const char* row_ptr(const Tensor* t, int64_t i1, int64_t i2 = 0, int64_t i3 = 0) {
  return static_cast<const char*>(t->data) + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
}
inline char* row_ptr(Tensor* t, int64_t i1, int64_t i2 = 0, int64_t i3 = 0) {
  return static_cast<char*>(t->data) + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
}
inline const char* elem_ptr(const Tensor* t, int64_t i0, int64_t i1, int64_t i2 = 0, int64_t i3 = 0) {
  return row_ptr(t, i1, i2, i3) + i0 * t->nb[0];
}

// Row index r (0 <= r < ne1*ne2*ne3) -> (i1, i2, i3).
inline void unravel_row(int64_t r, const int64_t* ne, int64_t& i1, int64_t& i2, int64_t& i3) {
  i1 = r % ne[1];
  r /= ne[1];
  i2 = r % ne[2];
  i3 = r / ne[2];
}

// ---- type predicates ---------------------------------------------------------------------------

inline bool is_plain_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
// Dim 0 has unit stride (always true of a non-permuted quantized tensor).
inline bool dim0_contiguous(const Tensor* t) { return t->nb[0] == dtype_info(t->type).type_size; }
// Rows can be read as f32 by row_to_f32: a type with a conversion, and for block types a
// unit-stride dim 0 (a block cannot be split across strides).
inline bool rows_readable(const Tensor* t) {
  const DTypeInfo& info = dtype_info(t->type);
  return info.to_float != nullptr && (info.block_size == 1 || dim0_contiguous(t));
}
inline bool rows_writable(const Tensor* t) {
  const DTypeInfo& info = dtype_info(t->type);
  return info.from_float != nullptr && (info.block_size == 1 || dim0_contiguous(t));
}
inline bool is_f32_contiguous(const Tensor* t) { return t->type == DType::F32 && t->is_contiguous(); }
// Whether the byte ranges the two tensors' elements span overlap (false where either has no
// memory).
inline bool overlaps(const Tensor* a, const Tensor* b) {
  if (!a || !b || !a->data || !b->data) return false;
  const char* a0 = static_cast<const char*>(a->data);
  const char* b0 = static_cast<const char*>(b->data);
  return a0 < b0 + b->nbytes() && b0 < a0 + a->nbytes();
}

// ---- scalar loads and stores (plain float types only) ------------------------------------------

inline float load_f32(DType type, const void* p) {
  switch (type) {
    case DType::F16: return fp16_to_f32(*static_cast<const fp16_t*>(p));
    case DType::BF16: return bf16_to_f32(*static_cast<const bf16_t*>(p));
    default: return *static_cast<const float*>(p);
  }
}
inline void store_f32(DType type, void* p, float v) {
  switch (type) {
    case DType::F16: *static_cast<fp16_t*>(p) = f32_to_fp16(v); break;
    case DType::BF16: *static_cast<bf16_t*>(p) = f32_to_bf16(v); break;
    default: *static_cast<float*>(p) = v; break;
  }
}

// ---- whole rows --------------------------------------------------------------------------------

// n elements of a row starting at src (stride nb0 between plain elements) -> out[0, n).
inline void row_to_f32(DType type, const char* src, size_t nb0, int64_t n, float* out) {
  const DTypeInfo& info = dtype_info(type);
  if (nb0 == info.type_size || info.block_size > 1) {
    info.to_float(src, out, n);
    return;
  }
  switch (type) {
    case DType::F32:
      for (int64_t i = 0; i < n; ++i) out[i] = *reinterpret_cast<const float*>(src + i * nb0);
      break;
    case DType::F16:
      for (int64_t i = 0; i < n; ++i) out[i] = fp16_to_f32(*reinterpret_cast<const fp16_t*>(src + i * nb0));
      break;
    case DType::BF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(*reinterpret_cast<const bf16_t*>(src + i * nb0));
      break;
    default: break;  // excluded by rows_readable
  }
}

// src[0, n) -> a row at dst (stride nb0 between plain elements; block types quantize whole blocks).
inline void row_from_f32(DType type, const float* src, char* dst, size_t nb0, int64_t n) {
  const DTypeInfo& info = dtype_info(type);
  if (nb0 == info.type_size || info.block_size > 1) {
    const WeightKernels* wk = weight_kernels(type);  // F16 / BF16: the active level's writer
    (wk && wk->from_f32 ? wk->from_f32 : info.from_float)(src, dst, n);
    return;
  }
  for (int64_t i = 0; i < n; ++i) store_f32(type, dst + i * nb0, src[i]);
}

// Whether t's rows are f32 with unit stride (row_as_f32 then needs no tmp).
inline bool unit_f32_rows(const Tensor* t) { return t->type == DType::F32 && t->nb[0] == sizeof(float); }

// The row (i1, i2, i3) of t as f32: the row itself when t is F32 with unit stride, else tmp
// (ne0 floats) filled by conversion.
inline const float* row_as_f32(const Tensor* t, int64_t i1, int64_t i2, int64_t i3, float* tmp) {
  const char* p = row_ptr(t, i1, i2, i3);
  if (unit_f32_rows(t)) return reinterpret_cast<const float*>(p);
  row_to_f32(t->type, p, t->nb[0], t->ne[0], tmp);
  return tmp;
}

// n units of unit bytes each (an element, or a block of a quantized type) between two strided rows.
inline void copy_units(const char* src, size_t src_nb0, char* dst, size_t dst_nb0, int64_t n, size_t unit) {
  if (src_nb0 == unit && dst_nb0 == unit) {
    std::memmove(dst, src, (size_t)n * unit);
    return;
  }
  for (int64_t i = 0; i < n; ++i) std::memcpy(dst + i * dst_nb0, src + i * src_nb0, unit);
}

// Elements [e0, e1) of n that thread ith handles when a flat array is split in 64-element chunks.
inline void split_flat(int64_t n, const KernelArgs& args, int64_t& e0, int64_t& e1) {
  int64_t c0, c1;
  split_rows((n + 63) / 64, args.ith, args.nth, c0, c1);
  e0 = c0 * 64 < n ? c0 * 64 : n;
  e1 = c1 * 64 < n ? c1 * 64 : n;
}

// ---- per-thread scratch -------------------------------------------------------------------------
// A kernel needing `per_thread` bytes for each thread asks work_size for scratch_bytes(per_thread,
// nth) and finds its slice with thread_scratch. Slices are 64-byte multiples (no false sharing).

inline size_t scratch_stride(size_t per_thread) { return (per_thread + 63) / 64 * 64; }
inline size_t scratch_bytes(size_t per_thread, int nth) { return scratch_stride(per_thread) * (size_t)nth; }
template <typename T = float>
inline T* thread_scratch(const KernelArgs& args, size_t per_thread, size_t offset = 0) {
  return reinterpret_cast<T*>(static_cast<char*>(args.wdata) + offset + scratch_stride(per_thread) * args.ith);
}

// ---- summation --------------------------------------------------------------------------------

// Sum of x[0, n) with 16 independent f32 lanes (vectorizes without fast-math), combined in double.
inline double sum_f32(const float* x, int64_t n) {
  float lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) lanes[j] += x[i + j];
  double s = 0;
  for (; i < n; ++i) s += x[i];
  for (float l : lanes) s += l;
  return s;
}

// Sum of x[i]^2 (or (x[i] - c)^2), likewise.
inline double sum_sq_f32(const float* x, int64_t n, float c = 0.0f) {
  float lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) {
      const float d = x[i + j] - c;
      lanes[j] += d * d;
    }
  double s = 0;
  for (; i < n; ++i) s += (double)(x[i] - c) * (x[i] - c);
  for (float l : lanes) s += l;
  return s;
}

// Sum of x[i] * y[i], likewise.
inline double dot_f32(const float* x, const float* y, int64_t n) {
  float lanes[16] = {};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    for (int j = 0; j < 16; ++j) lanes[j] += x[i + j] * y[i + j];
  double s = 0;
  for (; i < n; ++i) s += (double)x[i] * y[i];
  for (float l : lanes) s += l;
  return s;
}

}  // namespace loom::cpu
