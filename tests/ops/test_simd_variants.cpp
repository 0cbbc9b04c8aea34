// Every SIMD variant of the CPU kernels against the readable scalar reference: each level this
// CPU has (scalar, avx2, avx512) is forced in turn. Kernel level: int8 column quantization bit
// for bit, row conversions bit for bit, fused dots / rows_dot / axpy / GEMM tiles within float
// rounding of the reference (bounded by sum |a_k b_k|), repacked layouts round-tripping. Op
// level: MUL_MAT / MUL_MAT_ID through every path (dot, gemm f32, gemm int8, strided) against
// double-precision loops, with odd shapes. Levels the CPU lacks are skipped (the vectorized math
// and attention: test_simd_math.cpp).
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
#include "loom/core/quants_iq.h"
#include "loom/core/thread_pool.h"
#include "op_harness.h"
#include "simd_levels.h"

namespace loom::test {
namespace {

// ---- kernel level ------------------------------------------------------------------------------

using KernelTest = LevelTest;

TEST_P(KernelTest, ColumnQuantizationIsBitExact) {
  std::mt19937 rng(3);
  for (cpu::ActType act : {cpu::ActType::q8, cpu::ActType::q8k})
    for (int64_t K : {256L, 512L, 2816L}) {
      std::vector<float> x = normal(rng, (size_t)K, 2.0f);
      std::fill(x.begin(), x.begin() + 32, 0.0f);  // an all-zero block: d = 0, no NaN
      x[40] = 1e-30f;                              // a tiny one
      const size_t bytes = cpu::act_row_bytes(act, K);
      std::vector<uint8_t> want(bytes), got(bytes);
      cpu::quantize_act(act, Isa::scalar)(x.data(), want.data(), K);
      cpu::quantize_act(act, GetParam())(x.data(), got.data(), K);
      EXPECT_EQ(want, got) << "act " << (int)act << " K " << K;
    }
}

TEST_P(KernelTest, RowConversionIsBitExact) {
  std::mt19937 rng(4);
  for (DType t : kWeightTypes)
    for (int64_t n : {1L, 15L, 16L, 17L, 67L, 256L, 768L}) {
      const int64_t bs = dtype_info(t).block_size;
      const int64_t K = bs == 1 ? n : bs * ((n + bs - 1) / bs);
      const auto rows = make_rows(t, normal(rng, (size_t)K), K, 1);
      std::vector<float> want((size_t)K), got((size_t)K, -1.0f);
      cpu::weight_kernels(t, Isa::scalar)->to_f32(rows.data(), want.data(), K);
      cpu::weight_kernels(t, GetParam())->to_f32(rows.data(), got.data(), K);
      EXPECT_EQ(0, std::memcmp(want.data(), got.data(), want.size() * 4)) << dtype_name(t) << " n " << K;
    }
}

TEST_P(KernelTest, HalfRowWritesAreBitExact) {
  // specials (zeros, infinities, NaNs with payloads, the largest half and just past it, half
  // subnormals and ties), then random bit patterns over every exponent
  std::vector<float> x;
  for (uint32_t b : {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00001u, 0x7f800001u,
                     0x7fffffffu, 0x477fe000u, 0x477ff000u, 0x477fefffu, 0x33800000u, 0x33000000u, 0x33000001u,
                     0x387fc000u, 0x38800000u, 0x3f808000u, 0x3f818000u, 0x00000001u, 0x3f7fffffu})
    x.push_back(std::bit_cast<float>(b));
  std::mt19937 rng(9);
  while (x.size() < 1037) x.push_back(std::bit_cast<float>((uint32_t)rng()));
  for (DType t : {DType::F16, DType::BF16})
    for (size_t n : {x.size(), (size_t)7, (size_t)16}) {
      std::vector<uint16_t> want(n), got(n, 0x1234);
      dtype_info(t).from_float(x.data(), want.data(), (int64_t)n);
      cpu::weight_kernels(t, GetParam())->from_f32(x.data(), got.data(), (int64_t)n);
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(want[i], got[i]) << dtype_name(t) << " element " << i << " bits " << std::hex
                                   << std::bit_cast<uint32_t>(x[i]);
    }
  EXPECT_EQ(cpu::weight_kernels(DType::Q8_0, GetParam())->from_f32, nullptr);
}

// rows_dot of every type for nr rows x nc columns against the scalar kernel (which the op tests
// pin to double references), within a few float roundings of sum |a_k x_k|.
TEST_P(KernelTest, RowsDotMatchesScalarEveryTypeAndWidth) {
  std::mt19937 rng(5);
  for (DType t : kWeightTypes) {
    const int64_t bs = dtype_info(t).block_size;
    const int64_t Ks[] = {bs == 1 ? 67 : bs, bs == 1 ? 16 : 3 * bs, bs == 1 ? 1 : 5 * bs, bs == 1 ? 300 : 11 * bs};
    for (int64_t K : Ks)
      for (int nc = 1; nc <= cpu::kMaxDotCols; ++nc) {
        const int64_t nr = 5;
        const std::vector<float> wv = normal(rng, (size_t)(K * nr));
        const auto rows = make_rows(t, wv, K, nr);
        const size_t lda = rows.size() / nr;
        const std::vector<float> xv = normal(rng, (size_t)(K * nc));
        std::vector<float> want((size_t)(nr * nc)), got((size_t)(nr * nc), NAN);
        auto run = [&](Isa isa, std::vector<float>& out) {
          const cpu::WeightKernels* wk = cpu::weight_kernels(t, isa);
          std::vector<std::vector<uint8_t>> act((size_t)nc);
          const void* bp[cpu::kMaxDotCols];
          float* op[cpu::kMaxDotCols];
          for (int c = 0; c < nc; ++c) {
            op[c] = out.data() + c * nr;
            if (wk->act == cpu::ActType::f32) {
              bp[c] = xv.data() + c * K;
              continue;
            }
            act[(size_t)c].resize(cpu::act_row_bytes(wk->act, K));
            cpu::quantize_act(wk->act, isa)(xv.data() + c * K, act[(size_t)c].data(), K);
            bp[c] = act[(size_t)c].data();
          }
          wk->rows_dot(K, rows.data(), lda, nr, bp, nc, op);
        };
        run(Isa::scalar, want);
        run(GetParam(), got);
        // magnitude of the sum for the tolerance
        std::vector<float> deq((size_t)(K * nr));
        for (int64_t r = 0; r < nr; ++r) dtype_info(t).to_float(rows.data() + lda * r, deq.data() + r * K, K);
        for (int c = 0; c < nc; ++c)
          for (int64_t r = 0; r < nr; ++r) {
            double mag = 0;
            for (int64_t k = 0; k < K; ++k)
              mag += std::fabs((double)deq[(size_t)(r * K + k)] * xv[(size_t)(c * K + k)]);
            EXPECT_NEAR(got[(size_t)(c * nr + r)], want[(size_t)(c * nr + r)], 2e-6 * mag + 1e-30)
                << dtype_name(t) << " K " << K << " nc " << nc << " r " << r << " c " << c;
          }
      }
  }
}

// The hand-written dots of the newer types (simd_q_more.h) on blocks of random bytes, every
// level against the scalar loops: every level, grid value, scale and high bit shows up (quantized
// normal rows rarely reach the extremes), with finite scales put back over the random bytes.
TEST_P(KernelTest, RowsDotOfRandomBlocksMatchesScalar) {
  std::mt19937 rng(17);
  std::uniform_int_distribution<int> byte(0, 255);
  struct Case {
    DType t;
    std::vector<size_t> halves;  // offsets of the fp16 scales in a block
    int e8m0 = -1;               // offset of an E8M0 exponent
  };
  const Case cases[] = {
      {DType::Q4_1, {offsetof(BlockQ4_1, d), offsetof(BlockQ4_1, m)}},
      {DType::Q5_0, {offsetof(BlockQ5_0, d)}},
      {DType::Q5_1, {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)}},
      {DType::IQ4_NL, {offsetof(BlockIQ4_NL, d)}},
      {DType::MXFP4, {}, (int)offsetof(BlockMXFP4, e)},
      {DType::Q2_K, {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)}},
      {DType::Q3_K, {offsetof(BlockQ3_K, d)}},
      {DType::Q5_K, {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)}},
      {DType::IQ4_XS, {offsetof(BlockIQ4_XS, d)}},
      {DType::IQ2_XXS, {0}},
      {DType::IQ2_XS, {0}},
      {DType::IQ2_S, {0}},
      {DType::IQ3_XXS, {0}},
      {DType::IQ3_S, {0}},
      {DType::IQ1_S, {0}},
      {DType::IQ1_M, {}},  // d in the top nibbles of the scale words: set below
  };
  for (const Case& cs : cases) {
    const DTypeInfo& info = dtype_info(cs.t);
    const int64_t K = 7 * info.block_size, nr = 3, nblk = 7;
    const size_t lda = (size_t)nblk * info.type_size;
    std::vector<uint8_t> rows(lda * (size_t)nr);
    for (uint8_t& b : rows) b = (uint8_t)byte(rng);
    for (int64_t blk = 0; blk < nblk * nr; ++blk) {
      uint8_t* p = rows.data() + (size_t)blk * info.type_size;
      for (size_t off : cs.halves) {
        const fp16_t h = f32_to_fp16(std::ldexp(1.0f + (float)byte(rng) / 256, -12 + byte(rng) % 8));
        std::memcpy(p + off, &h, sizeof(h));
      }
      if (cs.e8m0 >= 0) p[cs.e8m0] = (uint8_t)(118 + byte(rng) % 12);
      if (cs.t == DType::IQ1_M) {
        const fp16_t h = f32_to_fp16(std::ldexp(1.0f + (float)byte(rng) / 256, -12 + byte(rng) % 8));
        for (int k = 0; k < 4; ++k) {
          uint8_t& hi = p[offsetof(BlockIQ1_M, scales) + 2 * k + 1];
          hi = (uint8_t)((hi & 15) | (((h >> (4 * k)) & 15) << 4));
        }
      }
    }
    ASSERT_EQ(first_bad_block(cs.t, rows.data(), rows.size()), -1) << dtype_name(cs.t);
    std::vector<float> deq((size_t)(K * nr));
    for (int64_t r = 0; r < nr; ++r) info.to_float(rows.data() + lda * r, deq.data() + r * K, K);
    for (int nc = 1; nc <= cpu::kMaxDotCols; ++nc) {
      std::vector<float> xv = normal(rng, (size_t)(K * nc));
      for (size_t i = 0; i < xv.size(); i += 37) xv[i] *= 40.0f;  // outliers: many blocks at +-127
      const cpu::WeightKernels* wk = cpu::weight_kernels(cs.t, Isa::scalar);
      std::vector<std::vector<uint8_t>> act((size_t)nc, std::vector<uint8_t>(cpu::act_row_bytes(wk->act, K)));
      const void* bp[cpu::kMaxDotCols];
      std::vector<float> want((size_t)(nr * nc)), got((size_t)(nr * nc), NAN);
      float *wp[cpu::kMaxDotCols], *gp[cpu::kMaxDotCols];
      for (int c = 0; c < nc; ++c) {
        cpu::quantize_act(wk->act, Isa::scalar)(xv.data() + c * K, act[(size_t)c].data(), K);
        bp[c] = act[(size_t)c].data();
        wp[c] = want.data() + c * nr;
        gp[c] = got.data() + c * nr;
      }
      wk->rows_dot(K, rows.data(), lda, nr, bp, nc, wp);
      cpu::weight_kernels(cs.t, GetParam())->rows_dot(K, rows.data(), lda, nr, bp, nc, gp);
      for (int c = 0; c < nc; ++c)
        for (int64_t r = 0; r < nr; ++r) {
          double mag = 0;
          for (int64_t k = 0; k < K; ++k) mag += std::fabs((double)deq[(size_t)(r * K + k)] * xv[(size_t)(c * K + k)]);
          EXPECT_NEAR(got[(size_t)(c * nr + r)], want[(size_t)(c * nr + r)], 2e-6 * mag + 1e-30)
              << dtype_name(cs.t) << " nc " << nc << " r " << r << " c " << c;
        }
    }
  }
}

