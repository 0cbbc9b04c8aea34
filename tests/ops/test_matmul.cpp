// Matrix products on the CPU (MUL_MAT, MUL_MAT_ID, OUT_PROD) against double-precision loops
// written here: every weight type (quantized weights compared with the double product of their
// dequantized values), odd shapes, broadcasting, permuted/transposed b and a, the fused
// (few columns) and decoded-rows (many columns) paths, 1 and 3 threads, and exact decoding.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "../../lib/backends/cpu/src/dispatch.h"
#include "op_harness.h"

namespace loom::test {
namespace {

constexpr double kMatmulNmse = 5e-4;  // REFERENCE.md limit for mul_mat-like ops

// Tighter bound per weight type. Plain float weights: f32 accumulation of exactly representable
// products, far below the limit (1e-9). Quantized weights: the kernels quantize the b columns
// to int8 blocks (scale d = amax / 127) for integer dot products, so each b value carries a
// rounding error uniform in +-d/2, an error power of d^2 / 12 against var(b); with normal b and
// amax <= 4 sigma per block that is (4 / 127)^2 / 12 = 8.3e-5 of the output power, hence 1e-4.
// BF16: the GEMM rounds the columns to bf16 where the CPU has AVX-512 BF16 (NMSE ~2e-6).
double nmse_bound(DType weight) {
  return weight == DType::BF16 ? 1e-5 : dtype_info(weight).block_size == 1 ? 1e-9 : 1e-4;
}

const DType kWeightTypes[] = {DType::F32, DType::F16, DType::BF16, DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K};

// A K that is legal for the type: odd (not a multiple of 32) for plain floats.
int64_t k_for(DType t, int64_t plain) {
  const int64_t bs = dtype_info(t).block_size;
  return bs == 1 ? plain : bs * std::max<int64_t>(1, (plain + bs - 1) / bs);
}

// ---- MUL_MAT over types x shapes x threads ------------------------------------------------------

struct MatmulShape {
  const char* name;
  int64_t K, M, N, a2, a3, b2, b3;
};
const MatmulShape kShapes[] = {
    {"decode", 67, 13, 1, 1, 1, 1, 1},    // one column: the fused path
    {"few_cols", 67, 13, 5, 1, 1, 1, 1},  // < kMaxDotCols columns in one fused call
    {"eight_cols", 300, 7, 8, 1, 1, 1, 1},
    {"many_cols", 300, 21, 19, 1, 1, 1, 1},  // rows decoded once, then reused
    {"tall_b", 67, 1, 33, 1, 1, 1, 1},       // one weight row: columns split over threads
    {"broadcast", 67, 5, 3, 2, 1, 4, 3},     // b2 = 2 a2, b3 = 3 a3
    {"broadcast_many", 67, 9, 12, 1, 2, 3, 2},
};

struct MatmulParam {
  DType type;
  MatmulShape shape;
  int threads;
};

class MatmulTest : public testing::TestWithParam<MatmulParam> {};

TEST_P(MatmulTest, MatchesDoubleReference) {
  const MatmulParam& p = GetParam();
  const MatmulShape& s = p.shape;
  const int64_t K = k_for(p.type, s.K);
  OpRunner r;
  Tensor* a = r.input(p.type, {K, s.M, s.a2, s.a3}, "a");
  Tensor* b = r.input(DType::F32, {K, s.N, s.b2, s.b3}, "b");
  Tensor* out = ops::mul_mat(r.ctx, a, b);
  ASSERT_TRUE(cpu::supports(out));
  r.alloc();
  r.fill_normal(a);
  r.fill_normal(b);
  r.compute(out, p.threads);
  const auto want = ref_mul_mat(r.get_f32(a), a->ne, r.get_f32(b), b->ne);
  const auto got = r.get_f32(out);
  EXPECT_LE(nmse(got, want), kMatmulNmse);
  EXPECT_LE(nmse(got, want), nmse_bound(p.type));
}

std::vector<MatmulParam> matmul_params() {
  std::vector<MatmulParam> v;
  for (DType t : kWeightTypes)
    for (const MatmulShape& s : kShapes)
      for (int th : {1, 3}) v.push_back({t, s, th});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulTest, testing::ValuesIn(matmul_params()),
                         [](const testing::TestParamInfo<MatmulParam>& i) {
                           return std::string(dtype_name(i.param.type)) + "_" + i.param.shape.name + "_t" +
                                  std::to_string(i.param.threads);
                         });

// ---- layouts of b and a --------------------------------------------------------------------

// b as attention builds it: a permuted view {K, N, H} of a contiguous {K, H, N} tensor.
TEST(Matmul, PermutedBLikeAttention) {
  for (DType t : {DType::F32, DType::F16, DType::Q8_0})
    for (int th : {1, 3}) {
      OpRunner r;
      const int64_t K = k_for(t, 40), M = 11, H = 4, N = 6;
      Tensor* a = r.input(t, {K, M, 2}, "a");  // GQA-like: 2 weight matrices for 4 heads
      Tensor* base = r.input(DType::F32, {K, H, N}, "b_base");
      Tensor* b = ops::permute(r.ctx, base, 0, 2, 1, 3);
      ASSERT_EQ(b->ne[1], N);
      ASSERT_EQ(b->ne[2], H);
      Tensor* out = ops::mul_mat(r.ctx, a, b);
      r.alloc();
      r.fill_normal(a);
      r.fill_normal(base);
      r.compute(out, th);
      EXPECT_LE(nmse(r.get_f32(out), ref_mul_mat(r.get_f32(a), a->ne, r.get_f32(b), b->ne)), nmse_bound(t))
          << dtype_name(t) << " threads " << th;
    }
}

// b with a strided dim 0 (a transposed view) and b in F16/BF16: converted before the products.
TEST(Matmul, TransposedAndHalfPrecisionB) {
  for (DType bt : {DType::F32, DType::F16, DType::BF16})
    for (bool transposed : {false, true})
      for (int th : {1, 3}) {
        OpRunner r;
        const int64_t K = 64, M = 9, N = 10;
        Tensor* a = r.input(DType::Q4_0, {K, M}, "a");
        Tensor* base = transposed ? r.input(bt, {N, K}, "b_base") : r.input(bt, {K, N}, "b");
        Tensor* b = transposed ? ops::transpose(r.ctx, base) : base;
        Tensor* out = ops::mul_mat(r.ctx, a, b);
        ASSERT_TRUE(cpu::supports(out));
        r.alloc();
        r.fill_normal(a);
        r.fill_normal(base);
        r.compute(out, th);
        EXPECT_LE(nmse(r.get_f32(out), ref_mul_mat(r.get_f32(a), a->ne, r.get_f32(b), b->ne)), nmse_bound(DType::Q4_0))
            << dtype_name(bt) << (transposed ? " transposed" : "") << " threads " << th;
      }
}

// a as a transposed float view (V^T in attention without flash): dim 0 strided.
TEST(Matmul, TransposedFloatWeights) {
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (int64_t N : {1, 4, 12}) {
      OpRunner r;
      const int64_t K = 37, M = 15;
      Tensor* base = r.input(t, {M, K, 3}, "a_base");
      Tensor* a = ops::transpose(r.ctx, base);  // {K, M, 3}, nb0 = M * size
      Tensor* b = r.input(DType::F32, {K, N, 3}, "b");
      Tensor* out = ops::mul_mat(r.ctx, a, b);
      ASSERT_TRUE(cpu::supports(out));
      r.alloc();
      r.fill_normal(base);
      r.fill_normal(b);
      r.compute(out, 3);
      EXPECT_LE(nmse(r.get_f32(out), ref_mul_mat(r.get_f32(a), a->ne, r.get_f32(b), b->ne)), 1e-9)
          << dtype_name(t) << " N " << N;
    }
}

TEST(Matmul, TransposedQuantWeightsAreUnsupported) {
  OpRunner r;
  Tensor* base = r.input(DType::Q8_0, {64, 64}, "a");
  Tensor* a = ops::transpose(r.ctx, base);
  Tensor* b = r.input(DType::F32, {64, 2}, "b");
  EXPECT_FALSE(cpu::supports(ops::mul_mat(r.ctx, a, b)));
}

// Many threads, sizes where row blocks, thread shares and column groups do not line up.
TEST(Matmul, LargerQuantizedProductManyThreads) {
  for (DType t : {DType::Q4_K, DType::Q6_K, DType::F16}) {
    OpRunner r;
    Tensor* a = r.input(t, {512, 101}, "a");
    Tensor* b = r.input(DType::F32, {512, 27}, "b");
    Tensor* out = ops::mul_mat(r.ctx, a, b);
    r.alloc();
    r.fill_normal(a);
    r.fill_normal(b);
    r.compute(out, 5);
    EXPECT_LE(nmse(r.get_f32(out), ref_mul_mat(r.get_f32(a), a->ne, r.get_f32(b), b->ne)), nmse_bound(t))
        << dtype_name(t);
  }
}

// Per node of g (2 threads, no fusions): 1 where a product takes b as an earlier one prepared it,
// -1 for a tensor that is not a node.
struct PreparedB {
  const Graph& g;
  std::vector<uint8_t> ready;
  explicit PreparedB(const Graph& graph) : g(graph) {
    std::vector<size_t> sizes;
    for (const Tensor* n : g.nodes()) sizes.push_back(cpu::work_size(n, 2));
    ready = cpu::prepared_b_nodes(g.nodes(), {}, sizes, 2);
  }
  int operator()(const Tensor* t) const {
    const auto it = std::find(g.nodes().begin(), g.nodes().end(), t);
    return it == g.nodes().end() ? -1 : (int)ready[(size_t)(it - g.nodes().begin())];
  }
};

// MUL_MATs over one b (Q/K/V, gate/up) prepare it once: a later one finds b quantized in the
// scratch when only scratch-free nodes ran in between (here SET_ROWS of f32 rows), and prepares
// it again after a node that used the scratch (CPY f32 -> f16, a product over another b), for
// another form of b (F16 weights read f32 columns) or after b itself was written (SET_ROWS into b). The flags are
// checked, and every product against the reference on 2 threads, so a stale or clobbered b would show.
TEST(Matmul, SiblingProductsPrepareBOnce) {
  OpRunner r;
  const int64_t K = 256, N = 160;  // b big enough to be prepared once for both threads
  Tensor* b = r.input(DType::F32, {K, N}, "b");
  Tensor* b2 = r.input(DType::F32, {K, N}, "b2");
  const DType types[] = {DType::Q8_0, DType::Q8_0, DType::Q4_0, DType::Q8_0, DType::F16};
  Tensor* w[5];
  for (int i = 0; i < 5; ++i) w[i] = r.input(types[i], {K, 24 + 8 * i}, "w");
  Tensor* ids = r.input(DType::I32, {N}, "ids");
  Tensor* cache = r.input(DType::F16, {24, N}, "cache");
  Tensor* m[5];
  Graph g;
  auto add = [&](Tensor* t) {
    g.build_forward(t);
    return t;
  };
  m[0] = add(ops::mul_mat(r.ctx, w[0], b));
  Tensor* stored = add(ops::set_rows(r.ctx, cache, m[0], ids));
  m[1] = add(ops::mul_mat(r.ctx, w[1], b));
  m[2] = add(ops::mul_mat(r.ctx, w[2], b));
  Tensor* half = add(ops::cpy(r.ctx, b, r.ctx.new_tensor(DType::F16, {K, N})));
  Tensor* other = add(ops::mul_mat(r.ctx, w[1], b2));
  m[3] = add(ops::mul_mat(r.ctx, w[3], b));
  m[4] = add(ops::mul_mat(r.ctx, w[4], b));
  Tensor* again = add(ops::mul_mat(r.ctx, w[0], b));
  Tensor* rows = r.input(DType::F32, {K, 4}, "rows");
  Tensor* rows_at = r.input(DType::I32, {4}, "rows_at");
  Tensor* overwrite = add(ops::set_rows(r.ctx, b, rows, rows_at));  // b's columns 3, 50, 90, 151
  Tensor* after = add(ops::mul_mat(r.ctx, w[1], b));
  r.alloc();
  r.fill_normal(b);
  r.fill_normal(b2);
  r.fill_normal(rows, 3.0f);
  r.set_i32(rows_at, {3, 50, 90, 151});
  const std::vector<float> b_before = r.get_f32(b);
  for (Tensor* t : w) r.fill_normal(t);
  std::vector<int32_t> perm((size_t)N);
  for (int64_t i = 0; i < N; ++i) perm[(size_t)i] = (int32_t)((i * 7) % N);
  r.set_i32(ids, perm);

  const PreparedB flag(g);
  EXPECT_EQ(flag(m[0]), 0);
  EXPECT_EQ(flag(stored), 0);
  EXPECT_EQ(flag(m[1]), 1);  // after SET_ROWS of f32 rows: no scratch
  EXPECT_EQ(flag(m[2]), 1);  // Q4_0 reads the same int8 columns
  EXPECT_EQ(flag(half), 0);
  EXPECT_EQ(flag(other), 0);  // the CPY used the scratch
  EXPECT_EQ(flag(m[3]), 0);   // b2's columns in the scratch
  EXPECT_EQ(flag(m[4]), 0);   // f32 columns: nothing prepared
  EXPECT_EQ(flag(again), 0);
  EXPECT_EQ(flag(overwrite), 0);
  EXPECT_EQ(flag(after), 0);  // b was written since

  ThreadPool pool(2);
  cpu::compute_graph(g, pool);
  for (int i = 0; i < 5; ++i)
    EXPECT_LE(nmse(r.get_f32(m[i]), ref_mul_mat(r.get_f32(w[i]), w[i]->ne, b_before, b->ne)), nmse_bound(types[i]))
        << "product " << i;
  EXPECT_LE(nmse(r.get_f32(other), ref_mul_mat(r.get_f32(w[1]), w[1]->ne, r.get_f32(b2), b2->ne)), 1e-4);
  EXPECT_LE(nmse(r.get_f32(again), ref_mul_mat(r.get_f32(w[0]), w[0]->ne, b_before, b->ne)), 1e-4);
  const std::vector<float> b_after = r.get_f32(b);
  ASSERT_NE(b_after, b_before);
  EXPECT_LE(nmse(r.get_f32(after), ref_mul_mat(r.get_f32(w[1]), w[1]->ne, b_after, b->ne)), 1e-4);
}

// Products of one decode column (q, k, v as a Q4_K_M file holds them; gate, up) run as one phase
// (product_runs, mul_mat_run): a member may follow a view, a product reading b in another form
// (F16 weights: f32 columns) ends a run. Every product must equal itself computed alone bit for
// bit: the same kernels over the same rows, only the threads' shares of the rows differ.
TEST(Matmul, ProductRunsOfOneColumnEqualEachProductAlone) {
  for (int nth : {2, 3}) {
    OpRunner r;
    const int64_t K = 512;
    Tensor* b = r.input(DType::F32, {K, 1}, "b");
    const DType types[] = {DType::Q4_K, DType::Q4_K, DType::Q6_K, DType::F16, DType::Q8_0, DType::Q8_0};
    const int64_t rows[] = {256, 64, 64, 64, 128, 96};
    Tensor* w[6];
    Tensor* m[6];
    for (int i = 0; i < 6; ++i) w[i] = r.input(types[i], {K, rows[i]}, "w");
    Graph g;
    for (int i = 0; i < 6; ++i) {
      m[i] = ops::mul_mat(r.ctx, w[i], b);
      g.build_forward(m[i]);
      if (i == 1) g.build_forward(ops::reshape(r.ctx, m[1], {16, 4}));  // a view between members
    }
    r.alloc();
    r.fill_normal(b);
    for (Tensor* t : w) r.fill_normal(t);

    const std::vector<uint32_t> last = cpu::product_runs(g.nodes(), {}, nth);
    auto at = [&](const Tensor* t) {
      return (size_t)(std::find(g.nodes().begin(), g.nodes().end(), t) - g.nodes().begin());
    };
    EXPECT_EQ(last[at(m[0])], at(m[2])) << "q, k, v: one run";
    EXPECT_EQ(last[at(m[3])], 0u) << "F16 reads f32 columns";
    EXPECT_EQ(last[at(m[4])], at(m[5])) << "gate, up: one run";

    ThreadPool pool(nth);
    cpu::compute_graph(g, pool);
    for (int i = 0; i < 6; ++i) {
      const std::vector<float> in_run = r.get_f32(m[i]);
      Graph alone;
      alone.build_forward(m[i]);
      cpu::compute_graph(alone, pool);
      EXPECT_EQ(in_run, r.get_f32(m[i])) << "product " << i << ", " << nth << " threads";
      EXPECT_LE(nmse(in_run, ref_mul_mat(r.get_f32(w[i]), w[i]->ne, r.get_f32(b), b->ne)), nmse_bound(types[i]));
    }
  }
}

// A product's residual ADD is made by the product's threads, each adding the rows it made
// (product_adds, mul_mat_add), for a decode column and a few: the sum must equal the ADD computed
// after the product bit for bit, with the product on either side. Products on the GEMM path
// (many columns) and ADDs that broadcast keep their own node.
TEST(Matmul, ResidualAddsMadeByTheProductsThreadsEqualTheAddAfterIt) {
  for (int nth : {2, 3})
    for (int64_t N : {1, 3, 40}) {
      OpRunner r;
      const int64_t K = 512, M = 160;
      Tensor* b = r.input(DType::F32, {K, N}, "b");
      Tensor* w = r.input(DType::Q4_K, {K, M}, "w");
      Tensor* x = r.input(DType::F32, {M, N}, "x");
      Tensor* bias = r.input(DType::F32, {1, N}, "bias");
      Graph g;
      Tensor* m1 = ops::mul_mat(r.ctx, w, b);
      Tensor* s1 = ops::add(r.ctx, m1, x);
      Tensor* m2 = ops::mul_mat(r.ctx, w, b);
      Tensor* s2 = ops::add(r.ctx, x, ops::reshape(r.ctx, m2, {M, N}));  // a view between
      Tensor* m3 = ops::mul_mat(r.ctx, w, b);
      Tensor* s3 = ops::add(r.ctx, m3, bias);  // broadcast: its own node
      for (Tensor* t : {s1, s2, s3}) g.build_forward(t);
      r.alloc();
      for (Tensor* t : {b, w, x, bias}) r.fill_normal(t);

      const std::vector<uint32_t> adds = cpu::product_adds(g.nodes(), {}, cpu::product_runs(g.nodes(), {}, nth), nth);
      auto at = [&](const Tensor* t) {
        return (size_t)(std::find(g.nodes().begin(), g.nodes().end(), t) - g.nodes().begin());
      };
      const bool dot = N < 16;
      EXPECT_EQ(adds[at(m1)], dot ? at(s1) : 0u) << N << " columns";
      EXPECT_EQ(adds[at(m2)], dot ? at(s2) : 0u) << N << " columns";
      EXPECT_EQ(adds[at(m3)], 0u) << "a broadcast ADD";

      ThreadPool pool(nth);
      cpu::compute_graph(g, pool);
      const std::vector<float> xs = r.get_f32(x);
      for (auto [m, s] : {std::pair{m1, s1}, std::pair{m2, s2}}) {
        const std::vector<float> fused = r.get_f32(s), product = r.get_f32(m);
        ASSERT_EQ(fused.size(), xs.size());
        for (size_t i = 0; i < xs.size(); ++i)
          ASSERT_EQ(fused[i], product[i] + xs[i]) << "element " << i << ", " << N << " columns, " << nth << " threads";
      }
    }
}

// One-hot columns of b pick single weights: the product must equal the reference dequantized
// value bit for bit for float weights, in the fused path (8 columns) and the decoded-rows path
// (K columns). Quantized weights see the column as int8 blocks: 1.0 -> 127 with scale
// fl(1 / 127) (blocks of 256) or that scale rounded to fp16 (blocks of 32, as GGUF's Q8_0), so
// the pick is w * 127 * scale up to the rounding of the scale products, a few ulps of the terms
// summed: for Q4_K the value is d * sc * q - dmin * m, two terms each at most 2 max |w| of the
// row, so the bound is 1e-6 (8 ulps) of the row's max |w|.
TEST(Matmul, OneHotColumnsReproduceDequantizedWeightsExactly) {
  for (DType t : kWeightTypes)
    for (bool many : {false, true}) {
      OpRunner r;
      const int64_t K = k_for(t, 64), M = 6;
      std::vector<int64_t> pick;
      if (many) {
        for (int64_t k = 0; k < K; ++k) pick.push_back(k);
      } else {
        for (int64_t k : {0L, 5L, 15L, 16L, 31L, K / 2 + 3, K - 17, K - 1}) pick.push_back(k);
      }
      const int64_t N = (int64_t)pick.size();
      Tensor* a = r.input(t, {K, M}, "a");
      Tensor* b = r.input(DType::F32, {K, N}, "b");
      Tensor* out = ops::mul_mat(r.ctx, a, b);
      r.alloc();
      r.fill_normal(a, 3.0f);
      std::vector<float> bv((size_t)(K * N), 0.0f);
      for (int64_t n = 0; n < N; ++n) bv[(size_t)(n * K + pick[(size_t)n])] = 1.0f;
      r.set_f32(b, bv);
      r.compute(out, 2);
      const auto av = r.get_f32(a);
      const auto got = r.get_f32(out);
      const double rel = dtype_info(t).block_size == 1 ? 0.0 : 1e-6;
      const cpu::MatmulActivations acts = cpu::matmul_activations(t, K);
      const bool q8_32 = (N >= acts.large_from ? acts.large : acts.small) == cpu::ActRounding::q8_32;
      const float one = q8_32 ? 127.0f * fp16_to_f32(f32_to_fp16(1.0f / 127.0f)) : 1.0f;  // 1.0 as rounded
      int bad = 0;
      for (int64_t m = 0; m < M; ++m) {
        double row_max = 0;
        for (int64_t k = 0; k < K; ++k) row_max = std::max(row_max, (double)std::fabs(av[(size_t)(m * K + k)]));
        for (int64_t n = 0; n < N; ++n) {
          const float want = av[(size_t)(m * K + pick[(size_t)n])] * one;
          bad += std::fabs((double)got[(size_t)(n * M + m)] - want) > rel * row_max;
        }
      }
      EXPECT_EQ(bad, 0) << dtype_name(t) << (many ? " many columns" : " 8 columns");
    }
}

// Every finite half (subnormals included) decodes exactly through an F16 weight.
TEST(Matmul, F16WeightsDecodeEveryFiniteHalfExactly) {
  OpRunner r;
  const int64_t K = 32, M = 63488 / 32;  // 65536 bit patterns minus 2048 inf/nan
  Tensor* a = r.input(DType::F16, {K, M}, "a");
  Tensor* b = r.input(DType::F32, {K, K}, "b");
  Tensor* out = ops::mul_mat(r.ctx, a, b);
  r.alloc();
  std::vector<fp16_t> bits;
  for (uint32_t h = 0; h < 65536; ++h)
    if (((h >> 10) & 31) != 31) bits.push_back((fp16_t)h);
  ASSERT_EQ((int64_t)bits.size(), K * M);
  std::memcpy(a->data, bits.data(), bits.size() * 2);
  std::vector<float> eye((size_t)(K * K), 0.0f);
  for (int64_t k = 0; k < K; ++k) eye[(size_t)(k * K + k)] = 1.0f;
  r.set_f32(b, eye);
  r.compute(out, 2);
  const auto got = r.get_f32(out);  // {M, K}: got[n * M + m] = a[n, m]
  int bad = 0;
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      const float want = fp16_to_f32(bits[(size_t)(m * K + k)]);
      const float g = got[(size_t)(k * M + m)];
      bad += std::memcmp(&g, &want, 4) != 0 && !(g == 0.0f && want == 0.0f);
    }
  EXPECT_EQ(bad, 0);
}

// ---- MUL_MAT_ID --------------------------------------------------------------------------------

// dst[:, i, t] = as[:, :, ids[i, t]] x b[:, i % bn, t]
std::vector<double> ref_mul_mat_id(const std::vector<float>& as, const int64_t* ane, const std::vector<float>& b,
                                   const int64_t* bne, const std::vector<int32_t>& ids, int64_t n_used, int64_t T) {
  const int64_t K = ane[0], M = ane[1];
  std::vector<double> out((size_t)(M * n_used * T));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < n_used; ++i) {
      const int64_t e = ids[(size_t)(t * n_used + i)];
      for (int64_t m = 0; m < M; ++m) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) s += (double)as[idx(ane, k, m, e)] * (double)b[idx(bne, k, i % bne[1], t)];
        out[(size_t)((t * n_used + i) * M + m)] = s;
      }
    }
  return out;
}

