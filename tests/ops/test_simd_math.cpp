// Every SIMD level of the CPU's vectorized math against double-precision references, each level
// this CPU has (scalar, avx2, avx512) forced in turn: exp within 2 ulp of std::exp with the same
// inf / 0 / NaN, SILU / SWIGLU / SOFT_MAX and tiled FLASH_ATTN_EXT with odd shapes; and the thread
// pool's work sharing the kernels rely on. Levels the CPU lacks are skipped.
#include <algorithm>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "../../lib/backends/cpu/src/cpu_features.h"
#include "../../lib/backends/cpu/src/cpu_repack.h"
#include "../../lib/backends/cpu/src/cpu_vec_dot.h"
#include "../../lib/backends/cpu/src/simd_gemm.h"
#include "../../lib/backends/cpu/src/simd_isa.h"
#include "../../lib/backends/cpu/src/simd_math.h"
#include "loom/core/fp16.h"
#include "loom/core/quants.h"
#include "loom/core/thread_pool.h"
#include "op_harness.h"
#include "simd_levels.h"

namespace loom::test {
namespace {

// ---- vectorized exp and the ops built on it -----------------------------------------------------

using MathLevelTest = LevelTest;

// Units in the last place between two floats of the same sign (huge if signs differ).
int64_t ulp_distance(float a, float b) {
  if (a == b) return 0;
  if (std::signbit(a) != std::signbit(b)) return INT64_MAX;
  return std::llabs((int64_t)std::bit_cast<int32_t>(a) - (int64_t)std::bit_cast<int32_t>(b));
}

TEST_P(MathLevelTest, ExpWithinTwoUlpAndEdgeCasesLikeStdExp) {
  const cpu::VecMath& vm = cpu::vec_math(GetParam());
  std::vector<float> x;
  for (float v = -110.0f; v <= 95.0f; v += 0.0137f) x.push_back(v);
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, 88.72f, 88.7228f, 88.73f, -87.33f, -103.97f, -103.28f, -150.0f, 1000.0f,
                  -1000.0f, INFINITY, -INFINITY})
    x.push_back(v);
  std::vector<float> y(x.size());
  vm.exp_shift_sum(x.data(), 0.0f, y.data(), (int64_t)x.size());
  int64_t worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = std::exp(x[i]);
    if (std::fpclassify(want) == FP_SUBNORMAL || want == 0.0f) {  // gradual underflow: absolute error
      EXPECT_NEAR(y[i], want, 3e-45f) << "x = " << x[i];
      continue;
    }
    if (std::isinf(want)) {
      EXPECT_EQ(y[i], want) << "x = " << x[i];
      continue;
    }
    worst = std::max(worst, ulp_distance(y[i], want));
    EXPECT_LE(ulp_distance(y[i], want), 2) << "x = " << x[i] << " got " << y[i] << " want " << want;
  }
  float nan_in = NAN, nan_out = 0.0f;
  vm.exp_shift_sum(&nan_in, 0.0f, &nan_out, 1);
  EXPECT_TRUE(std::isnan(nan_out));
  // the sum it returns, and a shift
  std::vector<float> z(37);
  for (size_t i = 0; i < z.size(); ++i) z[i] = 0.1f * (float)i;
  std::vector<float> e(z.size());
  const float sum = vm.exp_shift_sum(z.data(), 2.0f, e.data(), (int64_t)z.size());
  double want_sum = 0;
  for (float v : z) want_sum += std::exp((double)v - 2.0);
  EXPECT_NEAR(sum, want_sum, 1e-5 * want_sum);
  EXPECT_EQ(vm.max(z.data(), (int64_t)z.size()), z.back());
  EXPECT_EQ(vm.max(z.data(), 0), -INFINITY);
}

