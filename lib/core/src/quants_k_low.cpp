// Reference (scalar) row conversions of the low-bit K-quants Q2_K and Q3_K (layouts in quants.h),
// with ggml's reference scale searches (quantize_row_q2_K_ref / q3_K_ref: what llama-quantize
// writes without an imatrix), so rows quantize to llama.cpp's bytes.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "loom/core/error.h"
#include "loom/core/quants.h"
#include "quants_fit.h"

namespace loom {
namespace {

using detail::AffineFit;
using detail::fit_affine;
using detail::nearest_clamped;

// 256 2-bit levels -> qs: element 128h + 32k + l at bits 2k of qs[32h + l].
void pack_2bit(const uint8_t* q, uint8_t* qs) {
  for (int h = 0; h < 2; ++h)
    for (int l = 0; l < 32; ++l) {
      const uint8_t* qq = q + 128 * h + l;
      qs[32 * h + l] = (uint8_t)((qq[0] & 3) | ((qq[32] & 3) << 2) | ((qq[64] & 3) << 4) | ((qq[96] & 3) << 6));
    }
}

// Q3_K's fit of 16 values to s * l, l in [-nmax, nmax - 1] (x^2-weighted, or by `weights`): the grid that maps the
// value of largest magnitude to -nmax, then up to 5 passes moving single levels while the
// weighted cosine improves (ggml's make_q3_quants with rmse). Stores q = l + nmax.
float fit_q3_levels(const float* x, uint8_t* q, const float* weights) {
  constexpr int n = 16, nmax = 4;
  float amax = 0.0f, extreme = 0.0f;
  for (int i = 0; i < n; ++i)
    if (std::fabs(x[i]) > amax) {
      amax = std::fabs(x[i]);
      extreme = x[i];
    }
  if (amax < 1e-15f) {
    std::fill(q, q + n, 0);
    return 0.0f;
  }
  const float inv = -nmax / extreme;
  int l[n];
  float sum_lx = 0.0f, sum_l2 = 0.0f;
  for (int i = 0; i < n; ++i) {
    l[i] = nearest_clamped(inv * x[i], -nmax, nmax - 1);
    const float w = weights ? weights[i] : x[i] * x[i];
    sum_lx += w * x[i] * l[i];
    sum_l2 += w * l[i] * l[i];
  }
  for (int pass = 0; pass < 5; ++pass) {
    int changed = 0;
    for (int i = 0; i < n; ++i) {
      const float w = weights ? weights[i] : x[i] * x[i];
      float slx = sum_lx - w * x[i] * l[i];
      if (!(slx > 0.0f)) continue;
      float sl2 = sum_l2 - w * l[i] * l[i];
      const int nl = nearest_clamped(x[i] * sl2 / slx, -nmax, nmax - 1);
      if (nl == l[i]) continue;
      slx += w * x[i] * nl;
      sl2 += w * nl * nl;
      if (sl2 > 0.0f && slx * slx * sum_l2 > sum_lx * sum_lx * sl2) {
        l[i] = nl;
        sum_lx = slx;
        sum_l2 = sl2;
        ++changed;
      }
    }
    if (!changed) break;
  }
  for (int i = 0; i < n; ++i) q[i] = (uint8_t)(l[i] + nmax);
  return sum_l2 > 0.0f ? sum_lx / sum_l2 : 0.0f;
}

}  // namespace

// ---- Q2_K: x = d * (sc & 15) * q - dmin * (sc >> 4) per 16 values ------------------------------

void quantize_q2_k_row(const float* src, void* dst, int64_t n) { quantize_q2_k_row_imp(src, dst, n, nullptr); }

void quantize_q2_k_row_imp(const float* src, void* dst, int64_t n, const float* imp) {
  LOOM_ASSERT(n % kQK_K == 0, "q2_k row of {} elements", n);
  auto* blocks = static_cast<BlockQ2_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    BlockQ2_K& blk = blocks[b];
    uint8_t q[kQK_K];
    float sub_scale[16], sub_min[16], max_scale = 0.0f, max_min = 0.0f;
    float iw[kQK_K];  // with an importance matrix: its weights and a squared-error fit
    const bool weighted = detail::importance_weights(kQK_K, x, imp ? imp + b * kQK_K : nullptr, iw);
    for (int j = 0; j < 16; ++j) {
      float w[16];  // |x|, absolute-error fit
      for (int l = 0; l < 16; ++l) w[l] = weighted ? iw[16 * j + l] : std::fabs(x[16 * j + l]);
      const AffineFit fit = fit_affine(16, 3, x + 16 * j, w, q + 16 * j, -0.5f, 0.1f, 15, !weighted);
      sub_scale[j] = fit.scale;
      sub_min[j] = fit.neg_min;
      max_scale = std::max(max_scale, fit.scale);
      max_min = std::max(max_min, fit.neg_min);
    }
    // 4-bit sub-scales and sub-mins relative to the largest ones (the scales' times f), then the
    // levels against them as stored.
    auto pack = [&](float f, BlockQ2_K& out) {
      std::memset(out.scales, 0, sizeof(out.scales));
      out.d = f32_to_fp16(0.0f);
      out.dmin = f32_to_fp16(0.0f);
      if (max_scale > 0.0f) {
        const float inv = 15.0f / (max_scale * f);
        for (int j = 0; j < 16; ++j) out.scales[j] = (uint8_t)nearest_clamped(inv * sub_scale[j], 0, 15);
        out.d = f32_to_fp16(max_scale * f / 15.0f);
      }
      if (max_min > 0.0f) {
        const float inv = 15.0f / max_min;
        for (int j = 0; j < 16; ++j) out.scales[j] |= (uint8_t)(nearest_clamped(inv * sub_min[j], 0, 15) << 4);
        out.dmin = f32_to_fp16(max_min / 15.0f);
      }
      uint8_t qo[kQK_K];
      std::copy(q, q + kQK_K, qo);
      const float d = fp16_to_f32(out.d), dmin = fp16_to_f32(out.dmin);
      for (int j = 0; j < 16; ++j) {
        const float ds = d * (out.scales[j] & 15);
        if (ds == 0.0f) continue;
        const float ms = dmin * (out.scales[j] >> 4);
        for (int l = 0; l < 16; ++l) qo[16 * j + l] = (uint8_t)nearest_clamped((x[16 * j + l] + ms) / ds, 0, 3);
      }
      pack_2bit(qo, out.qs);
    };
    pack(1.0f, blk);
    if (weighted) detail::refine_block_scale(blk, x, iw, pack, dequantize_q2_k_row);
  }
}