struct MoeCase {
  const char* name;
  int64_t K, M, E, n_used, T;
  bool broadcast_b;
};
const MoeCase kMoeCases[] = {
    {"decode", 67, 13, 6, 3, 1, false},
    {"prefill", 67, 11, 5, 2, 9, false},
    {"broadcast_b", 67, 7, 4, 3, 5, true},
    {"crowded_experts", 40, 9, 3, 2, 20, false},  // experts with > 8 columns: decoded rows
};

struct MoeParam {
  DType type;
  MoeCase c;
  int threads;
};
class MatmulIdTest : public testing::TestWithParam<MoeParam> {};

TEST_P(MatmulIdTest, MatchesDoubleReference) {
  const MoeParam& p = GetParam();
  const MoeCase& c = p.c;
  const int64_t K = k_for(p.type, c.K);
  OpRunner r;
  Tensor* as = r.input(p.type, {K, c.M, c.E}, "experts");
  Tensor* b = r.input(DType::F32, {K, c.broadcast_b ? 1 : c.n_used, c.T}, "b");
  Tensor* ids = r.input(DType::I32, {c.n_used, c.T}, "ids");
  Tensor* out = ops::mul_mat_id(r.ctx, as, b, ids);
  ASSERT_TRUE(cpu::supports(out));
  r.alloc();
  r.fill_normal(as);
  r.fill_normal(b);
  // distinct experts per token, as top-k gives
  std::vector<int32_t> idv;
  std::mt19937 rng(7);
  for (int64_t t = 0; t < c.T; ++t) {
    std::vector<int32_t> e((size_t)c.E);
    for (int64_t i = 0; i < c.E; ++i) e[(size_t)i] = (int32_t)i;
    std::shuffle(e.begin(), e.end(), rng);
    for (int64_t i = 0; i < c.n_used; ++i) idv.push_back(e[(size_t)i]);
  }
  r.set_i32(ids, idv);
  r.compute(out, p.threads);
  const auto want = ref_mul_mat_id(r.get_f32(as), as->ne, r.get_f32(b), b->ne, idv, c.n_used, c.T);
  const auto got = r.get_f32(out);
  EXPECT_LE(nmse(got, want), kMatmulNmse);
  EXPECT_LE(nmse(got, want), nmse_bound(p.type));
}

