// Reference (scalar) row conversions for the 256-element K-quants, Q4_K, Q5_K and Q6_K (layouts in
// quants.h). The scale searches use the same grids, weights and rounding as ggml's reference
// quantizers (quantize_row_*_ref, what llama-quantize runs without an imatrix), so a row should
// quantize to llama.cpp's bytes, not just to similar values.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "loom/core/error.h"
#include "loom/core/quants.h"
#include "quants_fit.h"

namespace loom {

using detail::AffineFit;
using detail::fit_affine;
using detail::fit_symmetric;
using detail::nearest_clamped;

// ---- Q4_K: x = d * sc * q - dmin * m, 8 sub-blocks of 32 ---------------------------------------
// qs: 64-element chunk c fills qs[32c .. 32c + 31]; low nibble = element 64c + l (sub-block 2c),
// high nibble = element 64c + 32 + l (sub-block 2c + 1).

namespace {

// The Q4_K / Q5_K scale fit: per 32-value sub-block an affine fit (levels 0..nmax) weighting |x|
// plus the sub-block's RMS (big values matter most, small ones still count), then 6-bit
// sub-scales and sub-mins relative to the block's largest ones, then the levels again against
// the scales as stored (f16 times 6 bits), which is what decodes. With an importance matrix
// (imp, the block's 256 columns) the sub-block fits weight by it instead.
void fit_k_affine_block(const float* x, const float* imp, int nmax, float rmin, int nstep, uint8_t* scales, fp16_t& d16,
                        fp16_t& dmin16, uint8_t* q) {
  float sub_scale[8], sub_min[8];
  float max_scale = 0.0f, max_min = 0.0f;
  float iw[kQK_K];
  const bool weighted = detail::importance_weights(kQK_K, x, imp, iw);
  for (int j = 0; j < 8; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0.0f;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float rms = std::sqrt(sum_x2 / 32);
    float w[32];
    for (int l = 0; l < 32; ++l) w[l] = weighted ? iw[32 * j + l] : rms + std::fabs(xs[l]);
    const AffineFit fit = fit_affine(32, nmax, xs, w, q + 32 * j, rmin, 0.1f, nstep, false);
    sub_scale[j] = fit.scale;
    sub_min[j] = fit.neg_min;
    max_scale = std::max(max_scale, fit.scale);
    max_min = std::max(max_min, fit.neg_min);
  }
  // The 6-bit codes relative to d = max_scale / 63 * fd and dmin = max_min / 63 * fm, the levels
  // requantized against them; returns the weighted error (0 unweighted: nothing compares them).
  uint8_t fit_q[kQK_K];
  std::copy(q, q + kQK_K, fit_q);
  auto finish = [&](float fd, float fm, uint8_t* sc, fp16_t& d_out, fp16_t& dmin_out, uint8_t* qo) {
    const float inv_scale = max_scale > 0.0f ? 63.0f / (max_scale * fd) : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / (max_min * fm) : 0.0f;
    std::memset(sc, 0, kKScaleSize);
    for (int j = 0; j < 8; ++j)
      q4_k_set_scale_min(sc, j, (uint8_t)nearest_clamped(inv_scale * sub_scale[j], 0, 63),
                         (uint8_t)nearest_clamped(inv_min * sub_min[j], 0, 63));
    d_out = f32_to_fp16(max_scale * fd / 63.0f);
    dmin_out = f32_to_fp16(max_min * fm / 63.0f);
    const float d = fp16_to_f32(d_out), dmin = fp16_to_f32(dmin_out);
    std::copy(fit_q, fit_q + kQK_K, qo);
    float err = 0.0f;
    for (int j = 0; j < 8; ++j) {
      const ScaleMin sm = q4_k_scale_min(sc, j);
      const float ds = d * sm.sc, ms = dmin * sm.m;
      for (int l = 0; l < 32 && ds != 0.0f; ++l)  // ds 0: decodes to -ms whatever q is; keep the search's levels
        qo[32 * j + l] = (uint8_t)nearest_clamped((x[32 * j + l] + ms) / ds, 0, nmax);
      for (int l = 0; l < 32 && weighted; ++l) {
        const float diff = ds * qo[32 * j + l] - ms - x[32 * j + l];
        err += iw[32 * j + l] * diff * diff;
      }
    }
    return err;
  };
  float best = finish(1.0f, 1.0f, scales, d16, dmin16, q);
  if (!weighted) return;
  // With an importance matrix, d and then dmin a few percent either way where that lowers it.
  float best_fd = 1.0f;
  uint8_t sc[kKScaleSize], qt[kQK_K];
  fp16_t dt, mt;
  for (int pass = 0; pass < 2; ++pass)
    for (float f : {0.94f, 0.96f, 0.98f, 1.02f, 1.04f, 1.06f}) {
      const float err = pass == 0 ? finish(f, 1.0f, sc, dt, mt, qt) : finish(best_fd, f, sc, dt, mt, qt);
      if (!(err < best)) continue;
      best = err;
      if (pass == 0) best_fd = f;
      std::copy(sc, sc + kKScaleSize, scales);
      std::copy(qt, qt + kQK_K, q);
      d16 = dt;
      dmin16 = mt;
    }
}

}  // namespace

void quantize_q4_k_row(const float* src, void* dst, int64_t n) { quantize_q4_k_row_imp(src, dst, n, nullptr); }

void quantize_q4_k_row_imp(const float* src, void* dst, int64_t n, const float* imp) {
  LOOM_ASSERT(n % kQK_K == 0, "q4_k row of {} elements", n);
  auto* blocks = static_cast<BlockQ4_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    BlockQ4_K& blk = blocks[b];
    uint8_t q[kQK_K];
    fit_k_affine_block(src + b * kQK_K, imp ? imp + b * kQK_K : nullptr, 15, -1.0f, 20, blk.scales, blk.d, blk.dmin, q);
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        blk.qs[32 * c + l] = (uint8_t)(q[64 * c + l] | (q[64 * c + 32 + l] << 4));
  }
}

