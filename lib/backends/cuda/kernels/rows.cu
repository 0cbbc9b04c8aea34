// Row gathers and scatters (token embeddings, KV cache writes) and whole-matrix dequantization
// (the quantized mat-mat path feeds cuBLAS with F16).
#include "common.cuh"

namespace loom::cuda::k {

namespace {

// blockIdx.x: destination row (i, j, k flattened); threads walk the row.
__global__ void get_rows_kernel(TView a, TView ids, TView dst) {
  const int64_t r = blockIdx.x;
  const int64_t i = r % dst.ne[1], j = (r / dst.ne[1]) % dst.ne[2], kk = r / (dst.ne[1] * dst.ne[2]);
  const int32_t src_row = *reinterpret_cast<const int32_t*>(at(ids, i, j, kk, 0));
  for (int64_t e = threadIdx.x; e < dst.ne[0]; e += blockDim.x)
    store(dst, e, i, j, kk, load(a, e, src_row, j, kk));
}

__global__ void set_rows_kernel(TView src, TView ids, TView dst) {
  const int64_t r = blockIdx.x;
  const int64_t i = r % src.ne[1], j = (r / src.ne[1]) % src.ne[2], kk = r / (src.ne[1] * src.ne[2]);
  const int32_t dst_row = *reinterpret_cast<const int32_t*>(at(ids, i, j % ids.ne[1], kk % ids.ne[2], 0));
  for (int64_t e = threadIdx.x; e < src.ne[0]; e += blockDim.x)
    store(dst, e, dst_row, j, kk, load(src, e, i, j, kk));
}

__global__ void dequantize_kernel(TView a, void* out, bool to_f16) {
  const int64_t r = blockIdx.x;  // row of the flattened matrix
  const int64_t i1 = r % a.ne[1], i2 = (r / a.ne[1]) % a.ne[2], i3 = r / (a.ne[1] * a.ne[2]);
  const char* row = at(a, 0, i1, i2, i3);
  for (int64_t e = threadIdx.x; e < a.ne[0]; e += blockDim.x) {
    const float v = dequant_at(a.type, row, e);
    if (to_f16)
      static_cast<__half*>(out)[r * a.ne[0] + e] = __float2half_rn(v);
    else
      static_cast<float*>(out)[r * a.ne[0] + e] = v;
  }
}

}  // namespace

void get_rows(cudaStream_t s, const TView& a, const TView& ids, const TView& dst) {
  const int64_t rows = dst.ne[1] * dst.ne[2] * dst.ne[3];
  if (rows) get_rows_kernel<<<(unsigned)rows, 256, 0, s>>>(a, ids, dst);
}

void set_rows(cudaStream_t s, const TView& src, const TView& ids, const TView& dst) {
  const int64_t rows = src.ne[1] * src.ne[2] * src.ne[3];
  if (rows) set_rows_kernel<<<(unsigned)rows, 256, 0, s>>>(src, ids, dst);
}

void dequantize(cudaStream_t s, const TView& a, void* dst, bool to_f16) {
  const int64_t rows = a.ne[1] * a.ne[2] * a.ne[3];
  if (rows) dequantize_kernel<<<(unsigned)rows, 256, 0, s>>>(a, dst, to_f16);
}

}  // namespace loom::cuda::k
