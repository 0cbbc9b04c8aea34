// expf and its loops per level (see simd_math.h). The algorithm, shared by every level:
//   x <- clamp(x, -104, 89)                 (NaN passes through; beyond, exp is 0 or inf anyway)
//   n = round(x log2 e),  r = x - n C1 - n C2     (Cody-Waite: C1 + C2 = ln 2, C1 exact in few bits)
//   exp(r) ~ 1 + r + r^2 P(r)               (Cephes expf minimax polynomial, |r| <= ln2 / 2)
//   exp(x) = exp(r) * 2^(n/2) * 2^(n - n/2) (two normal factors: no overflow of the exponent
//                                            field before the product rounds to inf or 0)
#include "simd_math.h"

// GCC 12's AVX-512 intrinsics headers trip -Wuninitialized on their own _mm512_undefined_*
// helpers once inlined; the warning is about the header, not this file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>

namespace loom::cpu {
namespace {

constexpr float kLo = -104.0f, kHi = 89.0f;
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kC1 = 0.693359375f, kC2 = -2.12194440e-4f;
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f, kP3 = 4.1665795894e-2f,
                kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

// ---- scalar level (the reference loops) ---------------------------------------------------------

float exp_shift_sum_ref(const float* x, float shift, float* y, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    y[i] = exp_ref(x[i] - shift);
    s += y[i];
  }
  return s;
}
void silu_ref(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] / (1.0f + exp_ref(-x[i]));
}
void swiglu_ref(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = a[i] / (1.0f + exp_ref(-a[i])) * b[i];
}

float max_ref(const float* x, int64_t n) {
  float m = -INFINITY;
  for (int64_t i = 0; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

void softmax_step_ref(float* s, const float* mask, const float* slope, int64_t ld, int64_t kt, int64_t n, float* m,
                      float* l, float* alpha) {
  for (int64_t r = 0; r < n; ++r) {
    float mt = -INFINITY;
    for (int64_t j = 0; j < kt; ++j) {
      float& x = s[j * ld + r];
      if (mask) x += slope[r] * mask[j * ld + r];
      mt = std::max(mt, x);
    }
    const float mn = std::max(m[r], mt), shift = mn == -INFINITY ? 0.0f : mn;
    float sum = 0.0f;
    for (int64_t j = 0; j < kt; ++j) {
      float& x = s[j * ld + r];
      x = exp_ref(x - shift);
      sum += x;
    }
    alpha[r] = exp_ref(m[r] - shift);
    l[r] = l[r] * alpha[r] + sum;
    m[r] = mn;
  }
}

const VecMath kScalar{exp_shift_sum_ref, silu_ref, swiglu_ref, max_ref, softmax_step_ref};

}  // namespace

float exp_ref(float x) {
  if (std::isnan(x)) return x;
  x = std::min(std::max(x, kLo), kHi);
  const float n = std::nearbyint(x * kLog2e);
  const float r = (x - n * kC1) - n * kC2;
  const float p = ((((kP0 * r + kP1) * r + kP2) * r + kP3) * r + kP4) * r + kP5;
  const float e = p * (r * r) + r + 1.0f;
  const int n1 = (int)n / 2, n2 = (int)n - n1;  // |n| <= 151: each factor a normal float
  return e * std::bit_cast<float>((uint32_t)(n1 + 127) << 23) * std::bit_cast<float>((uint32_t)(n2 + 127) << 23);
}

namespace {

// ---- AVX2 ---------------------------------------------------------------------------------------

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

inline __m256 exp8(__m256 x) {
  x = _mm256_min_ps(_mm256_set1_ps(kHi), _mm256_max_ps(_mm256_set1_ps(kLo), x));  // NaN-keeping order
  const __m256 n =
      _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kC2), _mm256_fnmadd_ps(n, _mm256_set1_ps(kC1), x));
  __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(kP0), r, _mm256_set1_ps(kP1));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
  const __m256 e = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
  const __m256i ni = _mm256_cvtps_epi32(n);
  const __m256i n1 = _mm256_srai_epi32(_mm256_add_epi32(ni, _mm256_srli_epi32(ni, 31)), 1);  // n / 2 toward 0
  const __m256i n2 = _mm256_sub_epi32(ni, n1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 f1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n1, bias), 23));
  const __m256 f2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(n2, bias), 23));
  return _mm256_mul_ps(_mm256_mul_ps(e, f1), f2);
}
inline float hsum8(__m256 v) {
  const __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 t = _mm_add_ps(s, _mm_movehl_ps(s, s));
  return _mm_cvtss_f32(_mm_add_ss(t, _mm_movehdup_ps(t)));
}