// Every type with a repacked layout (cpu_repack.h).
const DType kRepackTypes[] = {DType::Q8_0,   DType::Q4_0,   DType::Q4_K, DType::Q6_K, DType::Q4_1,
                              DType::Q5_0,   DType::Q5_1,   DType::Q2_K, DType::Q3_K, DType::Q5_K,
                              DType::IQ4_NL, DType::IQ4_XS, DType::MXFP4};

// Repacked rows (cpu_repack.h), in groups and in pairs of groups: the layout round-trips, and
// each level's kernel of it gives the scalar GGUF-row kernel's results (in pairs: the AVX-512
// level's two-group kernels, and the reference at every level).
TEST_P(KernelTest, RepackedRowsDotMatchesScalar) {
  std::mt19937 rng(15);
  for (DType t : kRepackTypes)
    for (int64_t kb : {1L, 3L, 11L})
      for (int64_t nr : {8L, 24L, 32L})  // 24: a pair, then a group alone
        for (bool pairs : {false, true}) {
          const int64_t K = kb * dtype_info(t).block_size;
          const cpu::ActType act_type = dtype_info(t).block_size == 256 ? cpu::ActType::q8k : cpu::ActType::q8;
          const auto rows = make_rows(t, normal(rng, (size_t)(K * nr)), K, nr);
          const size_t lda = rows.size() / (size_t)nr;
          std::vector<uint8_t> packed(rows.size()), back(rows.size()), groups(rows.size());
          cpu::repack_rows(t, rows.data(), packed.data(), nr, K, pairs);
          cpu::unpack_rows(t, packed.data(), back.data(), nr, K, pairs);
          ASSERT_EQ(back, rows) << dtype_name(t);
          ASSERT_NE(packed, rows);
          cpu::repack_rows(t, rows.data(), groups.data(), nr, K);
          if (pairs && nr > 8 && kb > 1) {               // (one block per row: the same bytes)
            ASSERT_NE(packed, groups) << dtype_name(t);  // the pairs interleave
          }
          const cpu::RowsDotFn level_pairs = GetParam() == Isa::avx512 ? cpu::rows_dot_pairs_avx512(t) : nullptr;
          const cpu::RowsDotFn r8 = pairs ? level_pairs : cpu::weight_kernels(t, GetParam())->rows_dot_r8;
          if (!r8 && !pairs) continue;
          for (int nc = 1; nc <= cpu::kMaxDotCols; ++nc) {
            const std::vector<float> xv = normal(rng, (size_t)(K * nc));
            std::vector<std::vector<uint8_t>> act((size_t)nc, std::vector<uint8_t>(cpu::act_row_bytes(act_type, K)));
            std::vector<float> want((size_t)(nr * nc)), got((size_t)(nr * nc), NAN);
            const void* bp[cpu::kMaxDotCols];
            float *wp[cpu::kMaxDotCols], *gp[cpu::kMaxDotCols];
            for (int c = 0; c < nc; ++c) {
              cpu::quantize_act(act_type, Isa::scalar)(xv.data() + c * K, act[(size_t)c].data(), K);
              bp[c] = act[(size_t)c].data();
              wp[c] = want.data() + c * nr;
              gp[c] = got.data() + c * nr;
            }
            cpu::weight_kernels(t, Isa::scalar)->rows_dot(K, rows.data(), lda, nr, bp, nc, wp);
            auto check = [&](const char* what) {
              for (size_t i = 0; i < want.size(); ++i)
                EXPECT_NEAR(got[i], want[i], 1e-5 * std::fabs(want[i]) + 1e-4)
                    << dtype_name(t) << " K " << K << " nr " << nr << " nc " << nc << " " << what;
            };
            if (pairs) {
              cpu::rows_dot_r8_ref(t, K, packed.data(), lda, nr, bp, nc, gp, true);
              check("pairs, reference");
              if (!r8) continue;
              std::fill(got.begin(), got.end(), NAN);
              r8(K, packed.data(), lda, nr, bp, nc, gp);
              check("pairs");
              continue;
            }
            // the 8-row walk with and without the stream prefetch
            for (bool pf : {false, true}) {
              const uint64_t was_pf = cpu::force_stream_prefetch(pf ? cpu::kStreamPrefetchAll : 0);
              std::fill(got.begin(), got.end(), NAN);
              r8(K, packed.data(), lda, nr, bp, nc, gp);
              cpu::force_stream_prefetch(was_pf);
              check(pf ? "groups, prefetch" : "groups");
            }
          }
        }
}

