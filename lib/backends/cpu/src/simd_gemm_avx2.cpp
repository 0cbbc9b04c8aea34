// AVX2 register tile of the blocked f32 matrix product (see simd_gemm.h): 16 rows (one packed
// group, two ymm) x 6 columns = 12 accumulators; per k two panel loads, six broadcasts of b and
// twelve FMAs, which fills the 16 ymm registers. Rows past mr are computed (the panel is zero
// there) but not stored. The q8 tiles (16 x 2, vpmaddubsw) are described where they start.
// The panel transpose goes in 8 x 8 blocks (three shuffle stages). References: gemm_f32_tile_ref
// and transpose16_ref in simd_gemm.cpp.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "simd_gemm.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "simd_r8.h"

namespace loom::cpu {
namespace {

constexpr int kF32Cols = 6;

template <int NC>
void f32_tile(int64_t kc, const float* p, const float* b, int ldb, float* const* c, int mr, bool accumulate) {
  __m256 acc[2][NC];
#pragma GCC unroll 8  // not a memset of the array (simd_gemm_avx512.cpp)
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

// ---- q8 tiles: 16 rows (the two 8-row halves of a packed group) x 2 columns -------------------
// No VNNI here: vpmaddubsw multiplies unsigned by signed bytes into int16 pair sums (which
// saturate) and vpmaddwd by ones widens them to int32 lanes, one per row. The kinds differ in
// what keeps the pair sums in range:
//   nibbles (Q4_0): weights <= 15, so 8 quads of pair sums add up in int16 first;
//   mins (Q4_K, Q4_1, Q5_1, Q5_K): weights <= 31, so 4 quads at a time;
//   bytes   (Q8_0): u = q + 128 would overflow, so the signed q = u ^ 0x80 goes in as |q| with
//                   its sign moved onto the activations (sum q * x, which is the offset form's value);
//   halves  (Q6_K, Q3_K; Q2_K with mins): signed 6-bit weights, the activations + 128 as the
//           unsigned side.
constexpr int kQ8Cols = 2;
enum class Q8Kind { nibbles, bytes, mins, halves, halves_mins };

template <int NC, Q8Kind KIND>
void q8_tile(int64_t nblk, const uint8_t* p, const BlockQ8A* const* b, float* const* c, int mr, int shift) {
  constexpr bool kHalves = KIND == Q8Kind::halves || KIND == Q8Kind::halves_mins;
  constexpr size_t kBlock = KIND == Q8Kind::mins          ? kQ8MinGroupBlockBytes
                            : KIND == Q8Kind::halves      ? kQ8HalfGroupBlockBytes
                            : KIND == Q8Kind::halves_mins ? kQ8HalfMinGroupBlockBytes
                                                          : kQ8GroupBlockBytes;
  constexpr size_t kBytesAt = KIND == Q8Kind::mins ? 128 : KIND == Q8Kind::halves ? 256 : kHalves ? 384 : 64;
  const __m256i ones = _mm256_set1_epi16(1), k80 = _mm256_set1_epi8((char)0x80);
  __m256 acc[2][NC];
  for (int j = 0; j < NC; ++j) acc[0][j] = acc[1][j] = _mm256_setzero_ps();
  auto xq = [&](int j, int64_t blk, int q) {  // quad q's 4 bytes, broadcast
    int32_t x4;
    std::memcpy(&x4, b[j][blk].qs + 4 * q, 4);
    return _mm256_set1_epi32(x4);
  };
  // acc += int32 sums x (row scale at ds x column scale)
  auto scale_add = [&](__m256i(&isum)[2][NC], const uint8_t* ds, int64_t blk) {
#pragma GCC unroll 2
    for (int j = 0; j < NC; ++j) {
      const __m256 dx = _mm256_set1_ps(b[j][blk].d);
      for (int h = 0; h < 2; ++h)
        acc[h][j] =
            _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[h][j]),
                            _mm256_mul_ps(_mm256_loadu_ps(reinterpret_cast<const float*>(ds) + 8 * h), dx), acc[h][j]);
    }
  };
  for (int64_t blk = 0; blk < nblk; ++blk) {
    const uint8_t* pb = p + (size_t)blk * kBlock;
    const uint8_t* u = pb + kBytesAt;
    __m256i isum[2][NC];
    if constexpr (kHalves) {
      const __m256i ones8 = _mm256_set1_epi8(1);
      for (int hv = 0; hv < 2; ++hv) {
        __m256i xsum[NC];  // halves_mins: the column's sum over the half
        for (int h = 0; h < 2; ++h) {
          const __m256i off = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(pb + 128 + 64 * hv + 32 * h));
          for (int j = 0; j < NC; ++j) isum[h][j] = off;
        }
        for (int j = 0; j < NC; ++j) xsum[j] = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int q = 4 * hv; q < 4 * hv + 4; ++q) {
          __m256i w[2];
          for (int h = 0; h < 2; ++h) w[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u + 64 * q + 32 * h));
          for (int j = 0; j < NC; ++j) {
            const __m256i xs = xq(j, blk, q), xu = _mm256_xor_si256(xs, k80);
            for (int h = 0; h < 2; ++h)
              isum[h][j] = _mm256_add_epi32(isum[h][j], _mm256_madd_epi16(_mm256_maddubs_epi16(xu, w[h]), ones));
            if constexpr (KIND == Q8Kind::halves_mins)
              xsum[j] = _mm256_add_epi32(xsum[j], _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, xs), ones));
          }
        }
        scale_add(isum, pb + 64 * hv, blk);
        if constexpr (KIND == Q8Kind::halves_mins)  // acc -= mw * (x.d * the half's sum)
          for (int j = 0; j < NC; ++j) {
            const __m256 xm = _mm256_mul_ps(_mm256_cvtepi32_ps(xsum[j]), _mm256_set1_ps(b[j][blk].d));
            for (int h = 0; h < 2; ++h)
              acc[h][j] = _mm256_fnmadd_ps(
                  _mm256_loadu_ps(reinterpret_cast<const float*>(pb + 256 + 64 * hv) + 8 * h), xm, acc[h][j]);
          }
      }
      continue;
    }
    if constexpr (KIND == Q8Kind::bytes) {
      for (int j = 0; j < NC; ++j) isum[0][j] = isum[1][j] = _mm256_setzero_si256();
#pragma GCC unroll 1  // (as below: unrolled, the sums become a spilled add tree)
      for (int q = 0; q < 8; ++q) {
        __m256i w[2], aw[2];
        for (int h = 0; h < 2; ++h) {
          w[h] = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(u + 64 * q + 32 * h)), k80);
          aw[h] = _mm256_abs_epi8(w[h]);
        }
        for (int j = 0; j < NC; ++j) {
          const __m256i xv = xq(j, blk, q);
          for (int h = 0; h < 2; ++h)
            isum[h][j] = _mm256_add_epi32(
                isum[h][j], _mm256_madd_epi16(_mm256_maddubs_epi16(aw[h], _mm256_sign_epi8(xv, w[h])), ones));
        }
      }
    } else {  // nibbles, mins: int16 pair sums of 8 (mins: 4) quads, then a widening
      // Not unrolled: GCC would reassociate the 32 products of an unrolled block into an add tree
      // and spill them.
      constexpr int kRun = KIND == Q8Kind::mins ? 4 : 8;
      for (int j = 0; j < NC; ++j) {
        const __m256i off =
            KIND == Q8Kind::mins ? _mm256_setzero_si256() : _mm256_set1_epi32(-(b[j][blk].sum * (1 << shift)));
        isum[0][j] = isum[1][j] = off;
      }
      for (int q0 = 0; q0 < 8; q0 += kRun) {
        __m256i s16[2][NC];
        for (int j = 0; j < NC; ++j) s16[0][j] = s16[1][j] = _mm256_setzero_si256();
#pragma GCC unroll 1
        for (int q = q0; q < q0 + kRun; ++q) {
          __m256i w[2];
          for (int h = 0; h < 2; ++h) w[h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(u + 64 * q + 32 * h));
          for (int j = 0; j < NC; ++j) {
            const __m256i xv = xq(j, blk, q);
            for (int h = 0; h < 2; ++h) s16[h][j] = _mm256_add_epi16(s16[h][j], _mm256_maddubs_epi16(w[h], xv));
          }
        }
        for (int j = 0; j < NC; ++j)
          for (int h = 0; h < 2; ++h) isum[h][j] = _mm256_add_epi32(isum[h][j], _mm256_madd_epi16(s16[h][j], ones));
      }
    }
    scale_add(isum, pb, blk);
    if constexpr (KIND == Q8Kind::mins)  // acc -= mw * (x.d * x.sum)
      for (int j = 0; j < NC; ++j) {
        const __m256 xs = _mm256_set1_ps(b[j][blk].d * (float)b[j][blk].sum);
        for (int h = 0; h < 2; ++h)
          acc[h][j] = _mm256_fnmadd_ps(_mm256_loadu_ps(reinterpret_cast<const float*>(pb + 64) + 8 * h), xs, acc[h][j]);
      }
  }
  alignas(32) float t[16];
