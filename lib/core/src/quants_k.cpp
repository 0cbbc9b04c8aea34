// Reference (scalar) row conversions for the 256-element K-quants, Q4_K and Q6_K (layouts in
// quants.h). The scale searches use the same grids, weights and rounding as ggml's reference
// quantizers (quantize_row_*_ref, what llama-quantize runs without an imatrix), so a row should
// quantize to llama.cpp's bytes, not just to similar values.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "loom/core/error.h"
#include "loom/core/quants.h"

namespace loom {
namespace {

// Round half to even (ggml's nearest_int), then clamp; lrint keeps NaN/huge inputs defined.
inline int nearest_clamped(float v, int lo, int hi) {
  return (int)std::clamp(std::lrint(v), (long)lo, (long)hi);
}

struct AffineFit {
  float scale;
  float neg_min;  // x ~ scale * q - neg_min, neg_min >= 0
};

// Fits x[i] ~ scale * q[i] + offset, q[i] integer in [0, nmax], offset <= 0, minimising the
// w-weighted squared error. Starts from the plain min..max grid, then tries nstep + 1 grids of
// (nmax + rmin + rdelta * step) steps, takes the least-squares (scale, offset) for each level
// assignment and keeps it when the error drops. Like ggml's make_qkx2_quants, each grid spans
// from the best offset so far to the max, which keeps the bytes equal to llama.cpp's.
AffineFit fit_affine(int n, int nmax, const float* x, const float* w, uint8_t* q, float rmin,
                     float rdelta, int nstep) {
  float lo = x[0], hi = x[0];
  float sum_w = w[0], sum_wx = w[0] * x[0];
  for (int i = 1; i < n; ++i) {
    lo = std::min(lo, x[i]);
    hi = std::max(hi, x[i]);
    sum_w += w[i];
    sum_wx += w[i] * x[i];
  }
  lo = std::min(lo, 0.0f);  // the offset can only subtract
  if (hi == lo) {
    std::fill(q, q + n, 0);
    return {0.0f, -lo};
  }

  float inv = (float)nmax / (hi - lo);
  float scale = 1.0f / inv, offset = lo;
  float best_err = 0.0f;
  for (int i = 0; i < n; ++i) {
    q[i] = (uint8_t)nearest_clamped(inv * (x[i] - lo), 0, nmax);
    const float diff = scale * q[i] + lo - x[i];
    best_err += w[i] * (diff * diff);
  }

  uint8_t trial[kQK_K];  // n <= kQK_K
  for (int step = 0; step <= nstep; ++step) {
    inv = (rmin + rdelta * step + nmax) / (hi - offset);
    float sum_l = 0.0f, sum_l2 = 0.0f, sum_xl = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = nearest_clamped(inv * (x[i] - offset), 0, nmax);
      trial[i] = (uint8_t)l;
      sum_l += w[i] * l;
      sum_l2 += w[i] * l * l;
      sum_xl += w[i] * l * x[i];
    }
    // Weighted least squares for (s, o) in x ~ s * l + o: the 2x2 normal equations.
    const float det = sum_w * sum_l2 - sum_l * sum_l;
    if (!(det > 0.0f)) continue;
    float s = (sum_w * sum_xl - sum_wx * sum_l) / det;
    float o = (sum_l2 * sum_wx - sum_l * sum_xl) / det;
    if (o > 0.0f) {  // offset must stay <= 0: refit the scale alone
      o = 0.0f;
      s = sum_xl / sum_l2;
    }
    float err = 0.0f;
    for (int i = 0; i < n; ++i) {
      const float diff = s * trial[i] + o - x[i];
      err += w[i] * (diff * diff);
    }
    if (err < best_err) {
      std::copy(trial, trial + n, q);
      best_err = err;
      scale = s;
      offset = o;
    }
  }
  return {scale, -offset};
}

// Fits x[i] ~ scale * l[i], l[i] integer in [-nmax, nmax - 1], weighting by x^2 so the large
// values fit best; stores q[i] = l[i] + nmax. Starts from the grid that maps the value of largest
// magnitude to -nmax (the extra negative level), then tries 18 grids of nmax +- 0.1..0.9 steps,
// keeping the least-squares scale of the best one (ggml's make_qx_quants, rmse_type 1). The
// scale's sign is opposite to that value's.
float fit_symmetric(int n, int nmax, const float* x, uint8_t* q) {
  float amax = 0.0f, extreme = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      extreme = x[i];
    }
  }
  if (amax < 1e-15f) {  // all zero
    std::fill(q, q + n, 0);
    return 0.0f;
  }
  // sum of w*x*l and w*l*l with w = x^2, for the levels of grid `inv`
  auto sums = [&](float inv, float& sum_lx, float& sum_l2) {
    sum_lx = sum_l2 = 0.0f;
    for (int i = 0; i < n; ++i) {
      const int l = nearest_clamped(inv * x[i], -nmax, nmax - 1);
      const float w = x[i] * x[i];
      sum_lx += w * x[i] * l;
      sum_l2 += w * l * l;
    }
  };
  auto store = [&](float inv) {
    for (int i = 0; i < n; ++i)
      q[i] = (uint8_t)(nearest_clamped(inv * x[i], -nmax, nmax - 1) + nmax);
  };

  float inv = (float)-nmax / extreme;
  float sum_lx, sum_l2;
  sums(inv, sum_lx, sum_l2);
  store(inv);
  float scale = sum_l2 != 0.0f ? sum_lx / sum_l2 : 0.0f;
  float best = scale * sum_lx;  // = sum_lx^2 / sum_l2: larger means smaller error
  for (int step = -9; step <= 9; ++step) {
    if (step == 0) continue;
    inv = -(nmax + 0.1f * step) / extreme;
    sums(inv, sum_lx, sum_l2);
    if (sum_l2 > 0.0f && sum_lx * sum_lx > best * sum_l2) {
      store(inv);
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

}  // namespace

// ---- Q4_K: x = d * sc * q - dmin * m, 8 sub-blocks of 32 ---------------------------------------
// qs: 64-element chunk c fills qs[32c .. 32c + 31]; low nibble = element 64c + l (sub-block 2c),
// high nibble = element 64c + 32 + l (sub-block 2c + 1).

void quantize_q4_k_row(const float* src, void* dst, int64_t n) {
  LOOM_ASSERT(n % kQK_K == 0, "q4_k row of {} elements", n);
  auto* blocks = static_cast<BlockQ4_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    BlockQ4_K& blk = blocks[b];
    uint8_t q[kQK_K];
    float sub_scale[8], sub_min[8];
    float max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; ++j) {
      const float* xs = x + 32 * j;
      // Weight |x| plus the sub-block's RMS: big values matter most, small ones still count.
      float sum_x2 = 0.0f;
      for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
      const float rms = std::sqrt(sum_x2 / 32);
      float w[32];
      for (int l = 0; l < 32; ++l) w[l] = rms + std::fabs(xs[l]);
      const AffineFit fit = fit_affine(32, 15, xs, w, q + 32 * j, -1.0f, 0.1f, 20);
      sub_scale[j] = fit.scale;
      sub_min[j] = fit.neg_min;
      max_scale = std::max(max_scale, fit.scale);
      max_min = std::max(max_min, fit.neg_min);
    }

    // 6-bit sub-scales and sub-mins relative to the block's largest ones.
    const float inv_scale = max_scale > 0.0f ? 63.0f / max_scale : 0.0f;
    const float inv_min = max_min > 0.0f ? 63.0f / max_min : 0.0f;
    std::memset(blk.scales, 0, sizeof(blk.scales));
    for (int j = 0; j < 8; ++j) {
      q4_k_set_scale_min(blk.scales, j, (uint8_t)nearest_clamped(inv_scale * sub_scale[j], 0, 63),
                         (uint8_t)nearest_clamped(inv_min * sub_min[j], 0, 63));
    }
    blk.d = f32_to_fp16(max_scale / 63.0f);
    blk.dmin = f32_to_fp16(max_min / 63.0f);

    // Requantize against the scales as stored (f16 times 6 bits), which is what decodes.
    const float d = fp16_to_f32(blk.d), dmin = fp16_to_f32(blk.dmin);
    for (int j = 0; j < 8; ++j) {
      const ScaleMin sm = q4_k_scale_min(blk.scales, j);
      const float ds = d * sm.sc;
      if (ds == 0.0f) continue;  // decodes to -dmin * m whatever q is; keep the search's levels
      const float ms = dmin * sm.m;
      for (int l = 0; l < 32; ++l)
        q[32 * j + l] = (uint8_t)nearest_clamped((x[32 * j + l] + ms) / ds, 0, 15);
    }
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

// ---- Q6_K: x = d * scales[e / 16] * (q - 32), 6-bit q split into ql (4 bits) and qh (2 bits) ---
// Per 128-element half h and lane l < 32, elements 128h + 32k + l (k = 0..3) share
// qh[32h + l] (bits 2k, 2k+1); k = 0/1 use the low nibbles of ql[64h + l] / ql[64h + 32 + l],
// k = 2/3 their high nibbles.

void quantize_q6_k_row(const float* src, void* dst, int64_t n) {
  LOOM_ASSERT(n % kQK_K == 0, "q6_k row of {} elements", n);
  auto* blocks = static_cast<BlockQ6_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    BlockQ6_K& blk = blocks[b];
    uint8_t q[kQK_K];
    float sub_scale[16];
    float max_abs = 0.0f, max_scale = 0.0f;
    for (int s = 0; s < 16; ++s) {
      sub_scale[s] = fit_symmetric(16, 32, x + 16 * s, q + 16 * s);
      if (std::fabs(sub_scale[s]) > max_abs) {
        max_abs = std::fabs(sub_scale[s]);
        max_scale = sub_scale[s];
      }
    }
    if (max_abs < 1e-15f) {  // all zero: d = +0 decodes every element to 0
      std::memset(&blk, 0, sizeof(blk));
      continue;
    }

    // int8 sub-scales: the one of largest magnitude maps to -128, so d takes the opposite sign.
    const float inv = -128.0f / max_scale;
    blk.d = f32_to_fp16(1.0f / inv);
    for (int s = 0; s < 16; ++s)
      blk.scales[s] = (int8_t)nearest_clamped(inv * sub_scale[s], -128, 127);

    // Requantize against the stored scales.
    const float d = fp16_to_f32(blk.d);
    for (int s = 0; s < 16; ++s) {
      const float ds = d * blk.scales[s];
      if (ds == 0.0f) continue;  // decodes to 0 whatever q is
      for (int l = 0; l < 16; ++l)
        q[16 * s + l] = (uint8_t)(nearest_clamped(x[16 * s + l] / ds, -32, 31) + 32);
    }
    for (int h = 0; h < 2; ++h) {
      const uint8_t* qq = q + 128 * h;
      for (int l = 0; l < 32; ++l) {
        blk.ql[64 * h + l] = (uint8_t)((qq[l] & 15) | ((qq[l + 64] & 15) << 4));
        blk.ql[64 * h + 32 + l] = (uint8_t)((qq[l + 32] & 15) | ((qq[l + 96] & 15) << 4));
        blk.qh[32 * h + l] = (uint8_t)((qq[l] >> 4) | ((qq[l + 32] >> 4) << 2) |
                                       ((qq[l + 64] >> 4) << 4) | ((qq[l + 96] >> 4) << 6));
      }
    }
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
