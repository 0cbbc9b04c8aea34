// Decoding of the GGUF block types (byte layouts as lib/core/quants.h defines them), written once
// for the GPU kernels and the host: under nvcc every function is __host__ __device__, under a
// plain C++ compiler it is ordinary inline code, so tests/cuda checks every type against the CPU's
// reference dequantization on machines without a GPU.
#pragma once

#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define LOOM_HD __host__ __device__ __forceinline__
#else
#define LOOM_HD inline
#endif
#ifdef __CUDA_ARCH__  // device code: fixed-size loops over register arrays unrolled, so they stay in registers
#define LOOM_UNROLL _Pragma("unroll")
#else
#define LOOM_UNROLL
#endif

namespace loom::cuda::k {

// GGUF type ids (the same numbers as loom::DType) the kernels understand.
enum TypeCode : int {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ2_K = 10,
  kQ3_K = 11,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kIQ4_NL = 20,
  kIQ4_XS = 23,
  kI32 = 26,
  kBF16 = 30,
  kMXFP4 = 39,
};

struct BlockShape {
  int elems, bytes;  // {0, 0}: not a block type
};

LOOM_HD BlockShape block_shape(int type) {
  switch (type) {
    case kQ8_0: return {32, 34};
    case kQ4_0: return {32, 18};
    case kQ4_1: return {32, 20};
    case kQ5_0: return {32, 22};
    case kQ5_1: return {32, 24};
    case kIQ4_NL: return {32, 18};
    case kMXFP4: return {32, 17};
    case kQ2_K: return {256, 84};
    case kQ3_K: return {256, 110};
    case kQ4_K: return {256, 144};
    case kQ5_K: return {256, 176};
    case kQ6_K: return {256, 210};
    case kIQ4_XS: return {256, 136};
    default: return {0, 0};
  }
}

LOOM_HD float bits_to_float(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

// IEEE half (little-endian bytes at p, any alignment) to float, exact.
LOOM_HD float half_at(const uint8_t* p) {
  const uint32_t h = (uint32_t)p[0] | ((uint32_t)p[1] << 8);
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 31, man = h & 0x3ffu;
  if (exp == 0) {  // zero or subnormal: man * 2^-24 (exact in float)
    const float v = (float)man * 5.9604644775390625e-8f;
    return sign ? -v : v;
  }
  if (exp == 31) return bits_to_float(sign | 0x7f800000u | (man << 13));
  return bits_to_float(sign | ((exp + 112) << 23) | (man << 13));
}

// MXFP4's scale: 2^(e - 128) (half the E8M0 value; the levels below are doubled).
LOOM_HD float e8m0_half(uint8_t e) { return bits_to_float(e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23); }

// 16-entry level tables packed in two 64-bit words, byte q: a lookup that needs no memory (an
// array here would live in each GPU thread's local memory).
LOOM_HD int packed_level(uint64_t lo, uint64_t hi, int q) { return (int8_t)((q < 8 ? lo : hi) >> (8 * (q & 7))); }
// {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113}
LOOM_HD int iq4nl_level(int q) { return packed_level(0xf6eaddcfbfad9881ull, 0x7159453526190d01ull, q); }
// {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12}
LOOM_HD int mxfp4_level(int q) { return packed_level(0x0c08060403020100ull, 0xf4f8fafcfdfeff00ull, q); }

// Q4_K / Q5_K sub-block j's 6-bit scale and min from the 12 packed bytes.
LOOM_HD void k_scale_min(const uint8_t* sc, int j, int& s, int& m) {
  if (j < 4) {
    s = sc[j] & 63;
    m = sc[j + 4] & 63;
  } else {
    s = (sc[j + 4] & 15) | ((sc[j - 4] >> 6) << 4);
    m = (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4);
  }
}
// Q3_K sub-block j's (of 16) 6-bit scale.
LOOM_HD int q3_k_scale_at(const uint8_t* sc, int j) {
  return ((sc[j % 8] >> (4 * (j / 8))) & 15) | (((sc[8 + j % 4] >> (2 * (j / 4))) & 3) << 4);
}
// The 2-bit field of element e (0..255) in Q2_K / Q3_K's qs.
LOOM_HD int k_2bit(const uint8_t* qs, int e) { return (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3; }

// 32-element block types: x = level * d + m, the CPU's order of operations (m is 0 but for
// Q4_1 / Q5_1). The block's scales, decoded once per block, and element i's integer level.
struct Scale32 {
  float d, m;
};
LOOM_HD Scale32 block32_scale(int type, const uint8_t* b) {
  switch (type) {
    case kMXFP4: return {e8m0_half(b[0]), 0.0f};
    case kQ4_1:
    case kQ5_1: return {half_at(b), half_at(b + 2)};
    default: return {half_at(b), 0.0f};
  }
}
LOOM_HD int block32_level(int type, const uint8_t* b, int i) {
  const int l = i % 16, hi = i / 16;  // nibble l, high half hi
  switch (type) {
    case kQ8_0: return (int8_t)b[2 + i];
    case kQ4_0: return ((b[2 + l] >> (4 * hi)) & 15) - 8;
    case kQ4_1: return (b[4 + l] >> (4 * hi)) & 15;
    case kQ5_0:
    case kQ5_1: {
      const int o = type == kQ5_0 ? 2 : 4;
      const int q = ((b[o + 4 + l] >> (4 * hi)) & 15) | (((b[o + i / 8] >> (i % 8)) & 1) << 4);
      return type == kQ5_0 ? q - 16 : q;
    }
    case kIQ4_NL: return iq4nl_level((b[2 + l] >> (4 * hi)) & 15);
    case kMXFP4: return mxfp4_level((b[1 + l] >> (4 * hi)) & 15);
    default: return 0;
  }
}

// Element e of a row of a block type (e counted from the row start).
LOOM_HD float block_value(int type, const uint8_t* row, int64_t e) {
  const BlockShape bs = block_shape(type);
  if (bs.elems == 0) return 0.0f;
  const uint8_t* b = row + (e / bs.elems) * bs.bytes;
  const int i = (int)(e % bs.elems);
  if (bs.elems == 32) {
    const Scale32 s = block32_scale(type, b);
    return (float)block32_level(type, b, i) * s.d + s.m;
  }
  switch (type) {
    case kQ2_K: {
      const uint8_t sc = b[i / 16];
      return half_at(b + 80) * (float)(sc & 15) * (float)k_2bit(b + 16, i) - half_at(b + 82) * (float)(sc >> 4);
    }
    case kQ3_K: {
      const int q = k_2bit(b + 32, i) | (((b[i % 32] >> (i / 32)) & 1) << 2);
      return half_at(b + 108) * (float)(q3_k_scale_at(b + 96, i / 16) - 32) * (float)(q - 4);
    }
    case kQ4_K:
    case kQ5_K: {
      const int j = i / 32, c = j / 2, ll = i % 32;
      int s, m;
      k_scale_min(b + 4, j, s, m);
      const uint8_t* qs = b + (type == kQ4_K ? 16 : 48);
      int q = (qs[32 * c + ll] >> (4 * (j & 1))) & 15;
      if (type == kQ5_K) q |= ((b[16 + ll] >> j) & 1) << 4;
      return half_at(b) * (float)s * (float)q - half_at(b + 2) * (float)m;
    }
    case kQ6_K: {
      const int h = i / 128, ll = i % 32, kq = (i % 128) / 32;
      const uint8_t lo = b[64 * h + ll + 32 * (kq & 1)];
      const uint8_t hb = b[128 + 32 * h + ll];
      const int q = (((kq < 2 ? lo : lo >> 4) & 15) | (((hb >> (2 * kq)) & 3) << 4)) - 32;
      return half_at(b + 208) * (float)(int8_t)b[192 + i / 16] * (float)q;
    }
    case kIQ4_XS: {
      const int j = i / 32, ll = i % 32;
      const uint16_t sh = (uint16_t)(b[2] | (b[3] << 8));
      const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 15) | (((sh >> (2 * j)) & 3) << 4);
      const int q = (b[8 + 16 * j + ll % 16] >> (4 * (ll / 16))) & 15;
      return half_at(b) * (float)(ls - 32) * (float)iq4nl_level(q);
    }
    default: return 0.0f;
  }
}

// The 32 values of unit u of a row (elements 32u .. 32u + 31): one 32-element block, or one
// 32-element slice of a 256-element block. The block's scales are decoded once per unit.
LOOM_HD void decode_unit(int type, const uint8_t* row, int64_t u, float* out) {
  const BlockShape bs = block_shape(type);
  if (bs.elems == 32) {
    const uint8_t* b = row + u * bs.bytes;
    const Scale32 s = block32_scale(type, b);
    LOOM_UNROLL
    for (int i = 0; i < 32; ++i) out[i] = (float)block32_level(type, b, i) * s.d + s.m;
    return;
  }
  const uint8_t* b = row + (u / 8) * bs.bytes;
  const int j = (int)(u % 8);
  switch (type) {
    case kQ4_K:
    case kQ5_K: {
      int s, m;
      k_scale_min(b + 4, j, s, m);
      const float d = half_at(b) * (float)s, dm = half_at(b + 2) * (float)m;
      const uint8_t* qs = b + (type == kQ4_K ? 16 : 48) + 32 * (j / 2);
      LOOM_UNROLL
      for (int l = 0; l < 32; ++l) {
        int q = (qs[l] >> (4 * (j & 1))) & 15;
        if (type == kQ5_K) q |= ((b[16 + l] >> j) & 1) << 4;
        out[l] = d * (float)q - dm;
      }
      return;
    }
    case kIQ4_XS: {
      const uint16_t sh = (uint16_t)(b[2] | (b[3] << 8));
      const int ls = ((b[4 + j / 2] >> (4 * (j % 2))) & 15) | (((sh >> (2 * j)) & 3) << 4);
      const float dl = half_at(b) * (float)(ls - 32);
      LOOM_UNROLL
      for (int l = 0; l < 16; ++l) {
        out[l] = dl * (float)iq4nl_level(b[8 + 16 * j + l] & 15);
        out[l + 16] = dl * (float)iq4nl_level(b[8 + 16 * j + l] >> 4);
      }
      return;
    }
    default:  // Q2_K, Q3_K, Q6_K: scales per 16 elements; the element formula is cheap enough
      LOOM_UNROLL
      for (int l = 0; l < 32; ++l) out[l] = block_value(type, b, 32 * j + l);
  }
}

}  // namespace loom::cuda::k
