// Runtime CPU feature detection for the CPU backend: which instruction-set level the kernels
// use (one binary for every x86-64 machine). The level is chosen once at load time from the CPU
// (or LOOM_CPU_ISA=scalar|avx2|avx512, clamped to what the CPU has); tests force each level in turn.
#pragma once

#include <cstddef>
#include <cstdint>

#include "loom/core/dtype.h"

namespace loom::cpu {

// Kernel variants, from the portable reference up. Each level requires everything below it.
enum class Isa {
  scalar,  // portable C++ (the readable reference kernels)
  avx2,    // AVX2 + FMA + F16C
  avx512,  // AVX-512 F/BW/VL/VNNI (+ the avx2 set)
};

const char* isa_name(Isa isa);
// Best level this CPU supports.
Isa detected_isa();
// Level the kernels use now: detected_isa(), lowered by LOOM_CPU_ISA or force_isa.
Isa active_isa();
// Use `isa` (clamped to detected_isa()) from now on; returns the level in effect. For tests and
// benchmarks: call it between graph computations, never while one runs.
Isa force_isa(Isa isa);
// Whether the CPU has AVX-512 BF16 (vdpbf16ps) on top of the avx512 level: its GEMM then takes
// BF16 weights as pairs (simd_gemm.h).
bool has_avx512_bf16();
// Which types' avx512 repacked kernels take two groups of 8 rows per 512-bit vector
// (simd_r8x2.h): for rows of any length (`types`), and for rows of at least kWideLongRow values
// (`long_rows`), masks of 1 << DType. Read when a weight is repacked: those matrices are stored
// in pairs of groups (cpu_repack.h), the others in single groups, and each layout has its walk. Chosen per host class, each where decode from memory ran
// faster (docs/DECODE-SPEED.md): on Intel's AVX-512 cores Q4_0, Q4_K, Q2_K, Q3_K, Q4_1, Q5_0, Q5_1
// and MXFP4 at any length; on Zen 5 (AMD family 1Ah) Q2_K, Q3_K, Q4_K and Q5_K at any length and
// every type with a two-group kernel (those, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, MXFP4, IQ4_NL, IQ4_XS)
// from kWideLongRow values on: there an 8-row group of a down projection's long rows streams from
// memory slower than two groups at once, and a short row's faster; none elsewhere (Zen 4 splits
// 512-bit operations in two).
// LOOM_CPU_WIDE512=0 turns them all off, =1 on for every type that has a two-group kernel (at
// load time, as the weights are repacked).
struct Wide512 {
  uint64_t types = 0, long_rows = 0;
};
inline constexpr int64_t kWideLongRow = 8192;
inline constexpr Wide512 kWide512All{~uint64_t{0}, ~uint64_t{0}};
// Whether `type`'s kernels take two groups for rows of K values.
bool wide_512(DType type, int64_t K);
// Tests: the choice from now on (like force_isa); returns the old one.
Wide512 force_wide_512(Wide512 choice);
// Which types' weight streams (the repacked kernels, simd_r8.h and simd_r8x2.h, and the float
// rows) ask for their bytes kStreamAheadBytes ahead (cpu_vec_dot.h), a mask of 1 << DType. Every
// type's streams do, except on Zen 4 (AMD family 19h with AVX-512) those of Q8_0, Q4_0, Q4_1,
// Q5_0, Q5_1 and IQ4_XS and on Zen 5 (family 1Ah) those of Q8_0 and Q6_K, whose decode read more
// of the bandwidth without it, switched token by token in one decode (docs/DECODE-SPEED.md).
// LOOM_CPU_PREFETCH=0 turns it off for every type, =1 on.
inline constexpr uint64_t kStreamPrefetchAll = ~uint64_t{0};
bool stream_prefetch(DType type);
// How far ahead the repacked decode kernels ask for their weight stream: 8 KiB; on Zen 5 6 KiB
// for Q2_K and 4 KiB for Q8_0 (where LOOM_CPU_PREFETCH=1 asks), which read more so (switched
// token by token in one decode; 16 KiB read less for every K-quant there; docs/DECODE-SPEED.md).
size_t stream_ahead_bytes(DType type);
// Whether the repacked kernels of a type ask for their stream with StreamAsker (a loop, each line
// once) instead of prefetch_stream (which GCC unrolls into one burst per group block): on Zen 5
// Q2_K and IQ4_XS, which read more so (switched token by token; docs/DECODE-SPEED.md).
bool stream_ask_lines(DType type);
// Tests and benchmarks: the mask from now on (like force_isa); returns the old one.
uint64_t force_stream_prefetch(uint64_t types);

}  // namespace loom::cpu