#pragma GCC unroll 2
  for (int j = 0; j < NC; ++j) {
    _mm256_storeu_ps(mr == 16 ? c[j] : t, acc[0][j]);
    _mm256_storeu_ps((mr == 16 ? c[j] : t) + 8, acc[1][j]);
    if (mr < 16) std::memcpy(c[j], t, sizeof(float) * (size_t)mr);
  }
}

template <Q8Kind KIND>
void q8_tile_kind(int64_t nblk, const uint8_t* p, const BlockQ8A* const* b, int nc, float* const* c, int mr,
                  int shift) {
  if (nc == 1) return q8_tile<1, KIND>(nblk, p, b, c, mr, shift);
  q8_tile<2, KIND>(nblk, p, b, c, mr, shift);
}

// Q8_0 / Q4_0 panels: the offset says which (7: Q8_0's bytes, 3: Q4_0's nibbles).
void q8_tile_any(int64_t nblk, const uint8_t* p, const BlockQ8A* const* b, int nc, float* const* c, int mr, int shift) {
  if (shift == 7) return q8_tile_kind<Q8Kind::bytes>(nblk, p, b, nc, c, mr, shift);
  q8_tile_kind<Q8Kind::nibbles>(nblk, p, b, nc, c, mr, shift);
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

const GemmKernels kKernels{16,
                           kF32Cols,
                           f32_tile_any,
                           16,
                           kQ8Cols,
                           q8_tile_any,
                           q8_tile_kind<Q8Kind::mins>,
                           q8_tile_kind<Q8Kind::halves>,
                           transpose16,
                           nullptr,
                           nullptr,
                           pack_q8_0_r8,
                           pack_q4_0_r8,
                           pack_q4k_r8,
                           pack_q6k_r8,
                           q8_tile_kind<Q8Kind::halves_mins>};

}  // namespace
}  // namespace loom::cpu

#pragma GCC pop_options

namespace loom::cpu {
const GemmKernels* gemm_kernels_avx2() { return &kKernels; }
}  // namespace loom::cpu
