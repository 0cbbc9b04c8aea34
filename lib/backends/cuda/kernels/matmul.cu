// Products the weights' own type reads in place: quantized mat-vec (decode), the experts'
// MUL_MAT_ID and OUT_PROD. Rows are cut into 32-element units (a 32-element block, or a slice of a
// 256-element one); lanes of a warp take units in turn, so a warp reads a row's bytes in order.
// Larger products of quantized weights go through cuBLAS after dequantization (dispatch.cpp).
#include "act_round.h"
#include "common.cuh"

namespace loom::cuda::k {

namespace {

constexpr int kCols = 8;  // columns of b one warp multiplies per pass

// The 32 values of unit u of a row of type T (block types: dim 0 contiguous; plain types by
// stride). T is a template parameter so every per-element switch folds away and the 32 values
// stay in registers.
template <int T>
__device__ __forceinline__ void unit_values(const TView& t, const char* row, int64_t u, float* out) {
  if constexpr (T != kF32 && T != kF16 && T != kBF16) {
    decode_unit(T, reinterpret_cast<const uint8_t*>(row), u, out);
  } else {
    const int64_t e0 = u * 32;
    const char* p0 = row + e0 * t.nb[0];
    constexpr int size = T == kF32 ? 4 : 2;
    if (t.nb[0] == size && e0 + 32 <= t.ne[0] && ((uintptr_t)p0 & 15) == 0) {  // whole unit: 16-byte loads
      const uint4* v = reinterpret_cast<const uint4*>(p0);
      LOOM_UNROLL
      for (int j = 0; j < 2 * size; ++j) {
        const uint4 q = v[j];
        const uint32_t w[4] = {q.x, q.y, q.z, q.w};
        LOOM_UNROLL
        for (int i = 0; i < 4; ++i) {
          if constexpr (T == kF32) {
            out[j * 4 + i] = __uint_as_float(w[i]);
          } else if constexpr (T == kF16) {
            const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[i]));
            out[j * 8 + 2 * i] = f.x;
            out[j * 8 + 2 * i + 1] = f.y;
          } else {
            out[j * 8 + 2 * i] = __uint_as_float(w[i] << 16);
            out[j * 8 + 2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
          }
        }
      }
      return;
    }
    LOOM_UNROLL
    for (int i = 0; i < 32; ++i) {
      const int64_t e = e0 + i;
      const char* p = row + e * t.nb[0];
      out[i] = e >= t.ne[0] ? 0.0f : T == kF32 ? *reinterpret_cast<const float*>(p) : T == kF16 ? f16_at(p) : bf16_at(p);
    }
  }
}

__device__ float b_at(const TView& b, int64_t k, int64_t n, int64_t i2, int64_t i3) {
  return k < b.ne[0] ? *reinterpret_cast<const float*>(at(b, k, n, i2, i3)) : 0.0f;
}

// The 32 activations of unit u of column (n, i2, i3) (zeros when `on` is false), rounded as the
// CPU rounds them (act_round.h). Every lane of the warp calls it together: a 256-value block is
// the units of 8 neighbouring lanes, whose largest magnitude a shuffle shares.
__device__ void unit_activations(const TView& b, int64_t u, bool on, int64_t n, int64_t i2, int64_t i3, int act,
                                 float* x) {
  float amax = 0.0f;
  const float* p = reinterpret_cast<const float*>(at(b, u * 32, n, i2, i3));
  if (on && u * 32 + 32 <= b.ne[0] && ((uintptr_t)p & 15) == 0) {  // b's rows are unit-stride (op table)
    LOOM_UNROLL
    for (int j = 0; j < 8; ++j) {
      const float4 q = reinterpret_cast<const float4*>(p)[j];
      x[4 * j] = q.x, x[4 * j + 1] = q.y, x[4 * j + 2] = q.z, x[4 * j + 3] = q.w;
    }
  } else {
    LOOM_UNROLL
    for (int i = 0; i < 32; ++i) x[i] = on ? b_at(b, u * 32 + i, n, i2, i3) : 0.0f;
  }
  LOOM_UNROLL
  for (int i = 0; i < 32; ++i) amax = fmaxf(amax, fabsf(x[i]));
  if (act == kActQ8_256)
    for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if (act == kActQ8_32 || act == kActQ8_256) {
    const int block = act_block(act);
    LOOM_UNROLL
    for (int i = 0; i < 32; ++i) x[i] = q8_value(x[i], amax, block);
  } else if (act == kActBf16) {
    LOOM_UNROLL
    for (int i = 0; i < 32; ++i) x[i] = bf16_value(x[i]);
  }
}

// The activations of b's columns rounded once, before the products (else every warp would round
// them again for its row): xr[col * kp + i], col the flat column (n, i2, i3), kp = the units' 32
// values each. grid (columns, ceil(units / 128)), 4 warps per block, 32 units per warp, so a
// 256-value block's 8 units are 8 neighbouring lanes, as unit_activations shuffles them.
__global__ void round_act_kernel(TView b, float* xr, int64_t kp, int act) {
  const int lane = threadIdx.x % 32;
  const int64_t base = ((int64_t)blockIdx.y * 4 + threadIdx.x / 32) * 32, units = kp / 32;
  if (base >= units) return;  // whole warps
  const int64_t col = blockIdx.x, n = col % b.ne[1], i2 = col / b.ne[1] % b.ne[2], i3 = col / (b.ne[1] * b.ne[2]);
  const int64_t u = base + lane;
  float x[32];
  unit_activations(b, u, u < units, n, i2, i3, act, x);
  if (u >= units) return;
  float4* o = reinterpret_cast<float4*>(xr + col * kp + u * 32);
  LOOM_UNROLL
  for (int j = 0; j < 8; ++j) o[j] = make_float4(x[4 * j], x[4 * j + 1], x[4 * j + 2], x[4 * j + 3]);
}

// The 32 activations of unit u of column (n, i2, i3): from xr (rounded already) or rounded here.
__device__ __forceinline__ void unit_x(const TView& b, const float* xr, int64_t kp, int64_t u, bool on, int64_t n,
                                       int64_t i2, int64_t i3, int act, float* x) {
  if (!xr) return unit_activations(b, u, on, n, i2, i3, act, x);
  const float4* p = reinterpret_cast<const float4*>(xr + (n + (i2 + i3 * b.ne[2]) * b.ne[1]) * kp + u * 32);
  LOOM_UNROLL
  for (int j = 0; j < 8; ++j) {
    const float4 q = on ? p[j] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    x[4 * j] = q.x, x[4 * j + 1] = q.y, x[4 * j + 2] = q.z, x[4 * j + 3] = q.w;
  }
}

// grid (ceil(M / 4), ceil(N / kCols), b2 * b3), 4 warps per block, one row of a per warp.
template <int T>
__global__ void mul_mat_q_kernel(TView a, TView b, TView dst, int act, const float* xr, int64_t kp) {
  const int64_t m = blockIdx.x * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (m >= a.ne[1]) return;  // whole warps: M is split by warp
  const int64_t n0 = (int64_t)blockIdx.y * kCols;
  const int64_t i2 = blockIdx.z % b.ne[2], i3 = blockIdx.z / b.ne[2];
  const char* row = at(a, 0, m, i2 / (b.ne[2] / a.ne[2]), i3 / (b.ne[3] / a.ne[3]));
  const int64_t units = (a.ne[0] + 31) / 32;
  const int ncols = (int)min((int64_t)kCols, b.ne[1] - n0);
  float acc[kCols] = {};
  float w[32], x[32];
  for (int64_t base = 0; base < units; base += 32) {  // every lane in every pass (the shuffles)
    const int64_t u = base + lane;
    const bool on = u < units;
    if (on) {
      unit_values<T>(a, row, u, w);
    } else {
      LOOM_UNROLL
      for (int i = 0; i < 32; ++i) w[i] = 0.0f;
    }
    LOOM_UNROLL
    for (int c = 0; c < kCols; ++c) {
      if (c >= ncols) break;
      unit_x(b, xr, kp, u, on, n0 + c, i2, i3, act, x);
      float s = 0.0f;
      LOOM_UNROLL
      for (int i = 0; i < 32; ++i) s += w[i] * x[i];
      acc[c] += s;
    }
  }
  LOOM_UNROLL
  for (int c = 0; c < kCols; ++c) {
    if (c >= ncols) break;
    const float s = warp_sum(acc[c]);
    if (lane == 0) store(dst, m, n0 + c, i2, i3, s);
  }
}

// grid (ceil(M / 4), n_used * T): one warp per (row, expert slot, token).
template <int T>
__global__ void mul_mat_id_kernel(TView as, TView b, TView ids, TView dst, int act, const float* xr, int64_t kp) {
  const int64_t m = blockIdx.x * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (m >= as.ne[1]) return;
  const int64_t slot = blockIdx.y % ids.ne[0], t = blockIdx.y / ids.ne[0];
  const int32_t e = *reinterpret_cast<const int32_t*>(at(ids, slot, t, 0, 0));
  const char* row = at(as, 0, m, e, 0);
  const int64_t bn = slot % b.ne[1];
  const int64_t units = (as.ne[0] + 31) / 32;
  float acc = 0.0f, w[32], x[32];
  for (int64_t base = 0; base < units; base += 32) {
    const int64_t u = base + lane;
    const bool on = u < units;
    if (on) {
      unit_values<T>(as, row, u, w);
    } else {
      LOOM_UNROLL
      for (int i = 0; i < 32; ++i) w[i] = 0.0f;
    }
    unit_x(b, xr, kp, u, on, bn, t, 0, act, x);
    float s = 0.0f;
    LOOM_UNROLL
    for (int i = 0; i < 32; ++i) s += w[i] * x[i];
    acc += s;
  }
  acc = warp_sum(acc);
  if (lane == 0) store(dst, m, slot, t, 0, acc);
}

__global__ void out_prod_kernel(TView a, TView b, TView dst, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t m, nn, i2, i3;
    unravel(i, dst.ne, m, nn, i2, i3);
    const int64_t a2 = i2 / (dst.ne[2] / a.ne[2]), a3 = i3 / (dst.ne[3] / a.ne[3]);
    float s = 0.0f;
    for (int64_t kk = 0; kk < a.ne[1]; ++kk) s += load(a, m, kk, a2, a3) * load(b, nn, kk, i2, i3);
    store(dst, m, nn, i2, i3, s);
  }
}

}  // namespace