std::vector<MoeParam> moe_params() {
  std::vector<MoeParam> v;
  for (DType t : kWeightTypes)
    for (const MoeCase& c : kMoeCases)
      for (int th : {1, 3}) v.push_back({t, c, th});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Types, MatmulIdTest, testing::ValuesIn(moe_params()),
                         [](const testing::TestParamInfo<MoeParam>& i) {
                           return std::string(dtype_name(i.param.type)) + "_" + i.param.c.name + "_t" +
                                  std::to_string(i.param.threads);
                         });

// An expert id out of range is an upstream bug; the kernel must not crash, and marks the column.
TEST(MatmulId, OutOfRangeIdGivesNaNColumnOthersCorrect) {
  OpRunner r;
  Tensor* as = r.input(DType::F32, {8, 3, 2}, "experts");
  Tensor* b = r.input(DType::F32, {8, 2, 1}, "b");
  Tensor* ids = r.input(DType::I32, {2, 1}, "ids");
  Tensor* out = ops::mul_mat_id(r.ctx, as, b, ids);
  r.alloc();
  r.fill_normal(as);
  r.fill_normal(b);
  r.set_i32(ids, {1, 7});
  r.compute(out, 2);
  const auto got = r.get_f32(out);
  const auto want = ref_mul_mat_id(r.get_f32(as), as->ne, r.get_f32(b), b->ne, {1, 1}, 2, 1);
  for (int m = 0; m < 3; ++m) {
    EXPECT_NEAR(got[(size_t)m], want[(size_t)m], 1e-5);
    EXPECT_TRUE(std::isnan(got[(size_t)(3 + m)]));
  }
}

