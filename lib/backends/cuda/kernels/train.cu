// Training kernels: cross-entropy (per-row terms in double, summed in row order by one thread,
// so the loss does not depend on the launch shape), its gradient, and the optimizer steps with
// the CPU's exact update formulas.
#include "common.cuh"

namespace loom::cuda::k {

namespace {

// log(sum(exp(x))) of row (i1, i2, i3), in double; every thread of the block gets it.
__device__ double row_lse(const TView& x, int64_t i1, int64_t i2, int64_t i3) {
  float mx = -INFINITY;
  for (int64_t e = threadIdx.x; e < x.ne[0]; e += blockDim.x) mx = fmaxf(mx, load(x, e, i1, i2, i3));
  mx = block_max(mx);
  if (isinf(mx)) return mx;
  float s = 0.0f;
  for (int64_t e = threadIdx.x; e < x.ne[0]; e += blockDim.x) s += expf(load(x, e, i1, i2, i3) - mx);
  return (double)mx + log((double)block_sum(s));
}

__global__ void ce_rows_kernel(TView logits, TView labels, double* per_row) {
  const int64_t r = blockIdx.x;
  const int64_t i1 = r % logits.ne[1], i2 = (r / logits.ne[1]) % logits.ne[2], i3 = r / (logits.ne[1] * logits.ne[2]);
  const double lse = row_lse(logits, i1, i2, i3);
  float l = 0.0f;
  for (int64_t e = threadIdx.x; e < logits.ne[0]; e += blockDim.x) {
    const float p = load(labels, e, i1, i2, i3);
    if (p != 0.0f) l -= p * (float)((double)load(logits, e, i1, i2, i3) - lse);
  }
  l = block_sum(l);
  if (threadIdx.x == 0) per_row[r] = (double)l;
}

__global__ void ce_sum_kernel(const double* per_row, int64_t rows, float* loss) {
  double s = 0.0;
  for (int64_t r = 0; r < rows; ++r) s += per_row[r];
  *loss = (float)(s / (double)rows);
}

__global__ void ce_back_kernel(TView grad, TView logits, TView labels, TView dst) {
  const int64_t rows = logits.ne[1] * logits.ne[2] * logits.ne[3];
  const int64_t r = blockIdx.x;
  const int64_t i1 = r % logits.ne[1], i2 = (r / logits.ne[1]) % logits.ne[2], i3 = r / (logits.ne[1] * logits.ne[2]);
  const double g = (double)load(grad, 0, 0, 0, 0) / (double)rows;
  const double lse = row_lse(logits, i1, i2, i3);
  for (int64_t e = threadIdx.x; e < logits.ne[0]; e += blockDim.x)
    store(dst, e, i1, i2, i3,
          (float)((exp((double)load(logits, e, i1, i2, i3) - lse) - (double)load(labels, e, i1, i2, i3)) * g));
}

__global__ void adamw_kernel(float* w, const float* g, float* m, float* v, const float* hp, int64_t n) {
  const float alpha = hp[0], beta1 = hp[1], beta2 = hp[2], eps = hp[3], wd = hp[4];
  const float beta1h = hp[5], beta2h = hp[6], keep = 1.0f - alpha * wd;
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    const float gi = g[i];
    const float mi = m[i] * beta1 + gi * (1.0f - beta1);
    const float vi = v[i] * beta2 + gi * gi * (1.0f - beta2);
    m[i] = mi;
    v[i] = vi;
    w[i] = w[i] * keep - alpha * (mi * beta1h) / (sqrtf(vi * beta2h) + eps);
  }
}

__global__ void sgd_kernel(float* w, const float* g, const float* hp, int64_t n) {
  const float alpha = hp[0], keep = 1.0f - hp[0] * hp[1];
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
    w[i] = w[i] * keep - alpha * g[i];
}

int64_t count(const TView& t) { return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]; }
unsigned grid_for(int64_t n) {
  const unsigned g = blocks_for(n, 256);
  return g < 65535u * 16u ? (g ? g : 1u) : 65535u * 16u;
}

}  // namespace

void cross_entropy(cudaStream_t s, const TView& logits, const TView& labels, const TView& loss, double* scratch) {
  const int64_t rows = logits.ne[1] * logits.ne[2] * logits.ne[3];
  if (!rows) return;
  ce_rows_kernel<<<(unsigned)rows, 256, 0, s>>>(logits, labels, scratch);
  ce_sum_kernel<<<1, 1, 0, s>>>(scratch, rows, reinterpret_cast<float*>(loss.data));
}

void cross_entropy_back(cudaStream_t s, const TView& grad, const TView& logits, const TView& labels,
                        const TView& dst) {
  const int64_t rows = logits.ne[1] * logits.ne[2] * logits.ne[3];
  if (rows) ce_back_kernel<<<(unsigned)rows, 256, 0, s>>>(grad, logits, labels, dst);
}

void adamw(cudaStream_t s, const TView& param, const TView& grad, const TView& m, const TView& v,
           const TView& hp) {
  const int64_t n = count(param);
  if (n)
    adamw_kernel<<<grid_for(n), 256, 0, s>>>(reinterpret_cast<float*>(param.data), reinterpret_cast<float*>(grad.data),
                                             reinterpret_cast<float*>(m.data), reinterpret_cast<float*>(v.data),
                                             reinterpret_cast<float*>(hp.data), n);
}

void sgd(cudaStream_t s, const TView& param, const TView& grad, const TView& hp) {
  const int64_t n = count(param);
  if (n)
    sgd_kernel<<<grid_for(n), 256, 0, s>>>(reinterpret_cast<float*>(param.data), reinterpret_cast<float*>(grad.data),
                                           reinterpret_cast<float*>(hp.data), n);
}

}  // namespace loom::cuda::k