float exp_shift_sum_avx2(const float* x, float shift, float* y, int64_t n) {
  const __m256 sh = _mm256_set1_ps(shift);
  __m256 acc = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), sh));
    _mm256_storeu_ps(y + i, e);
    acc = _mm256_add_ps(acc, e);
  }
  float s = hsum8(acc);
  for (; i < n; ++i) {
    y[i] = exp_ref(x[i] - shift);
    s += y[i];
  }
  return s;
}
void silu_avx2(const float* x, float* y, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(y + i, _mm256_div_ps(v, _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, v)))));
  }
  silu_ref(x + i, y + i, n - i);
}
void swiglu_avx2(const float* a, const float* b, float* y, int64_t n) {
  const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(a + i);
    const __m256 s = _mm256_div_ps(v, _mm256_add_ps(one, exp8(_mm256_sub_ps(zero, v))));
    _mm256_storeu_ps(y + i, _mm256_mul_ps(s, _mm256_loadu_ps(b + i)));
  }
  swiglu_ref(a + i, b + i, y + i, n - i);
}

float max_avx2(const float* x, int64_t n) {
  __m256 m = _mm256_set1_ps(-INFINITY);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) m = _mm256_max_ps(m, _mm256_loadu_ps(x + i));
  const __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
  const __m128 t = _mm_max_ps(h, _mm_movehl_ps(h, h));
  return std::max(_mm_cvtss_f32(_mm_max_ss(t, _mm_movehdup_ps(t))), max_ref(x + i, n - i));
}

void softmax_step_avx2(float* s, const float* mask, const float* slope, int64_t ld, int64_t kt, int64_t n, float* m,
                       float* l, float* alpha) {
  const __m256 ninf = _mm256_set1_ps(-INFINITY);
  int64_t r = 0;
  for (; r + 8 <= n; r += 8) {
    const __m256 sl = mask ? _mm256_loadu_ps(slope + r) : _mm256_setzero_ps();
    __m256 mt = ninf;
    for (int64_t j = 0; j < kt; ++j) {
      float* x = s + j * ld + r;
      __m256 v = _mm256_loadu_ps(x);
      if (mask) {
        v = _mm256_fmadd_ps(sl, _mm256_loadu_ps(mask + j * ld + r), v);
        _mm256_storeu_ps(x, v);
      }
      mt = _mm256_max_ps(mt, v);
    }
    const __m256 mo = _mm256_loadu_ps(m + r), mn = _mm256_max_ps(mo, mt);
    const __m256 shift = _mm256_blendv_ps(mn, _mm256_setzero_ps(), _mm256_cmp_ps(mn, ninf, _CMP_EQ_OQ));
    __m256 sum = _mm256_setzero_ps();
    for (int64_t j = 0; j < kt; ++j) {
      float* x = s + j * ld + r;
      const __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(x), shift));
      _mm256_storeu_ps(x, e);
      sum = _mm256_add_ps(sum, e);
    }
    const __m256 a = exp8(_mm256_sub_ps(mo, shift));
    _mm256_storeu_ps(alpha + r, a);
    _mm256_storeu_ps(l + r, _mm256_fmadd_ps(_mm256_loadu_ps(l + r), a, sum));
    _mm256_storeu_ps(m + r, mn);
  }
  if (r < n)
    softmax_step_ref(s + r, mask ? mask + r : nullptr, mask ? slope + r : nullptr, ld, kt, n - r, m + r, l + r,
                     alpha + r);
}

#pragma GCC pop_options

// ---- AVX-512 --------------------------------------------------------------------------------------

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")

inline __m512 exp16(__m512 x) {
  x = _mm512_min_ps(_mm512_set1_ps(kHi), _mm512_max_ps(_mm512_set1_ps(kLo), x));
  const __m512 n =
      _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kC2), _mm512_fnmadd_ps(n, _mm512_set1_ps(kC1), x));
  __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(kP0), r, _mm512_set1_ps(kP1));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
  const __m512 e = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
  // e * 2^n, gradual underflow and overflow to inf included
  return _mm512_scalef_ps(e, n);
}