// Gate and up experts over one b quantize it once, as sibling MUL_MATs do; a MUL_MAT over the
// same b after them does not take the experts' scratch (another op's plan), and an expert
// product after a scratch-using node prepares b again.
TEST(MatmulId, SiblingExpertProductsPrepareBOnce) {
  for (DType t : {DType::Q8_0, DType::Q4_K}) {
    OpRunner r;
    const int64_t K = 256, M = 40, E = 4, n_used = 2, T = 48;
    Tensor* b = r.input(DType::F32, {K, 1, T}, "b");
    Tensor* ids = r.input(DType::I32, {n_used, T}, "ids");
    Tensor* as[3];
    for (Tensor*& a : as) a = r.input(t, {K, M, E}, "experts");
    Tensor* flat = ops::reshape(r.ctx, b, {K, T});
    Tensor* w = r.input(t, {K, M}, "w");
    Graph g;
    auto add = [&](Tensor* x) {
      g.build_forward(x);
      return x;
    };
    Tensor* gate = add(ops::mul_mat_id(r.ctx, as[0], b, ids));
    Tensor* up = add(ops::mul_mat_id(r.ctx, as[1], b, ids));
    Tensor* plain = add(ops::mul_mat(r.ctx, w, flat));
    Tensor* again = add(ops::mul_mat_id(r.ctx, as[2], b, ids));
    r.alloc();
    r.fill_normal(b);
    for (Tensor* a : as) r.fill_normal(a);
    r.fill_normal(w);
    std::vector<int32_t> idv((size_t)(n_used * T));
    for (int64_t i = 0; i < n_used * T; ++i) idv[(size_t)i] = (int32_t)((i * 5 + i / 3) % E);
    r.set_i32(ids, idv);

    const PreparedB flag(g);
    EXPECT_EQ(flag(gate), 0);
    EXPECT_EQ(flag(up), 1);
    EXPECT_EQ(flag(plain), 0);
    EXPECT_EQ(flag(again), 0);

    ThreadPool pool(2);
    cpu::compute_graph(g, pool);
    const Tensor* outs[3] = {gate, up, again};
    for (int i = 0; i < 3; ++i)
      EXPECT_LE(
          nmse(r.get_f32(outs[i]), ref_mul_mat_id(r.get_f32(as[i]), as[i]->ne, r.get_f32(b), b->ne, idv, n_used, T)),
          1e-4)
          << dtype_name(t) << " expert product " << i;
    EXPECT_LE(nmse(r.get_f32(plain), ref_mul_mat(r.get_f32(w), w->ne, r.get_f32(flat), flat->ne)), 1e-4);
  }
}

