// AVX-512 register tiles of the blocked matrix products (see simd_gemm.h):
//   f32: 32 rows (2 zmm, one per packed group) x 12 columns = 24 accumulators; per k two panel
//        loads, twelve broadcasts from the packed columns, 24 FMAs (98% of the FMA peak in L1
//        on Zen 4; broadcasting from twelve column pointers instead reached 85%).
//   q8:  32 rows x 6 columns; per block of 32, vpdpbusd of 16 unsigned weight bytes x 4
//        broadcast activation bytes into int32 lanes seeded with the offset term, then one
//        convert + FMA by the row scale x column scale into f32 accumulators. Q4_K's panels add
//        an FMA per block for the row mins, Q6_K's run each 16-value half with its own scale.
// Partial tiles (fewer rows or columns) are instantiations with fewer groups / columns and
// masked stores. References: gemm_f32_tile_ref / gemm_q8*_tile_ref in simd_gemm.cpp.

// GCC 12's AVX-512 intrinsics headers trip -Wuninitialized on their own _mm512_undefined_*
// helpers once inlined; the warning is about the header, not this file.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "cpu_vec_dot.h"
#include "simd_gemm.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#include "simd_r8.h"

namespace loom::cpu {
namespace {

constexpr int kF32Cols = 12;
constexpr int kQ8Cols = 6;

inline __mmask16 row_mask(int rows) { return rows >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << rows) - 1); }

// The accumulators of a G x NC tile from c (or zeros), and back to c; rows past mr untouched.
// (The "unroll 16" pragmas keep GCC from turning the zeroing loops into a memset of the whole
// accumulator array on every call -- a microcoded rep stos, 2.5% of a q8 tile's time.)
template <int G, int NC>
inline void load_tile(__m512 (&acc)[G][NC], float* const* c, int mr, bool accumulate) {
  const __mmask16 last = row_mask(mr - 16 * (G - 1));
#pragma GCC unroll 16
  for (int j = 0; j < NC; ++j)
    for (int g = 0; g < G; ++g)
      acc[g][j] = accumulate ? _mm512_maskz_loadu_ps(g == G - 1 ? last : (__mmask16)0xffff, c[j] + 16 * g)
                             : _mm512_setzero_ps();
}
template <int G, int NC>
inline void store_tile(const __m512 (&acc)[G][NC], float* const* c, int mr) {
  const __mmask16 last = row_mask(mr - 16 * (G - 1));
#pragma GCC unroll 16
  for (int j = 0; j < NC; ++j)
    for (int g = 0; g < G; ++g) _mm512_mask_storeu_ps(c[j] + 16 * g, g == G - 1 ? last : (__mmask16)0xffff, acc[g][j]);
}

// G groups of 16 rows x NC columns over kc.
template <int G, int NC>
void f32_tile(int64_t kc, const float* p, const float* b, int ldb, float* const* c, int mr, bool accumulate) {
  __m512 acc[G][NC];
  load_tile(acc, c, mr, accumulate);
  const int64_t gstride = kc * kPanelRows;
  for (int64_t k = 0; k < kc; ++k, b += ldb) {
    __m512 a[G];
    for (int g = 0; g < G; ++g) a[g] = _mm512_loadu_ps(p + g * gstride + k * kPanelRows);
#pragma GCC unroll 12
    for (int j = 0; j < NC; ++j) {
      const __m512 bv = _mm512_set1_ps(b[j]);
      for (int g = 0; g < G; ++g) acc[g][j] = _mm512_fmadd_ps(a[g], bv, acc[g][j]);
    }
  }
  store_tile(acc, c, mr);
}

template <int G>
void f32_tile_g(int64_t kc, const float* p, const float* b, int ldb, int nc, float* const* c, int mr, bool acc) {
  with_count<kF32Cols>(nc, [&]<int NC>() { f32_tile<G, NC>(kc, p, b, ldb, c, mr, acc); });
}

