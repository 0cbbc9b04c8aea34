// The reference row kernels as templates over a block decoder: decode a block of 32 or 256
// elements to f32 with plain loops, then the fused multi-column dot, row conversion, axpy and
// rows_dot built from it. Private to the CPU backend and deliberately in an anonymous namespace:
// each level's file (cpu_vec_dot.cpp for scalar, simd_<level>.cpp under its target pragma)
// compiles its own copy, so the compiler vectorizes the same code for every instruction set
// without one level's machine code ever standing in for another's.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>

#include "cpu_vec_dot.h"
#include "loom/core/quants.h"

namespace loom::cpu {
namespace {

// ---- block decoders: block(p, buf) returns the block's kBlock values as f32 ------------------
// Plain float types use 32-element chunks; elem() decodes one element for rows whose length is
// not a multiple of 32. Quantized rows are always whole blocks.

struct DecF32 {
  static constexpr int kBlock = 32;
  static constexpr size_t kBytes = kBlock * sizeof(float);
  static const float* block(const uint8_t* p, float*) { return reinterpret_cast<const float*>(p); }
  static float elem(const uint8_t* row, int64_t i) { return reinterpret_cast<const float*>(row)[i]; }
};

struct DecF16 {
  static constexpr int kBlock = 32;
  static constexpr size_t kBytes = kBlock * sizeof(fp16_t);
  static const float* block(const uint8_t* p, float* __restrict y) {
    const auto* h = reinterpret_cast<const fp16_t*>(p);
    for (int j = 0; j < kBlock; ++j) y[j] = fp16_to_f32_fast(h[j]);
    return y;
  }
  static float elem(const uint8_t* row, int64_t i) { return fp16_to_f32_fast(reinterpret_cast<const fp16_t*>(row)[i]); }
};

struct DecBF16 {
  static constexpr int kBlock = 32;
  static constexpr size_t kBytes = kBlock * sizeof(bf16_t);
  static const float* block(const uint8_t* p, float* __restrict y) {
    const auto* h = reinterpret_cast<const bf16_t*>(p);
    for (int j = 0; j < kBlock; ++j) y[j] = std::bit_cast<float>((uint32_t)h[j] << 16);
    return y;
  }
  static float elem(const uint8_t* row, int64_t i) { return bf16_to_f32(reinterpret_cast<const bf16_t*>(row)[i]); }
};

struct DecQ8_0 {
  static constexpr int kBlock = kQK8_0;
  static constexpr size_t kBytes = sizeof(BlockQ8_0);
  static const float* block(const uint8_t* p, float* __restrict y) {
    const auto& blk = *reinterpret_cast<const BlockQ8_0*>(p);
    const float d = fp16_to_f32_fast(blk.d);
    for (int j = 0; j < kBlock; ++j) y[j] = (float)blk.qs[j] * d;
    return y;
  }
  static float elem(const uint8_t*, int64_t) { return 0.0f; }  // never called: whole blocks
};

struct DecQ4_0 {
  static constexpr int kBlock = kQK4_0;
  static constexpr size_t kBytes = sizeof(BlockQ4_0);
  static const float* block(const uint8_t* p, float* __restrict y) {
    const auto& blk = *reinterpret_cast<const BlockQ4_0*>(p);
    const float d = fp16_to_f32_fast(blk.d);
    for (int j = 0; j < kBlock / 2; ++j) y[j] = (float)((int)(blk.qs[j] & 15) - 8) * d;
    for (int j = 0; j < kBlock / 2; ++j) y[j + kBlock / 2] = (float)((int)(blk.qs[j] >> 4) - 8) * d;
    return y;
  }
  static float elem(const uint8_t*, int64_t) { return 0.0f; }
};

struct DecQ4_K {
  static constexpr int kBlock = kQK_K;
  static constexpr size_t kBytes = sizeof(BlockQ4_K);
  static const float* block(const uint8_t* p, float* __restrict y) {
    const auto& blk = *reinterpret_cast<const BlockQ4_K*>(p);
    const float d = fp16_to_f32_fast(blk.d), dmin = fp16_to_f32_fast(blk.dmin);
    for (int c = 0; c < 4; ++c) {  // 64 elements: low nibbles (sub-block 2c), high nibbles (2c + 1)
      const ScaleMin lo = q4_k_scale_min(blk.scales, 2 * c), hi = q4_k_scale_min(blk.scales, 2 * c + 1);
      const float d_lo = d * lo.sc, m_lo = dmin * lo.m, d_hi = d * hi.sc, m_hi = dmin * hi.m;
      const uint8_t* qs = blk.qs + 32 * c;
      float* yc = y + 64 * c;
      for (int l = 0; l < 32; ++l) yc[l] = d_lo * (float)(qs[l] & 15) - m_lo;
      for (int l = 0; l < 32; ++l) yc[32 + l] = d_hi * (float)(qs[l] >> 4) - m_hi;
    }
    return y;
  }
  static float elem(const uint8_t*, int64_t) { return 0.0f; }
};

struct DecQ6_K {
  static constexpr int kBlock = kQK_K;
  static constexpr size_t kBytes = sizeof(BlockQ6_K);
  static const float* block(const uint8_t* p, float* __restrict y) {
    const auto& blk = *reinterpret_cast<const BlockQ6_K*>(p);
    const float d = fp16_to_f32_fast(blk.d);
    for (int h = 0; h < 2; ++h) {  // halves of 128: four quarters share each qh byte
      const uint8_t* ql = blk.ql + 64 * h;
      const uint8_t* qh = blk.qh + 32 * h;
      const int8_t* sc = blk.scales + 8 * h;
      float* yh = y + 128 * h;
      for (int half = 0; half < 2; ++half) {  // lanes 16*half .. 16*half+15 share a scale
        const float s0 = d * sc[half], s1 = d * sc[half + 2], s2 = d * sc[half + 4], s3 = d * sc[half + 6];
        for (int i = 0; i < 16; ++i) {
          const int l = 16 * half + i;
          yh[l] = s0 * (float)((int)((ql[l] & 15) | ((qh[l] & 3) << 4)) - 32);
          yh[l + 32] = s1 * (float)((int)((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32);
          yh[l + 64] = s2 * (float)((int)((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32);
          yh[l + 96] = s3 * (float)((int)((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32);
        }
      }
    }
    return y;
  }
  static float elem(const uint8_t*, int64_t) { return 0.0f; }
};

// ---- kernels built from a decoder ----------------------------------------------------------

// a: one row of K elements; b[c]: K floats each -> out[c]
template <class Dec, int NC>
void dot_cols_n(int64_t K, const void* a, const float* const* b, float* out) {
  constexpr int L = NC <= 2 ? 8 : 4;  // lanes per column: NC * L accumulators stay in registers
  static_assert(Dec::kBlock % L == 0);
  float acc[NC][L] = {};
  alignas(64) float xbuf[Dec::kBlock];
  const auto* pa = static_cast<const uint8_t*>(a);
  const int64_t nblk = K / Dec::kBlock;
  for (int64_t i = 0; i < nblk; ++i) {
    const float* __restrict x = Dec::block(pa + i * Dec::kBytes, xbuf);
    const int64_t off = i * Dec::kBlock;
#pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      const float* __restrict bc = b[c] + off;
      for (int j = 0; j < Dec::kBlock; j += L)
        for (int l = 0; l < L; ++l) acc[c][l] += x[j + l] * bc[j + l];
    }
  }
  float tail[NC] = {};
  for (int64_t k = nblk * Dec::kBlock; k < K; ++k) {  // plain float rows not a multiple of 32
    const float xk = Dec::elem(pa, k);
    for (int c = 0; c < NC; ++c) tail[c] += xk * b[c][k];
  }
  for (int c = 0; c < NC; ++c) {
    float s = tail[c];
    for (int l = 0; l < L; ++l) s += acc[c][l];
    out[c] = s;
  }
}

template <class Dec>
void dot_cols(int64_t K, const void* a, const float* const* b, int nc, float* out) {
  switch (nc) {
    case 1:
      return dot_cols_n<Dec, 1>(K, a, b, out);
    case 2:
      return dot_cols_n<Dec, 2>(K, a, b, out);
    case 3:
      return dot_cols_n<Dec, 3>(K, a, b, out);
    case 4:
      return dot_cols_n<Dec, 4>(K, a, b, out);
    case 5:
      return dot_cols_n<Dec, 5>(K, a, b, out);
    case 6:
      return dot_cols_n<Dec, 6>(K, a, b, out);
    case 7:
      return dot_cols_n<Dec, 7>(K, a, b, out);
    default:
      return dot_cols_n<Dec, 8>(K, a, b, out);
  }
}
static_assert(kMaxDotCols == 8, "dot_cols dispatches 1..8 columns");

template <class Dec>
void to_f32(const void* src, float* dst, int64_t n) {
  const auto* p = static_cast<const uint8_t*>(src);
  const int64_t nblk = n / Dec::kBlock;
  for (int64_t i = 0; i < nblk; ++i) {
    float* y = dst + i * Dec::kBlock;
    const float* x = Dec::block(p + i * Dec::kBytes, y);
    if (x != y) std::memcpy(y, x, sizeof(float) * Dec::kBlock);
  }
  for (int64_t k = nblk * Dec::kBlock; k < n; ++k) dst[k] = Dec::elem(p, k);
}

template <class Dec>
void axpy(int64_t n, float alpha, const void* xrow, float* __restrict y) {
  alignas(64) float xbuf[Dec::kBlock];
  const auto* p = static_cast<const uint8_t*>(xrow);
  const int64_t nblk = n / Dec::kBlock;
  for (int64_t i = 0; i < nblk; ++i) {
    const float* __restrict x = Dec::block(p + i * Dec::kBytes, xbuf);
    float* __restrict yi = y + i * Dec::kBlock;
    for (int j = 0; j < Dec::kBlock; ++j) yi[j] += alpha * x[j];
  }
  for (int64_t k = nblk * Dec::kBlock; k < n; ++k) y[k] += alpha * Dec::elem(p, k);
}

template <class Dec>
void rows_axpy(int64_t n, int64_t m, const void* x, size_t ldx, const float* p, size_t ldp, int nr, float* y,
               size_t ldy) {
  const auto* rows = static_cast<const uint8_t*>(x);
  for (int64_t j = 0; j < m; ++j)
    for (int r = 0; r < nr; ++r) axpy<Dec>(n, p[(size_t)r * ldp + j], rows + j * ldx, y + r * ldy);
}

// rows r < nr of a (stride lda) x f32 columns: out[c][r]
template <class Dec>
void rows_dot_f32(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc, float* const* out) {
  const auto* pa = static_cast<const uint8_t*>(a);
  const auto* const* bf = reinterpret_cast<const float* const*>(b);
  float o[kMaxDotCols];
  for (int64_t r = 0; r < nr; ++r) {
    dot_cols<Dec>(K, pa + r * lda, bf, nc, o);
    for (int c = 0; c < nc; ++c) out[c][r] = o[c];
  }
}

}  // namespace
}  // namespace loom::cpu