// Every weight type the kernels read, for the per-type instantiations.
#define LOOM_WEIGHT_TYPES(X) \
  X(kF32) X(kF16) X(kBF16) X(kQ8_0) X(kQ4_0) X(kQ4_1) X(kQ5_0) X(kQ5_1) X(kIQ4_NL) X(kMXFP4) X(kQ2_K) X(kQ3_K) \
  X(kQ4_K) X(kQ5_K) X(kQ6_K) X(kIQ4_XS)

namespace {
// Rounds b's columns into xr when act asks for rounding and xr is given; returns the pointer the
// products read (nullptr: they read b, rounding as they go) and sets kp.
const float* round_activations(cudaStream_t s, const TView& b, int act, float* xr, int64_t& kp) {
  kp = (b.ne[0] + 31) / 32 * 32;
  const int64_t cols = b.ne[1] * b.ne[2] * b.ne[3];
  if (act == kActNone || !xr || cols <= 0 || cols > 0x7fffffff) return nullptr;
  const dim3 grid((unsigned)cols, (unsigned)((kp / 32 + 127) / 128));
  round_act_kernel<<<grid, 128, 0, s>>>(b, xr, kp, act);
  return xr;
}
}  // namespace

size_t act_scratch_bytes(int64_t K, int64_t columns, int act) {
  return act == kActNone ? 0 : (size_t)((K + 31) / 32 * 32) * (size_t)columns * sizeof(float);
}