// MXFP4's smallest E8M0 scales (2^-128 and 2^-127 have no normal float; the kernels make them from
// the exponent's bits) through the repacked kernels: columns of ~1e6 keep the products normal
// floats, so a scale off by any factor shows.
TEST_P(KernelTest, RepackedMxfp4TinyScalesMatchScalar) {
  std::mt19937 rng(19);
  const int64_t nblk = 5, K = 32 * nblk, nr = 24;
  std::vector<uint8_t> rows = make_rows(DType::MXFP4, normal(rng, (size_t)(K * nr)), K, nr);
  const size_t lda = rows.size() / (size_t)nr;
  for (int64_t r = 0; r < nr; ++r)
    for (int64_t b = 0; b < nblk; ++b)
      rows[(size_t)r * lda + (size_t)b * sizeof(BlockMXFP4) + offsetof(BlockMXFP4, e)] = (uint8_t)((r + b) % 6);
  std::vector<float> xv = normal(rng, (size_t)K);
  for (float& v : xv) v *= 1e6f;
  std::vector<uint8_t> act(cpu::act_row_bytes(cpu::ActType::q8, K));
  cpu::quantize_act(cpu::ActType::q8, Isa::scalar)(xv.data(), act.data(), K);
  const void* bp[1] = {act.data()};
  std::vector<float> want((size_t)nr), got((size_t)nr);
  float* wp[1] = {want.data()};
  float* gp[1] = {got.data()};
  cpu::weight_kernels(DType::MXFP4, Isa::scalar)->rows_dot(K, rows.data(), lda, nr, bp, 1, wp);
  for (bool pairs : {false, true}) {
    const cpu::RowsDotFn r8 = pairs ? (GetParam() == Isa::avx512 ? cpu::rows_dot_pairs_avx512(DType::MXFP4) : nullptr)
                                    : cpu::weight_kernels(DType::MXFP4, GetParam())->rows_dot_r8;
    if (!r8) continue;
    std::vector<uint8_t> packed(rows.size());
    cpu::repack_rows(DType::MXFP4, rows.data(), packed.data(), nr, K, pairs);
    std::fill(got.begin(), got.end(), NAN);
    r8(K, packed.data(), lda, nr, bp, 1, gp);
    for (int64_t r = 0; r < nr; ++r) {
      ASSERT_NE(want[(size_t)r], 0.0f);
      EXPECT_NEAR(got[(size_t)r], want[(size_t)r], 1e-5 * std::fabs(want[(size_t)r]))
          << "row " << r << (pairs ? " pairs" : " groups");
    }
  }
}

