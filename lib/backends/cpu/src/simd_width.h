// Vector operations by width, for kernels written once over 256-bit vectors (one group of 8
// rows) and 512-bit ones (two groups, simd_r8x2.h): simd_r8_more.h's and simd_avx512_q.cpp's
// Q4_K group kernels. Included under a level's target pragma after defining LOOM_R8_VNNI (1: the
// vpdpbusd / vpdpwssd dots exist) and LOOM_R8_512 (1: the 512-bit overloads). Vx<__m256i> makes
// GCC drop the type's may_alias attribute (-Wignored-attributes, which the including files turn
// off): it only matters for pointers cast to the type, the intrinsics' own loads.
#pragma once

#include <immintrin.h>

#include "simd_r8.h"  // bcast32
#if LOOM_R8_512
#include "simd_r8x2.h"  // the two-group loads
#endif

namespace loom::cpu {
namespace {

// & and | are GCC's vector operators; Vx<V> makes the constants of width V.

template <class V>
struct Vx;
template <>
struct Vx<__m256i> {
  using F = __m256;
  static __m256i set8(int c) { return _mm256_set1_epi8((char)c); }
  static __m256i set32(int c) { return _mm256_set1_epi32(c); }
  static __m256i zero() { return _mm256_setzero_si256(); }
  static F setf(float f) { return _mm256_set1_ps(f); }
  static F zerof() { return _mm256_setzero_ps(); }
  static __m256i table(const int8_t* t) {                      // 16 bytes into every 128-bit lane
    const __m128i g = _mm_loadu_si128(reinterpret_cast<const __m128i*>(t));
    return _mm256_set_m128i(g, g);
  }
};
inline __m256i srli16(__m256i v, int n) { return _mm256_srli_epi16(v, n); }
inline __m256i srli32(__m256i v, int n) { return _mm256_srli_epi32(v, n); }
inline __m256i slli32(__m256i v, int n) { return _mm256_slli_epi32(v, n); }
inline __m256i srai32(__m256i v, int n) { return _mm256_srai_epi32(v, n); }
inline __m256i srai16(__m256i v, int n) { return _mm256_srai_epi16(v, n); }
inline __m256i sub8(__m256i a, __m256i b) { return _mm256_sub_epi8(a, b); }
inline __m256i add32(__m256i a, __m256i b) { return _mm256_add_epi32(a, b); }
inline __m256i sub32(__m256i a, __m256i b) { return _mm256_sub_epi32(a, b); }
inline __m256i lookup(__m256i table, __m256i idx) { return _mm256_shuffle_epi8(table, idx); }
inline __m256i odd16(__m256i a, __m256i b) { return _mm256_blend_epi16(a, b, 0xaa); }  // b's odd int16s
inline __m256 to_f(__m256i v) { return _mm256_cvtepi32_ps(v); }
inline __m256 mulf(__m256 a, __m256 b) { return _mm256_mul_ps(a, b); }
inline __m256 fmadd(__m256 a, __m256 b, __m256 c) { return _mm256_fmadd_ps(a, b, c); }
inline __m256 fnmadd(__m256 a, __m256 b, __m256 c) { return _mm256_fnmadd_ps(a, b, c); }
inline __m256 fmsub(__m256 a, __m256 b, __m256 c) { return _mm256_fmsub_ps(a, b, c); }
// per lane: the larger signed int32
inline __m256i max32(__m256i a, __m256i b) { return _mm256_max_epi32(a, b); }
#if LOOM_R8_VNNI
// acc + u . (the 4 bytes at x in every lane), the broadcast done by the instruction itself (EVEX
// {1to8}): from _mm256_set1_epi32 GCC 12 emits a vpbroadcastd apiece, ~17% of a quantized group
// kernel's instructions.
inline __m256i dot_u8_bcast(__m256i acc, __m256i u, const void* x) {
  __asm__("vpdpbusd %2%{1to8%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*static_cast<const int32_t*>(x)));
  return acc;
}
inline __m256i dot_i16(__m256i acc, __m256i a, __m256i b) { return _mm256_dpwssd_epi32(acc, a, b); }
inline __m256i dot_i16_bcast(__m256i acc, __m256i a, const void* b) {  // b: an int16 pair
  __asm__("vpdpwssd %2%{1to8%}, %1, %0" : "+v"(acc) : "v"(a), "m"(*static_cast<const int32_t*>(b)));
  return acc;
}
#else
inline __m256i dot_i16(__m256i acc, __m256i a, __m256i b) { return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b)); }
inline __m256i dot_i16_bcast(__m256i acc, __m256i a, const void* b) { return dot_i16(acc, a, bcast32(b)); }
#endif

#if LOOM_R8_512
template <>
struct Vx<__m512i> {
  using F = __m512;
  static __m512i set8(int c) { return _mm512_set1_epi8((char)c); }
  static __m512i set32(int c) { return _mm512_set1_epi32(c); }
  static __m512i zero() { return _mm512_setzero_si512(); }
  static F setf(float f) { return _mm512_set1_ps(f); }
  static F zerof() { return _mm512_setzero_ps(); }
  static __m512i table(const int8_t* t) {
    return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
  }
};
inline __m512i srli16(__m512i v, int n) { return _mm512_srli_epi16(v, n); }
inline __m512i srli32(__m512i v, int n) { return _mm512_srli_epi32(v, n); }
inline __m512i slli32(__m512i v, int n) { return _mm512_slli_epi32(v, n); }
inline __m512i srai32(__m512i v, int n) { return _mm512_srai_epi32(v, n); }
inline __m512i srai16(__m512i v, int n) { return _mm512_srai_epi16(v, n); }
inline __m512i sub8(__m512i a, __m512i b) { return _mm512_sub_epi8(a, b); }
inline __m512i add32(__m512i a, __m512i b) { return _mm512_add_epi32(a, b); }
inline __m512i sub32(__m512i a, __m512i b) { return _mm512_sub_epi32(a, b); }
inline __m512i lookup(__m512i table, __m512i idx) { return _mm512_shuffle_epi8(table, idx); }
inline __m512i odd16(__m512i a, __m512i b) { return _mm512_mask_blend_epi16(0xaaaaaaaa, a, b); }
inline __m512 to_f(__m512i v) { return _mm512_cvtepi32_ps(v); }
inline __m512 mulf(__m512 a, __m512 b) { return _mm512_mul_ps(a, b); }
inline __m512 fmadd(__m512 a, __m512 b, __m512 c) { return _mm512_fmadd_ps(a, b, c); }
inline __m512 fnmadd(__m512 a, __m512 b, __m512 c) { return _mm512_fnmadd_ps(a, b, c); }
inline __m512 fmsub(__m512 a, __m512 b, __m512 c) { return _mm512_fmsub_ps(a, b, c); }
inline __m512i max32(__m512i a, __m512i b) { return _mm512_max_epi32(a, b); }
inline __m512i dot_u8_bcast(__m512i acc, __m512i u, const void* x) {
  __asm__("vpdpbusd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(u), "m"(*static_cast<const int32_t*>(x)));
  return acc;
}
inline __m512i dot_i16(__m512i acc, __m512i a, __m512i b) { return _mm512_dpwssd_epi32(acc, a, b); }
inline __m512i dot_i16_bcast(__m512i acc, __m512i a, const void* b) {
  __asm__("vpdpwssd %2%{1to16%}, %1, %0" : "+v"(acc) : "v"(a), "m"(*static_cast<const int32_t*>(b)));
  return acc;
}
#endif

}  // namespace
}  // namespace loom::cpu
