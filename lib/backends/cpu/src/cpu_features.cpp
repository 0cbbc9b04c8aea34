// CPU feature detection (cpuid through __builtin_cpu_supports) and the active kernel level.
#include "cpu_features.h"

#include "cpu_vec_dot.h"  // kStreamAheadBytes

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace loom::cpu {
namespace {

Isa detect() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni") &&
                      __builtin_cpu_supports("bmi2");  // the i-quants' index words (simd_iq.h)
  return avx512 ? Isa::avx512 : avx2 ? Isa::avx2 : Isa::scalar;
#else
  return Isa::scalar;
#endif
}

Isa clamp(Isa want) { return (int)want < (int)detected_isa() ? want : detected_isa(); }

Isa initial() {
  const char* v = std::getenv("LOOM_CPU_ISA");
  if (v && std::strcmp(v, "scalar") == 0) return clamp(Isa::scalar);
  if (v && std::strcmp(v, "avx2") == 0) return clamp(Isa::avx2);
  return detected_isa();
}

constexpr uint64_t bit(DType t) { return uint64_t{1} << (int)t; }
// Whether a per-type mask holds t (types past 63 are in none).
constexpr bool has(uint64_t mask, DType t) { return (unsigned)t < 64 && ((mask >> (int)t) & 1); }
// The two-group choices per host class, each what decoded faster from memory in same-minute
// pairs of LOOM_CPU_WIDE512=0 and 1, or of the two forms for rows of kWideLongRow values and more
// (docs/DECODE-SPEED.md).
// Intel: Q4_K left out since 2026-12-07 (an Ice Lake Xeon at 21-26 GB/s, whole runs alternated:
// the 8-row kernel read 88.6-92.7% of the read, the two-group one 84.2-88.4%, 7 of 7 pairs).
constexpr uint64_t kIntelTypes = bit(DType::Q4_0) | bit(DType::Q2_K) | bit(DType::Q3_K) | bit(DType::Q4_1) |
                                 bit(DType::Q5_0) | bit(DType::Q5_1) | bit(DType::MXFP4);
constexpr Wide512 kWideIntel{kIntelTypes, kIntelTypes};
constexpr Wide512 kWideZen5{bit(DType::Q2_K) | bit(DType::Q3_K) | bit(DType::Q4_K) | bit(DType::Q5_K),
                            kWide512All.long_rows};

// The CPU family of an AMD processor (0x19 Zen 3/4, 0x1a Zen 5), 0 on any other.
unsigned amd_family() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__builtin_cpu_is("amd") || !__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
  return ((eax >> 8) & 15) + ((eax >> 20) & 255);  // base 0xf + extended on AMD
#else
  return 0;
#endif
}

Wide512 initial_wide_512() {
  const char* v = std::getenv("LOOM_CPU_WIDE512");
  if (v && (std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0)) return v[0] == '1' ? kWide512All : Wide512{};
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  if (__builtin_cpu_is("intel")) return kWideIntel;
#endif
  return amd_family() >= 0x1a ? kWideZen5 : Wide512{};  // Zen 4 (0x19) splits 512-bit ops
}

// Zen 4: the types whose decode read more without the stream prefetch, switched token by token
// in one decode (docs/DECODE-SPEED.md); F16, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_NL read more with it
// where the memory is fastest, and Q2_K's and MXFP4's runs disagreed.
constexpr uint64_t kNoPrefetchZen4 = bit(DType::Q8_0) | bit(DType::Q4_0) | bit(DType::Q4_1) | bit(DType::Q5_0) |
                                     bit(DType::Q5_1) | bit(DType::IQ4_XS);

// Zen 5, the same way (2026-12-05, three runs of 192-256 pairs): Q6_K read 11, 4.5 and 1.0 points
// more without it, Q8_0 3.5, 2.6 and 4.8 (the third at 66-75 GB/s); Q4_0, Q4_1, Q5_0, Q5_1,
// IQ4_NL and MXFP4 2-10 points less, the two-group K-quant kernels 28-51 less.
constexpr uint64_t kNoPrefetchZen5 = bit(DType::Q6_K) | bit(DType::Q8_0);