// ---- OUT_PROD ----------------------------------------------------------------------------------

// dst[m, n, i2, i3] = sum_k a[m, k, i2 / (b2 / a2), i3 / (b3 / a3)] * b[n, k, i2, i3]
std::vector<double> ref_out_prod(const std::vector<float>& a, const int64_t* ane, const std::vector<float>& b,
                                 const int64_t* bne) {
  const int64_t M = ane[0], K = ane[1], N = bne[0];
  const int64_t dne[4] = {M, N, bne[2], bne[3]};
  std::vector<double> out((size_t)(M * N * bne[2] * bne[3]));
  for (int64_t i3 = 0; i3 < bne[3]; ++i3)
    for (int64_t i2 = 0; i2 < bne[2]; ++i2)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k)
            s += (double)a[idx(ane, m, k, i2 / (bne[2] / ane[2]), i3 / (bne[3] / ane[3]))] *
                 (double)b[idx(bne, n, k, i2, i3)];
          out[idx(dne, m, n, i2, i3)] = s;
        }
  return out;
}

TEST(MatmulOutProd, TypesShapesBroadcastAndThreads) {
  struct Case {
    int64_t M, K, N, a2, a3, b2, b3;
  };
  const Case cases[] = {
      {13, 7, 5, 1, 1, 1, 1}, {600, 3, 9, 1, 1, 1, 1}, {5, 31, 1, 2, 1, 4, 3}, {1, 17, 3, 1, 1, 1, 1}};
  for (DType t : {DType::F32, DType::F16, DType::BF16})
    for (const Case& c : cases)
      for (int th : {1, 3}) {
        OpRunner r;
        Tensor* a = r.input(t, {c.M, c.K, c.a2, c.a3}, "a");
        Tensor* b = r.input(DType::F32, {c.N, c.K, c.b2, c.b3}, "b");
        Tensor* out = ops::out_prod(r.ctx, a, b);
        ASSERT_TRUE(cpu::supports(out));
        r.alloc();
        r.fill_normal(a);
        r.fill_normal(b);
        r.compute(out, th);
        const double e = nmse(r.get_f32(out), ref_out_prod(r.get_f32(a), a->ne, r.get_f32(b), b->ne));
        EXPECT_LE(e, kMatmulNmse);
        EXPECT_LE(e, 1e-9) << dtype_name(t) << " M " << c.M << " K " << c.K << " N " << c.N << " threads " << th;
      }
}

