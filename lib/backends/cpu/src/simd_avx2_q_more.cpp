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

namespace loom::cpu {

LOOM_DEFINE_ROWS_DOT_MORE(avx2)

}  // namespace loom::cpu

#pragma GCC pop_options
