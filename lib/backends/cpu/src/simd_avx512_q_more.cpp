// The AVX-512 level's integer dots of Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K, Q3_K, Q5_K and IQ4_XS:
// simd_q_more.h's 256-bit code compiled for this level (EVEX encodings), and simd_r8_more.h's
// repacked kernels with their two-group 512-bit form for weights repacked in pairs.

// GCC 12's AVX-512 intrinsics headers trip -Wuninitialized on their own helpers once inlined
// (as in simd_avx512_q.cpp).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu_vec_dot.h"
#include "loom/core/quants.h"
#include "simd_isa.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")
#include "simd_q_more.h"
#define LOOM_R8_VNNI 1
#define LOOM_R8_512 1
#include "simd_r8_more.h"
#undef LOOM_R8_512
#undef LOOM_R8_VNNI

namespace loom::cpu {

LOOM_DEFINE_ROWS_DOT_MORE(avx512)
LOOM_DEFINE_ROWS_DOT_R8_MORE(avx512)
LOOM_DEFINE_ROWS_DOT_PAIRS_MORE(avx512)

}  // namespace loom::cpu

#pragma GCC pop_options
#pragma GCC diagnostic pop