void dequantize_q2_k_row(const void* src, float* dst, int64_t n) {
  LOOM_ASSERT(n % kQK_K == 0, "q2_k row of {} elements", n);
  auto* blocks = static_cast<const BlockQ2_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ2_K& blk = blocks[b];
    const float d = fp16_to_f32(blk.d), dmin = fp16_to_f32(blk.dmin);
    // element e = 128h + 32k + l: bits 2k of qs[32h + l], group e / 16 (loops the compiler
    // vectorizes: the prompt GEMM of repacked Q2_K converts every weight through here)
    for (int h = 0; h < 2; ++h)
      for (int k = 0; k < 4; ++k)
        for (int half = 0; half < 2; ++half) {
          const uint8_t sc = blk.scales[8 * h + 2 * k + half];
          const float dl = d * (float)(sc & 15), ml = dmin * (float)(sc >> 4);
          float* out = dst + kQK_K * b + 128 * h + 32 * k + 16 * half;
          const uint8_t* qs = blk.qs + 32 * h + 16 * half;
          for (int l = 0; l < 16; ++l) out[l] = dl * (float)((qs[l] >> (2 * k)) & 3) - ml;
        }
  }
}

// ---- Q3_K: x = d * (s - 32) * (q - 4) per 16 values ---------------------------------------------

void quantize_q3_k_row(const float* src, void* dst, int64_t n) { quantize_q3_k_row_imp(src, dst, n, nullptr); }

