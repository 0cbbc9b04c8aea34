// Norms, RoPE, softmax and flash attention. One block per row for the row reductions; flash
// attention runs one warp per (query, head): lanes split the head dimension, keys stream past
// with an online softmax, so no n_q x n_kv score matrix is stored.
#include "common.cuh"

namespace loom::cuda::k {

namespace {

constexpr unsigned kRowThreads = 256;

__device__ void row_coords(int64_t r, const int64_t* ne, int64_t& i1, int64_t& i2, int64_t& i3) {
  i1 = r % ne[1];
  i2 = (r / ne[1]) % ne[2];
  i3 = r / (ne[1] * ne[2]);
}

__global__ void rms_norm_kernel(TView x, TView w, TView dst, float eps, bool rms) {
  int64_t i1, i2, i3;
  row_coords(blockIdx.x, x.ne, i1, i2, i3);
  const int64_t n = x.ne[0];
  float s = 0.0f, s2 = 0.0f;
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    const float v = load(x, e, i1, i2, i3);
    s += v;
    s2 += v * v;
  }
  const float mean = rms ? 0.0f : block_sum(s) / (float)n;
  const float var = block_sum(s2) / (float)n - (rms ? 0.0f : mean * mean);
  const float inv = rsqrtf(var + eps);
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    float v = (load(x, e, i1, i2, i3) - mean) * inv;
    if (w.data) v *= load(w, e % w.ne[0], i1 % w.ne[1], i2 % w.ne[2], i3 % w.ne[3]);
    store(dst, e, i1, i2, i3, v);
  }
}

// One thread per rotated pair of one row; dims past n_dims are copied.
__global__ void rope_kernel(TView a, TView pos, TView ff, TView dst, RopeArgs r) {
  int64_t i1, i2, i3;
  row_coords(blockIdx.x, a.ne, i1, i2, i3);
  const int half = r.n_dims / 2;
  const float p = (float)*reinterpret_cast<const int32_t*>(at(pos, i2, 0, 0, 0));
  const bool neox = r.mode == 2;
  for (int i = threadIdx.x; i < half; i += blockDim.x) {
    double e = pow((double)r.freq_base, -2.0 * i / r.n_dims);  // the CPU's order of operations
    if (ff.data) e /= (double)load(ff, i, 0, 0, 0);
    double mult = r.freq_scale;
    if (r.ext_factor != 0.0f) {  // YaRN: interpolated and extrapolated angles mixed by the pair's ramp
      const double y = (i - r.lo) / fmax(0.001, r.hi - r.lo);
      const double ramp = (1.0 - fmin(1.0, fmax(0.0, y))) * r.ext_factor;
      mult = r.freq_scale * (1.0 - ramp) + ramp;
    }
    const double ang = (double)p * (e * mult);
    const float c = (float)cos(ang) * r.mscale;
    const float sn = (float)(r.backward ? -sin(ang) : sin(ang)) * r.mscale;
    const int64_t j0 = neox ? i : 2 * i, j1 = neox ? i + half : 2 * i + 1;
    const float x0 = load(a, j0, i1, i2, i3), x1 = load(a, j1, i1, i2, i3);
    store(dst, j0, i1, i2, i3, x0 * c - x1 * sn);
    store(dst, j1, i1, i2, i3, x0 * sn + x1 * c);
  }
  for (int64_t e = r.n_dims + threadIdx.x; e < a.ne[0]; e += blockDim.x) store(dst, e, i1, i2, i3, load(a, e, i1, i2, i3));
}

__device__ float alibi_slope(float max_bias, int64_t n_head, int64_t h) {
  if (max_bias <= 0.0f) return 1.0f;
  const int64_t n2 = (int64_t)1 << (int)floor(log2((double)n_head));
  const float m0 = powf(2.0f, -max_bias / (float)n2);
  const float m1 = powf(2.0f, -max_bias / 2.0f / (float)n2);
  return h < n2 ? powf(m0, (float)(h + 1)) : powf(m1, (float)(2 * (h - n2) + 1));
}