// The full tile straight away: it is nearly every call, and with_count's closure costs ~1% of a
// prompt pass when the tile's runs are short.
void f32_tile_any(int64_t kc, const float* p, const float* b, int ldb, int nc, float* const* c, int mr,
                  bool accumulate) {
  if (mr > 16 && nc == kF32Cols) return f32_tile<2, kF32Cols>(kc, p, b, ldb, c, mr, accumulate);
  if (mr > 16) return f32_tile_g<2>(kc, p, b, ldb, nc, c, mr, accumulate);
  return f32_tile_g<1>(kc, p, b, ldb, nc, c, mr, accumulate);
}

// G groups of 16 rows x NC columns over nblk blocks of 32; MINS: the Q4_K panel (row mins after
// the scales, no offset in the bytes), else the offset (x.sum << shift) comes off the integers.
template <int G, int NC, bool MINS>
void q8_tile(int64_t nblk, const uint8_t* p, const BlockQ8A* const* b, float* const* c, int mr, int shift) {
  constexpr size_t kBlock = MINS ? kQ8MinGroupBlockBytes : kQ8GroupBlockBytes;
  constexpr size_t kBytesAt = MINS ? 128 : 64;
  __m512 acc[G][NC];
#pragma GCC unroll 16
  for (int j = 0; j < NC; ++j)
    for (int g = 0; g < G; ++g) acc[g][j] = _mm512_setzero_ps();
  const BlockQ8A* bj[NC];
  for (int j = 0; j < NC; ++j) bj[j] = b[j];
  const size_t gstride = (size_t)nblk * kBlock;
  for (int64_t blk = 0; blk < nblk; ++blk) {
    const uint8_t* pb = p + (size_t)blk * kBlock;
    __m512i isum[G][NC];  // from zero (no register copies); the offset comes off with the scales
#pragma GCC unroll 16
    for (int j = 0; j < NC; ++j)
      for (int g = 0; g < G; ++g) isum[g][j] = _mm512_setzero_si512();
#pragma GCC unroll 8
    for (int q = 0; q < 8; ++q) {
      __m512i w[G];
      for (int g = 0; g < G; ++g) w[g] = _mm512_loadu_si512(pb + g * gstride + kBytesAt + 64 * q);
#pragma GCC unroll 6
      for (int j = 0; j < NC; ++j) {
        int32_t x4;
        std::memcpy(&x4, bj[j][blk].qs + 4 * q, 4);
        const __m512i xv = _mm512_set1_epi32(x4);
        for (int g = 0; g < G; ++g) isum[g][j] = _mm512_dpbusd_epi32(isum[g][j], w[g], xv);
      }
    }
    __m512 dw[G];
    for (int g = 0; g < G; ++g) dw[g] = _mm512_loadu_ps(reinterpret_cast<const float*>(pb + g * gstride));
#pragma GCC unroll 6
    for (int j = 0; j < NC; ++j) {
      const __m512 dx = _mm512_set1_ps(bj[j][blk].d);
      if constexpr (!MINS) {
        const __m512i off = _mm512_set1_epi32(bj[j][blk].sum << shift);
        for (int g = 0; g < G; ++g) isum[g][j] = _mm512_sub_epi32(isum[g][j], off);
      }
      for (int g = 0; g < G; ++g)
        acc[g][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[g][j]), _mm512_mul_ps(dw[g], dx), acc[g][j]);
    }
    if constexpr (MINS) {  // acc -= mw * (x.d * x.sum)
      __m512 mw[G];
      for (int g = 0; g < G; ++g) mw[g] = _mm512_loadu_ps(reinterpret_cast<const float*>(pb + g * gstride + 64));
      for (int j = 0; j < NC; ++j) {
        const __m512 xs = _mm512_set1_ps(bj[j][blk].d * (float)bj[j][blk].sum);
        for (int g = 0; g < G; ++g) acc[g][j] = _mm512_fnmadd_ps(mw[g], xs, acc[g][j]);
      }
    }
  }
  store_tile(acc, c, mr);
}

