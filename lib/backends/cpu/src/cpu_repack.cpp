// Repacked rows (cpu_repack.h): the layout conversions, the reference kernel, and
// the entry point the model loader calls to place a weight repacked.
#include "cpu_repack.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <system_error>
#include <thread>
#include <vector>

#include "cpu_features.h"
#include "cpu_vec_dot.h"
#include "loom/core/quants.h"
#include "loom/core/thread_pool.h"
#include "loom/cpu/cpu.h"
#include "loom/graph/tensor.h"
#include "simd_isa.h"

namespace loom::cpu {
namespace {

size_t block_bytes(DType type) { return dtype_info(type).type_size; }
int64_t block_values(DType type) { return dtype_info(type).block_size; }
int quads(DType type) { return type == DType::Q8_0 ? 8 : 4; }

// GGUF Q4_K block <-> row i of a group block at p.
void put_block_q4k(const uint8_t* blk, int i, uint8_t* p) {
  BlockQ4_K w;
  std::memcpy(&w, blk, sizeof(w));
  std::memcpy(p + 2 * i, &w.d, sizeof(fp16_t));
  std::memcpy(p + 2 * (kRepackRows + i), &w.dmin, sizeof(fp16_t));
  uint8_t hi[4] = {};
  for (int j = 0; j < 8; ++j) {
    const ScaleMin sm = q4_k_scale_min(w.scales, j);
    p[kQ4kRepackScaleLo + j * kRepackRows + i] = (uint8_t)((sm.sc & 15) | ((sm.m & 15) << 4));
    hi[j % 4] |= (uint8_t)(((sm.sc >> 4) | ((sm.m >> 4) << 2)) << (j < 4 ? 0 : 4));
  }
  for (int jj = 0; jj < 4; ++jj) p[kQ4kRepackScaleHi + jj * kRepackRows + i] = hi[jj];
  for (int q = 0; q < 32; ++q) std::memcpy(p + kQ4kRepackQuads + (q * kRepackRows + i) * 4, w.qs + 4 * q, 4);
}
void get_block_q4k(const uint8_t* p, int i, uint8_t* blk) {
  BlockQ4_K w{};
  std::memcpy(&w.d, p + 2 * i, sizeof(fp16_t));
  std::memcpy(&w.dmin, p + 2 * (kRepackRows + i), sizeof(fp16_t));
  for (int j = 0; j < 8; ++j) {
    const ScaleMin sm = repacked_q4k_scale_min(p, i, j);
    q4_k_set_scale_min(w.scales, j, sm.sc, sm.m);
  }
  for (int q = 0; q < 32; ++q) std::memcpy(w.qs + 4 * q, p + kQ4kRepackQuads + (q * kRepackRows + i) * 4, 4);
  std::memcpy(blk, &w, sizeof(w));
}

// GGUF Q6_K block <-> row i of a group block at p.
void put_block_q6k(const uint8_t* blk, int i, uint8_t* p) {
  BlockQ6_K w;
  std::memcpy(&w, blk, sizeof(w));
  std::memcpy(p + 2 * i, &w.d, sizeof(fp16_t));
  for (int sb = 0; sb < 16; ++sb) p[q6k_repack_scale(sb, i)] = (uint8_t)w.scales[sb];
  for (int q = 0; q < 32; ++q) std::memcpy(p + q6k_repack_ql(q, i), w.ql + 4 * q, 4);
  for (int q = 0; q < 16; ++q) std::memcpy(p + q6k_repack_qh(q, i), w.qh + 4 * q, 4);
}
void get_block_q6k(const uint8_t* p, int i, uint8_t* blk) {
  BlockQ6_K w;
  std::memcpy(&w.d, p + 2 * i, sizeof(fp16_t));
  for (int sb = 0; sb < 16; ++sb) w.scales[sb] = (int8_t)p[q6k_repack_scale(sb, i)];
  for (int q = 0; q < 32; ++q) std::memcpy(w.ql + 4 * q, p + q6k_repack_ql(q, i), 4);
  for (int q = 0; q < 16; ++q) std::memcpy(w.qh + 4 * q, p + q6k_repack_qh(q, i), 4);
  std::memcpy(blk, &w, sizeof(w));
}

// The field layouts (cpu_repack.h) of the newer types; empty for the others.
std::span<const RepackField> repack_fields(DType type) {
  switch (type) {
    case DType::Q4_1:
      return kQ4_1Fields;
    case DType::Q5_0:
      return kQ5_0Fields;
    case DType::Q5_1:
      return kQ5_1Fields;
    case DType::IQ4_NL:
      return kIq4NlFields;
    case DType::MXFP4:
      return kMxfp4Fields;
    case DType::Q2_K:
      return kQ2KFields;
    case DType::Q3_K:
      return kQ3KFields;
    case DType::Q5_K:
      return kQ5KFields;
    case DType::IQ4_XS:
      return kIq4XsFields;
    default:
      return {};
  }
}

// Q5_0 / Q5_1's qh word: byte t bit b <- bit 4b + t (and back).
uint32_t transpose_qh(uint32_t v) {
  uint32_t r = 0;
  for (int n = 0; n < 32; ++n) r |= ((v >> n) & 1u) << (8 * (n % 4) + n / 4);
  return r;
}
uint32_t untranspose_qh(uint32_t v) {
  uint32_t r = 0;
  for (int n = 0; n < 32; ++n) r |= ((v >> (8 * (n % 4) + n / 4)) & 1u) << n;
  return r;
}

// Q3_K's levels (cpu_repack.h) of a GGUF block <-> row i's 24 words at p + kQ3kLevels. Byte m
// of the words (word m / 4, byte m % 4) holds levels m and 96 + m (groups 0-5 and 6-11), and
// bits of the levels 192 + m' (groups 12-15) as q3k_quad and q3k_high_bits place them. Flat
// loops: this runs for every Q3_K weight at load.
void put_q3k_levels(const uint8_t* blk, int i, uint8_t* p) {
  BlockQ3_K w;
  std::memcpy(&w, blk, sizeof(w));
  uint8_t v[256], out[96];
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l)
        v[128 * h + 32 * k + l] =
            (uint8_t)(((w.qs[32 * h + l] >> (2 * k)) & 3) | (((w.hmask[l] >> (4 * h + k)) & 1) << 2));
  for (int m = 0; m < 96; ++m) out[m] = (uint8_t)(v[m] | v[96 + m] << 5);
  for (int m = 0; m < 64; ++m) {
    const int j = m / 4;
    out[m] |= (uint8_t)((v[192 + m] & 3) << 3);
    out[64 + 4 * (j / 2) + m % 4] |= (uint8_t)((v[192 + m] >> 2) << (3 + j % 2));
  }
  for (int n = 0; n < 24; ++n) std::memcpy(p + kQ3kLevels + (size_t)(n * kRepackRows + i) * 4, out + 4 * n, 4);
}
// Row i's 256 levels (0..7) at v.
void q3k_levels(const uint8_t* p, int i, uint8_t* v) {
  uint8_t in[96];
  for (int n = 0; n < 24; ++n) std::memcpy(in + 4 * n, p + kQ3kLevels + (size_t)(n * kRepackRows + i) * 4, 4);
  for (int m = 0; m < 96; ++m) {
    v[m] = in[m] & 7;
    v[96 + m] = (uint8_t)(in[m] >> 5);
  }
  for (int m = 0; m < 64; ++m) {
    const int j = m / 4;
    v[192 + m] = (uint8_t)(((in[m] >> 3) & 3) | (((in[64 + 4 * (j / 2) + m % 4] >> (3 + j % 2)) & 1) << 2));
  }
}
void get_q3k_levels(const uint8_t* p, int i, uint8_t* blk) {
  uint8_t v[256];
  q3k_levels(p, i, v);
  BlockQ3_K w;
  std::memcpy(&w, blk, sizeof(w));  // d and the scales, from get_fields
  std::memset(w.qs, 0, sizeof(w.qs));
  std::memset(w.hmask, 0, sizeof(w.hmask));
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l) {
        const uint8_t x = v[128 * h + 32 * k + l];
        w.qs[32 * h + l] |= (uint8_t)((x & 3) << (2 * k));
        w.hmask[l] |= (uint8_t)((x >> 2) << (4 * h + k));
      }
  std::memcpy(blk, &w, sizeof(w));
}

