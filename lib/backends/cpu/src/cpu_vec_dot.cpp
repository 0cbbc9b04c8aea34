// Portable per-type row kernels (see cpu_vec_dot.h): the scalar level's table and the readable
// reference of every SIMD variant, plus the choice of table by level. Each weight type has a
// block decoder (a block of 32 or 256 elements -> f32, plain loops the compiler vectorizes); one
// template turns a decoder into the fused multi-column dot, the row conversion and the axpy.
// Quantized types also have integer dots against int8-quantized columns (ActType q8 / q8k).
// Accumulators are arrays of independent lanes, so the loops vectorize without fast-math.
#include "cpu_vec_dot.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "cpu_repack.h"
#include "loom/core/quants.h"
#include "loom/core/quants_iq.h"
#include "simd_ref.h"
#include "simd_ref_iq.h"
#include "simd_ref_q.h"

namespace loom::cpu {
namespace {

// ---- int8 columns: the reference quantizers and integer dots ---------------------------------
// Every SIMD level quantizes exactly like these (same d, same rounding to nearest even), so the
// prepared columns agree bit for bit; the dots differ only in the order of float additions.

// x[0, K) -> K / 32 BlockQ8A, as GGUF's Q8_0 rounds a row (llama.cpp's activations for these
// weights): q = x / d with d = amax / 127 in f32, then d kept at fp16 precision.
void quantize_q8(const float* x, void* dst, int64_t K) {
  auto* y = static_cast<BlockQ8A*>(dst);
  for (int64_t i = 0; i < K / 32; ++i) {
    const float* xb = x + 32 * i;
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float d = amax / 127.0f, id = amax > 0.0f ? 1.0f / d : 0.0f;
    int32_t sum = 0;
    for (int j = 0; j < 32; ++j) {
      y[i].qs[j] = (int8_t)std::nearbyint(xb[j] * id);
      sum += y[i].qs[j];
    }
    y[i].d = q8_scale(d);
    y[i].sum = sum;
  }
}

// x[0, K) -> K / 256 BlockQ8KA
void quantize_q8k(const float* x, void* dst, int64_t K) {
  auto* y = static_cast<BlockQ8KA*>(dst);
  for (int64_t i = 0; i < K / 256; ++i) {
    const float* xb = x + 256 * i;
    float amax = 0.0f;
    for (int j = 0; j < 256; ++j) amax = std::max(amax, std::fabs(xb[j]));
    const float id = amax > 0.0f ? 127.0f / amax : 0.0f;
    y[i].d = amax / 127.0f;
    for (int g = 0; g < 16; ++g) {
      int sum = 0;
      for (int j = 16 * g; j < 16 * g + 16; ++j) {
        y[i].qs[j] = (int8_t)std::nearbyint(xb[j] * id);
        sum += y[i].qs[j];
      }
      y[i].bsums[g] = (int16_t)sum;
    }
  }
}

// One weight row (nblk blocks) . one prepared column, per type: sum over blocks of scales times
// integer dot products.
float dot_q8_0(const BlockQ8_0* w, const BlockQ8A* x, int64_t nblk) {
  float s = 0.0f;
  for (int64_t i = 0; i < nblk; ++i) {
    int32_t dot = 0;
    for (int j = 0; j < 32; ++j) dot += (int32_t)w[i].qs[j] * x[i].qs[j];
    s += fp16_to_f32_fast(w[i].d) * x[i].d * (float)dot;
  }
  return s;
}

// w = (q - 8) d with q the nibbles: sum (q - 8) x = sum q x - 8 sum x
float dot_q4_0(const BlockQ4_0* w, const BlockQ8A* x, int64_t nblk) {
  float s = 0.0f;
  for (int64_t i = 0; i < nblk; ++i) {
    int32_t dot = 0;
    for (int j = 0; j < 16; ++j)
      dot += (int32_t)(w[i].qs[j] & 15) * x[i].qs[j] + (int32_t)(w[i].qs[j] >> 4) * x[i].qs[j + 16];
    s += fp16_to_f32_fast(w[i].d) * x[i].d * (float)(dot - 8 * x[i].sum);
  }
  return s;
}

// w = d sc_j q - dmin m_j per sub-block j of 32: d sum_j sc_j (q.x)_j - dmin sum_j m_j sum_j(x)
float dot_q4_k(const BlockQ4_K* w, const BlockQ8KA* x, int64_t nblk) {
  float s = 0.0f;
  for (int64_t i = 0; i < nblk; ++i) {
    int32_t sum_qx = 0, sum_mx = 0;
    for (int j = 0; j < 8; ++j) {  // sub-block j: nibbles (j & 1 ? high : low) of qs[32 (j / 2) + l]
      const ScaleMin sm = q4_k_scale_min(w[i].scales, j);
      const uint8_t* q = w[i].qs + 32 * (j / 2);
      const int8_t* a = x[i].qs + 32 * j;
      int32_t dot = 0;
      for (int l = 0; l < 32; ++l) dot += (int32_t)((j & 1) ? q[l] >> 4 : q[l] & 15) * a[l];
      sum_qx += sm.sc * dot;
      sum_mx += sm.m * (x[i].bsums[2 * j] + x[i].bsums[2 * j + 1]);
    }
    s += x[i].d * (fp16_to_f32_fast(w[i].d) * (float)sum_qx - fp16_to_f32_fast(w[i].dmin) * (float)sum_mx);
  }
  return s;
}

// w = d sc_g (q - 32) per group g of 16: d sum_g sc_g ((q.x)_g - 32 sum_g(x))
float dot_q6_k(const BlockQ6_K* w, const BlockQ8KA* x, int64_t nblk) {
  float s = 0.0f;
  for (int64_t i = 0; i < nblk; ++i) {
    int32_t sum = 0;
    for (int e0 = 0; e0 < 256; e0 += 16) {  // one group of 16 elements shares a scale
      int32_t dot = 0;
      for (int e = e0; e < e0 + 16; ++e) {
        const int h = e / 128, l = e % 32, k = (e % 128) / 32;
        const uint8_t lo = w[i].ql[64 * h + l + 32 * (k & 1)];
        const int q = ((k < 2 ? lo & 15 : lo >> 4) | (((w[i].qh[32 * h + l] >> (2 * k)) & 3) << 4));
        dot += q * x[i].qs[e];
      }
      sum += w[i].scales[e0 / 16] * (dot - 32 * x[i].bsums[e0 / 16]);
    }
    s += fp16_to_f32_fast(w[i].d) * x[i].d * (float)sum;
  }
  return s;
}

template <DType T>
void rows_dot_r8(int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc, float* const* out) {
  rows_dot_r8_ref(T, K, a, lda, nr, b, nc, out);
}

const WeightKernels kKernels[] = {
    {DType::F32, 1, sizeof(float), dot_cols<DecF32>, to_f32<DecF32>, axpy<DecF32>, ActType::f32, rows_dot_f32<DecF32>,
     rows_axpy<DecF32>},
    {DType::F16, 1, sizeof(fp16_t), dot_cols<DecF16>, to_f32<DecF16>, axpy<DecF16>, ActType::f32, rows_dot_f32<DecF16>,
     rows_axpy<DecF16>, nullptr, f32_to_f16_row},
    {DType::BF16, 1, sizeof(bf16_t), dot_cols<DecBF16>, to_f32<DecBF16>, axpy<DecBF16>, ActType::f32,
     rows_dot_f32<DecBF16>, rows_axpy<DecBF16>, nullptr, f32_to_bf16_row},
    {DType::Q8_0, kQK8_0, sizeof(BlockQ8_0), dot_cols<DecQ8_0>, to_f32<DecQ8_0>, nullptr, ActType::q8,
     rows_dot_q<BlockQ8_0, BlockQ8A, dot_q8_0>, nullptr, rows_dot_r8<DType::Q8_0>},
    {DType::Q4_0, kQK4_0, sizeof(BlockQ4_0), dot_cols<DecQ4_0>, to_f32<DecQ4_0>, nullptr, ActType::q8,
     rows_dot_q<BlockQ4_0, BlockQ8A, dot_q4_0>, nullptr, rows_dot_r8<DType::Q4_0>},
    {DType::Q4_K, kQK_K, sizeof(BlockQ4_K), dot_cols<DecQ4_K>, to_f32<DecQ4_K>, nullptr, ActType::q8k,
     rows_dot_q<BlockQ4_K, BlockQ8KA, dot_q4_k>, nullptr, rows_dot_r8<DType::Q4_K>},
    {DType::Q6_K, kQK_K, sizeof(BlockQ6_K), dot_cols<DecQ6_K>, to_f32<DecQ6_K>, nullptr, ActType::q8k,
     rows_dot_q<BlockQ6_K, BlockQ8KA, dot_q6_k>, nullptr, rows_dot_r8<DType::Q6_K>},
    LOOM_EXTRA_QUANT_KERNELS(LOOM_ROWS_REF, LOOM_R8_REF),
    LOOM_IQ_KERNELS(dot_iq, dot_iq),
};

}  // namespace

const WeightKernels* weight_kernels_scalar(DType type) { return find_kernels(kKernels, type); }

QuantizeActFn quantize_act_scalar(ActType act) { return pick_quantizer(act, quantize_q8, quantize_q8k); }

const WeightKernels* weight_kernels(DType type, Isa isa) {
  if ((int)isa > (int)detected_isa()) isa = detected_isa();
  switch (isa) {
    case Isa::avx512:
      return weight_kernels_avx512(type);
    case Isa::avx2:
      return weight_kernels_avx2(type);
    default:
      return weight_kernels_scalar(type);
  }
}
const WeightKernels* weight_kernels(DType type) { return weight_kernels(type, active_isa()); }

QuantizeActFn quantize_act(ActType act, Isa isa) {
  if ((int)isa > (int)detected_isa()) isa = detected_isa();
  switch (isa) {
    case Isa::avx512:
      return quantize_act_avx512(act);
    case Isa::avx2:
      return quantize_act_avx2(act);
    default:
      return quantize_act_scalar(act);
  }
}
QuantizeActFn quantize_act(ActType act) { return quantize_act(act, active_isa()); }

void scale_f32(int64_t n, float s, float* __restrict y) {
  for (int64_t i = 0; i < n; ++i) y[i] *= s;
}

}  // namespace loom::cpu