// Values are staged in dst (which may alias a): pass 1 writes the scaled, masked logits.
// A sink (F32 {h}) takes part in the max and the sum only.
__global__ void soft_max_kernel(TView a, TView mask, TView sinks, TView dst, float scale, float max_bias) {
  int64_t i1, i2, i3;
  row_coords(blockIdx.x, a.ne, i1, i2, i3);
  const int64_t n = a.ne[0];
  const float slope = mask.data ? alibi_slope(max_bias, a.ne[2], i2) : 0.0f;
  float mx = -INFINITY;
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    float v = load(a, e, i1, i2, i3) * scale;
    if (mask.data) v += slope * load(mask, e, i1, i2 % mask.ne[2], i3 % mask.ne[3]);
    store(dst, e, i1, i2, i3, v);
    mx = fmaxf(mx, v);
  }
  mx = block_max(mx);
  const float sink = sinks.data ? *reinterpret_cast<const float*>(at(sinks, i2, 0, 0, 0)) : -INFINITY;
  mx = fmaxf(mx, sink);
  float sum = 0.0f;
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    const float v = mx == -INFINITY ? 0.0f : expf(load(dst, e, i1, i2, i3) - mx);
    store(dst, e, i1, i2, i3, v);
    sum += v;
  }
  sum = block_sum(sum);
  if (sinks.data && mx != -INFINITY) sum += expf(sink - mx);
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) store(dst, e, i1, i2, i3, load(dst, e, i1, i2, i3) * inv);
}

constexpr int kMaxHeadDim = 256;  // the largest D and Dv: q staged in shared memory, two output dims a thread

constexpr int kFaThreads = 128;  // keys per tile: one per thread when scoring

// q (shared memory, D floats) . K row (j, hk, kb); F16 rows (the cache's usual type) in 16-byte loads.
__device__ float row_dot(const float* q, const TView& kk, int64_t j, int64_t hk, int64_t kb) {
  const int64_t D = kk.ne[0];
  const char* row = at(kk, 0, j, hk, kb);
  float s = 0.0f;
  if (kk.type == kF16 && kk.nb[0] == 2 && (D & 7) == 0 && ((uintptr_t)row & 15) == 0) {
    const uint4* v = reinterpret_cast<const uint4*>(row);
    for (int64_t i = 0; i < D / 8; ++i) {
      const uint4 u = v[i];
      const uint32_t w[4] = {u.x, u.y, u.z, u.w};
      for (int k = 0; k < 4; ++k) {
        const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w[k]));
        s += q[8 * i + 2 * k] * f.x;
        s += q[8 * i + 2 * k + 1] * f.y;
      }
    }
    return s;
  }
  for (int64_t d = 0; d < D; ++d) s += q[d] * load(kk, d, j, hk, kb);
  return s;
}