// Which types the AVX-512 level reads in pairs, and that a matrix is repacked in pairs where
// wide_512 takes two groups for its rows (and only where it has their kernel).
TEST(RepackLayout, PairsWhereTwoGroupsAreTaken) {
  const DType with[] = {DType::Q8_0, DType::Q4_0,   DType::Q4_K,  DType::Q4_1, DType::Q5_0, DType::Q5_1,
                        DType::Q2_K, DType::IQ4_NL, DType::MXFP4, DType::Q3_K, DType::Q5_K, DType::IQ4_XS};
  for (DType t : with) EXPECT_NE(cpu::rows_dot_pairs_avx512(t), nullptr) << dtype_name(t);
  for (DType t : {DType::Q6_K, DType::F16}) EXPECT_EQ(cpu::rows_dot_pairs_avx512(t), nullptr) << dtype_name(t);
  const cpu::Wide512 was = cpu::force_wide_512(cpu::kWide512All);
  const bool avx512 = cpu::active_isa() == Isa::avx512;
  for (DType t : kRepackTypes)
    EXPECT_EQ(cpu::repack_pairs(t, 4096), avx512 && cpu::rows_dot_pairs_avx512(t)) << dtype_name(t);
  cpu::force_wide_512(cpu::Wide512{});
  for (DType t : kRepackTypes) EXPECT_FALSE(cpu::repack_pairs(t, 4096)) << dtype_name(t);
  cpu::force_wide_512(was);
}

// The two-group choice is per row length: the long-row mask from kWideLongRow values on.
TEST(Wide512, LongRowMaskFromItsThreshold) {
  const uint64_t q4_0 = uint64_t{1} << (int)DType::Q4_0, q4_1 = uint64_t{1} << (int)DType::Q4_1;
  const cpu::Wide512 was = cpu::force_wide_512({q4_1, q4_0});
  EXPECT_FALSE(cpu::wide_512(DType::Q4_0, cpu::kWideLongRow - 32));
  EXPECT_TRUE(cpu::wide_512(DType::Q4_0, cpu::kWideLongRow));
  EXPECT_TRUE(cpu::wide_512(DType::Q4_1, 32));
  EXPECT_FALSE(cpu::wide_512(DType::Q4_1, cpu::kWideLongRow));
  cpu::force_wide_512(was);
}

// Matrices of 4 MiB and more are repacked on every core (the groups split between threads).
TEST(RepackLayout, BigMatricesRoundTripOnAllThreads) {
  std::mt19937 rng(16);
  for (DType t : kRepackTypes) {
    const int64_t K = 4096, nrows = 1032, nblk = K / dtype_info(t).block_size;  // 129 groups
    const size_t bytes = (size_t)nrows * (size_t)nblk * dtype_info(t).type_size * (t == DType::Q8_0 ? 1 : 2);
    const int64_t rows = (int64_t)(bytes / ((size_t)nblk * dtype_info(t).type_size));  // > 4 MiB
    std::vector<uint8_t> src(bytes), packed(bytes), back(bytes);
    std::uniform_int_distribution<int> byte(0, 255);
    for (uint8_t& v : src) v = (uint8_t)byte(rng);
    cpu::repack_rows(t, src.data(), packed.data(), rows, K, /*pairs=*/true, /*matrix_rows=*/rows / 3);
    cpu::unpack_rows(t, packed.data(), back.data(), rows, K, true, rows / 3);
    EXPECT_EQ(back, src) << dtype_name(t) << " pairs";
    cpu::repack_rows(t, src.data(), packed.data(), rows, K);
    cpu::unpack_rows(t, packed.data(), back.data(), rows, K);
    EXPECT_EQ(back, src) << dtype_name(t);
    // spot check one row's block against the single-threaded unpacker
    std::vector<uint8_t> blk(dtype_info(t).type_size);
    const int64_t r = rows - 3, lda = nblk * (int64_t)dtype_info(t).type_size;
    cpu::unpack_blocks(t, packed.data() + (r / 8) * 8 * lda, (int)(r % 8), 5, 1, blk.data());
    EXPECT_EQ(0, std::memcmp(blk.data(), src.data() + r * lda + 5 * (int64_t)blk.size(), blk.size()));
  }
}

TEST_P(KernelTest, FloatDotAndAxpyMatchScalar) {
  std::mt19937 rng(6);
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t n : {1L, 7L, 16L, 33L, 64L, 65L, 1000L}) {
      const auto row = make_rows(t, normal(rng, (size_t)n), n, 1);
      std::vector<float> xs = normal(rng, (size_t)(n * 8));
      const float* bp[8];
      for (int c = 0; c < 8; ++c) bp[c] = xs.data() + c * n;
      for (int nc = 1; nc <= 8; ++nc) {
        float want[8], got[8];
        cpu::weight_kernels(t, Isa::scalar)->dot(n, row.data(), bp, nc, want);
        cpu::weight_kernels(t, GetParam())->dot(n, row.data(), bp, nc, got);
        for (int c = 0; c < nc; ++c) EXPECT_NEAR(got[c], want[c], 1e-5 * std::sqrt((double)n)) << dtype_name(t) << n;
      }
      std::vector<float> y0 = normal(rng, (size_t)n), y1 = y0;
      cpu::weight_kernels(t, Isa::scalar)->axpy(n, 0.75f, row.data(), y0.data());
      cpu::weight_kernels(t, GetParam())->axpy(n, 0.75f, row.data(), y1.data());
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(y1[(size_t)i], y0[(size_t)i], 1e-6) << dtype_name(t) << " axpy " << i;
    }
}