// The weight gradient of mul_mat: out_prod(x, transpose(grad)) with grad {M, N}: b is a strided view.
TEST(MatmulOutProd, TransposedBAsInBackward) {
  OpRunner r;
  const int64_t M = 19, K = 11, N = 6;
  Tensor* a = r.input(DType::F32, {M, K}, "a");
  Tensor* gbase = r.input(DType::F32, {K, N}, "g");
  Tensor* b = ops::transpose(r.ctx, gbase);  // {N, K}
  Tensor* out = ops::out_prod(r.ctx, a, b);
  r.alloc();
  r.fill_normal(a);
  r.fill_normal(gbase);
  r.compute(out, 3);
  EXPECT_LE(nmse(r.get_f32(out), ref_out_prod(r.get_f32(a), a->ne, r.get_f32(b), b->ne)), 1e-9);
}

// A column's product does not depend on the columns that come with it: from 16 columns on, the
// int8 GEMM (and the f32 GEMM of Q2_K and the i-quants) reads b rounded as the dot kernels round
// it (int8 blocks of 32 or 256 values, as llama.cpp's quantized products do on every path). Exact
// activations, or 32-value blocks where the dots take 256, would move each product by ~1e-3
// (NMSE ~1e-6); for the i-quants that moved llama.cpp's perplexity of an IQ2_M file by 0.1%.
TEST(Matmul, PromptBatchesRoundActivationsAsTheDots) {
  for (DType t :
       {DType::Q8_0,   DType::Q4_0,  DType::Q4_K,    DType::Q6_K,  DType::Q4_1,  DType::Q5_0,   DType::Q5_1,
        DType::IQ4_NL, DType::MXFP4, DType::Q2_K,    DType::Q3_K,  DType::Q5_K,  DType::IQ4_XS, DType::IQ2_XXS,
        DType::IQ2_XS, DType::IQ2_S, DType::IQ3_XXS, DType::IQ3_S, DType::IQ1_S, DType::IQ1_M}) {
    const cpu::MatmulActivations acts = cpu::matmul_activations(t, 512);
    ASSERT_NE(acts.large, cpu::ActRounding::none) << dtype_name(t);
    ASSERT_EQ(acts.large, acts.small) << dtype_name(t);
    OpRunner r;
    const int64_t K = 512, M = 8, N = 24, pick = 5;
    Tensor* a = r.input(t, {K, M}, "a");
    Tensor* b = r.input(DType::F32, {K, N}, "b");
    Tensor* one = r.input(DType::F32, {K, 1}, "one");
    Tensor* batch = ops::mul_mat(r.ctx, a, b);
    Tensor* single = ops::mul_mat(r.ctx, a, one);
    r.alloc();
    r.fill_normal(a, 1.0f);
    r.fill_normal(b, 1.0f);
    const std::vector<float> bv = r.get_f32(b);
    r.set_f32(one, std::vector<float>(bv.begin() + pick * K, bv.begin() + (pick + 1) * K));
    r.compute(batch, 2);
    r.compute(single, 2);
    const std::vector<float> got = r.get_f32(batch), want = r.get_f32(single);
    std::vector<double> want_d(want.begin(), want.end());
    EXPECT_LE(nmse(std::vector<float>(got.begin() + pick * M, got.begin() + (pick + 1) * M), want_d), 1e-10)
        << dtype_name(t);
  }
}

}  // namespace
}  // namespace loom::test
