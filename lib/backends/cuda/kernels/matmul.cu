// Products the weights' own type reads in place: quantized mat-vec (decode), the experts'
// MUL_MAT_ID and OUT_PROD. Rows are cut into 32-element units (a 32-element block, or a slice of a
// 256-element one); lanes of a warp take units in turn, so a warp reads a row's bytes in order.
// Larger products of quantized weights go through cuBLAS after dequantization (dispatch.cpp).
#include "act_round.h"
#include "common.cuh"

namespace loom::cuda::k {

namespace {

constexpr int kCols = 8;  // columns of b one warp multiplies per pass

// The 32 values of unit u of a row (block types: dim 0 contiguous; plain types by stride).
__device__ void unit_values(const TView& t, const char* row, int64_t u, float* out) {
  if (block_shape(t.type).elems) {
    decode_unit(t.type, reinterpret_cast<const uint8_t*>(row), u, out);
    return;
  }
  const int64_t e0 = u * 32;
  for (int i = 0; i < 32; ++i) {
    const int64_t e = e0 + i;
    const char* p = row + e * t.nb[0];
    out[i] = e >= t.ne[0] ? 0.0f : t.type == kF32 ? *reinterpret_cast<const float*>(p)
                                 : t.type == kF16 ? f16_at(p) : bf16_at(p);
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
  for (int i = 0; i < 32; ++i) {
    x[i] = on ? b_at(b, u * 32 + i, n, i2, i3) : 0.0f;
    amax = fmaxf(amax, fabsf(x[i]));
  }
  if (act == kActQ8_256)
    for (int o = 1; o < 8; o <<= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  if (act == kActQ8_32 || act == kActQ8_256)
    for (int i = 0; i < 32; ++i) x[i] = q8_value(x[i], amax, act_block(act));
  else if (act == kActBf16)
    for (int i = 0; i < 32; ++i) x[i] = bf16_value(x[i]);
}

// grid (ceil(M / 4), ceil(N / kCols), b2 * b3), 4 warps per block, one row of a per warp.
__global__ void mul_mat_q_kernel(TView a, TView b, TView dst, int act) {
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
    if (on) unit_values(a, row, u, w);
    else
      for (float& v : w) v = 0.0f;
    for (int c = 0; c < ncols; ++c) {
      unit_activations(b, u, on, n0 + c, i2, i3, act, x);
      float s = 0.0f;
      for (int i = 0; i < 32; ++i) s += w[i] * x[i];
      acc[c] += s;
    }
  }
  for (int c = 0; c < ncols; ++c) {
    const float s = warp_sum(acc[c]);
    if (lane == 0) store(dst, m, n0 + c, i2, i3, s);
  }
}

// grid (ceil(M / 4), n_used * T): one warp per (row, expert slot, token).
__global__ void mul_mat_id_kernel(TView as, TView b, TView ids, TView dst, int act) {
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
    if (on) unit_values(as, row, u, w);
    else
      for (float& v : w) v = 0.0f;
    unit_activations(b, u, on, bn, t, 0, act, x);
    float s = 0.0f;
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

void mul_mat_q(cudaStream_t s, const TView& a, const TView& b, const TView& dst, int act) {
  const dim3 grid((unsigned)((a.ne[1] + 3) / 4), (unsigned)((b.ne[1] + kCols - 1) / kCols), (unsigned)(b.ne[2] * b.ne[3]));
  if (a.ne[1] && b.ne[1]) mul_mat_q_kernel<<<grid, 128, 0, s>>>(a, b, dst, act);
}

void mul_mat_id(cudaStream_t s, const TView& as, const TView& b, const TView& ids, const TView& dst, int act) {
  const dim3 grid((unsigned)((as.ne[1] + 3) / 4), (unsigned)(ids.ne[0] * ids.ne[1]));
  if (as.ne[1] > 0 && ids.ne[0] * ids.ne[1] > 0) mul_mat_id_kernel<<<grid, 128, 0, s>>>(as, b, ids, dst, act);
}

void out_prod(cudaStream_t s, const TView& a, const TView& b, const TView& dst) {
  const int64_t n = dst.ne[0] * dst.ne[1] * dst.ne[2] * dst.ne[3];
  if (n) out_prod_kernel<<<blocks_for(n, 256) < 65535u * 16u ? blocks_for(n, 256) : 65535u * 16u, 256, 0, s>>>(a, b, dst, n);
}

}  // namespace loom::cuda::k