// The halves variant (Q6_K, Q3_K): per block and 16-value half, the integer sums start at the row
// offsets, the activations are the unsigned side (+ 128 through the xor) and each half gets its
// own row scale. MINS (Q2_K): each half's row mins times the column's sum over the half: the
// first half's counted with one more vpdpbusd per quad (ones x the signed activations), the
// second's the block's sum less the first's.
template <int G, int NC, bool MINS>
void q8h_tile(int64_t nblk, const uint8_t* p, const BlockQ8A* const* b, float* const* c, int mr) {
  constexpr size_t kBlock = MINS ? kQ8HalfMinGroupBlockBytes : kQ8HalfGroupBlockBytes;
  constexpr size_t kBytesAt = MINS ? 384 : 256;
  __m512 acc[G][NC];
#pragma GCC unroll 16
  for (int j = 0; j < NC; ++j)
    for (int g = 0; g < G; ++g) acc[g][j] = _mm512_setzero_ps();
  const BlockQ8A* bj[NC];
  for (int j = 0; j < NC; ++j) bj[j] = b[j];
  const __m512i k80 = _mm512_set1_epi32((int32_t)0x80808080u), ones = _mm512_set1_epi8(1);
  const size_t gstride = (size_t)nblk * kBlock;
  for (int64_t blk = 0; blk < nblk; ++blk) {
    const uint8_t* pb = p + (size_t)blk * kBlock;
    __m512i xsum[NC];
    if constexpr (MINS)
      for (int j = 0; j < NC; ++j) xsum[j] = _mm512_setzero_si512();
    for (int h = 0; h < 2; ++h) {
      __m512i isum[G][NC];
      for (int g = 0; g < G; ++g) {
        const __m512i off = _mm512_loadu_si512(pb + g * gstride + 128 + 64 * h);
        for (int j = 0; j < NC; ++j) isum[g][j] = off;
      }
#pragma GCC unroll 4
      for (int q = 4 * h; q < 4 * h + 4; ++q) {
        __m512i w[G];
        for (int g = 0; g < G; ++g) w[g] = _mm512_loadu_si512(pb + g * gstride + kBytesAt + 64 * q);
#pragma GCC unroll 6
        for (int j = 0; j < NC; ++j) {
          int32_t x4;
          std::memcpy(&x4, bj[j][blk].qs + 4 * q, 4);
          const __m512i xs = _mm512_set1_epi32(x4), xv = _mm512_xor_si512(xs, k80);
          for (int g = 0; g < G; ++g) isum[g][j] = _mm512_dpbusd_epi32(isum[g][j], xv, w[g]);
          if constexpr (MINS)
            if (h == 0) xsum[j] = _mm512_dpbusd_epi32(xsum[j], ones, xs);
        }
      }
      __m512 dw[G], mw[G];
      for (int g = 0; g < G; ++g) {
        dw[g] = _mm512_loadu_ps(reinterpret_cast<const float*>(pb + g * gstride + 64 * h));
        if constexpr (MINS) mw[g] = _mm512_loadu_ps(reinterpret_cast<const float*>(pb + g * gstride + 256 + 64 * h));
      }
#pragma GCC unroll 6
      for (int j = 0; j < NC; ++j) {
        const __m512 dx = _mm512_set1_ps(bj[j][blk].d);
        for (int g = 0; g < G; ++g)
          acc[g][j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[g][j]), _mm512_mul_ps(dw[g], dx), acc[g][j]);
        if constexpr (MINS) {  // acc -= mw * (x.d * the half's sum)
          const __m512i hs = h == 0 ? xsum[j] : _mm512_sub_epi32(_mm512_set1_epi32(bj[j][blk].sum), xsum[j]);
          const __m512 xm = _mm512_mul_ps(_mm512_cvtepi32_ps(hs), dx);
          for (int g = 0; g < G; ++g) acc[g][j] = _mm512_fnmadd_ps(mw[g], xm, acc[g][j]);
        }
      }
    }
  }
  store_tile(acc, c, mr);
}

