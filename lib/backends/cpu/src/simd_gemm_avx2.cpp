// AVX2 register tile of the blocked f32 matrix product (see simd_gemm.h): 16 rows (one packed
// group, two ymm) x 6 columns = 12 accumulators; per k two panel loads, six broadcasts of b and
// twelve FMAs, which fills the 16 ymm registers. Rows past mr are computed (the panel is zero
// there) but not stored. No int8 tile at this level: Q8_0 / Q4_0 batches take the f32 tile.
// The panel transpose goes in 8 x 8 blocks (three shuffle stages). References: gemm_f32_tile_ref
// and transpose16_ref in simd_gemm.cpp.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

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
  // Constant indices only (the loop unrolled): an acc[][j] with a run-time j would keep the
  // accumulators in memory, a store per FMA in the loop above.
  alignas(32) float t[NC][16];
#pragma GCC unroll 6
  for (int j = 0; j < NC; ++j) {
    if (mr == 16 && accumulate) {
      acc[0][j] = _mm256_add_ps(_mm256_loadu_ps(c[j]), acc[0][j]);
      acc[1][j] = _mm256_add_ps(_mm256_loadu_ps(c[j] + 8), acc[1][j]);
    }
    _mm256_storeu_ps(mr == 16 ? c[j] : t[j], acc[0][j]);
    _mm256_storeu_ps((mr == 16 ? c[j] : t[j]) + 8, acc[1][j]);
  }
  if (mr == 16) return;
  for (int j = 0; j < NC; ++j)
    for (int i = 0; i < mr; ++i) c[j][i] = accumulate ? c[j][i] + t[j][i] : t[j][i];
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

// The first `lanes` floats of v to dst (vmaskmovps stores are slow on AMD).
inline void store_lanes(float* dst, int lanes, __m256 v) {
  if (lanes == 8) return _mm256_storeu_ps(dst, v);
  alignas(32) float t[8];
  _mm256_store_ps(t, v);
  std::memcpy(dst, t, sizeof(float) * (size_t)lanes);
}

// dst[i * ldd + s] = src[s][i] for s < nsrc <= 16, i < n: runs past nsrc read as zeros, lanes
// past nsrc and rows past n are not written.
void transpose16(const float* const* src, int nsrc, int64_t n, float* dst, int ldd) {
  const int64_t n8 = n / 8 * 8;
  for (int s0 = 0; s0 < nsrc; s0 += 8) {
    const int lanes = std::min(8, nsrc - s0);
    for (int64_t i0 = 0; i0 < n8; i0 += 8) {
      __m256 v[8], t[8];
      for (int r = 0; r < 8; ++r) v[r] = r < lanes ? _mm256_loadu_ps(src[s0 + r] + i0) : _mm256_setzero_ps();
      for (int r = 0; r < 8; r += 2) {  // 2 x 2 blocks
        t[r] = _mm256_unpacklo_ps(v[r], v[r + 1]);
        t[r + 1] = _mm256_unpackhi_ps(v[r], v[r + 1]);
      }
      for (int r = 0; r < 8; r += 4) {  // 4 x 4 blocks within each 128-bit half
        v[r] = _mm256_shuffle_ps(t[r], t[r + 2], 0x44);
        v[r + 1] = _mm256_shuffle_ps(t[r], t[r + 2], 0xee);
        v[r + 2] = _mm256_shuffle_ps(t[r + 1], t[r + 3], 0x44);
        v[r + 3] = _mm256_shuffle_ps(t[r + 1], t[r + 3], 0xee);
      }
      for (int k = 0; k < 4; ++k) {  // halves: element k from runs 0-3 and 4-7, then element k + 4
        const __m256 lo = _mm256_permute2f128_ps(v[k], v[k + 4], 0x20);
        const __m256 hi = _mm256_permute2f128_ps(v[k], v[k + 4], 0x31);
        store_lanes(dst + (i0 + k) * ldd + s0, lanes, lo);
        store_lanes(dst + (i0 + k + 4) * ldd + s0, lanes, hi);
      }
    }
    for (int64_t i = n8; i < n; ++i)
      for (int r = 0; r < lanes; ++r) dst[i * ldd + s0 + r] = src[s0 + r][i];
  }
}

const GemmKernels kKernels{16, kF32Cols, f32_tile_any, 0, 0, nullptr, nullptr, nullptr, transpose16};

}  // namespace
}  // namespace loom::cpu

#pragma GCC pop_options

namespace loom::cpu {
const GemmKernels* gemm_kernels_avx2() { return &kKernels; }
}  // namespace loom::cpu