// One online-softmax step of the prompt attention (key-major scores, rows as lanes) against a
// double reference: rows past a vector's width, a mask with hidden keys and an ALiBi-like slope,
// rows with an earlier maximum (rescaled), rows that have seen nothing yet and see nothing now.
TEST_P(MathLevelTest, SoftmaxStepKeyMajor) {
  const cpu::VecMath& vm = cpu::vec_math(GetParam());
  for (int64_t n : {1L, 7L, 16L, 37L})
    for (bool with_mask : {false, true}) {
      const int64_t kt = 23, ld = n + 5;
      std::mt19937 rng(7 + (unsigned)n);
      std::normal_distribution<float> nd(0.0f, 3.0f);
      std::vector<float> s((size_t)(kt * ld)), mask((size_t)(kt * ld)), slope((size_t)n), m((size_t)n), l((size_t)n);
      for (auto& x : s) x = nd(rng);
      for (int64_t j = 0; j < kt; ++j)
        for (int64_t r = 0; r < n; ++r)
          mask[(size_t)(j * ld + r)] = r % 5 == 2 || (j + r) % 4 == 1 ? -INFINITY : -0.25f * (float)j;
      for (int64_t r = 0; r < n; ++r) {
        slope[(size_t)r] = 0.5f + 0.1f * (float)r;
        m[(size_t)r] = r % 3 == 0 ? -INFINITY : nd(rng);  // no key seen yet, or an earlier maximum
        l[(size_t)r] = m[(size_t)r] == -INFINITY ? 0.0f : 2.0f;
      }
      std::vector<float> got = s, gm = m, gl = l, alpha((size_t)n);
      vm.softmax_step(got.data(), with_mask ? mask.data() : nullptr, slope.data(), ld, kt, n, gm.data(), gl.data(),
                      alpha.data());
      for (int64_t r = 0; r < n; ++r) {
        double mx = m[(size_t)r];
        std::vector<double> x((size_t)kt);
        for (int64_t j = 0; j < kt; ++j) {
          x[(size_t)j] = s[(size_t)(j * ld + r)];
          if (with_mask) x[(size_t)j] += (double)slope[(size_t)r] * mask[(size_t)(j * ld + r)];
          mx = std::max(mx, x[(size_t)j]);
        }
        const double shift = mx == -INFINITY ? 0.0 : mx, a = std::exp((double)m[(size_t)r] - shift);
        double sum = 0;
        for (int64_t j = 0; j < kt; ++j) {
          const double p = std::exp(x[(size_t)j] - shift);
          sum += p;
          EXPECT_NEAR(got[(size_t)(j * ld + r)], p, 1e-6 * std::max(1.0, p))
              << "n " << n << " row " << r << " key " << j;
        }
        EXPECT_NEAR(alpha[(size_t)r], a, 1e-6 * std::max(1.0, a)) << "n " << n << " row " << r;
        EXPECT_NEAR(gl[(size_t)r], l[(size_t)r] * a + sum, 1e-5 * (l[(size_t)r] * a + sum + 1)) << "row " << r;
        if (mx == -INFINITY)
          EXPECT_EQ(gm[(size_t)r], -INFINITY) << "row " << r;
        else
          EXPECT_NEAR(gm[(size_t)r], mx, 1e-6 * std::abs(mx)) << "row " << r;
      }
      for (int64_t j = 0; j < kt; ++j)  // the padding past n is left alone
        for (int64_t r = n; r < ld; ++r) EXPECT_EQ(got[(size_t)(j * ld + r)], s[(size_t)(j * ld + r)]);
    }
}

TEST_P(MathLevelTest, SiluSwigluSoftmaxOps) {
  for (int64_t n : {1L, 15L, 16L, 1000L}) {
    OpRunner r;
    Tensor* a = r.input(DType::F32, {n, 3}, "a");
    Tensor* b = r.input(DType::F32, {n, 3}, "b");
    Tensor* s = ops::silu(r.ctx, a);
    Tensor* g = ops::swiglu(r.ctx, a, b);
    Tensor* sm = ops::soft_max(r.ctx, a, nullptr, 0.7f);
    r.alloc();
    r.fill_normal(a, 4.0f);
    r.fill_normal(b);
    r.compute(s, 2);
    r.compute(g, 2);
    r.compute(sm, 2);
    const auto av = r.get_f32(a), bv = r.get_f32(b);
    std::vector<double> ws(av.size()), wg(av.size()), wsm(av.size());
    for (size_t i = 0; i < av.size(); ++i) {
      ws[i] = av[i] / (1.0 + std::exp(-(double)av[i]));
      wg[i] = ws[i] * bv[i];
    }
    for (int64_t row = 0; row < 3; ++row) {
      double mx = -INFINITY, sum = 0;
      for (int64_t i = 0; i < n; ++i) mx = std::max(mx, 0.7 * av[(size_t)(row * n + i)]);
      for (int64_t i = 0; i < n; ++i) sum += std::exp(0.7 * av[(size_t)(row * n + i)] - mx);
      for (int64_t i = 0; i < n; ++i) wsm[(size_t)(row * n + i)] = std::exp(0.7 * av[(size_t)(row * n + i)] - mx) / sum;
    }
    EXPECT_LE(nmse(r.get_f32(s), ws), 1e-12) << n;
    EXPECT_LE(nmse(r.get_f32(g), wg), 1e-12) << n;
    EXPECT_LE(nmse(r.get_f32(sm), wsm), 1e-12) << n;
  }
  OpRunner r;  // saturation: no NaN, exact limits
  Tensor* a = r.input(DType::F32, {4});
  Tensor* s = ops::silu(r.ctx, a);
  r.alloc();
  r.set_f32(a, {-200.0f, 200.0f, -90.0f, 90.0f});
  r.compute(s, 1);
  const auto sv = r.get_f32(s);
  EXPECT_EQ(sv[0], 0.0f);
  EXPECT_EQ(sv[1], 200.0f);
  EXPECT_EQ(sv[3], 90.0f);
}