// GGUF block <-> row i of a group block at p, field by field.
void put_fields(std::span<const RepackField> fields, const uint8_t* blk, int i, uint8_t* p) {
  for (const RepackField& f : fields) {
    for (int c = 0; c < f.bytes / f.grain; ++c) {
      uint8_t* dst = p + (size_t)(c * kRepackRows + i) * f.grain;
      if (f.bit_transpose) {
        uint32_t v;
        std::memcpy(&v, blk + f.at, 4);
        v = transpose_qh(v);
        std::memcpy(dst, &v, 4);
      } else {
        std::memcpy(dst, blk + f.at + c * f.grain, f.grain);
      }
    }
    p += (size_t)kRepackRows * f.bytes;
  }
}
void get_fields(std::span<const RepackField> fields, const uint8_t* p, int i, uint8_t* blk) {
  for (const RepackField& f : fields) {
    for (int c = 0; c < f.bytes / f.grain; ++c) {
      const uint8_t* src = p + (size_t)(c * kRepackRows + i) * f.grain;
      if (f.bit_transpose) {
        uint32_t v;
        std::memcpy(&v, src, 4);
        v = untranspose_qh(v);
        std::memcpy(blk + f.at, &v, 4);
      } else {
        std::memcpy(blk + f.at + c * f.grain, src, f.grain);
      }
    }
    p += (size_t)kRepackRows * f.bytes;
  }
}