// rows_axpy (attention's O += P V) against the scalar level: every row count, tails of n.
TEST_P(KernelTest, RowsAxpyMatchesScalar) {
  std::mt19937 rng(7);
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t n : {1L, 7L, 16L, 33L, 64L, 130L})
      for (int64_t m : {1L, 5L, 64L}) {
        const auto x = make_rows(t, normal(rng, (size_t)(n * m)), n, m);
        const size_t ldx = x.size() / (size_t)m;
        const std::vector<float> p = normal(rng, (size_t)(8 * m));
        for (int nr = 1; nr <= 8; ++nr) {
          std::vector<float> y0 = normal(rng, (size_t)(nr * n)), y1 = y0;
          cpu::weight_kernels(t, Isa::scalar)->rows_axpy(n, m, x.data(), ldx, p.data(), (size_t)m, nr, y0.data(), n);
          cpu::weight_kernels(t, GetParam())->rows_axpy(n, m, x.data(), ldx, p.data(), (size_t)m, nr, y1.data(), n);
          for (size_t i = 0; i < y0.size(); ++i)
            ASSERT_NEAR(y1[i], y0[i], 1e-5 * std::sqrt((double)m))
                << dtype_name(t) << " n" << n << " m" << m << " nr" << nr;
        }
      }
}

// The register tiles against the readable reference tiles on packed panels, all partial shapes.
TEST_P(KernelTest, GemmTilesMatchReferenceTiles) {
  const cpu::GemmKernels* gk = cpu::gemm_kernels(GetParam());
  if (!gk) GTEST_SKIP() << "no tiles at this level";
  std::mt19937 rng(7);
  // The float tiles: f32, and bf16 pairs where the CPU has AVX-512 BF16 (two bf16 values in each
  // 32-bit element of the panel and the columns).
  struct FloatTile {
    const char* name;
    cpu::GemmF32TileFn ref, tile;
    bool pairs;
  };
  std::vector<FloatTile> tiles = {{"f32", cpu::gemm_f32_tile_ref, gk->f32_tile, false}};
  if (gk->bf16_tile) tiles.push_back({"bf16", cpu::gemm_bf16_tile_ref, gk->bf16_tile, true});
  auto values = [&](bool pairs, size_t n) {
    if (!pairs) return normal(rng, n);
    const std::vector<float> x = normal(rng, 2 * n);
    std::vector<float> v(n);
    gk->to_bf16(x.data(), v.data(), (int64_t)x.size());
    return v;
  };
  for (const FloatTile& ft : tiles)
    for (int64_t kc : {1L, 5L, 64L, 256L})
      for (int mr = 1; mr <= gk->f32_mr; mr += mr < 17 ? 4 : 7)
        for (int nc = 1; nc <= gk->f32_nr; ++nc) {
          const int groups = (mr + 15) / 16;
          const std::vector<float> p = values(ft.pairs, (size_t)(groups * 16 * kc));
          const int ldb = gk->f32_nr;  // packed columns, k-major
          const std::vector<float> b = values(ft.pairs, (size_t)(ldb * kc));
          std::vector<float> c0 = normal(rng, (size_t)(nc * 64)), c1 = c0;
          float *cp0[16], *cp1[16];
          for (int j = 0; j < nc; ++j) {
            cp0[j] = c0.data() + j * 64;
            cp1[j] = c1.data() + j * 64;
          }
          for (bool acc : {false, true}) {
            ft.ref(kc, p.data(), b.data(), ldb, nc, cp0, mr, acc);
            ft.tile(kc, p.data(), b.data(), ldb, nc, cp1, mr, acc);
            for (int j = 0; j < nc; ++j)
              for (int i = 0; i < 64; ++i)  // rows past mr untouched
                EXPECT_NEAR(c1[(size_t)(j * 64 + i)], c0[(size_t)(j * 64 + i)], 2e-5 * std::sqrt((double)kc + 1))
                    << ft.name << " kc " << kc << " mr " << mr << " nc " << nc << " i " << i;
          }
        }
  if (!gk->q8_tile) return;
  // The three q8 panels: plain (Q8_0 / Q4_0), with mins (Q4_K), in halves (Q6_K), each with the
  // byte range its packer writes (the tiles may rely on it: AVX2 adds nibble products in int16).
  struct Form {
    int shift, lo, hi;  // the offset's shift, the bytes' range (as int8 when lo < 0)
  };
  struct Variant {
    const char* name;
    size_t block;
    cpu::GemmQ8TileFn ref, tile;
    std::vector<Form> forms;
  };
  const Variant variants[] = {
      {"q8", cpu::kQ8GroupBlockBytes, cpu::gemm_q8_tile_ref, gk->q8_tile, {{3, 0, 15}, {7, 0, 255}}},
      {"q8m", cpu::kQ8MinGroupBlockBytes, cpu::gemm_q8m_tile_ref, gk->q8m_tile, {{0, 0, 15}}},
      {"q8h", cpu::kQ8HalfGroupBlockBytes, cpu::gemm_q8h_tile_ref, gk->q8h_tile, {{0, -32, 31}}},
      {"q8hm", cpu::kQ8HalfMinGroupBlockBytes, cpu::gemm_q8hm_tile_ref, gk->q8hm_tile, {{0, 0, 3}}}};
  for (const Variant& var : variants)
    for (const Form& form : var.forms)
      for (int64_t nblk : {1L, 3L, 8L})
        for (int mr = 1; mr <= gk->q8_mr; mr += mr < 17 ? 4 : 7)
          for (int nc = 1; nc <= gk->q8_nr; ++nc) {
            const int groups = (mr + 15) / 16;
            std::vector<uint8_t> p((size_t)(groups * nblk) * var.block);
            std::uniform_int_distribution<int> byte(form.lo, form.hi);
            for (uint8_t& v : p) v = (uint8_t)(int8_t)byte(rng);  // the bytes; then the fields over them
            for (int64_t gb = 0; gb < groups * nblk; ++gb) {      // sane row scales, mins, offsets
              auto* dw = reinterpret_cast<float*>(p.data() + gb * var.block);
              for (int l = 0; l < 16; ++l) dw[l] = 0.01f * (float)(l + 1);
              if (var.block == cpu::kQ8MinGroupBlockBytes)
                for (int l = 0; l < 16; ++l) dw[16 + l] = 0.003f * (float)(l % 5);
              if (var.block == cpu::kQ8HalfGroupBlockBytes || var.block == cpu::kQ8HalfMinGroupBlockBytes) {
                auto* off = reinterpret_cast<int32_t*>(dw + 32);
                for (int l = 0; l < 16; ++l) {
                  dw[16 + l] = 0.02f * (float)(16 - l);
                  off[l] = -300 * l;
                  off[16 + l] = 250 * l - 1000;
                }
              }
              if (var.block == cpu::kQ8HalfMinGroupBlockBytes)
                for (int l = 0; l < 32; ++l) dw[64 + l] = 0.004f * (float)(l % 7);
            }
            std::vector<std::vector<cpu::BlockQ8A>> cols((size_t)nc, std::vector<cpu::BlockQ8A>((size_t)nblk));
            const cpu::BlockQ8A* bp[16];
            for (int j = 0; j < nc; ++j) {
              const std::vector<float> x = normal(rng, (size_t)(32 * nblk));
              cpu::quantize_act(cpu::ActType::q8, Isa::scalar)(x.data(), cols[(size_t)j].data(), 32 * nblk);
              bp[j] = cols[(size_t)j].data();
            }
            std::vector<float> c0((size_t)(nc * 64), 7.0f), c1 = c0;
            float *cp0[16], *cp1[16];
            for (int j = 0; j < nc; ++j) {
              cp0[j] = c0.data() + j * 64;
              cp1[j] = c1.data() + j * 64;
            }
            var.ref(nblk, p.data(), bp, nc, cp0, mr, form.shift);
            var.tile(nblk, p.data(), bp, nc, cp1, mr, form.shift);
            for (size_t i = 0; i < c0.size(); ++i)  // rows past mr keep their 7
              EXPECT_NEAR(c1[i], c0[i], 1e-5 * std::fabs(c0[i]) + 1e-4)
                  << var.name << " shift " << form.shift << " nblk " << nblk << " mr " << mr << " nc " << nc;
          }
}

