// Per-row selection: ARGSORT / TOP_K by a bitonic sort in shared memory (rows of up to 1024),
// the fused MoE router (gating, top-k, weights), ARGMAX and row sums. Ties go to the lower
// index, as on the CPU.
#include "common.cuh"

namespace loom::cuda::k {

namespace {

constexpr int kMaxRow = 1024;

// True when (va, a) sorts before (vb, b): larger first if descending, lower index on ties;
// padding (index >= n) sorts last.
__device__ bool before(float va, int a, float vb, int b, int n, bool desc) {
  if (a >= n || b >= n) return a < b;
  if (va != vb) return desc ? va > vb : va < vb;
  return a < b;
}

// Sorts idx[0..P) (P = blockDim.x, a power of two) by vals; every thread takes part.
__device__ void bitonic(int* idx, const float* vals, int n, bool desc) {
  const int P = blockDim.x, t = threadIdx.x;
  for (int size = 2; size <= P; size <<= 1)
    for (int stride = size >> 1; stride > 0; stride >>= 1) {
      __syncthreads();
      const int o = t ^ stride;
      if (o > t) {
        const int a = idx[t], b = idx[o];
        const bool up = (t & size) == 0;
        const bool a_first = before(a < n ? vals[a] : 0.0f, a, b < n ? vals[b] : 0.0f, b, n, desc);
        if (a_first != up) {
          idx[t] = b;
          idx[o] = a;
        }
      }
    }
  __syncthreads();
}

__global__ void argsort_kernel(TView a, TView dst, bool desc, int k) {
  __shared__ int idx[kMaxRow];
  __shared__ float vals[kMaxRow];
  const int64_t r = blockIdx.x;
  const int64_t i1 = r % a.ne[1], i2 = (r / a.ne[1]) % a.ne[2], i3 = r / (a.ne[1] * a.ne[2]);
  const int n = (int)a.ne[0], t = threadIdx.x;
  if (t < n) vals[t] = load(a, t, i1, i2, i3);
  idx[t] = t;
  bitonic(idx, vals, n, desc);
  if (t < k) *reinterpret_cast<int32_t*>(const_cast<char*>(at(dst, t, i1, i2, i3))) = idx[t];
}

__global__ void topk_moe_kernel(TView logits, TView bias, float* weights, int32_t* ids, TopkMoeArgs p) {
  __shared__ int idx[kMaxRow];
  __shared__ float gate[kMaxRow];
  __shared__ float sel[kMaxRow];
  __shared__ float wsum;
  const int64_t tok = blockIdx.x;
  const int n = p.n_expert, t = threadIdx.x;
  const float x = t < n ? load(logits, t, tok, 0, 0) * p.gate_scale : -INFINITY;
  float g;
  if (p.sigmoid) {
    g = 1.0f / (1.0f + expf(-x));
  } else {
    const float mx = block_max(x);
    const float e = t < n ? expf(x - mx) : 0.0f;
    g = e / block_sum(e);
  }
  if (t < n) {
    gate[t] = g;
    sel[t] = g + (bias.data ? load(bias, t, 0, 0, 0) : 0.0f);
  }
  idx[t] = t;
  bitonic(idx, sel, n, true);
  if (t == 0) {
    float s = 0.0f;
    for (int i = 0; i < p.k; ++i) s += gate[idx[i]];
    wsum = s;
  }
  __syncthreads();
  if (t < p.k) {
    float w = gate[idx[t]];
    if (p.normalize) w /= wsum;
    if (p.has_scale) w = w * p.scale + p.scale_bias;
    weights[tok * p.k + t] = w;
    ids[tok * p.k + t] = idx[t];
  }
}

__global__ void argmax_kernel(TView a, TView dst) {
  const int64_t r = blockIdx.x;
  float best = -INFINITY;
  int bi = 0x7fffffff;
  for (int64_t e = threadIdx.x; e < a.ne[0]; e += blockDim.x) {
    const float v = load(a, e, r, 0, 0);
    if (v > best || (v == best && e < bi)) {
      best = v;
      bi = (int)e;
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, best, o);
    const int oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (ov > best || (ov == best && oi < bi)) {
      best = ov;
      bi = oi;
    }
  }
  __shared__ float bv[32];
  __shared__ int bx[32];
  if (threadIdx.x % 32 == 0) {
    bv[threadIdx.x / 32] = best;
    bx[threadIdx.x / 32] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (unsigned w = 1; w < blockDim.x / 32; ++w)
      if (bv[w] > best || (bv[w] == best && bx[w] < bi)) {
        best = bv[w];
        bi = bx[w];
      }
    *reinterpret_cast<int32_t*>(const_cast<char*>(at(dst, r, 0, 0, 0))) = bi == 0x7fffffff ? 0 : bi;
  }
}

__global__ void sum_rows_kernel(TView a, TView dst, bool mean) {
  const int64_t r = blockIdx.x;
  const int64_t i1 = r % a.ne[1], i2 = (r / a.ne[1]) % a.ne[2], i3 = r / (a.ne[1] * a.ne[2]);
  float s = 0.0f;
  for (int64_t e = threadIdx.x; e < a.ne[0]; e += blockDim.x) s += load(a, e, i1, i2, i3);
  s = block_sum(s);
  if (threadIdx.x == 0) store(dst, 0, i1, i2, i3, mean ? s / (float)a.ne[0] : s);
}

unsigned pow2_threads(int64_t n) {
  unsigned p = 32;
  while ((int64_t)p < n) p <<= 1;
  return p;
}

}  // namespace

void argsort(cudaStream_t s, const TView& a, const TView& dst, bool descending, int k) {
  const int64_t rows = a.ne[1] * a.ne[2] * a.ne[3];
  if (rows) argsort_kernel<<<(unsigned)rows, pow2_threads(a.ne[0]), 0, s>>>(a, dst, descending, k);
}

void topk_moe(cudaStream_t s, const TView& logits, const TView& bias, float* weights, int32_t* ids,
              const TopkMoeArgs& a) {
  if (a.n_tokens) topk_moe_kernel<<<(unsigned)a.n_tokens, pow2_threads(a.n_expert), 0, s>>>(logits, bias, weights, ids, a);
}

void argmax(cudaStream_t s, const TView& a, const TView& dst) {
  if (a.ne[1]) argmax_kernel<<<(unsigned)a.ne[1], 256, 0, s>>>(a, dst);
}

void sum_rows(cudaStream_t s, const TView& a, const TView& dst, bool mean) {
  const int64_t rows = a.ne[1] * a.ne[2] * a.ne[3];
  if (rows) sum_rows_kernel<<<(unsigned)rows, 256, 0, s>>>(a, dst, mean);
}

int max_sort_row() { return kMaxRow; }

}  // namespace loom::cuda::k
