// The AVX2 level's integer dots of Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K, Q3_K, Q5_K and IQ4_XS
// (simd_q_more.h under this level's target).
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "cpu_vec_dot.h"
#include "loom/core/quants.h"
#include "simd_isa.h"

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include "simd_q_more.h"
#define LOOM_R8_VNNI 0
#define LOOM_R8_512 0
#include "simd_r8_more.h"
#undef LOOM_R8_512
#undef LOOM_R8_VNNI

namespace loom::cpu {

LOOM_DEFINE_ROWS_DOT_MORE(avx2)
LOOM_DEFINE_ROWS_DOT_R8_MORE(avx2)

}  // namespace loom::cpu

#pragma GCC pop_options
