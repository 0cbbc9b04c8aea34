// AVX2 register tile of the blocked f32 matrix product (see simd_gemm.h): 16 rows (one packed
// group, two ymm) x 6 columns = 12 accumulators; per k two panel loads, six broadcasts of b and
// twelve FMAs, which fills the 16 ymm registers. Rows past mr are computed (the panel is zero
// there) but not stored. No int8 tile at this level: Q8_0 / Q4_0 batches take the f32 tile.
// Reference: gemm_f32_tile_ref in simd_gemm.cpp.
#include <immintrin.h>

#include <cstdint>

#include "simd_gemm.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace loom::cpu {
namespace {

constexpr int kF32Cols = 6;

template <int NC>
void f32_tile(int64_t kc, const float* p, const float* b, int ldb, float* const* c, int mr, bool accumulate) {
  __m256 acc[2][NC];
  for (int j = 0; j < NC; ++j)
    for (int h = 0; h < 2; ++h) acc[h][j] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k, b += ldb) {
    const __m256 a0 = _mm256_loadu_ps(p + k * kPanelRows), a1 = _mm256_loadu_ps(p + k * kPanelRows + 8);
#pragma GCC unroll 6
    for (int j = 0; j < NC; ++j) {
      const __m256 bv = _mm256_broadcast_ss(b + j);
      acc[0][j] = _mm256_fmadd_ps(a0, bv, acc[0][j]);
      acc[1][j] = _mm256_fmadd_ps(a1, bv, acc[1][j]);
    }
  }
  for (int j = 0; j < NC; ++j) {
    alignas(32) float t[16];
    _mm256_store_ps(t, acc[0][j]);
    _mm256_store_ps(t + 8, acc[1][j]);
    if (mr == 16) {
      if (accumulate) {
        _mm256_storeu_ps(c[j], _mm256_add_ps(_mm256_loadu_ps(c[j]), acc[0][j]));
        _mm256_storeu_ps(c[j] + 8, _mm256_add_ps(_mm256_loadu_ps(c[j] + 8), acc[1][j]));
      } else {
        _mm256_storeu_ps(c[j], acc[0][j]);
        _mm256_storeu_ps(c[j] + 8, acc[1][j]);
      }
      continue;
    }
    for (int i = 0; i < mr; ++i) c[j][i] = accumulate ? c[j][i] + t[i] : t[i];
  }
}

void f32_tile_any(int64_t kc, const float* p, const float* b, int ldb, int nc, float* const* c, int mr,
                  bool accumulate) {
  switch (nc) {
    case 1:
      return f32_tile<1>(kc, p, b, ldb, c, mr, accumulate);
    case 2:
      return f32_tile<2>(kc, p, b, ldb, c, mr, accumulate);
    case 3:
      return f32_tile<3>(kc, p, b, ldb, c, mr, accumulate);
    case 4:
      return f32_tile<4>(kc, p, b, ldb, c, mr, accumulate);
    case 5:
      return f32_tile<5>(kc, p, b, ldb, c, mr, accumulate);
    default:
      return f32_tile<6>(kc, p, b, ldb, c, mr, accumulate);
  }
}

const GemmKernels kKernels{16, kF32Cols, f32_tile_any, 0, 0, nullptr, transpose16_ref};

}  // namespace
}  // namespace loom::cpu

#pragma GCC pop_options

namespace loom::cpu {
const GemmKernels* gemm_kernels_avx2() { return &kKernels; }
}  // namespace loom::cpu