void dequantize_q4_k_row(const void* src, float* dst, int64_t n) {
  LOOM_ASSERT(n % kQK_K == 0, "q4_k row of {} elements", n);
  auto* blocks = static_cast<const BlockQ4_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ4_K& blk = blocks[b];
    const float d = fp16_to_f32(blk.d), dmin = fp16_to_f32(blk.dmin);
    float* y = dst + b * kQK_K;
    for (int c = 0; c < 4; ++c) {
      const ScaleMin lo = q4_k_scale_min(blk.scales, 2 * c),
                     hi = q4_k_scale_min(blk.scales, 2 * c + 1);
      const float d_lo = d * lo.sc, m_lo = dmin * lo.m;
      const float d_hi = d * hi.sc, m_hi = dmin * hi.m;
      const uint8_t* qs = blk.qs + 32 * c;
      for (int l = 0; l < 32; ++l) y[64 * c + l] = d_lo * (qs[l] & 15) - m_lo;
      for (int l = 0; l < 32; ++l) y[64 * c + 32 + l] = d_hi * (qs[l] >> 4) - m_hi;
    }
  }
}

// ---- Q5_K: Q4_K with a fifth bit, element e's in qh[e % 32] bit e / 32 -------------------------

void quantize_q5_k_row(const float* src, void* dst, int64_t n) { quantize_q5_k_row_imp(src, dst, n, nullptr); }

void quantize_q5_k_row_imp(const float* src, void* dst, int64_t n, const float* imp) {
  LOOM_ASSERT(n % kQK_K == 0, "q5_k row of {} elements", n);
  auto* blocks = static_cast<BlockQ5_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    BlockQ5_K& blk = blocks[b];
    uint8_t q[kQK_K];
    fit_k_affine_block(src + b * kQK_K, imp ? imp + b * kQK_K : nullptr, 31, -0.5f, 15, blk.scales, blk.d, blk.dmin, q);
    std::memset(blk.qh, 0, sizeof(blk.qh));
    for (int e = 0; e < kQK_K; ++e) blk.qh[e % 32] |= (uint8_t)((q[e] >> 4) << (e / 32));
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l)
        blk.qs[32 * c + l] = (uint8_t)((q[64 * c + l] & 15) | ((q[64 * c + 32 + l] & 15) << 4));
  }
}

void dequantize_q5_k_row(const void* src, float* dst, int64_t n) {
  LOOM_ASSERT(n % kQK_K == 0, "q5_k row of {} elements", n);
  auto* blocks = static_cast<const BlockQ5_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ5_K& blk = blocks[b];
    const float d = fp16_to_f32(blk.d), dmin = fp16_to_f32(blk.dmin);
    for (int j = 0; j < 8; ++j) {  // sub-block j: nibbles (j odd: high) of qs[32 (j / 2) + l]
      const ScaleMin sm = q4_k_scale_min(blk.scales, j);
      const float ds = d * sm.sc, ms = dmin * sm.m;
      for (int l = 0; l < 32; ++l) {
        const uint8_t lo = blk.qs[32 * (j / 2) + l];
        const int q = ((j & 1) ? lo >> 4 : lo & 15) | (((blk.qh[l] >> j) & 1) << 4);
        dst[kQK_K * b + 32 * j + l] = ds * (float)q - ms;
      }
    }
  }
}

