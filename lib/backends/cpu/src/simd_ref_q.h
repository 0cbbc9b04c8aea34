// Portable row kernels of Q4_1, Q5_0, Q5_1, Q2_K, Q3_K, Q5_K, IQ4_NL, IQ4_XS and MXFP4: block
// decoders for the f32 paths (included under each level's target pragma, like simd_ref.h) and
// integer dots against the int8 columns written as plain loops over unpacked levels: the scalar
// level's dots and the readable reference of the SIMD levels' hand-written ones (simd_q_more.h).
// Activations as llama.cpp quantizes them for these types: 32-value q8 blocks (its Q8_0 / Q8_1:
// d and the sum of the quants) for the 32-element types, 256-value q8k blocks (Q8_K) for the
// K-quants and IQ4_XS. LOOM_EXTRA_QUANT_KERNELS(rows) is the table rows a level adds.
#pragma once

#include <cstdint>
#include <cstring>

#include "cpu_vec_dot.h"
#include "loom/core/quants.h"
#include "simd_ref.h"

namespace loom::cpu {
namespace {

// ---- unpacking: levels of one block as bytes ---------------------------------------------------

// 32 nibbles in the 32-element order (j and j + 16 share qs[j]).
inline void unpack_nibbles32(const uint8_t* __restrict qs, uint8_t* __restrict q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = qs[j] & 15;
    q[j + 16] = qs[j] >> 4;
  }
}
// adds bit 4 from the qh word (bit j = element j)
inline void add_high_bits32(const uint8_t* qh, uint8_t* __restrict q) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  for (int j = 0; j < 32; ++j) q[j] |= (uint8_t)(((bits >> j) & 1) << 4);
}
// 256 2-bit levels (Q2_K / Q3_K order: element 128h + 32k + l at bits 2k of qs[32h + l])
inline void unpack_2bit256(const uint8_t* __restrict qs, uint8_t* __restrict q) {
  for (int h = 0; h < 2; ++h)
    for (int k = 0; k < 4; ++k)
      for (int l = 0; l < 32; ++l) q[128 * h + 32 * k + l] = (qs[32 * h + l] >> (2 * k)) & 3;
}
// 256 nibbles in the Q4_K / Q5_K order (chunk c of 64: low nibbles, then high, of qs[32c..])
inline void unpack_nibbles256(const uint8_t* __restrict qs, uint8_t* __restrict q) {
  for (int c = 0; c < 4; ++c)
    for (int l = 0; l < 32; ++l) {
      q[64 * c + l] = qs[32 * c + l] & 15;
      q[64 * c + 32 + l] = qs[32 * c + l] >> 4;
    }
}
// bit e / 32 of mask[e % 32] -> bit `shift` of q[e] (Q3_K's hmask, Q5_K's qh)
inline void add_mask_bits256(const uint8_t* __restrict mask, int shift, uint8_t* __restrict q) {
  for (int k = 0; k < 8; ++k)
    for (int l = 0; l < 32; ++l) q[32 * k + l] |= (uint8_t)(((mask[l] >> k) & 1) << shift);
}
// grid lookup of 32 nibbles (IQ4_NL, IQ4_XS, MXFP4)
inline void grid_values32(const uint8_t* qs, const int8_t* grid, int8_t* __restrict v) {
  uint8_t q[32];
  unpack_nibbles32(qs, q);
  for (int j = 0; j < 32; ++j) v[j] = grid[q[j]];
}

template <class W>
inline int32_t idot(const W* __restrict w, const int8_t* __restrict x, int n) {
  int32_t s = 0;
  for (int j = 0; j < n; ++j) s += (int32_t)w[j] * (int32_t)x[j];
  return s;
}

// ---- block decoders (f32 paths: attention-free dots, GEMM panels, GET_ROWS) -------------------
// Each decodes through the core's reference row conversion of one block: the same values, and
// one definition of every layout.

template <class Block, int N, void (*Dequant)(const void*, float*, int64_t)>
struct DecRef {
  static constexpr int kBlock = N;
  static constexpr size_t kBytes = sizeof(Block);
  static const float* block(const uint8_t* p, float* __restrict y) {
    Dequant(p, y, N);
    return y;
  }
  static float elem(const uint8_t*, int64_t) { return 0.0f; }  // never called: whole blocks
};

// ---- integer dots: one row of nblk blocks . one prepared column (the scalar level's; inline: the
// SIMD levels' files include them unused) ----------------------------------------------------

// w = d q + m: d dx (q . xq) + m dx sum(xq)
inline float dot_q4_1(const BlockQ4_1* w, const BlockQ8A* x, int64_t nblk) {
  float s = 0.0f;
  for (int64_t i = 0; i < nblk; ++i) {
    uint8_t q[32];
    unpack_nibbles32(w[i].qs, q);
    const int32_t dot = idot(q, x[i].qs, 32);
    s += x[i].d * (fp16_to_f32_fast(w[i].d) * (float)dot + fp16_to_f32_fast(w[i].m) * (float)x[i].sum);
  }
  return s;
}

