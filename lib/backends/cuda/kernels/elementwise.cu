// Element-wise kernels: one thread per destination element (grid-stride), strides honoured, so
// views and broadcasts need no copies.
#include "common.cuh"

namespace loom::cuda::k {

namespace {

constexpr unsigned kThreads = 256;

unsigned grid_for(int64_t n) {
  const unsigned g = blocks_for(n, kThreads);
  return g < 65535u * 16u ? (g ? g : 1u) : 65535u * 16u;
}

__global__ void binary_kernel(Binary op, TView a, TView b, TView dst, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t i0, i1, i2, i3;
    unravel(i, dst.ne, i0, i1, i2, i3);
    const float x = load(a, i0, i1, i2, i3);
    const float y = load(b, i0 % b.ne[0], i1 % b.ne[1], i2 % b.ne[2], i3 % b.ne[3]);
    float r;
    switch (op) {
      case Binary::add: r = x + y; break;
      case Binary::sub: r = x - y; break;
      case Binary::mul: r = x * y; break;
      default: r = x / y; break;
    }
    store(dst, i0, i1, i2, i3, r);
  }
}

__device__ float gelu_tanh(float x) {
  const float c = 0.7978845608028654f;  // sqrt(2 / pi)
  return 0.5f * x * (1.0f + tanhf(c * (x + 0.044715f * x * x * x)));
}

__global__ void unary_kernel(Unary op, TView a, TView dst, float p0, float p1, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t i0, i1, i2, i3;
    unravel(i, dst.ne, i0, i1, i2, i3);
    const float x = op == Unary::tile ? load(a, i0 % a.ne[0], i1 % a.ne[1], i2 % a.ne[2], i3 % a.ne[3])
                                      : load(a, i0, i1, i2, i3);
    float r;
    switch (op) {
      case Unary::scale: r = x * p0 + p1; break;
      case Unary::clamp: r = fminf(fmaxf(x, p0), p1); break;
      case Unary::silu: r = x / (1.0f + expf(-x)); break;
      case Unary::gelu: r = gelu_tanh(x); break;
      case Unary::tanh: r = tanhf(x); break;
      case Unary::sigmoid: r = 1.0f / (1.0f + expf(-x)); break;
      case Unary::softplus: r = x > 20.0f ? x : log1pf(expf(x)); break;
      case Unary::exp: r = expf(x); break;
      case Unary::log: r = logf(x); break;
      case Unary::sqr: r = x * x; break;
      case Unary::sqrt: r = sqrtf(x); break;
      default: r = x; break;
    }
    store(dst, i0, i1, i2, i3, r);
  }
}

__global__ void swiglu_kernel(TView a, TView b, TView dst, int64_t n, bool oai, float alpha, float limit) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t i0, i1, i2, i3;
    unravel(i, dst.ne, i0, i1, i2, i3);
    const float x = load(a, i0, i1, i2, i3), y = load(b, i0, i1, i2, i3);
    if (oai) {
      const float xc = fminf(x, limit), yc = fminf(fmaxf(y, -limit), limit);
      store(dst, i0, i1, i2, i3, xc / (1.0f + expf(-alpha * xc)) * (yc + 1.0f));
    } else {
      store(dst, i0, i1, i2, i3, x / (1.0f + expf(-x)) * y);
    }
  }
}

__global__ void add_id_kernel(TView a, TView b, TView ids, TView dst, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t i0, i1, i2, i3;
    unravel(i, dst.ne, i0, i1, i2, i3);
    const int32_t e = *reinterpret_cast<const int32_t*>(at(ids, i1, i2, 0, 0));
    store(dst, i0, i1, i2, i3, load(a, i0, i1, i2, i3) + load(b, i0, e, 0, 0));
  }
}

// src and dst may differ in shape (same element count): both are walked in their own order.
__global__ void convert_kernel(TView src, TView dst, int64_t n) {
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
    int64_t s0, s1, s2, s3, d0, d1, d2, d3;
    unravel(i, src.ne, s0, s1, s2, s3);
    unravel(i, dst.ne, d0, d1, d2, d3);
    if (src.type == kI32 && dst.type == kI32)
      *reinterpret_cast<int32_t*>(const_cast<char*>(at(dst, d0, d1, d2, d3))) =
          *reinterpret_cast<const int32_t*>(at(src, s0, s1, s2, s3));
    else
      store(dst, d0, d1, d2, d3, load(src, s0, s1, s2, s3));
  }
}

int64_t count(const TView& t) { return t.ne[0] * t.ne[1] * t.ne[2] * t.ne[3]; }

}  // namespace

void binary(cudaStream_t s, Binary op, const TView& a, const TView& b, const TView& dst) {
  const int64_t n = count(dst);
  if (n) binary_kernel<<<grid_for(n), kThreads, 0, s>>>(op, a, b, dst, n);
}

void unary(cudaStream_t s, Unary op, const TView& a, const TView& dst, float p0, float p1) {
  const int64_t n = count(dst);
  if (n) unary_kernel<<<grid_for(n), kThreads, 0, s>>>(op, a, dst, p0, p1, n);
}

void swiglu(cudaStream_t s, const TView& a, const TView& b, const TView& dst, bool oai, float alpha, float limit) {
  const int64_t n = count(dst);
  if (n) swiglu_kernel<<<grid_for(n), kThreads, 0, s>>>(a, b, dst, n, oai, alpha, limit);
}

void add_id(cudaStream_t s, const TView& a, const TView& b, const TView& ids, const TView& dst) {
  const int64_t n = count(dst);
  if (n) add_id_kernel<<<grid_for(n), kThreads, 0, s>>>(a, b, ids, dst, n);
}

void convert(cudaStream_t s, const TView& src, const TView& dst) {
  const int64_t n = count(dst);
  if (n) convert_kernel<<<grid_for(n), kThreads, 0, s>>>(src, dst, n);
}

}  // namespace loom::cuda::k