// GGUF block (34 / 18 bytes) <-> row i of a group block at p: the scale, then 4 bytes per quad
// (Q8_0 flipped to unsigned q + 128). Whole-word copies: this runs for every weight at load.
void put_block(DType type, const uint8_t* blk, int i, uint8_t* p) {
  if (type == DType::Q4_K) return put_block_q4k(blk, i, p);
  if (type == DType::Q6_K) return put_block_q6k(blk, i, p);
  if (const auto fields = repack_fields(type); !fields.empty()) {
    put_fields(fields, blk, i, p);
    if (type == DType::Q3_K) put_q3k_levels(blk, i, p);
    return;
  }
  std::memcpy(p + 2 * i, blk, sizeof(fp16_t));
  uint8_t qs[32];
  const int n = 4 * quads(type);
  std::memcpy(qs, blk + sizeof(fp16_t), (size_t)n);
  if (type == DType::Q8_0)
    for (int k = 0; k < 32; ++k) qs[k] ^= 0x80;
  for (int q = 0; q < quads(type); ++q) std::memcpy(p + 16 + (q * kRepackRows + i) * 4, qs + 4 * q, 4);
}
void get_block(DType type, const uint8_t* p, int i, uint8_t* blk) {
  if (type == DType::Q4_K) return get_block_q4k(p, i, blk);
  if (type == DType::Q6_K) return get_block_q6k(p, i, blk);
  if (const auto fields = repack_fields(type); !fields.empty()) {
    get_fields(fields, p, i, blk);  // (Q3_K: d and scales, the levels then added)
    if (type == DType::Q3_K) get_q3k_levels(p, i, blk);
    return;
  }
  std::memcpy(blk, p + 2 * i, sizeof(fp16_t));
  uint8_t qs[32];
  for (int q = 0; q < quads(type); ++q) std::memcpy(qs + 4 * q, p + 16 + (q * kRepackRows + i) * 4, 4);
  if (type == DType::Q8_0)
    for (int k = 0; k < 32; ++k) qs[k] ^= 0x80;
  std::memcpy(blk + sizeof(fp16_t), qs, (size_t)(4 * quads(type)));
}

}  // namespace