float exp_shift_sum_avx512(const float* x, float shift, float* y, int64_t n) {
  const __m512 sh = _mm512_set1_ps(shift);
  __m512 acc = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), sh));
    _mm512_storeu_ps(y + i, e);
    acc = _mm512_add_ps(acc, e);
  }
  if (i < n) {
    const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, x + i), sh));
    _mm512_mask_storeu_ps(y + i, m, e);
    acc = _mm512_mask_add_ps(acc, m, acc, e);
  }
  return _mm512_reduce_add_ps(acc);
}
void silu_avx512(const float* x, float* y, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, x + i);
    _mm512_mask_storeu_ps(y + i, m, _mm512_div_ps(v, _mm512_add_ps(one, exp16(_mm512_sub_ps(zero, v)))));
  }
}
void swiglu_avx512(const float* a, const float* b, float* y, int64_t n) {
  const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    const __m512 v = _mm512_maskz_loadu_ps(m, a + i);
    const __m512 s = _mm512_div_ps(v, _mm512_add_ps(one, exp16(_mm512_sub_ps(zero, v))));
    _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(s, _mm512_maskz_loadu_ps(m, b + i)));
  }
}

float max_avx512(const float* x, int64_t n) {
  __m512 m = _mm512_set1_ps(-INFINITY);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 k = n - i >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - i)) - 1);
    m = _mm512_mask_max_ps(m, k, m, _mm512_maskz_loadu_ps(k, x + i));
  }
  return _mm512_reduce_max_ps(m);
}

void softmax_step_avx512(float* s, const float* mask, const float* slope, int64_t ld, int64_t kt, int64_t n, float* m,
                         float* l, float* alpha) {
  const __m512 ninf = _mm512_set1_ps(-INFINITY);
  for (int64_t r = 0; r < n; r += 16) {
    const __mmask16 k = n - r >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (n - r)) - 1);
    const __m512 sl = mask ? _mm512_maskz_loadu_ps(k, slope + r) : _mm512_setzero_ps();
    __m512 mt = ninf;
    for (int64_t j = 0; j < kt; ++j) {
      float* x = s + j * ld + r;
      __m512 v = _mm512_maskz_loadu_ps(k, x);
      if (mask) {
        v = _mm512_fmadd_ps(sl, _mm512_maskz_loadu_ps(k, mask + j * ld + r), v);
        _mm512_mask_storeu_ps(x, k, v);
      }
      mt = _mm512_max_ps(mt, v);
    }
    const __m512 mo = _mm512_mask_loadu_ps(ninf, k, m + r), mn = _mm512_max_ps(mo, mt);
    const __m512 shift = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(mn, ninf, _CMP_EQ_OQ), mn, _mm512_setzero_ps());
    __m512 sum = _mm512_setzero_ps();
    for (int64_t j = 0; j < kt; ++j) {
      float* x = s + j * ld + r;
      const __m512 e = exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x), shift));
      _mm512_mask_storeu_ps(x, k, e);
      sum = _mm512_add_ps(sum, e);
    }
    const __m512 a = exp16(_mm512_sub_ps(mo, shift));
    _mm512_mask_storeu_ps(alpha + r, k, a);
    _mm512_mask_storeu_ps(l + r, k, _mm512_fmadd_ps(_mm512_maskz_loadu_ps(k, l + r), a, sum));
    _mm512_mask_storeu_ps(m + r, k, mn);
  }
}

#pragma GCC pop_options

const VecMath kAvx2{exp_shift_sum_avx2, silu_avx2, swiglu_avx2, max_avx2, softmax_step_avx2};
const VecMath kAvx512{exp_shift_sum_avx512, silu_avx512, swiglu_avx512, max_avx512, softmax_step_avx512};

}  // namespace

const VecMath& vec_math(Isa isa) {
  if ((int)isa > (int)detected_isa()) isa = detected_isa();
  switch (isa) {
    case Isa::avx512:
      return kAvx512;
    case Isa::avx2:
      return kAvx2;
    default:
      return kScalar;
  }
}
const VecMath& vec_math() { return vec_math(active_isa()); }

}  // namespace loom::cpu

#pragma GCC diagnostic pop
