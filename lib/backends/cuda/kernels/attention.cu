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
    double theta = (double)r.freq_scale * pow((double)r.freq_base, -2.0 * i / r.n_dims);
    if (ff.data) theta /= (double)load(ff, i, 0, 0, 0);
    const double ang = (double)p * theta;
    const float c = (float)cos(ang) * r.attn_factor;
    const float sn = (float)(r.backward ? -sin(ang) : sin(ang)) * r.attn_factor;
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
__global__ void soft_max_kernel(TView a, TView mask, TView dst, float scale, float max_bias) {
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
  float sum = 0.0f;
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) {
    const float v = mx == -INFINITY ? 0.0f : expf(load(dst, e, i1, i2, i3) - mx);
    store(dst, e, i1, i2, i3, v);
    sum += v;
  }
  sum = block_sum(sum);
  const float inv = sum > 0.0f ? 1.0f / sum : 0.0f;
  for (int64_t e = threadIdx.x; e < n; e += blockDim.x) store(dst, e, i1, i2, i3, load(dst, e, i1, i2, i3) * inv);
}

constexpr int kMaxHeadDim = 256;  // per lane: up to 8 values of q and of the output

// grid: (n_q, h, b) warps, packed 4 per block along x.
__global__ void flash_attn_kernel(TView q, TView kk, TView v, TView mask, TView dst, float scale, float max_bias,
                                  float softcap) {
  const int64_t iq = blockIdx.x * 4 + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  const int64_t h = blockIdx.y, b = blockIdx.z;
  if (iq >= q.ne[1]) return;
  const int64_t D = q.ne[0], Dv = v.ne[0];
  const int64_t hk = h / (q.ne[2] / kk.ne[2]);
  float qr[kMaxHeadDim / 32], acc[kMaxHeadDim / 32];
  for (int i = 0; i < kMaxHeadDim / 32; ++i) {
    const int64_t d = lane + 32 * i;
    qr[i] = d < D ? load(q, d, iq, h, b) : 0.0f;
    acc[i] = 0.0f;
  }
  const float slope = mask.data ? alibi_slope(max_bias, q.ne[2], h) : 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = 0; j < kk.ne[1]; ++j) {
    float mv = 0.0f;
    if (mask.data) {
      mv = load(mask, j, iq, 0, 0);
      if (mv == -INFINITY) continue;
    }
    float s = 0.0f;
    for (int i = 0; i < kMaxHeadDim / 32; ++i) {
      const int64_t d = lane + 32 * i;
      if (d < D) s += qr[i] * load(kk, d, j, hk, b % kk.ne[3]);
    }
    s = warp_sum(s) * scale;
    if (softcap > 0.0f) s = softcap * tanhf(s / softcap);
    s += slope * mv;
    const float m_new = fmaxf(m, s);
    const float corr = m == -INFINITY ? 0.0f : expf(m - m_new);
    const float p = expf(s - m_new);
    l = l * corr + p;
    for (int i = 0; i < kMaxHeadDim / 32; ++i) {
      const int64_t d = lane + 32 * i;
      acc[i] = acc[i] * corr + (d < Dv ? p * load(v, d, j, hk, b % v.ne[3]) : 0.0f);
    }
    m = m_new;
  }
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;
  for (int i = 0; i < kMaxHeadDim / 32; ++i) {
    const int64_t d = lane + 32 * i;
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

void soft_max(cudaStream_t s, const TView& a, const TView& mask, const TView& dst, float scale, float max_bias) {
  if (rows_of(a)) soft_max_kernel<<<(unsigned)rows_of(a), kRowThreads, 0, s>>>(a, mask, dst, scale, max_bias);
}

void flash_attn(cudaStream_t s, const TView& q, const TView& kk, const TView& v, const TView& mask,
                const TView& dst, float scale, float max_bias, float softcap) {
  const dim3 grid((unsigned)((q.ne[1] + 3) / 4), (unsigned)q.ne[2], (unsigned)q.ne[3]);
  if (q.ne[1] && q.ne[2] && q.ne[3]) flash_attn_kernel<<<grid, 128, 0, s>>>(q, kk, v, mask, dst, scale, max_bias, softcap);
}

int max_head_dim() { return kMaxHeadDim; }

}  // namespace loom::cuda::k