uint64_t initial_stream_prefetch() {
  const char* v = std::getenv("LOOM_CPU_PREFETCH");
  if (v && (std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0)) return v[0] == '1' ? kStreamPrefetchAll : 0;
  if (detected_isa() != Isa::avx512) return kStreamPrefetchAll;
  const unsigned family = amd_family();  // Zen 4: 0x19 (as Zen 3, which has no AVX-512), Zen 5: 0x1a
  return family == 0x19 ? ~kNoPrefetchZen4 : family >= 0x1a ? ~kNoPrefetchZen5 : kStreamPrefetchAll;
}
std::atomic<uint64_t>& prefetch_mask() {
  static std::atomic<uint64_t> mask{initial_stream_prefetch()};
  return mask;
}
// Read as weights are repacked, written only by force_wide_512.
std::atomic<uint64_t>* wide() {
  static const Wide512 initial = initial_wide_512();
  static std::atomic<uint64_t> masks[2] = {initial.types, initial.long_rows};
  return masks;
}
std::atomic<int>& active() {
  static std::atomic<int> level{(int)initial()};
  return level;
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
    default:
      return "scalar";
  }
}

bool has_avx512_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  static const bool bf16 = detected_isa() == Isa::avx512 && __builtin_cpu_supports("avx512bf16");
  return bf16;
#else
  return false;
#endif
}

bool wide_512(DType type, int64_t K) {
  const uint64_t mask = wide()[K >= kWideLongRow ? 1 : 0].load(std::memory_order_relaxed);
  return has(mask, type);
}

Wide512 force_wide_512(Wide512 choice) {
  return {wide()[0].exchange(choice.types, std::memory_order_relaxed),
          wide()[1].exchange(choice.long_rows, std::memory_order_relaxed)};
}

bool stream_prefetch(DType type) {
  const uint64_t mask = prefetch_mask().load(std::memory_order_relaxed);
  return (unsigned)type >= 64 || ((mask >> (int)type) & 1);
}

size_t stream_ahead_bytes(DType type) {
  static const bool zen5 = amd_family() >= 0x1a;  // cpuid leaves the VM: once
  if (!zen5) return kStreamAheadBytes;
  // Zen 5: Q2_K 6 KiB (switched token by token at 48-61 GB/s, 128 pairs each: +2.2, +1.5 and
  // +1.3 points over 4 KiB, 5 KiB the same, 7 and 8 KiB less), Q8_0 4 KiB (where asked)
  if (type == DType::Q2_K) return kStreamAheadBytes * 3 / 4;
  return type == DType::Q8_0 ? kStreamAheadBytes / 2 : kStreamAheadBytes;
}

bool stream_ask_lines(DType type) {
  // Zen 5 (2026-12-07, switched token by token between the two walkers, each compiled on its
  // own, 128 pairs per type and run at 50-60 GB/s): Q2_K +1.2 to +2.8 points in 4 runs, IQ4_XS
  // -3.4, +0.9, +2.7 and +3.1; Q3_K -1.6 to +2.8, Q4_K -0.8 and -1.6, Q5_K -1.5 and -1.4, MXFP4
  // -2.4 and -1.6, which keep prefetch_stream.
  constexpr uint64_t kZen5 = bit(DType::Q2_K) | bit(DType::IQ4_XS);
  static const uint64_t types = amd_family() >= 0x1a ? kZen5 : 0;
  return has(types, type);
}

uint64_t force_stream_prefetch(uint64_t types) { return prefetch_mask().exchange(types, std::memory_order_relaxed); }

Isa detected_isa() {
  static const Isa isa = detect();
  return isa;
}

Isa active_isa() { return (Isa)active().load(std::memory_order_relaxed); }

Isa force_isa(Isa isa) {
  const Isa level = clamp(isa);
  active().store((int)level, std::memory_order_relaxed);
  return level;
}

}  // namespace loom::cpu