void quantize_q3_k_row_imp(const float* src, void* dst, int64_t n, const float* imp) {
  LOOM_ASSERT(n % kQK_K == 0, "q3_k row of {} elements", n);
  auto* blocks = static_cast<BlockQ3_K*>(dst);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const float* x = src + b * kQK_K;
    BlockQ3_K& blk = blocks[b];
    uint8_t q[kQK_K];
    float sub_scale[16], max_scale = 0.0f, amax = 0.0f;
    float w[kQK_K];
    const bool weighted = detail::importance_weights(kQK_K, x, imp ? imp + b * kQK_K : nullptr, w);
    for (int j = 0; j < 16; ++j) {
      sub_scale[j] = fit_q3_levels(x + 16 * j, q + 16 * j, weighted ? w + 16 * j : nullptr);
      if (weighted) {  // the weighted grid search too, where it fits better
        uint8_t alt[16];
        const float s_alt = detail::fit_symmetric(16, 4, x + 16 * j, alt, w + 16 * j);
        auto err = [&](float sc, const uint8_t* lv) {
          float e = 0.0f;
          for (int l = 0; l < 16; ++l) {
            const float diff = sc * (lv[l] - 4) - x[16 * j + l];
            e += w[16 * j + l] * diff * diff;
          }
          return e;
        };
        if (err(s_alt, alt) < err(sub_scale[j], q + 16 * j)) {
          sub_scale[j] = s_alt;
          std::copy(alt, alt + 16, q + 16 * j);
        }
      }
      if (std::fabs(sub_scale[j]) > amax) {
        amax = std::fabs(sub_scale[j]);
        max_scale = sub_scale[j];
      }
    }
    // 6-bit signed sub-scales: the one of largest magnitude maps to -32 (times f).
    auto pack = [&](float f, BlockQ3_K& out) {
      uint8_t qo[kQK_K];
      std::copy(q, q + kQK_K, qo);
      std::memset(out.scales, 0, sizeof(out.scales));
      out.d = f32_to_fp16(0.0f);
      if (max_scale != 0.0f) {
        const float inv = -32.0f / (max_scale * f);
        for (int j = 0; j < 16; ++j) {
          const int s = nearest_clamped(inv * sub_scale[j], -32, 31) + 32;
          out.scales[j % 8] |= (uint8_t)((s & 15) << (4 * (j / 8)));
          out.scales[8 + j % 4] |= (uint8_t)((s >> 4) << (2 * (j / 4)));
        }
        out.d = f32_to_fp16(1.0f / inv);
      }
      const float d = fp16_to_f32(out.d);
      for (int j = 0; j < 16; ++j) {
        const float ds = d * (float)(q3_k_scale(out.scales, j) - 32);
        if (ds == 0.0f) continue;
        for (int l = 0; l < 16; ++l) qo[16 * j + l] = (uint8_t)(nearest_clamped(x[16 * j + l] / ds, -4, 3) + 4);
      }
      std::memset(out.hmask, 0, sizeof(out.hmask));
      for (int e = 0; e < kQK_K; ++e) out.hmask[e % 32] |= (uint8_t)((qo[e] >> 2) << (e / 32));
      pack_2bit(qo, out.qs);
    };
    pack(1.0f, blk);
    if (weighted) detail::refine_block_scale(blk, x, w, pack, dequantize_q3_k_row);
  }
}

void dequantize_q3_k_row(const void* src, float* dst, int64_t n) {
  LOOM_ASSERT(n % kQK_K == 0, "q3_k row of {} elements", n);
  auto* blocks = static_cast<const BlockQ3_K*>(src);
  for (int64_t b = 0; b < n / kQK_K; ++b) {
    const BlockQ3_K& blk = blocks[b];
    const float d = fp16_to_f32(blk.d);
    for (int h = 0; h < 2; ++h)  // element e = 128h + 32k + l, as in dequantize_q2_k_row
      for (int k = 0; k < 4; ++k)
        for (int half = 0; half < 2; ++half) {
          const float s = d * (float)(q3_k_scale(blk.scales, 8 * h + 2 * k + half) - 32);
          float* out = dst + kQK_K * b + 128 * h + 32 * k + 16 * half;
          for (int l = 16 * half; l < 16 * half + 16; ++l) {
            const int q = ((blk.qs[32 * h + l] >> (2 * k)) & 3) | (((blk.hmask[l] >> (4 * h + k)) & 1) << 2);
            out[l - 16 * half] = s * (float)(q - 4);
          }
        }
  }
}

}  // namespace loom
