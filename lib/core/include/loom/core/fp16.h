// Scalar conversions between f32 and the 16-bit float formats (IEEE half and bfloat16).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

namespace loom {

using fp16_t = uint16_t;  // IEEE 754 binary16 bits
using bf16_t = uint16_t;  // upper half of an f32, round to nearest even

inline float fp16_to_f32(fp16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal: value = man * 2^-24
      float f = std::ldexp((float)man, -24);
      return sign ? -f : f;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  return std::bit_cast<float>(bits);
}

inline fp16_t f32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (x >> 16) & 0x8000;
  const uint32_t ax = x & 0x7fffffffu;
  if (ax >= 0x7f800000u) return (fp16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 : 0));  // inf / nan
  if (ax >= 0x477ff000u) return (fp16_t)(sign | 0x7c00);  // rounds past the largest half: inf
  if (ax < 0x38800000u) {  // below the smallest normal half: subnormal or zero, round to nearest even
    const float a = std::bit_cast<float>(ax);
    const float scaled = a * 16777216.0f;  // 2^24: units of the smallest subnormal
    return (fp16_t)(sign | (uint32_t)std::nearbyint(scaled));
  }
  // normal: rebias the exponent and round the mantissa to 10 bits, nearest even
  uint32_t m = ax + 0xc8000000u;  // exponent - 112
  m += 0x0fffu + ((m >> 13) & 1u);
  return (fp16_t)(sign | (m >> 13));
}

inline float bf16_to_f32(bf16_t h) { return std::bit_cast<float>((uint32_t)h << 16); }

inline bf16_t f32_to_bf16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (bf16_t)((x >> 16) | 0x40);  // quiet nan
  x += 0x7fffu + ((x >> 16) & 1u);
  return (bf16_t)(x >> 16);
}

}  // namespace loom
