// Block layouts of the quantized types (bit-exact with GGUF) and their reference row
// conversions. Reference = readable scalar code; SIMD variants live beside the kernels and are
// tested against these.
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>

#include "loom/core/dtype.h"
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

inline constexpr int kQK4_1 = 32;
inline constexpr int kQK5_0 = 32;
inline constexpr int kQK5_1 = 32;
inline constexpr int kQK4_NL = 32;
inline constexpr int kQK_MXFP4 = 32;

// 32-element types: element j < 16 sits in the low nibble of qs[j], element j + 16 in its high
// nibble; the 5-bit types keep bit 4 of element j in bit j of qh (little-endian u32).
struct BlockQ4_1 {  // x = d * q + m, q 4 bits
  fp16_t d;
  fp16_t m;
  uint8_t qs[kQK4_1 / 2];
};
static_assert(sizeof(BlockQ4_1) == 20);

struct BlockQ5_0 {  // x = d * (q - 16), q 5 bits
  fp16_t d;
  uint8_t qh[4];
  uint8_t qs[kQK5_0 / 2];
};
static_assert(sizeof(BlockQ5_0) == 22);

struct BlockQ5_1 {  // x = d * q + m, q 5 bits
  fp16_t d;
  fp16_t m;
  uint8_t qh[4];
  uint8_t qs[kQK5_1 / 2];
};
static_assert(sizeof(BlockQ5_1) == 24);

