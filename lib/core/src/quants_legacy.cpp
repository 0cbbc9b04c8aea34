// Reference (scalar) row conversions of the 32-element types beside Q4_0 / Q8_0: Q4_1, Q5_0,
// Q5_1 (affine and 5-bit variants), MXFP4 (E2M1 values under an E8M0 scale) and the
// non-linear IQ4_NL / IQ4_XS. Scale choice and rounding follow ggml's reference quantizers
// (what llama-quantize writes without an imatrix), so rows quantize to llama.cpp's bytes.
#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "loom/core/error.h"
#include "loom/core/quants.h"
#include "quants_fit.h"

namespace loom {
namespace {

using detail::nearest_clamped;

// Packs 32 levels (< 16 each) as the 32-element types store them: j and j + 16 share qs[j].
void pack_nibbles(const uint8_t* q, uint8_t* qs) {
  for (int j = 0; j < 16; ++j) qs[j] = (uint8_t)((q[j] & 15) | ((q[j + 16] & 15) << 4));
}
// Bit 4 of the 32 levels -> the qh word (bit j = element j).
void pack_high_bits(const uint8_t* q, uint8_t* qh) {
  uint32_t bits = 0;
  for (int j = 0; j < 32; ++j) bits |= (uint32_t)((q[j] >> 4) & 1) << j;
  std::memcpy(qh, &bits, 4);
}
// The 32 levels of a block from its nibbles (element j < 16: low nibble of qs[j], else high of
// qs[j - 16]) and (5-bit types) qh bit j, in loops the compiler vectorizes: the dequantizers run
// for every weight of a prompt's GEMM on the CPU's repacked types.
void levels4(const uint8_t* qs, uint8_t* q) {
  for (int j = 0; j < 16; ++j) {
    q[j] = qs[j] & 15;
    q[16 + j] = qs[j] >> 4;
  }
}
void levels5(const uint8_t* qs, const uint8_t* qh, uint8_t* q) {
  uint32_t bits;
  std::memcpy(&bits, qh, 4);
  levels4(qs, q);
  for (int j = 0; j < 32; ++j) q[j] |= (uint8_t)(((bits >> j) & 1) << 4);
}

// Affine fit of the 32-element types: d = (max - min) / nmax, m = min, q = trunc((x - min) / d + 0.5).
template <int Nmax>
void affine_levels(const float* x, float& d, float& m, uint8_t* q) {
  float lo = FLT_MAX, hi = -FLT_MAX;
  for (int j = 0; j < 32; ++j) {
    lo = std::min(lo, x[j]);
    hi = std::max(hi, x[j]);
  }
  d = (hi - lo) / Nmax;
  m = lo;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < 32; ++j) q[j] = (uint8_t)std::min(Nmax, (int)((x[j] - lo) * id + 0.5f));
}

// The importance-weighted affine fit of Q4_1 / Q5_1 (the grids of ggml's make_qkx3_quants for
// them); false where the weights are unusable.
template <int Nmax>
bool weighted_affine_levels(const float* x, const float* imp, float& d, float& m, uint8_t* q) {
  float w[32];
  if (!detail::importance_weights(32, x, imp, w)) return false;
  const detail::AffineFit fit = detail::fit_affine(32, Nmax, x, w, q, -0.9f, 0.05f, 36, false, true);
  d = fit.scale;
  m = -fit.neg_min;
  return true;
}

// Symmetric 5-bit fit: the value of largest magnitude maps to level 0 (-16).
float q5_0_levels(const float* x, uint8_t* q) {
  float amax = 0.0f, extreme = 0.0f;
  for (int j = 0; j < 32; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      extreme = x[j];
    }
  const float d = extreme / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (int j = 0; j < 32; ++j) q[j] = (uint8_t)std::min(31, (int)(x[j] * id + 16.5f));
  return d;
}

// Index of the grid value nearest to v in a sorted 16-entry grid; halfway goes up.
int nearest_in_grid(const int8_t* grid, float v) {
  int idx = 0;
  for (int step = 8; step > 0; step >>= 1) {
    const int j = idx + step;
    if (v + v >= (float)(grid[j - 1] + grid[j])) idx = j;
  }
  return idx;
}

// IQ4_NL / IQ4_XS: per 32-value sub-block the x^2-weighted (or weights-weighted) least-squares
// scale over 15 grids around "largest magnitude -> the grid's end" (ggml's
// quantize_row_iq4_nl_impl, ntry 7).
float iq4_sub_scale(const float* x, uint8_t* q, const float* weights = nullptr) {
  constexpr int kTries = 7;
  float amax = 0.0f, extreme = 0.0f;
  for (int j = 0; j < 32; ++j)
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      extreme = x[j];
    }
  if (amax < 1e-15f) return 0.0f;
  const int8_t* v = kIq4nlValues;
  auto sums = [&](float id, float& sqx, float& sq2, bool store) {
    sqx = sq2 = 0.0f;
    for (int j = 0; j < 32; ++j) {
      const int l = nearest_in_grid(v, id * x[j]);
      if (store) q[j] = (uint8_t)l;
      const float w = weights ? weights[j] : x[j] * x[j], ql = v[l];
      sqx += w * ql * x[j];
      sq2 += w * ql * ql;
    }
  };
  float sqx, sq2;
  sums(1.0f / (-extreme / v[0]), sqx, sq2, true);
  float d = sq2 > 0.0f ? sqx / sq2 : 0.0f, best = d * sqx;
  for (int t = -kTries; t <= kTries; ++t) {
    sums((t + v[0]) / extreme, sqx, sq2, false);
    if (sq2 > 0.0f && sqx * sqx > best * sq2) {
      d = sqx / sq2;
      best = d * sqx;
    }
  }
  return d;
}

}  // namespace

