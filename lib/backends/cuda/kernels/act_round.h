// The CPU's rounding of mat-mul activations (loom::cpu::matmul_activations), for the kernels that
// multiply quantized weights in place: with the activations rounded as the CPU rounds them, a
// model on CUDA gives the CPU's tokens (the products then differ only in summation order).
// __host__ __device__ like block_decode.h, so tests/cuda checks it against the CPU's quantizers.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "block_decode.h"  // LOOM_HD, bits_to_float

namespace loom::cuda::k {

// As loom::cpu::ActRounding: none, bf16 (nearest even), int8 blocks of 32 or 256 values.
enum ActMode : int { kActNone = 0, kActBf16 = 1, kActQ8_32 = 2, kActQ8_256 = 3 };

LOOM_HD int act_block(int mode) { return mode == kActQ8_32 ? 32 : mode == kActQ8_256 ? 256 : 1; }

// One IEEE rounding per operation, never fused into a multiply-add (the CPU's quantizer).
LOOM_HD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;  // a lone product: nothing to contract it with
#endif
}
LOOM_HD float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

// x >= 0 rounded to the nearest fp16 (ties to even) and widened again, as loom::f32_to_fp16.
LOOM_HD float fp16_round(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if (u >= 0x7f800000u) return x;                      // inf / nan
  if (u >= 0x477ff000u) return bits_to_float(0x7f800000u);  // past the largest half: inf
  if (u < 0x38800000u) return mul_rn(rintf(mul_rn(x, 16777216.0f)), 1.0f / 16777216.0f);  // subnormal half
  return bits_to_float((u + 0x0fffu + ((u >> 13) & 1u)) & 0xffffe000u);
}

// x in an int8 block of `block` values whose largest magnitude is amax, as the CPU stores it times
// its scale: d * q with d = amax / 127. Blocks of 256: q = x * (127 / amax) rounded to nearest
// even. Blocks of 32 (GGUF's Q8_0): q = x * (1 / d), and d is kept at fp16 precision.
LOOM_HD float q8_value(float x, float amax, int block) {
  if (!(amax > 0.0f)) return 0.0f;
  const float d = div_rn(amax, 127.0f);
  if (block == 32) return mul_rn(fp16_round(d), rintf(mul_rn(x, div_rn(1.0f, d))));
  return mul_rn(d, rintf(mul_rn(x, div_rn(127.0f, amax))));
}

// x rounded to bf16 (nearest even; NaN stays NaN) and widened again.
LOOM_HD float bf16_value(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bits_to_float((u | 0x00400000u) & 0xffff0000u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return bits_to_float(u & 0xffff0000u);
}

}  // namespace loom::cuda::k