void q8h_tile_any(int64_t nblk, const uint8_t* p, const BlockQ8A* const* b, int nc, float* const* c, int mr, int) {
  if (mr > 16 && nc == kQ8Cols) return q8h_tile<2, kQ8Cols, false>(nblk, p, b, c, mr);
  if (mr > 16) return with_count<kQ8Cols>(nc, [&]<int NC>() { q8h_tile<2, NC, false>(nblk, p, b, c, mr); });
  with_count<kQ8Cols>(nc, [&]<int NC>() { q8h_tile<1, NC, false>(nblk, p, b, c, mr); });
}
// With mins, 4 columns at a time: the columns' half sums would not leave registers for 6.
void q8hm_tile_any(int64_t nblk, const uint8_t* p, const BlockQ8A* const* b, int nc, float* const* c, int mr, int) {
  constexpr int kCols = 4;
  for (int j0 = 0; j0 < nc; j0 += kCols) {
    const int n = std::min(kCols, nc - j0);
    if (mr > 16 && n == kCols) {
      q8h_tile<2, kCols, true>(nblk, p, b + j0, c + j0, mr);
      continue;
    }
    if (mr > 16) with_count<kCols>(n, [&]<int NC>() { q8h_tile<2, NC, true>(nblk, p, b + j0, c + j0, mr); });
    else with_count<kCols>(n, [&]<int NC>() { q8h_tile<1, NC, true>(nblk, p, b + j0, c + j0, mr); });
  }
}

template <int G, bool MINS>
void q8_tile_g(int64_t nblk, const uint8_t* p, const BlockQ8A* const* b, int nc, float* const* c, int mr, int sh) {
  with_count<kQ8Cols>(nc, [&]<int NC>() { q8_tile<G, NC, MINS>(nblk, p, b, c, mr, sh); });
}

template <bool MINS>
void q8_tile_any(int64_t nblk, const uint8_t* p, const BlockQ8A* const* b, int nc, float* const* c, int mr, int shift) {
  if (mr > 16 && nc == kQ8Cols) return q8_tile<2, kQ8Cols, MINS>(nblk, p, b, c, mr, shift);  // as f32_tile_any
  if (mr > 16) return q8_tile_g<2, MINS>(nblk, p, b, nc, c, mr, shift);
  return q8_tile_g<1, MINS>(nblk, p, b, nc, c, mr, shift);
}

// dst[i * ldd + s] = src[s][i]: 16 x 16 blocks through four shuffle stages (64 shuffles per 256
// floats); runs past nsrc read as zeros, rows past n and lanes past nsrc are not written.
void transpose16(const float* const* src, int nsrc, int64_t n, float* dst, int ldd) {
  const __mmask16 lanes = row_mask(nsrc);
  for (int64_t i0 = 0; i0 < n; i0 += 16) {
    const int rows = (int)std::min<int64_t>(16, n - i0);
    const __mmask16 m = row_mask(rows);
    __m512 v[16], t[16];
    // The stages leave lanes 4-7 and 8-11 swapped: load runs 4-7 and 8-11 into each other's slots.
    for (int s = 0; s < 16; ++s) {
      const int r = s >= 4 && s < 8 ? s + 4 : s >= 8 && s < 12 ? s - 4 : s;
      v[s] = r < nsrc ? _mm512_maskz_loadu_ps(m, src[r] + i0) : _mm512_setzero_ps();
    }
    for (int s = 0; s < 16; s += 2) {  // 2x2 blocks of floats
      t[s] = _mm512_unpacklo_ps(v[s], v[s + 1]);
      t[s + 1] = _mm512_unpackhi_ps(v[s], v[s + 1]);
    }
    for (int s = 0; s < 16; s += 4)  // 4x4
      for (int h = 0; h < 2; ++h) {
        v[s + h] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[s + h]), _mm512_castps_pd(t[s + 2 + h])));
        v[s + 2 + h] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[s + h]), _mm512_castps_pd(t[s + 2 + h])));
      }
    for (int s = 0; s < 8; ++s) {  // 8x8: 128-bit lanes of rows s and s + 8
      t[s] = _mm512_shuffle_f32x4(v[s], v[s + 8], 0x88);
      t[s + 8] = _mm512_shuffle_f32x4(v[s], v[s + 8], 0xdd);
    }
    for (int s = 0; s < 16; s += 8)  // 16x16
      for (int h = 0; h < 4; ++h) {
        v[s + h] = _mm512_shuffle_f32x4(t[s + h], t[s + 4 + h], 0x88);
        v[s + 4 + h] = _mm512_shuffle_f32x4(t[s + h], t[s + 4 + h], 0xdd);
      }
    // v[q] now holds output row kRow[q] (element kRow[q] of every run)
    static constexpr int kRow[16] = {0, 2, 1, 3, 8, 10, 9, 11, 4, 6, 5, 7, 12, 14, 13, 15};
    for (int q = 0; q < 16; ++q)
      if (kRow[q] < rows) _mm512_mask_storeu_ps(dst + (i0 + kRow[q]) * ldd, lanes, v[q]);
  }
}

