// Device-side helpers shared by the kernels: a tensor view passed by value (data, shape, byte
// strides, type), element loads and stores for the plain float types, and per-element
// dequantization of the block types (block_decode.h).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels.h"

namespace loom::cuda::k {

__device__ __forceinline__ float f16_at(const void* p) { return __half2float(*static_cast<const __half*>(p)); }

__device__ __forceinline__ float bf16_at(const void* p) {
  const uint32_t bits = (uint32_t)(*static_cast<const uint16_t*>(p)) << 16;
  return __uint_as_float(bits);
}

__device__ __forceinline__ const char* at(const TView& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return t.data + i0 * t.nb[0] + i1 * t.nb[1] + i2 * t.nb[2] + i3 * t.nb[3];
}

// Element e of a row of a block type (e counted from the row start).
__device__ __forceinline__ float dequant_at(int type, const char* row, int64_t e) {
  return block_value(type, reinterpret_cast<const uint8_t*>(row), e);
}

// Element (i0, i1, i2, i3) of t as f32: plain floats through their strides, block types by
// row (dim 0 contiguous), I32 converted.
__device__ __forceinline__ float load(const TView& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  switch (t.type) {
    case kF32: return *reinterpret_cast<const float*>(at(t, i0, i1, i2, i3));
    case kF16: return f16_at(at(t, i0, i1, i2, i3));
    case kBF16: return bf16_at(at(t, i0, i1, i2, i3));
    case kI32: return (float)*reinterpret_cast<const int32_t*>(at(t, i0, i1, i2, i3));
    default: return dequant_at(t.type, at(t, 0, i1, i2, i3), i0);
  }
}

__device__ __forceinline__ void store(const TView& t, int64_t i0, int64_t i1, int64_t i2, int64_t i3, float v) {
  char* p = const_cast<char*>(at(t, i0, i1, i2, i3));
  switch (t.type) {
    case kF32: *reinterpret_cast<float*>(p) = v; break;
    case kF16: *reinterpret_cast<__half*>(p) = __float2half_rn(v); break;
    case kBF16: *reinterpret_cast<__nv_bfloat16*>(p) = __float2bfloat16_rn(v); break;
    case kI32: *reinterpret_cast<int32_t*>(p) = (int32_t)v; break;
    default: break;
  }
}

// Linear index -> 4-D coordinates of shape ne.
__device__ __forceinline__ void unravel(int64_t i, const int64_t* ne, int64_t& i0, int64_t& i1, int64_t& i2,
                                        int64_t& i3) {
  i0 = i % ne[0];
  i /= ne[0];
  i1 = i % ne[1];
  i /= ne[1];
  i2 = i % ne[2];
  i3 = i / ne[2];
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Sum / max over a block of blockDim.x threads (a multiple of 32, at most 1024); every thread gets it.
__device__ inline float block_sum(float v) {
  __shared__ float part[32];
  v = warp_sum(v);
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  __syncthreads();
  if (l == 0) part[w] = v;
  __syncthreads();
  v = l < (int)(blockDim.x / 32) ? part[l] : 0.0f;
  return warp_sum(v);
}
__device__ inline float block_max(float v) {
  __shared__ float part[32];
  v = warp_max(v);
  const int w = threadIdx.x / 32, l = threadIdx.x % 32;
  __syncthreads();
  if (l == 0) part[w] = v;
  __syncthreads();
  v = l < (int)(blockDim.x / 32) ? part[l] : -INFINITY;
  return warp_max(v);
}

inline unsigned blocks_for(int64_t n, unsigned threads) { return (unsigned)((n + threads - 1) / threads); }

}  // namespace loom::cuda::k