// ---- Q4_1 / Q5_0 / Q5_1 -----------------------------------------------------------------------

void quantize_q4_1_row(const float* src, void* dst, int64_t n) { quantize_q4_1_row_imp(src, dst, n, nullptr); }

void quantize_q4_1_row_imp(const float* src, void* dst, int64_t n, const float* imp) {
  LOOM_ASSERT(n % kQK4_1 == 0, "q4_1 row of {} elements", n);
  auto* blocks = static_cast<BlockQ4_1*>(dst);
  for (int64_t b = 0; b < n / kQK4_1; ++b) {
    float d, m;
    uint8_t q[32];
    if (!weighted_affine_levels<15>(src + 32 * b, imp ? imp + 32 * b : nullptr, d, m, q))
      affine_levels<15>(src + 32 * b, d, m, q);
    blocks[b].d = f32_to_fp16(d);
    blocks[b].m = f32_to_fp16(m);
    pack_nibbles(q, blocks[b].qs);
  }
}

void dequantize_q4_1_row(const void* src, float* dst, int64_t n) {
  LOOM_ASSERT(n % kQK4_1 == 0, "q4_1 row of {} elements", n);
  auto* blocks = static_cast<const BlockQ4_1*>(src);
  for (int64_t b = 0; b < n / kQK4_1; ++b) {
    const float d = fp16_to_f32(blocks[b].d), m = fp16_to_f32(blocks[b].m);
    uint8_t q[32];
    levels4(blocks[b].qs, q);
    for (int j = 0; j < 32; ++j) dst[32 * b + j] = (float)q[j] * d + m;
  }
}

void quantize_q5_0_row(const float* src, void* dst, int64_t n) { quantize_q5_0_row_imp(src, dst, n, nullptr); }

void quantize_q5_0_row_imp(const float* src, void* dst, int64_t n, const float* imp) {
  LOOM_ASSERT(n % kQK5_0 == 0, "q5_0 row of {} elements", n);
  auto* blocks = static_cast<BlockQ5_0*>(dst);
  for (int64_t b = 0; b < n / kQK5_0; ++b) {
    uint8_t q[32];
    float w[32];
    const bool weighted = detail::importance_weights(32, src + 32 * b, imp ? imp + 32 * b : nullptr, w);
    blocks[b].d =
        f32_to_fp16(weighted ? detail::fit_symmetric(32, 16, src + 32 * b, q, w) : q5_0_levels(src + 32 * b, q));
    pack_nibbles(q, blocks[b].qs);
    pack_high_bits(q, blocks[b].qh);
  }
}

void dequantize_q5_0_row(const void* src, float* dst, int64_t n) {
  LOOM_ASSERT(n % kQK5_0 == 0, "q5_0 row of {} elements", n);
  auto* blocks = static_cast<const BlockQ5_0*>(src);
  for (int64_t b = 0; b < n / kQK5_0; ++b) {
    const float d = fp16_to_f32(blocks[b].d);
    uint8_t q[32];
    levels5(blocks[b].qs, blocks[b].qh, q);
    for (int j = 0; j < 32; ++j) dst[32 * b + j] = (float)(q[j] - 16) * d;
  }
}

