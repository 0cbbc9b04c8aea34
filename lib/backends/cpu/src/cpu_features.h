// Runtime CPU feature detection for the CPU backend: which instruction-set level the kernels
// use (one binary for every x86-64 machine). The level is chosen once at load time from the CPU
// (or LOOM_CPU_ISA=scalar|avx2|avx512, clamped to what the CPU has); tests force each level in turn.
#pragma once

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
// Whether 512-bit operations run at the rate of 256-bit ones (Intel's AVX-512 cores; Zen 4 splits
// them into two 256-bit halves): the avx512 level's repacked Q4_0, Q4_K, Q2_K, Q3_K, Q4_1, Q5_0,
// Q5_1 and MXFP4 kernels then take two groups of 8 rows per vector. Detected from the vendor;
// LOOM_CPU_WIDE512=0|1 overrides.
bool wide_512();
// Tests: use the two-group kernels or not from now on (like force_isa); returns the old setting.
bool force_wide_512(bool on);

}  // namespace loom::cpu