// w = d (q - 16)
inline float dot_q5_0(const BlockQ5_0* w, const BlockQ8A* x, int64_t nblk) {
  float s = 0.0f;
  for (int64_t i = 0; i < nblk; ++i) {
    uint8_t q[32];
    unpack_nibbles32(w[i].qs, q);
    add_high_bits32(w[i].qh, q);
    const int32_t dot = idot(q, x[i].qs, 32) - 16 * x[i].sum;
    s += fp16_to_f32_fast(w[i].d) * x[i].d * (float)dot;
  }
  return s;
}

// w = d q + m, q 5 bits
inline float dot_q5_1(const BlockQ5_1* w, const BlockQ8A* x, int64_t nblk) {
  float s = 0.0f;
  for (int64_t i = 0; i < nblk; ++i) {
    uint8_t q[32];
    unpack_nibbles32(w[i].qs, q);
    add_high_bits32(w[i].qh, q);
    const int32_t dot = idot(q, x[i].qs, 32);
    s += x[i].d * (fp16_to_f32_fast(w[i].d) * (float)dot + fp16_to_f32_fast(w[i].m) * (float)x[i].sum);
  }
  return s;
}

// w = d grid[q]
inline float dot_iq4_nl(const BlockIQ4_NL* w, const BlockQ8A* x, int64_t nblk) {
  float s = 0.0f;
  for (int64_t i = 0; i < nblk; ++i) {
    int8_t v[32];
    grid_values32(w[i].qs, kIq4nlValues, v);
    s += fp16_to_f32_fast(w[i].d) * x[i].d * (float)idot(v, x[i].qs, 32);
  }
  return s;
}

// w = 2^(e - 128) grid[q]
inline float dot_mxfp4(const BlockMXFP4* w, const BlockQ8A* x, int64_t nblk) {
  float s = 0.0f;
  for (int64_t i = 0; i < nblk; ++i) {
    int8_t v[32];
    grid_values32(w[i].qs, kMxfp4Values, v);
    s += e8m0_half_to_f32(w[i].e) * x[i].d * (float)idot(v, x[i].qs, 32);
  }
  return s;
}

// w = d (sc_g & 15) q - dmin (sc_g >> 4) per group g of 16
inline float dot_q2_k(const BlockQ2_K* w, const BlockQ8KA* x, int64_t nblk) {
  float s = 0.0f;
  for (int64_t i = 0; i < nblk; ++i) {
    uint8_t q[256];
    unpack_2bit256(w[i].qs, q);
    int32_t sum_q = 0, sum_m = 0;
    for (int g = 0; g < 16; ++g) {
      sum_q += (w[i].scales[g] & 15) * idot(q + 16 * g, x[i].qs + 16 * g, 16);
      sum_m += (w[i].scales[g] >> 4) * x[i].bsums[g];
    }
    s += x[i].d * (fp16_to_f32_fast(w[i].d) * (float)sum_q - fp16_to_f32_fast(w[i].dmin) * (float)sum_m);
  }
  return s;
}

// w = d (s_g - 32) (q - 4) per group g of 16
inline float dot_q3_k(const BlockQ3_K* w, const BlockQ8KA* x, int64_t nblk) {
  float s = 0.0f;
  for (int64_t i = 0; i < nblk; ++i) {
    uint8_t q[256];
    unpack_2bit256(w[i].qs, q);
    add_mask_bits256(w[i].hmask, 2, q);
    int32_t sum = 0;
    for (int g = 0; g < 16; ++g)
      sum += (q3_k_scale(w[i].scales, g) - 32) * (idot(q + 16 * g, x[i].qs + 16 * g, 16) - 4 * x[i].bsums[g]);
    s += fp16_to_f32_fast(w[i].d) * x[i].d * (float)sum;
  }
  return s;
}

// w = d sc_j q - dmin m_j per sub-block j of 32, q 5 bits
inline float dot_q5_k(const BlockQ5_K* w, const BlockQ8KA* x, int64_t nblk) {
  float s = 0.0f;
  for (int64_t i = 0; i < nblk; ++i) {
    uint8_t q[256];
    unpack_nibbles256(w[i].qs, q);
    add_mask_bits256(w[i].qh, 4, q);
    int32_t sum_q = 0, sum_m = 0;
    for (int j = 0; j < 8; ++j) {
      const ScaleMin sm = q4_k_scale_min(w[i].scales, j);
      sum_q += sm.sc * idot(q + 32 * j, x[i].qs + 32 * j, 32);
      sum_m += sm.m * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
    }
    s += x[i].d * (fp16_to_f32_fast(w[i].d) * (float)sum_q - fp16_to_f32_fast(w[i].dmin) * (float)sum_m);
  }
  return s;
}

// w = d (ls_j - 32) grid[q] per sub-block j of 32
inline float dot_iq4_xs(const BlockIQ4_XS* w, const BlockQ8KA* x, int64_t nblk) {
  float s = 0.0f;
  for (int64_t i = 0; i < nblk; ++i) {
    int32_t sum = 0;
    for (int j = 0; j < 8; ++j) {
      int8_t v[32];
      grid_values32(w[i].qs + 16 * j, kIq4nlValues, v);
      sum += (iq4_xs_scale(w[i], j) - 32) * idot(v, x[i].qs + 32 * j, 32);
    }
    s += fp16_to_f32_fast(w[i].d) * x[i].d * (float)sum;
  }
  return s;
}