void mul_mat_q(cudaStream_t s, const TView& a, const TView& b, const TView& dst, int act, float* scratch) {
  const dim3 grid((unsigned)((a.ne[1] + 3) / 4), (unsigned)((b.ne[1] + kCols - 1) / kCols), (unsigned)(b.ne[2] * b.ne[3]));
  if (!a.ne[1] || !b.ne[1]) return;
  int64_t kp = 0;
  const float* xr = round_activations(s, b, act, scratch, kp);
  switch (a.type) {
#define LOOM_CASE(T) \
  case T: mul_mat_q_kernel<T><<<grid, 128, 0, s>>>(a, b, dst, act, xr, kp); break;
    LOOM_WEIGHT_TYPES(LOOM_CASE)
#undef LOOM_CASE
    default: break;  // the op table admits no other type
  }
}

void mul_mat_id(cudaStream_t s, const TView& as, const TView& b, const TView& ids, const TView& dst, int act,
                float* scratch) {
  const dim3 grid((unsigned)((as.ne[1] + 3) / 4), (unsigned)(ids.ne[0] * ids.ne[1]));
  if (as.ne[1] <= 0 || ids.ne[0] * ids.ne[1] <= 0) return;
  int64_t kp = 0;
  const float* xr = round_activations(s, b, act, scratch, kp);
  switch (as.type) {
#define LOOM_CASE(T) \
  case T: mul_mat_id_kernel<T><<<grid, 128, 0, s>>>(as, b, ids, dst, act, xr, kp); break;
    LOOM_WEIGHT_TYPES(LOOM_CASE)
#undef LOOM_CASE
    default: break;
  }
}

void out_prod(cudaStream_t s, const TView& a, const TView& b, const TView& dst) {
  const int64_t n = dst.ne[0] * dst.ne[1] * dst.ne[2] * dst.ne[3];
  if (n) out_prod_kernel<<<blocks_for(n, 256) < 65535u * 16u ? blocks_for(n, 256) : 65535u * 16u, 256, 0, s>>>(a, b, dst, n);
}

}  // namespace loom::cuda::k