const GemmKernels kKernels{
    32,           kF32Cols,    f32_tile_any, 32,      kQ8Cols,      q8_tile_any<false>, q8_tile_any<true>,
    q8h_tile_any, transpose16, nullptr,      nullptr, pack_q8_0_r8, pack_q4_0_r8,       pack_q4k_r8,
    pack_q6k_r8,  q8hm_tile_any};

// ---- bf16 pairs (AVX-512 BF16, where the CPU has it) ---------------------------------------------
// The f32 tile's loop with vdpbf16ps: each 32-bit lane of the panel and each broadcast column
// element hold two bf16 values, so one instruction does the work of two FMAs.
#define LOOM_BF16_TARGET __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16")))

template <int G, int NC>
LOOM_BF16_TARGET void bf16_tile(int64_t kc, const float* p, const float* b, int ldb, float* const* c, int mr,
                                bool accumulate) {
  __m512 acc[G][NC];
  load_tile(acc, c, mr, accumulate);
  const int64_t gstride = kc * kPanelRows;
  for (int64_t k = 0; k < kc; ++k, b += ldb) {
    __m512bh a[G];
    for (int g = 0; g < G; ++g) a[g] = (__m512bh)_mm512_loadu_ps(p + g * gstride + k * kPanelRows);
#pragma GCC unroll 12
    for (int j = 0; j < NC; ++j) {
      const __m512bh bv = (__m512bh)_mm512_set1_ps(b[j]);
      for (int g = 0; g < G; ++g) acc[g][j] = _mm512_dpbf16_ps(acc[g][j], a[g], bv);
    }
  }
  store_tile(acc, c, mr);
}

LOOM_BF16_TARGET void bf16_tile_any(int64_t kc, const float* p, const float* b, int ldb, int nc, float* const* c,
                                    int mr, bool accumulate) {
  if (mr > 16 && nc == kF32Cols) return bf16_tile<2, kF32Cols>(kc, p, b, ldb, c, mr, accumulate);  // as f32_tile_any
  if (mr > 16) return with_count<kF32Cols>(nc, [&]<int NC>() { bf16_tile<2, NC>(kc, p, b, ldb, c, mr, accumulate); });
  with_count<kF32Cols>(nc, [&]<int NC>() { bf16_tile<1, NC>(kc, p, b, ldb, c, mr, accumulate); });
}

GemmKernels with_bf16() {
  GemmKernels k = kKernels;
  k.bf16_tile = bf16_tile_any;
  k.to_bf16 = weight_kernels_avx512(DType::BF16)->from_f32;  // the level's BF16 row writer
  return k;
}

}  // namespace
}  // namespace loom::cpu

#pragma GCC pop_options

namespace loom::cpu {
const GemmKernels* gemm_kernels_avx512() {
  static const GemmKernels bf16 = with_bf16();
  return has_avx512_bf16() ? &bf16 : &kKernels;
}
}  // namespace loom::cpu

#pragma GCC diagnostic pop
