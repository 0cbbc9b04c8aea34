// CPU feature detection (cpuid through __builtin_cpu_supports) and the active kernel level.
#include "cpu_features.h"

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
                      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
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

bool initial_wide_512() {
  const char* v = std::getenv("LOOM_CPU_WIDE512");
  if (v && (std::strcmp(v, "0") == 0 || std::strcmp(v, "1") == 0)) return v[0] == '1';
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_is("intel");
#else
  return false;
#endif
}
std::atomic<bool>& wide() {
  static std::atomic<bool> on{initial_wide_512()};
  return on;
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

bool wide_512() { return wide().load(std::memory_order_relaxed); }

bool force_wide_512(bool on) { return wide().exchange(on, std::memory_order_relaxed); }

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