TEST_P(KernelTest, PanelTransposeMatchesReference) {
  const cpu::GemmKernels* gk = cpu::gemm_kernels(GetParam());
  if (!gk) GTEST_SKIP() << "no tiles at this level";
  std::mt19937 rng(8);
  for (int nsrc : {1, 5, 12, 16})
    for (int64_t n : {1L, 7L, 16L, 33L, 256L})
      for (int ldd : {12, 16}) {
        if (nsrc > ldd) continue;
        const std::vector<float> v = normal(rng, (size_t)(16 * n));
        const float* src[16];
        for (int s = 0; s < 16; ++s) src[s] = v.data() + s * n;
        std::vector<float> want((size_t)(n * ldd + 16), -7.0f), got = want;
        cpu::transpose16_ref(src, nsrc, n, want.data(), ldd);
        gk->transpose16(src, nsrc, n, got.data(), ldd);
        EXPECT_EQ(want, got) << "nsrc " << nsrc << " n " << n << " ldd " << ldd;
      }
}

// The level's panel packers from repacked rows against the readable ones, bit for bit, over
// random quants and scales, into either half of the panel blocks.
TEST_P(KernelTest, RepackedPanelPackingMatchesReference) {
  const cpu::GemmKernels* gk = cpu::gemm_kernels(GetParam());
  if (!gk || !gk->pack_q8_0_r8) GTEST_SKIP() << "no panel packers at this level";
  std::mt19937 rng(9);
  std::uniform_int_distribution<int> byte(0, 255);
  struct Case {
    DType t;
    cpu::PackR8Fn ref, level;
  };
  std::vector<Case> cases = {{DType::Q8_0, cpu::pack_q8_0_r8_ref, gk->pack_q8_0_r8},
                             {DType::Q4_0, cpu::pack_q4_0_r8_ref, gk->pack_q4_0_r8},
                             {DType::Q4_K, cpu::pack_q4k_r8_ref, gk->pack_q4k_r8},
                             {DType::Q6_K, cpu::pack_q6k_r8_ref, gk->pack_q6k_r8}};
  for (DType t : {DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::IQ4_NL, DType::MXFP4, DType::IQ4_XS, DType::Q5_K,
                  DType::Q3_K, DType::Q2_K})
    cases.push_back({t, cpu::pack_r8_ref_more(t), cpu::pack_r8_avx2_more(t)});
  for (const auto& c : cases) {
    ASSERT_TRUE(c.ref && c.level) << dtype_name(c.t);
    std::vector<uint8_t> group(cpu::repack_group_block_bytes(c.t));
    for (uint8_t& b : group) b = (uint8_t)byte(rng);
    // finite d (the first field but MXFP4's exponents) and m / dmin (the second, where it is one)
    const bool mins =
        c.t == DType::Q4_K || c.t == DType::Q4_1 || c.t == DType::Q5_1 || c.t == DType::Q5_K || c.t == DType::Q2_K;
    for (int i = 0; i < 16 && c.t != DType::MXFP4; ++i) {
      const fp16_t d = f32_to_fp16(std::ldexp(1.0f + (float)(i % 8) / 8, -10 + i % 8));
      if (mins || i < 8) std::memcpy(group.data() + 2 * i, &d, sizeof(d));
    }
    const size_t blocks = (size_t)(dtype_info(c.t).block_size / 32) * cpu::gemm_q8_block_bytes(c.t);
    for (int h = 0; h < 2; ++h) {
      std::vector<uint8_t> want(blocks, 0xee), got = want;
      c.ref(group.data(), want.data(), h);
      c.level(group.data(), got.data(), h);
      EXPECT_EQ(want, got) << dtype_name(c.t) << " half " << h;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, KernelTest, testing::ValuesIn(kLevels), level_name);

// ---- op level: matrix products through every path ----------------------------------------------

// f32 products (F32 / F16 weights) are exact to float rounding; BF16 weights' GEMM rounds the
// columns to bf16 where the CPU has AVX-512 BF16 (as llama.cpp does; NMSE ~2e-6); int8 columns
// carry the activation quantization (REFERENCE.md's matmul limit).
double limit_for(DType t) { return t == DType::BF16 ? 1e-5 : dtype_info(t).block_size == 1 ? 1e-9 : 5e-4; }

using MatmulLevelTest = LevelTest;

// A weight's bytes (as the file holds them) repacked where they are, as the model loader places
// them; false where the level has no repacked kernels.
// As the model loader repacks a weight; with `pairs`, where every type's two groups are taken
// (cpu_features.h: wide_512), so in pairs where the level reads them (cpu_repack.h).
bool repack_in_place(Tensor* t, bool pairs = false) {
  const auto* p = static_cast<const uint8_t*>(t->data);
  const std::vector<uint8_t> file(p, p + t->nbytes());
  const cpu::Wide512 was = cpu::force_wide_512(pairs ? cpu::kWide512All : cpu::Wide512{});
  const bool done = cpu::repack_weight(*t, file.data());
  cpu::force_wide_512(was);
  EXPECT_EQ(t->has_flag(kFlagRepackedPairs), done && pairs && cpu::rows_dot_pairs(t->type)) << dtype_name(t->type);
  return done;
}

TEST_P(MatmulLevelTest, EveryTypeEveryPathOddShapes) {
  struct Shape {
    int64_t K, M, N, b2;
  };
  // N = 1, 3, 8: dot path; 16, 29, 40: gemm (partial tiles in both directions); M odd, not a
  // multiple of 16 or of the tile; K odd for plain floats, an odd block count for quants.
  const Shape shapes[] = {{67, 13, 1, 1},  {300, 37, 3, 1},  {96, 50, 8, 1},
                          {67, 45, 16, 1}, {300, 70, 29, 2}, {40, 33, 40, 1}};
  for (DType t : kWeightTypes)
    for (const Shape& s : shapes)
      for (int th : {1, 2}) {
        const int64_t bs = dtype_info(t).block_size;
        const int64_t K = bs == 1 ? s.K : bs * (bs == 32 ? 3 : 1) * ((s.K + bs - 1) / bs);
        OpRunner r;
        Tensor* a = r.input(t, {K, s.M}, "a");
        Tensor* b = r.input(DType::F32, {K, s.N, s.b2}, "b");
        Tensor* out = ops::mul_mat(r.ctx, a, b);
        ASSERT_TRUE(cpu::supports(out));
        r.alloc();
        r.fill_normal(a);
        r.fill_normal(b);
        r.compute(out, th);
        const double e = nmse(r.get_f32(out), ref_mul_mat(r.get_f32(a), a->ne, r.get_f32(b), b->ne));
        EXPECT_LE(e, limit_for(t)) << dtype_name(t) << " K " << K << " M " << s.M << " N " << s.N << " threads " << th;
      }
}

// Columns large enough to be packed once per node and shared by the threads (gemm_f32_pack_b),
// for every plain float type (BF16: as bf16 pairs where the CPU has AVX-512 BF16; an odd K
// keeps f32 columns).
TEST_P(MatmulLevelTest, SharedPackedColumnsForPlainFloats) {
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t K : {256L, 301L}) {
      const int64_t M = 96, N = 40000 / K + 16;  // more b values than a thread prepares alone
      OpRunner r;
      Tensor* a = r.input(t, {K, M}, "a");
      Tensor* b = r.input(DType::F32, {K, N}, "b");
      Tensor* out = ops::mul_mat(r.ctx, a, b);
      r.alloc();
      r.fill_normal(a);
      r.fill_normal(b);
      r.compute(out, 2);
      EXPECT_LE(nmse(r.get_f32(out), ref_mul_mat(r.get_f32(a), a->ne, r.get_f32(b), b->ne)), limit_for(t))
          << dtype_name(t) << " K " << K;
    }
}

// Weights repacked as the model loader places them (where the level has the kernels), in groups
// and in pairs: the dot path (N < 16) and the GEMM (N >= 16: int8 tiles, or f32 ones decoding the
// groups), M a multiple of 8 but not of 16 (a last group alone) or of 16; at M 264 a thread's
// share is many row blocks, taken as claimed ranges.
TEST_P(MatmulLevelTest, RepackedWeightsDotAndGemm) {
  for (DType t : kRepackTypes)
    for (int64_t N : {1L, 3L, 8L, 16L, 29L})
      for (int th : {1, 2})
        for (int64_t M : {40L, 48L, 264L})
          for (bool pairs : {false, true}) {
            const int64_t K = dtype_info(t).block_size == 256 ? 512 : 96;
            if (!cpu::repacked_kernels(t)) continue;
            OpRunner r;
            Tensor* a = r.input(t, {K, M}, "a");
            Tensor* b = r.input(DType::F32, {K, N}, "b");
            Tensor* out = ops::mul_mat(r.ctx, a, b);
            r.alloc();
            r.fill_normal(a);
            r.fill_normal(b);
            const auto want = ref_mul_mat(r.get_f32(a), a->ne, r.get_f32(b), b->ne);
            if (!repack_in_place(a, pairs)) GTEST_SKIP() << "no repacked kernels at this level";
            ASSERT_TRUE(a->has_flag(kFlagRepacked));
            EXPECT_FALSE(cpu::supports(ops::cont(r.ctx, a)));  // no other op reads the layout
            EXPECT_TRUE(cpu::supports(out));
            r.compute(out, th);
            const double e = nmse(r.get_f32(out), want);
            EXPECT_LE(e, limit_for(t)) << dtype_name(t) << " M " << M << " N " << N << " threads " << th
                                       << (a->has_flag(kFlagRepackedPairs) ? " pairs" : "");
          }
}

// A tied token embedding is repacked as the output matrix and looked up by GET_ROWS: every row
// of every matrix of a stack comes back as the file's layout gives it, exactly, alone and in pairs
// (a last group of an odd count on its own: M = 40).
TEST_P(MatmulLevelTest, GetRowsOfRepackedWeights) {
  for (DType t : kRepackTypes)
    for (int64_t M : {40L, 48L})
      for (bool pairs : {false, true}) {
        const int64_t K = dtype_info(t).block_size == 256 ? 512 : 96, a2 = 2, n = 2 * M;
        if (!cpu::repacked_kernels(t)) continue;
        OpRunner r;
        Tensor* a = r.input(t, {K, M, a2}, "a");
        Tensor* ids = r.input(DType::I32, {n, a2}, "ids");
        Tensor* out = ops::get_rows(r.ctx, a, ids);
        r.alloc();
        r.fill_normal(a);
        std::vector<int32_t> iv((size_t)(n * a2));
        for (size_t i = 0; i < iv.size(); ++i) iv[i] = (int32_t)((i * 7 + i / 5) % (size_t)M);
        r.set_i32(ids, iv);
        const auto av = r.get_f32(a);
        std::vector<float> want;
        for (int64_t j = 0; j < a2; ++j)
          for (int64_t i = 0; i < n; ++i) {
            const int64_t row = iv[(size_t)(j * n + i)];
            want.insert(want.end(), av.begin() + (j * M + row) * K, av.begin() + (j * M + row + 1) * K);
          }
        if (!repack_in_place(a, pairs)) GTEST_SKIP() << "no repacked kernels at this level";
        ASSERT_TRUE(cpu::supports(out));
        r.compute(out, 2);
        EXPECT_EQ(r.get_f32(out), want) << dtype_name(t) << " M " << M
                                        << (a->has_flag(kFlagRepackedPairs) ? " pairs" : "");
      }
}

// b not F32 rows (converted first), a transposed float view (the strided path), broadcast.
TEST_P(MatmulLevelTest, ConvertedBStridedABroadcast) {
  for (DType bt : {DType::F16, DType::BF16})
    for (int64_t N : {1L, 20L}) {
      OpRunner r;
      Tensor* a = r.input(DType::Q8_0, {64, 21, 2}, "a");
      Tensor* b = r.input(bt, {64, N, 4}, "b");
      Tensor* out = ops::mul_mat(r.ctx, a, b);
      r.alloc();
      r.fill_normal(a);
      r.fill_normal(b);
      r.compute(out, 2);
      EXPECT_LE(nmse(r.get_f32(out), ref_mul_mat(r.get_f32(a), a->ne, r.get_f32(b), b->ne)), 5e-4)
          << dtype_name(bt) << " N " << N;
    }
  for (DType t : {DType::F32, DType::F16})
    for (int64_t N : {1L, 5L, 24L}) {
      OpRunner r;
      Tensor* base = r.input(t, {19, 37}, "a_base");
      Tensor* a = ops::transpose(r.ctx, base);  // {37, 19}
      Tensor* b = r.input(DType::F32, {37, N}, "b");
      Tensor* out = ops::mul_mat(r.ctx, a, b);
      r.alloc();
      r.fill_normal(base);
      r.fill_normal(b);
      r.compute(out, 2);
      EXPECT_LE(nmse(r.get_f32(out), ref_mul_mat(r.get_f32(a), a->ne, r.get_f32(b), b->ne)), 1e-9)
          << dtype_name(t) << " N " << N;
    }
}

// Experts: crowded (gemm) and sparse (dot) experts in one node.
TEST_P(MatmulLevelTest, ExpertsMixCrowdedAndSparse) {
  struct Case {
    DType t;
    bool repack, pairs;  // experts repacked where the level has the kernels, in pairs where it reads them
  };
  std::vector<Case> cases;
  for (DType t : kWeightTypes) cases.push_back({t, false, false});
  for (DType t : kRepackTypes) cases.push_back({t, true, false});
  for (DType t : kRepackTypes) cases.push_back({t, true, true});  // 5 groups per expert: 2 pairs, 1 alone
  for (auto [t, repack, pairs] : cases) {
    OpRunner r;
    const int64_t bs = dtype_info(t).block_size;
    const int64_t K = bs == 1 ? 45 : bs * 2, M = repack ? 40 : 35, E = 4, n_used = 2, T = 24;
    Tensor* as = r.input(t, {K, M, E}, "experts");
    Tensor* b = r.input(DType::F32, {K, n_used, T}, "b");
    Tensor* ids = r.input(DType::I32, {n_used, T}, "ids");
    Tensor* out = ops::mul_mat_id(r.ctx, as, b, ids);
    r.alloc();
    r.fill_normal(as);
    r.fill_normal(b);
    std::vector<int32_t> idv;  // expert 0 in every token (crowded), the others rare
    for (int64_t tk = 0; tk < T; ++tk) {
      idv.push_back(0);
      idv.push_back(1 + (int32_t)(tk % 7 == 0 ? 1 : tk % 7 == 3 ? 2 : 0));
    }
    r.set_i32(ids, idv);
    const auto av = r.get_f32(as), bv = r.get_f32(b);
    if (repack) {
      if (!repack_in_place(as, pairs)) continue;  // no repacked kernels at this level
      ASSERT_TRUE(as->has_flag(kFlagRepacked));
    }
    r.compute(out, 2);
    std::vector<double> want((size_t)(M * n_used * T));
    for (int64_t tk = 0; tk < T; ++tk)
      for (int64_t i = 0; i < n_used; ++i)
        for (int64_t m = 0; m < M; ++m) {
          double s = 0;
          const int64_t e = idv[(size_t)(tk * n_used + i)];
          for (int64_t k = 0; k < K; ++k)
            s += (double)av[(size_t)((e * M + m) * K + k)] * bv[(size_t)((tk * n_used + i) * K + k)];
          want[(size_t)((tk * n_used + i) * M + m)] = s;
        }
    EXPECT_LE(nmse(r.get_f32(out), want), limit_for(t))
        << dtype_name(t) << (repack ? " repacked" : "") << (as->has_flag(kFlagRepackedPairs) ? " in pairs" : "");
  }
}

INSTANTIATE_TEST_SUITE_P(Levels, MatmulLevelTest, testing::ValuesIn(kLevels), level_name);

}  // namespace
}  // namespace loom::test