// rows r < nr of a (stride lda) x prepared columns: out[c][r]
template <class W, class X, float (*Dot)(const W*, const X*, int64_t)>
void rows_dot_q(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc, float* const* out) {
  const int64_t nblk = K / (int64_t)(sizeof(X::qs));
  for (int64_t r = 0; r < nr; ++r) {
    const auto* w = reinterpret_cast<const W*>(static_cast<const uint8_t*>(a) + r * lda);
    for (int c = 0; c < nc; ++c) out[c][r] = Dot(w, static_cast<const X*>(b[c]), nblk);
  }
}

// Table rows of the types: `rows(name, Block, X, dot)` names each type's rows_dot (the scalar
// level: rows_dot_q<Block, X, dot>; the SIMD levels: their rows_dot_<name>_<level>), `r8(name, T)`
// its rows_dot_r8 for the types with repacked kernels (cpu_repack.h; the scalar level: the
// reference rows_dot_r8<DType::T>; the SIMD levels: rows_dot_<name>_r8_<level>).
#define LOOM_EXTRA_QUANT_KERNEL(T, Block, N, deq, act, rows, r8)                                                    \
  {                                                                                                                 \
    DType::T, N, sizeof(Block), dot_cols<DecRef<Block, N, deq>>, to_f32<DecRef<Block, N, deq>>, nullptr, act, rows, \
        nullptr, r8                                                                                                 \
  }
#define LOOM_EXTRA_QUANT_KERNELS(rows, r8)                                                              \
  LOOM_EXTRA_QUANT_KERNEL(Q4_1, BlockQ4_1, 32, dequantize_q4_1_row, ActType::q8,                        \
                          rows(q4_1, BlockQ4_1, BlockQ8A, dot_q4_1), r8(q4_1, Q4_1)),                          \
      LOOM_EXTRA_QUANT_KERNEL(Q5_0, BlockQ5_0, 32, dequantize_q5_0_row, ActType::q8,                    \
                              rows(q5_0, BlockQ5_0, BlockQ8A, dot_q5_0), r8(q5_0, Q5_0)),                      \
      LOOM_EXTRA_QUANT_KERNEL(Q5_1, BlockQ5_1, 32, dequantize_q5_1_row, ActType::q8,                    \
                              rows(q5_1, BlockQ5_1, BlockQ8A, dot_q5_1), r8(q5_1, Q5_1)),                      \
      LOOM_EXTRA_QUANT_KERNEL(IQ4_NL, BlockIQ4_NL, 32, dequantize_iq4_nl_row, ActType::q8,              \
                              rows(iq4_nl, BlockIQ4_NL, BlockQ8A, dot_iq4_nl), r8(iq4_nl, IQ4_NL)),                \
      LOOM_EXTRA_QUANT_KERNEL(MXFP4, BlockMXFP4, 32, dequantize_mxfp4_row, ActType::q8,                 \
                              rows(mxfp4, BlockMXFP4, BlockQ8A, dot_mxfp4), r8(mxfp4, MXFP4)),                   \
      LOOM_EXTRA_QUANT_KERNEL(Q2_K, BlockQ2_K, 256, dequantize_q2_k_row, ActType::q8k,                  \
                              rows(q2_k, BlockQ2_K, BlockQ8KA, dot_q2_k), r8(q2_k, Q2_K)),                     \
      LOOM_EXTRA_QUANT_KERNEL(Q3_K, BlockQ3_K, 256, dequantize_q3_k_row, ActType::q8k,                  \
                              rows(q3_k, BlockQ3_K, BlockQ8KA, dot_q3_k), r8(q3_k, Q3_K)),                     \
      LOOM_EXTRA_QUANT_KERNEL(Q5_K, BlockQ5_K, 256, dequantize_q5_k_row, ActType::q8k,                  \
                              rows(q5_k, BlockQ5_K, BlockQ8KA, dot_q5_k), r8(q5_k, Q5_K)),              \
      LOOM_EXTRA_QUANT_KERNEL(IQ4_XS, BlockIQ4_XS, 256, dequantize_iq4_xs_row, ActType::q8k,            \
                              rows(iq4_xs, BlockIQ4_XS, BlockQ8KA, dot_iq4_xs), r8(iq4_xs, IQ4_XS))
#define LOOM_ROWS_REF(name, Block, X, dot) rows_dot_q<Block, X, dot>
#define LOOM_ROWS_AVX2(name, Block, X, dot) rows_dot_##name##_avx2
#define LOOM_ROWS_AVX512(name, Block, X, dot) rows_dot_##name##_avx512
#define LOOM_R8_REF(name, T) rows_dot_r8<DType::T>
#define LOOM_R8_AVX2(name, T) rows_dot_##name##_r8_avx2
#define LOOM_R8_AVX512(name, T) rows_dot_##name##_r8_avx512

}  // namespace
}  // namespace loom::cpu