// grid (n_q, h, b), kFaThreads threads. Keys go in tiles of kFaThreads: thread t scores key
// tile + t against q (staged in shared memory), the block's max and sum of the tile update the
// running max M and sum L (online softmax), then thread t adds the tile's p-weighted value rows
// to dims t and t + kFaThreads. A sink adds one more logit to L at the end.
__global__ void flash_attn_kernel(TView q, TView kk, TView v, TView mask, TView sinks, TView dst, float scale,
                                  float max_bias, float softcap) {
  const int64_t iq = blockIdx.x, h = blockIdx.y, b = blockIdx.z;
  const int t = threadIdx.x;
  const int64_t D = q.ne[0], Dv = v.ne[0], n_kv = kk.ne[1];
  const int64_t hk = h / (q.ne[2] / kk.ne[2]), kb = b % kk.ne[3], vb = b % v.ne[3];
  constexpr int kPer = kMaxHeadDim / kFaThreads;
  __shared__ float qs[kMaxHeadDim];
  __shared__ float ps[kFaThreads];
  for (int64_t d = t; d < D; d += kFaThreads) qs[d] = load(q, d, iq, h, b);
  __syncthreads();
  const float slope = mask.data ? alibi_slope(max_bias, q.ne[2], h) : 0.0f;
  float M = -INFINITY, L = 0.0f, acc[kPer] = {};
  for (int64_t j0 = 0; j0 < n_kv; j0 += kFaThreads) {
    const int64_t j = j0 + t;
    float s = -INFINITY;
    if (j < n_kv) {
      const float mv = mask.data ? load(mask, j, iq, h % mask.ne[2], b % mask.ne[3]) : 0.0f;
      if (mv != -INFINITY) {
        s = row_dot(qs, kk, j, hk, kb) * scale;
        if (softcap != 0.0f) s = softcap * tanhf(s / softcap);
        s += slope * mv;
      }
    }
    const float tile_max = block_max(s);  // the same in every thread: the skip below is uniform
    if (tile_max == -INFINITY) continue;
    const float m_new = fmaxf(M, tile_max);
    const float corr = M == -INFINITY ? 0.0f : expf(M - m_new);
    const float p = s == -INFINITY ? 0.0f : expf(s - m_new);
    ps[t] = p;
    L = L * corr + block_sum(p);  // its barriers also publish ps
    M = m_new;
    const int64_t n = min((int64_t)kFaThreads, n_kv - j0);
    for (int i = 0; i < kPer; ++i) {
      const int64_t d = t + (int64_t)i * kFaThreads;
      if (d >= Dv) continue;
      // 8 value loads in flight at a time; masked keys (p = 0) add nothing, whatever their row holds
      float a = acc[i] * corr;
      int64_t jj = 0;
      for (; jj + 8 <= n; jj += 8) {
        float vv[8];
        LOOM_UNROLL
        for (int k = 0; k < 8; ++k) vv[k] = load(v, d, j0 + jj + k, hk, vb);
        LOOM_UNROLL
        for (int k = 0; k < 8; ++k) a += ps[jj + k] != 0.0f ? ps[jj + k] * vv[k] : 0.0f;
      }
      for (; jj < n; ++jj) {
        const float vv = load(v, d, j0 + jj, hk, vb);
        a += ps[jj] != 0.0f ? ps[jj] * vv : 0.0f;
      }
      acc[i] = a;
    }
    __syncthreads();  // the next tile rewrites ps
  }
  if (sinks.data) {
    const float sink = *reinterpret_cast<const float*>(at(sinks, h, 0, 0, 0));
    const float m_new = fmaxf(M, sink);
    const float corr = M == -INFINITY ? 0.0f : expf(M - m_new);
    L = L * corr + expf(sink - m_new);
    for (int i = 0; i < kPer; ++i) acc[i] *= corr;
  }
  const float inv = L > 0.0f ? 1.0f / L : 0.0f;
  for (int i = 0; i < kPer; ++i) {
    const int64_t d = t + (int64_t)i * kFaThreads;
    if (d < Dv) store(dst, d, h, iq, b, acc[i] * inv);
  }
}

int64_t rows_of(const TView& t) { return t.ne[1] * t.ne[2] * t.ne[3]; }

}  // namespace

void rms_norm(cudaStream_t s, const TView& x, const TView& w, const TView& dst, float eps) {
  if (rows_of(x)) rms_norm_kernel<<<(unsigned)rows_of(x), kRowThreads, 0, s>>>(x, w, dst, eps, true);
}

void norm(cudaStream_t s, const TView& x, const TView& dst, float eps) {
  const TView none{};
  if (rows_of(x)) rms_norm_kernel<<<(unsigned)rows_of(x), kRowThreads, 0, s>>>(x, none, dst, eps, false);
}

void rope(cudaStream_t s, const TView& a, const TView& pos, const TView& ff, const TView& dst, const RopeArgs& r) {
  if (rows_of(a)) rope_kernel<<<(unsigned)rows_of(a), 64, 0, s>>>(a, pos, ff, dst, r);
}

void soft_max(cudaStream_t s, const TView& a, const TView& mask, const TView& sinks, const TView& dst, float scale,
              float max_bias) {
  if (rows_of(a)) soft_max_kernel<<<(unsigned)rows_of(a), kRowThreads, 0, s>>>(a, mask, sinks, dst, scale, max_bias);
}

void flash_attn(cudaStream_t s, const TView& q, const TView& kk, const TView& v, const TView& mask,
                const TView& sinks, const TView& dst, float scale, float max_bias, float softcap) {
  const dim3 grid((unsigned)q.ne[1], (unsigned)q.ne[2], (unsigned)q.ne[3]);
  if (q.ne[1] && q.ne[2] && q.ne[3])
    flash_attn_kernel<<<grid, kFaThreads, 0, s>>>(q, kk, v, mask, sinks, dst, scale, max_bias, softcap);
}

int max_head_dim() { return kMaxHeadDim; }

}  // namespace loom::cuda::k