// q {D, n_q, h, b}, k/v {D | Dv, n_kv, h_kv, b}, mask {n_kv, n_q} -> {Dv, h, n_q, b}
std::vector<double> ref_flash(const std::vector<float>& q, const int64_t* qne, const std::vector<float>& k,
                              const int64_t* kne, const std::vector<float>& v, const int64_t* vne,
                              const std::vector<float>* mask, int64_t mask_ne0, float scale, float softcap) {
  const int64_t D = qne[0], n_q = qne[1], H = qne[2], B = qne[3], n_kv = kne[1], Dv = vne[0];
  const int64_t one[4] = {Dv, H, n_q, B};
  std::vector<double> out((size_t)(Dv * H * n_q * B), 0.0), s((size_t)n_kv);
  for (int64_t ib = 0; ib < B; ++ib)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t iq = 0; iq < n_q; ++iq) {
        const int64_t hk = h / (H / kne[2]);
        double mx = -INFINITY;
        for (int64_t j = 0; j < n_kv; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += (double)q[idx(qne, d, iq, h, ib)] * k[idx(kne, d, j, hk, ib)];
          dot *= scale;
          if (softcap != 0) dot = softcap * std::tanh(dot / softcap);
          if (mask) dot += (double)(*mask)[(size_t)(iq * mask_ne0 + j)];
          s[(size_t)j] = dot;
          mx = std::max(mx, dot);
        }
        if (mx == -INFINITY) continue;
        double sum = 0;
        for (int64_t j = 0; j < n_kv; ++j) sum += std::exp(s[(size_t)j] - mx);
        for (int64_t j = 0; j < n_kv; ++j)
          for (int64_t d = 0; d < Dv; ++d)
            out[idx(one, d, h, iq, ib)] += std::exp(s[(size_t)j] - mx) / sum * v[idx(vne, d, j, hk, ib)];
      }
  return out;
}