void quantize_q5_1_row(const float* src, void* dst, int64_t n) { quantize_q5_1_row_imp(src, dst, n, nullptr); }

void quantize_q5_1_row_imp(const float* src, void* dst, int64_t n, const float* imp) {
  LOOM_ASSERT(n % kQK5_1 == 0, "q5_1 row of {} elements", n);
  auto* blocks = static_cast<BlockQ5_1*>(dst);
  for (int64_t b = 0; b < n / kQK5_1; ++b) {
    float d, m;
    uint8_t q[32];
    if (!weighted_affine_levels<31>(src + 32 * b, imp ? imp + 32 * b : nullptr, d, m, q))
      affine_levels<31>(src + 32 * b, d, m, q);
    blocks[b].d = f32_to_fp16(d);
    blocks[b].m = f32_to_fp16(m);
    pack_nibbles(q, blocks[b].qs);
    pack_high_bits(q, blocks[b].qh);
  }
}

void dequantize_q5_1_row(const void* src, float* dst, int64_t n) {
  LOOM_ASSERT(n % kQK5_1 == 0, "q5_1 row of {} elements", n);
  auto* blocks = static_cast<const BlockQ5_1*>(src);
  for (int64_t b = 0; b < n / kQK5_1; ++b) {
    const float d = fp16_to_f32(blocks[b].d), m = fp16_to_f32(blocks[b].m);
    uint8_t q[32];
    levels5(blocks[b].qs, blocks[b].qh, q);
    for (int j = 0; j < 32; ++j) dst[32 * b + j] = (float)q[j] * d + m;
  }
}

// ---- MXFP4 ------------------------------------------------------------------------------------
// The exponent puts the largest magnitude in [4, 8) times 2^(e-127) (E2M1 tops out at 6); each
// value then takes the nearest grid level (the first of equals).

void quantize_mxfp4_row(const float* src, void* dst, int64_t n) {
  LOOM_ASSERT(n % kQK_MXFP4 == 0, "mxfp4 row of {} elements", n);
  auto* blocks = static_cast<BlockMXFP4*>(dst);
  for (int64_t b = 0; b < n / kQK_MXFP4; ++b) {
    const float* x = src + 32 * b;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const int e = amax > 0.0f ? std::clamp((int)std::floor(std::log2(amax)) - 2 + 127, 0, 254) : 0;
    const float d = e8m0_half_to_f32((uint8_t)e);
    uint8_t q[32];
    for (int j = 0; j < 32; ++j) {
      int best = 0;
      float best_err = std::fabs(kMxfp4Values[0] * d - x[j]);
      for (int i = 1; i < 16; ++i) {
        const float err = std::fabs(kMxfp4Values[i] * d - x[j]);
        if (err < best_err) {
          best = i;
          best_err = err;
        }
      }
      q[j] = (uint8_t)best;
    }
    blocks[b].e = (uint8_t)e;
    pack_nibbles(q, blocks[b].qs);
  }
}

void dequantize_mxfp4_row(const void* src, float* dst, int64_t n) {
  LOOM_ASSERT(n % kQK_MXFP4 == 0, "mxfp4 row of {} elements", n);
  auto* blocks = static_cast<const BlockMXFP4*>(src);
  for (int64_t b = 0; b < n / kQK_MXFP4; ++b) {
    const float d = e8m0_half_to_f32(blocks[b].e);
    float t[16];  // the grid times d, then looked up
    for (int k = 0; k < 16; ++k) t[k] = (float)kMxfp4Values[k] * d;
    uint8_t q[32];
    levels4(blocks[b].qs, q);
    for (int j = 0; j < 32; ++j) dst[32 * b + j] = t[q[j]];
  }
}

// ---- IQ4_NL / IQ4_XS ----------------------------------------------------------------------------

void quantize_iq4_nl_row(const float* src, void* dst, int64_t n) { quantize_iq4_nl_row_imp(src, dst, n, nullptr); }