ScaleMin repacked_q4k_scale_min(const uint8_t* p, int i, int j) {
  const uint8_t lo = p[kQ4kRepackScaleLo + j * kRepackRows + i];
  const uint8_t hi = (uint8_t)(p[kQ4kRepackScaleHi + (j % 4) * kRepackRows + i] >> (j < 4 ? 0 : 4));
  return {(uint8_t)((lo & 15) | ((hi & 3) << 4)), (uint8_t)((lo >> 4) | (((hi >> 2) & 3) << 4))};
}

bool repack_type(DType type) {
  return type == DType::Q8_0 || type == DType::Q4_0 || type == DType::Q4_K || type == DType::Q6_K ||
         !repack_fields(type).empty();
}

bool repacked_kernels(DType type) {
  const WeightKernels* wk = repack_type(type) ? weight_kernels(type) : nullptr;
  return wk && wk->rows_dot_r8;
}

size_t repack_group_block_bytes(DType type) { return kRepackRows * block_bytes(type); }

RowsDotFn rows_dot_pairs(DType type) { return active_isa() == Isa::avx512 ? rows_dot_pairs_avx512(type) : nullptr; }

bool repack_pairs(DType type, int64_t K) { return rows_dot_pairs(type) && wide_512(type, K); }

namespace {
// Group g of nrows: its matrix's start and its place in it (pairs: r8_group).
R8Group group_at(int64_t g, int64_t nrows, size_t lda, size_t gbb, bool pairs, int64_t matrix_rows) {
  const int64_t per = (matrix_rows > 0 ? matrix_rows : nrows) / kRepackRows;  // groups per matrix
  const R8Group in = r8_group(g % per, per, lda, gbb, pairs);
  return {(size_t)(g / per) * (size_t)per * kRepackRows * lda + in.at, in.stride};
}
}  // namespace

void repack_rows(DType type, const void* src, void* dst, int64_t nrows, int64_t K, bool pairs, int64_t matrix_rows) {
  const int64_t nblk = K / block_values(type);
  const size_t lda = (size_t)nblk * block_bytes(type), gbb = repack_group_block_bytes(type);
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  const int64_t groups = nrows / kRepackRows;
  auto repack_groups = [&](int64_t g0, int64_t g1) {
    const void* blocks[kRepackRows];
    for (int64_t g = g0; g < g1; ++g) {
      const R8Group at = group_at(g, nrows, lda, gbb, pairs, matrix_rows);
      for (int64_t b = 0; b < nblk; ++b) {
        for (int i = 0; i < kRepackRows; ++i)
          blocks[i] = s + (size_t)(g * kRepackRows + i) * lda + (size_t)b * block_bytes(type);
        repack_group_block(type, blocks, d + at.at + (size_t)b * at.stride);
      }
    }
  };
  // Big matrices on all cores: model loading repacks every such weight.
  const int64_t nth = (size_t)nrows * lda < (size_t(4) << 20) ? 1 : ThreadPool::default_threads();
  std::vector<std::thread> threads;
  for (int64_t t = 1; t < nth; ++t) {
    try {
      threads.emplace_back([&, t] {
        unpin_current_thread();  // not on the one CPU a pinned caller may have
        repack_groups(groups * t / nth, groups * (t + 1) / nth);
      });
    } catch (const std::system_error&) {
      repack_groups(groups * t / nth, groups * (t + 1) / nth);  // no thread to be had: do it here
    }
  }
  repack_groups(0, groups / nth);
  for (std::thread& th : threads) th.join();
}