// Shapes around the tiles: keys past one 64-key tile, head sizes not a multiple of 16, GQA
// groups of 1, 4 and 8 (rows per unit 32 and beyond), causal masks whose early tiles are
// skipped, a row that sees nothing, softcap; decode steps over many keys; head sizes past one
// 256-value K block of the panels, and heads too big to pack more than one per phase (batches).
TEST_P(MathLevelTest, FlashAttentionTiledOddShapes) {
  struct Case {
    int64_t D, Dv, n_q, n_kv, h, h_kv;
    bool causal;
    float softcap;
    int64_t b = 1;
    int64_t filled = 0;  // > 0: keys from here on hidden (a cache's unused slots)
  };
  const Case cases[] = {{64, 64, 1, 130, 8, 2, false, 0.0f},
                        {40, 24, 37, 150, 4, 1, true, 0.0f},
                        {80, 80, 70, 200, 8, 1, true, 0.0f},
                        {16, 16, 5, 9, 3, 3, true, 30.0f},
                        // decode steps over many keys
                        {64, 64, 1, 700, 8, 2, false, 0.0f},
                        {64, 32, 2, 1000, 4, 4, true, 30.0f},
                        {128, 128, 3, 600, 8, 8, false, 0.0f},
                        // decode chunks that see no key (unused cache slots), two batches
                        {64, 64, 1, 900, 16, 4, false, 0.0f, 1, 200},
                        {64, 48, 2, 333, 8, 2, false, 0.0f, 2, 70},
                        // prompts: K blocks of 256 + 64 dims; ~5 MB heads, one per phase, 2 batches
                        {320, 48, 10, 70, 2, 1, true, 0.0f},
                        {288, 32, 9, 4000, 2, 1, true, 0.0f, 2}};
  for (const Case& c : cases)
    for (DType kv : {DType::F16, DType::F32})
      for (int nth : {2, 3}) {  // decode splits the keys into chunks per thread count
        OpRunner r;
        Tensor* q = r.input(DType::F32, {c.D, c.n_q, c.h, c.b}, "q");
        Tensor* k = r.input(kv, {c.D, c.n_kv, c.h_kv, c.b}, "k");
        Tensor* v = r.input(kv, {c.Dv, c.n_kv, c.h_kv, c.b}, "v");
        Tensor* mask = r.input(DType::F32, {c.n_kv, c.n_q}, "mask");
        Tensor* out = ops::flash_attn_ext(r.ctx, q, k, v, mask, 1.0f / std::sqrt((float)c.D), 0.0f, c.softcap);
        r.alloc();
        r.fill_normal(q);
        r.fill_normal(k);
        r.fill_normal(v);
        std::vector<float> mv((size_t)(c.n_kv * c.n_q), 0.0f);
        for (int64_t iq = 0; iq < c.n_q; ++iq)
          for (int64_t j = 0; j < c.n_kv; ++j) {
            const bool hidden = (c.causal ? j > c.n_kv - c.n_q + iq : (j % 7 == 3)) || (c.filled > 0 && j >= c.filled);
            mv[(size_t)(iq * c.n_kv + j)] = hidden || (c.n_q > 2 && iq == 1) ? -INFINITY : 0.0f;  // row 1 sees nothing
          }
        r.set_f32(mask, mv);
        r.compute(out, nth);
        const auto got = r.get_f32(out);
        const auto want = ref_flash(r.get_f32(q), q->ne, r.get_f32(k), k->ne, r.get_f32(v), v->ne, &mv, c.n_kv,
                                    1.0f / std::sqrt((float)c.D), c.softcap);
        EXPECT_LE(nmse(got, want), 1e-9) << "D " << c.D << " n_q " << c.n_q << " n_kv " << c.n_kv << " "
                                         << dtype_name(kv) << " threads " << nth;
        for (float g : got) ASSERT_FALSE(std::isnan(g));
      }
}

INSTANTIATE_TEST_SUITE_P(Levels, MathLevelTest, testing::ValuesIn(kLevels), level_name);

// ---- work sharing of the thread pool the kernels rely on ---------------------------------------

// claim() hands out every item of a phase exactly once, in ranges, whatever the interleaving,
// and starts over after each barrier and each run (phases use different totals here; phases
// that claim nothing (-1) leave the shares of one set untouched for two phases, and run 1 delays
// a thread so the others take from its share).
TEST(ThreadPoolClaim, EveryItemOnceAndRestartsAfterBarrier) {
  for (int nth : {1, 2, 3, 5}) {
    ThreadPool pool(nth);
    const int64_t totals[] = {1000, 7, -1, 1, -1, -1, 0, 333, 64, -1, 64};
    for (int run = 0; run < 3; ++run) {
      std::vector<std::vector<std::atomic<int>>> hits;
      for (int64_t t : totals) hits.emplace_back((size_t)std::max<int64_t>(t, 0));
      pool.run([&](int ith, int) {
        for (size_t phase = 0; phase < std::size(totals); ++phase) {
          if (run == 1 && ith == nth - 1) std::this_thread::sleep_for(std::chrono::microseconds(200));
          int64_t first, last;
          while (totals[phase] >= 0 && pool.claim(totals[phase], 2, first, last)) {
            EXPECT_LT(first, last);
            for (int64_t i = first; i < last; ++i) hits[phase][(size_t)i].fetch_add(1);
          }
          pool.barrier();
        }
      });
      for (size_t phase = 0; phase < std::size(totals); ++phase)
        for (const auto& h : hits[phase])
          ASSERT_EQ(h.load(), 1) << "threads " << nth << " run " << run << " phase " << phase;
    }
  }
}

}  // namespace
}  // namespace loom::test
