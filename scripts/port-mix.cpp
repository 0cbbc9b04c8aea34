// How much an int8 GEMM tile loses to the float work of block-scaled formats (docs/PERFORMANCE.md,
// "Why the misses"): one core runs 12 independent vpdpbusd chains per step, alone and mixed with
// other 512-bit operations, and prints vpdpbusd per second. A mix that runs as fast as the pure
// loop uses execution ports vpdpbusd does not need; one that slows it competes for them.
// Developer check, not part of the build:
//   g++ -O3 -funroll-all-loops -std=c++20 scripts/port-mix.cpp -o /tmp/port-mix && /tmp/port-mix
#include <immintrin.h>

#include <chrono>
#include <cstdint>
#include <cstdio>

namespace {

using Clock = std::chrono::steady_clock;

// Per step: 12 vpdpbusd, then `extra` operations of kind Op on independent registers.
enum Op { none, fma, mul, add, cvt, add_i32, shift_i32, move };

template <Op op, int extra>
__attribute__((target("avx512f,avx512bw,avx512vnni"), noinline)) double rate(int64_t steps) {
  __m512i acc[12];
  __m512 f[6];
  for (int j = 0; j < 12; ++j) acc[j] = _mm512_set1_epi32(j);
  for (int j = 0; j < 6; ++j) f[j] = _mm512_set1_ps((float)j);
  const __m512i x = _mm512_set1_epi8(3), y = _mm512_set1_epi8(-2);
  const __m512 g = _mm512_set1_ps(1.0001f);
  const auto t0 = Clock::now();
  for (int64_t i = 0; i < steps; ++i) {
    for (int j = 0; j < 12; ++j) acc[j] = _mm512_dpbusd_epi32(acc[j], x, y);
    for (int j = 0; j < extra; ++j) {
      if constexpr (op == fma) f[j] = _mm512_fmadd_ps(f[j], g, g);
      if constexpr (op == mul) f[j] = _mm512_mul_ps(f[j], g);
      if constexpr (op == add) f[j] = _mm512_add_ps(f[j], g);
      if constexpr (op == cvt) f[j] = _mm512_cvtepi32_ps(acc[j]);
      if constexpr (op == add_i32) acc[j] = _mm512_add_epi32(acc[j], x);
      if constexpr (op == shift_i32) acc[j] = _mm512_sll_epi32(acc[j], _mm_cvtsi32_si128(1));
      if constexpr (op == move) {  // a register copy (as a seeded accumulator needs), then a free add
        __m512i t;
        __asm__ volatile("vmovdqa32 %1, %0" : "=v"(t) : "v"(x));
        acc[j] = _mm512_add_epi32(acc[j], t);
      }
    }
  }
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  __m512i si = acc[0];
  __m512 sf = f[0];
  for (int j = 1; j < 12; ++j) si = _mm512_add_epi32(si, acc[j]);
  for (int j = 1; j < 6; ++j) sf = _mm512_add_ps(sf, f[j]);
  volatile int sink = _mm512_reduce_add_epi32(si) + (int)_mm512_reduce_add_ps(sf);
  (void)sink;
  return (double)steps * 12 / s / 1e9;
}

template <Op op, int extra>
double best_rate() {  // best of 5: the machine may be shared
  double best = 0;
  for (int r = 0; r < 5; ++r) {
    const double v = rate<op, extra>(50'000'000);
    best = v > best ? v : best;
  }
  return best;
}

}  // namespace

int main() {
  const double before = best_rate<none, 0>();
  const double r[] = {best_rate<fma, 3>(), best_rate<fma, 6>(), best_rate<mul, 3>(), best_rate<add, 3>(),
                      best_rate<cvt, 3>(), best_rate<add_i32, 3>(), best_rate<shift_i32, 3>(), best_rate<move, 3>()};
  const double after = best_rate<none, 0>();
  const double base = before > after ? before : after;
  const char* what[] = {"+ 3 FMA", "+ 6 FMA", "+ 3 MUL", "+ 3 ADDPS", "+ 3 CVTDQ2PS", "+ 3 PADDD", "+ 3 PSLLD", "+ 3 (MOVDQA32+PADDD)"};
  std::printf("12 vpdpbusd per step          %6.2f G vpdpbusd/s (best of before/after)\n", base);
  for (int i = 0; i < 8; ++i) std::printf("12 vpdpbusd %-17s %6.2f G vpdpbusd/s  %5.1f%%\n", what[i], r[i], 100 * r[i] / base);
}