void repack_group_block(DType type, const void* const* blocks, void* dst) {
  alignas(8) static const uint8_t kZero[sizeof(BlockQ6_K)] = {};
  for (int i = 0; i < kRepackRows; ++i)
    put_block(type, blocks[i] ? static_cast<const uint8_t*>(blocks[i]) : kZero, i, static_cast<uint8_t*>(dst));
}

void unpack_blocks(DType type, const uint8_t* group, int i, int64_t b0, int64_t nb, void* out) {
  const size_t gbb = repack_group_block_bytes(type), bb = block_bytes(type);
  for (int64_t b = 0; b < nb; ++b)
    get_block(type, group + (size_t)(b0 + b) * gbb, i, static_cast<uint8_t*>(out) + (size_t)b * bb);
}

void unpack_tensor_row(const Tensor& t, int64_t r, int64_t i2, void* out) {
  const int64_t row = i2 * t.ne[1] + r;  // in the stack, as repack_weight laid it out
  const R8Group at = group_at(row / kRepackRows, t.ne[1] * t.ne[2], t.nb[1], repack_group_block_bytes(t.type),
                              t.has_flag(kFlagRepackedPairs), t.ne[1]);
  const auto* base = static_cast<const uint8_t*>(t.data);
  for (int64_t b = 0; b < t.ne[0] / block_values(t.type); ++b)
    get_block(t.type, base + at.at + (size_t)b * at.stride, (int)(row % kRepackRows),
              static_cast<uint8_t*>(out) + (size_t)b * block_bytes(t.type));
}

void unpack_rows(DType type, const void* src, void* dst, int64_t nrows, int64_t K, bool pairs, int64_t matrix_rows) {
  const int64_t nblk = K / block_values(type);
  const size_t lda = (size_t)nblk * block_bytes(type), gbb = repack_group_block_bytes(type), bb = block_bytes(type);
  const auto* s = static_cast<const uint8_t*>(src);
  auto* d = static_cast<uint8_t*>(dst);
  for (int64_t g = 0; g < nrows / kRepackRows; ++g) {
    const R8Group at = group_at(g, nrows, lda, gbb, pairs, matrix_rows);
    for (int i = 0; i < kRepackRows; ++i)
      for (int64_t b = 0; b < nblk; ++b)
        get_block(type, s + at.at + (size_t)b * at.stride, i, d + (size_t)(g * kRepackRows + i) * lda + (size_t)b * bb);
  }
}

void rows_dot_r8_ref(DType type, int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                     float* const* out, bool pairs) {
  const WeightKernels* ref = weight_kernels_scalar(type);
  std::vector<uint8_t> rows((size_t)nr * lda);
  unpack_rows(type, a, rows.data(), nr, K, pairs);  // (a pair-aligned range: its own pairs)
  ref->rows_dot(K, rows.data(), lda, nr, b, nc, out);
}

bool repack_weight(Tensor& t, const void* src) {
  // Matrices, and stacks of them (MoE experts): groups never straddle two matrices.
  if (!repack_type(t.type) || t.ne[3] != 1 || t.ne[1] % kRepackRows != 0 || t.ne[0] % block_values(t.type) != 0 ||
      !t.is_contiguous() || t.is_view() || !t.data)
    return false;
  if (!repacked_kernels(t.type)) return false;
  const bool pairs = repack_pairs(t.type, t.ne[0]);
  repack_rows(t.type, src, t.data, t.ne[1] * t.ne[2], t.ne[0], pairs, t.ne[1]);
  t.flags |= kFlagRepacked | (pairs ? kFlagRepackedPairs : 0u);
  return true;
}

}  // namespace loom::cpu

namespace loom::cpu {

void HostBufferType::upload_weight(Tensor* t, const void* src, bool may_transform) const {
  if (may_transform && repack_weight(*t, src)) return;
  t->buffer->set(t, src, 0, t->nbytes());
}

}  // namespace loom::cpu