void quantize_iq4_nl_row_imp(const float* src, void* dst, int64_t n, const float* imp) {
  LOOM_ASSERT(n % kQK4_NL == 0, "iq4_nl row of {} elements", n);
  auto* blocks = static_cast<BlockIQ4_NL*>(dst);
  for (int64_t b = 0; b < n / kQK4_NL; ++b) {
    const float* x = src + 32 * b;
    uint8_t q[32];
    float w[32];
    const bool weighted = detail::importance_weights(32, x, imp ? imp + 32 * b : nullptr, w);
    const float d = iq4_sub_scale(x, q, weighted ? w : nullptr);
    blocks[b].d = f32_to_fp16(d);
    // Levels against the f32 scale found (as ggml does), not its f16 rounding.
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; ++j) q[j] = (uint8_t)nearest_in_grid(kIq4nlValues, id * x[j]);
    pack_nibbles(q, blocks[b].qs);
  }
}

void dequantize_iq4_nl_row(const void* src, float* dst, int64_t n) {
  LOOM_ASSERT(n % kQK4_NL == 0, "iq4_nl row of {} elements", n);
  auto* blocks = static_cast<const BlockIQ4_NL*>(src);
  for (int64_t b = 0; b < n / kQK4_NL; ++b) {
    const float d = fp16_to_f32(blocks[b].d);
    float t[16];  // the grid times d, then looked up
    for (int k = 0; k < 16; ++k) t[k] = d * (float)kIq4nlValues[k];
    uint8_t q[32];
    levels4(blocks[b].qs, q);
    for (int j = 0; j < 32; ++j) dst[32 * b + j] = t[q[j]];
  }
}

// The sub-block scales become 6-bit multiples (-32..31) of d = -(scale of largest magnitude) / 32.
void quantize_iq4_xs_row(const float* src, void* dst, int64_t n) { quantize_iq4_xs_row_imp(src, dst, n, nullptr); }

void quantize_iq4_xs_row_imp(const float* src, void* dst, int64_t n, const float* imp) {
  LOOM_ASSERT(n % kQK_K == 0, "iq4_xs row of {} elements", n);
  auto* blocks = static_cast<BlockIQ4_XS*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + kQK_K * b;
    BlockIQ4_XS& blk = blocks[b];
    float scales[8];
    uint8_t q[32];
    float w[kQK_K];
    const bool weighted = detail::importance_weights(kQK_K, x, imp ? imp + kQK_K * b : nullptr, w);
    float max_scale = 0.0f, amax_scale = 0.0f;
    for (int j = 0; j < 8; ++j) {
      scales[j] = iq4_sub_scale(x + 32 * j, q, weighted ? w + 32 * j : nullptr);
      if (std::fabs(scales[j]) > amax_scale) {
        amax_scale = std::fabs(scales[j]);
        max_scale = scales[j];
      }
    }
    const float d = -max_scale / 32;
    blk.d = f32_to_fp16(d);
    blk.scales_h = 0;
    std::memset(blk.scales_l, 0, sizeof(blk.scales_l));
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 8; ++j) {
      const int l = nearest_clamped(id * scales[j], -32, 31);
      const float dl = d * (float)l, idl = dl != 0.0f ? 1.0f / dl : 0.0f;
      for (int i = 0; i < 32; ++i) q[i] = (uint8_t)nearest_in_grid(kIq4nlValues, idl * x[32 * j + i]);
      pack_nibbles(q, blk.qs + 16 * j);
      const int ls = l + 32;
      blk.scales_l[j / 2] |= (uint8_t)((ls & 15) << (4 * (j % 2)));
      blk.scales_h |= (uint16_t)((ls >> 4) << (2 * j));
    }
  }
}

void dequantize_iq4_xs_row(const void* src, float* dst, int64_t n) {
  LOOM_ASSERT(n % kQK_K == 0, "iq4_xs row of {} elements", n);
  auto* blocks = static_cast<const BlockIQ4_XS*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockIQ4_XS& blk = blocks[b];
    const float d = fp16_to_f32(blk.d);
    for (int j = 0; j < 8; ++j) {
      const float dl = d * (float)(iq4_xs_scale(blk, j) - 32);
      float t[16];  // the grid times dl, then looked up
      for (int k = 0; k < 16; ++k) t[k] = dl * (float)kIq4nlValues[k];
      uint8_t q[32];
      levels4(blk.qs + 16 * j, q);
      for (int i = 0; i < 32; ++i) dst[kQK_K * b + 32 * j + i] = t[q[i]];
    }
  }
}

}  // namespace loom