// IQ4_NL / IQ4_XS levels: a fixed non-uniform grid, x = d * kIq4nlValues[q].
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};
struct BlockIQ4_NL {
  fp16_t d;
  uint8_t qs[kQK4_NL / 2];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

// MXFP4 (OCP microscaling): E2M1 values, stored doubled as integers, times 2^(e - 128)
// (half the E8M0 scale, which undoes the doubling).
inline constexpr int8_t kMxfp4Values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
struct BlockMXFP4 {
  uint8_t e;  // E8M0 exponent
  uint8_t qs[kQK_MXFP4 / 2];
};
static_assert(sizeof(BlockMXFP4) == 17);
// 2^(e - 128) as f32 (e = 0, 1 are subnormal); exact.
inline float e8m0_half_to_f32(uint8_t e) {
  return std::bit_cast<float>(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23);
}

// Q2_K: 16 sub-blocks of 16, x = d * (sc & 15) * q - dmin * (sc >> 4), q 2 bits. Element e:
// half h = e / 128, quarter k = (e % 128) / 32, lane l = e % 32 -> bits 2k of qs[32h + l].
struct BlockQ2_K {
  uint8_t scales[kQK_K / 16];
  uint8_t qs[kQK_K / 4];
  fp16_t d;
  fp16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84);

// Q3_K: 16 sub-blocks of 16, x = d * (s - 32) * (q - 4), q = 2 low bits (as Q2_K) | high bit
// (hmask[e % 32] bit e / 32) << 2; the 6-bit s are packed in scales[12] (q3_k_scale).
struct BlockQ3_K {
  uint8_t hmask[kQK_K / 8];
  uint8_t qs[kQK_K / 4];
  uint8_t scales[12];
  fp16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110);
// Sub-block j's 6-bit scale (0..63; subtract 32): low 4 bits in the nibble (j / 8) of scales[j % 8],
// high 2 bits at bit 2 (j / 4) of scales[8 + j % 4].
inline int q3_k_scale(const uint8_t* scales, int j) {
  const int lo = (scales[j % 8] >> (4 * (j / 8))) & 15;
  const int hi = (scales[8 + j % 4] >> (2 * (j / 4))) & 3;
  return lo | (hi << 4);
}

// Q5_K: as Q4_K (same scales) with bit 4 of element e in qh[e % 32] bit e / 32.
struct BlockQ5_K {
  fp16_t d;
  fp16_t dmin;
  uint8_t scales[kKScaleSize];
  uint8_t qh[kQK_K / 8];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176);

// IQ4_XS: 8 sub-blocks of 32, x = d * (ls - 32) * kIq4nlValues[q]; ls 6 bits: low 4 in nibble
// (j % 2) of scales_l[j / 2], high 2 at bit 2j of scales_h. Sub-block j's nibbles as IQ4_NL's
// at qs + 16j.
struct BlockIQ4_XS {
  fp16_t d;
  uint16_t scales_h;
  uint8_t scales_l[kQK_K / 64];
  uint8_t qs[kQK_K / 2];
};
static_assert(sizeof(BlockIQ4_XS) == 136);
inline int iq4_xs_scale(const BlockIQ4_XS& b, int j) {
  return ((b.scales_l[j / 2] >> (4 * (j % 2))) & 15) | (((b.scales_h >> (2 * j)) & 3) << 4);
}

// Index of the first block (element, for F32/F16/BF16) of data[0, nbytes) whose scale or value is
// NaN or infinite, or -1: such blocks decode to garbage, and files holding them are refused.
int64_t first_bad_block(DType type, const void* data, size_t nbytes);

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
void dequantize_q4_1_row(const void* src, float* dst, int64_t n);
void quantize_q4_1_row(const float* src, void* dst, int64_t n);
void dequantize_q5_0_row(const void* src, float* dst, int64_t n);
void quantize_q5_0_row(const float* src, void* dst, int64_t n);
void dequantize_q5_1_row(const void* src, float* dst, int64_t n);
void quantize_q5_1_row(const float* src, void* dst, int64_t n);
void dequantize_mxfp4_row(const void* src, float* dst, int64_t n);
void quantize_mxfp4_row(const float* src, void* dst, int64_t n);
void dequantize_iq4_nl_row(const void* src, float* dst, int64_t n);
void quantize_iq4_nl_row(const float* src, void* dst, int64_t n);
void dequantize_iq4_xs_row(const void* src, float* dst, int64_t n);
void quantize_iq4_xs_row(const float* src, void* dst, int64_t n);
void dequantize_q2_k_row(const void* src, float* dst, int64_t n);
void quantize_q2_k_row(const float* src, void* dst, int64_t n);
void dequantize_q3_k_row(const void* src, float* dst, int64_t n);
void quantize_q3_k_row(const float* src, void* dst, int64_t n);
void dequantize_q5_k_row(const void* src, float* dst, int64_t n);
void quantize_q5_k_row(const float* src, void* dst, int64_t n);

// Importance-weighted quantization (llama-quantize --imatrix): importance[0, n) holds, per column
// of the row, the mean square of the activations that column meets (>= 0); each block's scale
// search minimises its error weighted by it, and the blocks are then scaled back to the
// originals' size (least squares shrinks them; quants_fit.h). A block whose importance is all
// zero keeps the reference bytes. The _imp functions are the searches alone; with importance ==
// nullptr they are the reference quantizers.
using FromFloatImportanceFn = void (*)(const float* src, void* dst, int64_t n, const float* importance);
// nullptr for the types that have no use for an importance matrix, as in llama.cpp: F32, F16,
// BF16, I32, Q8_0 and MXFP4 (their scales follow from each block's largest value).
FromFloatImportanceFn importance_quantizer(DType type);
void quantize_q4_0_row_imp(const float* src, void* dst, int64_t n, const float* importance);
void quantize_q4_1_row_imp(const float* src, void* dst, int64_t n, const float* importance);
void quantize_q5_0_row_imp(const float* src, void* dst, int64_t n, const float* importance);
void quantize_q5_1_row_imp(const float* src, void* dst, int64_t n, const float* importance);
void quantize_iq4_nl_row_imp(const float* src, void* dst, int64_t n, const float* importance);
void quantize_iq4_xs_row_imp(const float* src, void* dst, int64_t n, const float* importance);
void quantize_q2_k_row_imp(const float* src, void* dst, int64_t n, const float* importance);
void quantize_q3_k_row_imp(const float* src, void* dst, int64_t n, const float* importance);
void quantize_q4_k_row_imp(const float* src, void* dst, int64_t n, const float* importance);
void quantize_q5_k_row_imp(const float* src, void* dst, int64_t n, const float* importance);
void quantize_q6_k_row_imp(const float* src, void* dst, int64_t n, const float* importance);

}  // namespace loom
