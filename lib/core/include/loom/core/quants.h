// Block layouts of the quantized types (bit-exact with GGUF) and their reference row
// conversions. Reference = readable scalar code; SIMD variants live beside the kernels and are
// tested against these.
#pragma once

#include <cstdint>

#include "loom/core/fp16.h"

namespace loom {

inline constexpr int kQK8_0 = 32;
inline constexpr int kQK4_0 = 32;
inline constexpr int kQK_K = 256;
inline constexpr int kKScaleSize = 12;

struct BlockQ8_0 {  // x = qs * d, d = amax / 127
  fp16_t d;
  int8_t qs[kQK8_0];
};
static_assert(sizeof(BlockQ8_0) == 34);

struct BlockQ4_0 {  // x[j] = ((qs[j] & 15) - 8) * d, x[j+16] = ((qs[j] >> 4) - 8) * d
  fp16_t d;
  uint8_t qs[kQK4_0 / 2];
};
static_assert(sizeof(BlockQ4_0) == 18);

struct BlockQ4_K {  // 8 sub-blocks of 32: x = d * sc * q - dmin * m, 6-bit (sc, m) in scales
  fp16_t d;
  fp16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144);

// Q4_K packs eight 6-bit (sc, m) pairs, one per 32-element sub-block j, into scales[12]:
//   bytes 0-3:  sc[0..3] in bits 0-5; bits 6-7 hold sc[4..7] >> 4
//   bytes 4-7:  m[0..3]  in bits 0-5; bits 6-7 hold m[4..7]  >> 4
//   bytes 8-11: sc[4..7] & 15 in bits 0-3, m[4..7] & 15 in bits 4-7
struct ScaleMin {
  uint8_t sc;
  uint8_t m;
};
inline ScaleMin q4_k_scale_min(const uint8_t* scales, int j) {
  if (j < 4) return {(uint8_t)(scales[j] & 63), (uint8_t)(scales[j + 4] & 63)};
  return {(uint8_t)((scales[j + 4] & 15) | ((scales[j - 4] >> 6) << 4)),
          (uint8_t)((scales[j + 4] >> 4) | ((scales[j] >> 6) << 4))};
}
// Writes pair j (sc, m < 64) without disturbing the bits of the other pairs.
inline void q4_k_set_scale_min(uint8_t* scales, int j, uint8_t sc, uint8_t m) {
  if (j < 4) {
    scales[j] = (uint8_t)((scales[j] & 0xc0) | sc);
    scales[j + 4] = (uint8_t)((scales[j + 4] & 0xc0) | m);
  } else {
    scales[j + 4] = (uint8_t)((sc & 15) | ((m & 15) << 4));
    scales[j - 4] = (uint8_t)((scales[j - 4] & 63) | ((sc >> 4) << 6));
    scales[j] = (uint8_t)((scales[j] & 63) | ((m >> 4) << 6));
  }
}

// Q6_K element e of a block: half h = e / 128, lane l = e % 32, quarter k = (e % 128) / 32;
// low 4 bits in ql[64h + l + 32(k & 1)] (low nibble for k < 2, high for k >= 2), high 2 bits in
// qh[32h + l] at bit 2k, scale scales[e / 16].
struct BlockQ6_K {  // 16 sub-blocks of 16: x = d * scales[i] * (q - 32), q 6 bits split in ql/qh
  uint8_t ql[kQK_K / 2];
  uint8_t qh[kQK_K / 4];
  int8_t scales[kQK_K / 16];
  fp16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210);

// Row conversions, n a multiple of the block size. quantize_* are the reference quantizers.
void f16_to_f32_row(const void* src, float* dst, int64_t n);
void f32_to_f16_row(const float* src, void* dst, int64_t n);
void bf16_to_f32_row(const void* src, float* dst, int64_t n);
void f32_to_bf16_row(const float* src, void* dst, int64_t n);
void dequantize_q8_0_row(const void* src, float* dst, int64_t n);
void quantize_q8_0_row(const float* src, void* dst, int64_t n);
void dequantize_q4_0_row(const void* src, float* dst, int64_t n);
void quantize_q4_0_row(const float* src, void* dst, int64_t n);
void dequantize_q4_k_row(const void* src, float* dst, int64_t n);
void quantize_q4_k_row(const float* src, void* dst, int64_t n);
void dequantize_q6_k_row(const void* src, float* dst, int64_t n);
void quantize_q6_k_row(const float* src, void* dst, int64_t n);

}  // namespace loom
