// Reference (scalar) row conversions for the 16-bit floats and the 32-element block formats
// Q8_0 and Q4_0; the 256-element K-quants live in quants_k.cpp. Scale choice and rounding follow
// ggml's reference quantizers, so a row quantizes to the bytes llama.cpp writes without imatrix.
#include "loom/core/quants.h"

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"
#include "quants_fit.h"

namespace loom {

void f16_to_f32_row(const void* src, float* dst, int64_t n) {
  auto* s = static_cast<const fp16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(s[i]);
}
void f32_to_f16_row(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<fp16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = f32_to_fp16(src[i]);
}
void bf16_to_f32_row(const void* src, float* dst, int64_t n) {
  auto* s = static_cast<const bf16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
}
void f32_to_bf16_row(const float* src, void* dst, int64_t n) {
  auto* d = static_cast<bf16_t*>(dst);
  for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
}

// ---- Q8_0: 32 x int8, one f16 scale ---------------------------------------------------------

void quantize_q8_0_row(const float* src, void* dst, int64_t n) {
  LOOM_ASSERT(n % kQK8_0 == 0, "q8_0 row of {} elements", n);
  auto* blocks = static_cast<BlockQ8_0*>(dst);
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float* x = src + b * kQK8_0;
    float amax = 0.0f;
    for (int j = 0; j < kQK8_0; ++j) amax = std::max(amax, std::fabs(x[j]));
    // The f32 d (not its f16 rounding) sets q, as in ggml, so the largest value maps to +-127.
    const float d = amax / 127.0f;
    const float inv_d = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = f32_to_fp16(d);
    // roundf: halves go away from zero (ggml's choice, not nearest-even).
    for (int j = 0; j < kQK8_0; ++j) blocks[b].qs[j] = (int8_t)std::round(x[j] * inv_d);
  }
}

void dequantize_q8_0_row(const void* src, float* dst, int64_t n) {
  LOOM_ASSERT(n % kQK8_0 == 0, "q8_0 row of {} elements", n);
  auto* blocks = static_cast<const BlockQ8_0*>(src);
  for (int64_t b = 0; b < n / kQK8_0; ++b) {
    const float d = fp16_to_f32(blocks[b].d);
    float* y = dst + b * kQK8_0;
    for (int j = 0; j < kQK8_0; ++j) y[j] = (float)blocks[b].qs[j] * d;
  }
}

// ---- Q4_0: 32 x 4-bit, offset 8, one f16 scale ------------------------------------------------
// qs[j] holds element j in its low nibble and element j + 16 in its high nibble.

void quantize_q4_0_row(const float* src, void* dst, int64_t n) { quantize_q4_0_row_imp(src, dst, n, nullptr); }

void quantize_q4_0_row_imp(const float* src, void* dst, int64_t n, const float* imp) {
  LOOM_ASSERT(n % kQK4_0 == 0, "q4_0 row of {} elements", n);
  auto* blocks = static_cast<BlockQ4_0*>(dst);
  for (int64_t b = 0; b < n / kQK4_0; ++b) {
    const float* x = src + b * kQK4_0;
    float w[kQK4_0];
    if (detail::importance_weights(kQK4_0, x, imp ? imp + b * kQK4_0 : nullptr, w)) {
      uint8_t q[kQK4_0];  // levels 0..15 = l + 8
      blocks[b].d = f32_to_fp16(detail::fit_symmetric(kQK4_0, 8, x, q, w));
      for (int j = 0; j < kQK4_0 / 2; ++j) blocks[b].qs[j] = (uint8_t)(q[j] | (q[j + kQK4_0 / 2] << 4));
      continue;
    }
    // The signed value of largest magnitude maps to q = 0 (i.e. -8), which uses the one extra
    // negative level; the other side then reaches at most +7.
    float amax = 0.0f, extreme = 0.0f;
    for (int j = 0; j < kQK4_0; ++j) {
      if (std::fabs(x[j]) > amax) {
        amax = std::fabs(x[j]);
        extreme = x[j];
      }
    }
    const float d = extreme / -8.0f;
    const float inv_d = d != 0.0f ? 1.0f / d : 0.0f;
    blocks[b].d = f32_to_fp16(d);
    // Truncating x/d + 8.5 rounds halves up; x = -extreme gives 16, clamped to 15.
    auto level = [&](float v) { return (uint8_t)std::min(15, (int)(v * inv_d + 8.5f)); };
    for (int j = 0; j < kQK4_0 / 2; ++j)
      blocks[b].qs[j] = (uint8_t)(level(x[j]) | (level(x[j + kQK4_0 / 2]) << 4));
  }
}

void dequantize_q4_0_row(const void* src, float* dst, int64_t n) {
  LOOM_ASSERT(n % kQK4_0 == 0, "q4_0 row of {} elements", n);
  auto* blocks = static_cast<const BlockQ4_0*>(src);
  for (int64_t b = 0; b < n / kQK4_0; ++b) {
    const float d = fp16_to_f32(blocks[b].d);
    float* y = dst + b * kQK4_0;
    for (int j = 0; j < kQK4_0 / 2; ++j) {
      y[j] = (float)((blocks[b].qs[j] & 15) - 8) * d;
      y[j + kQK4_0 / 2] = (float)((blocks[b].qs[j] >> 4) - 8) * d;
    }
  }
}

}  // namespace loom