// ---- Q6_K: x = d * scales[e / 16] * (q - 32), 6-bit q split into ql (4 bits) and qh (2 bits) ---
// Per 128-element half h and lane l < 32, elements 128h + 32k + l (k = 0..3) share
// qh[32h + l] (bits 2k, 2k+1); k = 0/1 use the low nibbles of ql[64h + l] / ql[64h + 32 + l],
// k = 2/3 their high nibbles.

void quantize_q6_k_row(const float* src, void* dst, int64_t n) { quantize_q6_k_row_imp(src, dst, n, nullptr); }

void quantize_q6_k_row_imp(const float* src, void* dst, int64_t n, const float* imp) {
  LOOM_ASSERT(n % kQK_K == 0, "q6_k row of {} elements", n);
  auto* blocks = static_cast<BlockQ6_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    BlockQ6_K& blk = blocks[b];
    uint8_t q[kQK_K];
    float sub_scale[16];
    float max_abs = 0.0f, max_scale = 0.0f;
    float w[kQK_K];
    const bool weighted = detail::importance_weights(kQK_K, x, imp ? imp + b * kQK_K : nullptr, w);
    for (int s = 0; s < 16; ++s) {
      sub_scale[s] = fit_symmetric(16, 32, x + 16 * s, q + 16 * s, weighted ? w + 16 * s : nullptr);
      if (std::fabs(sub_scale[s]) > max_abs) {
        max_abs = std::fabs(sub_scale[s]);
        max_scale = sub_scale[s];
      }
    }
    if (max_abs < 1e-15f) {  // all zero: d = +0 decodes every element to 0
      std::memset(&blk, 0, sizeof(blk));
      continue;
    }

    // int8 sub-scales: the one of largest magnitude maps to -128 (times f), so d takes the
    // opposite sign; then the levels against the scales as stored.
    auto pack = [&](float f, BlockQ6_K& out) {
      const float inv = -128.0f / (max_scale * f);
      out.d = f32_to_fp16(1.0f / inv);
      for (int s = 0; s < 16; ++s) out.scales[s] = (int8_t)nearest_clamped(inv * sub_scale[s], -128, 127);
      uint8_t qo[kQK_K];
      std::copy(q, q + kQK_K, qo);
      const float d = fp16_to_f32(out.d);
      for (int s = 0; s < 16; ++s) {
        const float ds = d * out.scales[s];
        if (ds == 0.0f) continue;  // decodes to 0 whatever q is
        for (int l = 0; l < 16; ++l) qo[16 * s + l] = (uint8_t)(nearest_clamped(x[16 * s + l] / ds, -32, 31) + 32);
      }
      for (int h = 0; h < 2; ++h) {
        const uint8_t* qq = qo + 128 * h;
        for (int l = 0; l < 32; ++l) {
          out.ql[64 * h + l] = (uint8_t)((qq[l] & 15) | ((qq[l + 64] & 15) << 4));
          out.ql[64 * h + 32 + l] = (uint8_t)((qq[l + 32] & 15) | ((qq[l + 96] & 15) << 4));
          out.qh[32 * h + l] =
              (uint8_t)((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) | ((qq[l + 64] >> 4) << 4) | ((qq[l + 96] >> 4) << 6));
        }
      }
    };
    pack(1.0f, blk);
    if (weighted) detail::refine_block_scale(blk, x, w, pack, dequantize_q6_k_row);
  }
}

void dequantize_q6_k_row(const void* src, float* dst, int64_t n) {
  LOOM_ASSERT(n % kQK_K == 0, "q6_k row of {} elements", n);
  auto* blocks = static_cast<const BlockQ6_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ6_K& blk = blocks[b];
    const float d = fp16_to_f32(blk.d);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* ql = blk.ql + 64 * h;
      const uint8_t* qh = blk.qh + 32 * h;
      const int8_t* sc = blk.scales + 8 * h;
      float* y = dst + b * kQK_K + 128 * h;
      for (int l = 0; l < 32; ++l) {
        const int q0 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q1 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        const int s = l / 16;
        // (d * sc) * q, in this order, as ggml rounds it
        y[l] = d * sc[s] * q0;
        y[l + 32] = d * sc[s + 2] * q1;
        y[l + 64] = d * sc[s + 4] * q2;
        y[l + 96] = d * sc[s + 6] * q3;
      }
    }
  }
}

}  // namespace loom
