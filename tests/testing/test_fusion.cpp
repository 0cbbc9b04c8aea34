// Fusion: can_fuse and the pattern matcher (positive and negative: an intermediate read twice or
// marked as output must not fuse), the topk-moe variants and the model's router shape, and fused
// against unfused numerics on the CPU for both patterns (with proof that the fused kernel ran).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>

#include "loom/cpu/cpu.h"
#include "loom/graph/fusion.h"
#include "loom/graph/ops.h"

namespace loom {
namespace {

using namespace ops;

Tensor* in(Context& c, std::initializer_list<int64_t> ne) {
  Tensor* t = c.new_tensor(DType::F32, ne);
  t->flags |= kFlagInput;
  return t;
}

TEST(CanFuse, ChainOfSingleUse) {
  Context c;
  Tensor* n = rms_norm(c, in(c, {8, 3}), 1e-6f);
  Tensor* y = mul(c, n, in(c, {8}));
  Graph g;
  g.build_forward(y);
  ASSERT_EQ(g.n_nodes(), 2u);
  EXPECT_TRUE(can_fuse(g, 0, {OpKind::RMS_NORM, OpKind::MUL}));
  EXPECT_FALSE(can_fuse(g, 0, {OpKind::RMS_NORM, OpKind::ADD}));
  EXPECT_FALSE(can_fuse(g, 1, {OpKind::RMS_NORM, OpKind::MUL}));
  EXPECT_FALSE(can_fuse(g, 1, {OpKind::MUL, OpKind::MUL}));  // past the end
}

TEST(CanFuse, RefusesAnIntermediateUsedTwiceOrOutputOrNotChained) {
  {
    Context c;
    Tensor* n = rms_norm(c, in(c, {8, 3}), 1e-6f);
    Tensor* y = mul(c, n, in(c, {8}));
    Tensor* z = add(c, y, n);  // n read twice
    Graph g;
    g.build_forward(z);
    EXPECT_FALSE(can_fuse(g, 0, {OpKind::RMS_NORM, OpKind::MUL}));
    EXPECT_TRUE(find_fusions(g).empty());
  }
  {
    Context c;
    Tensor* n = rms_norm(c, in(c, {8, 3}), 1e-6f);
    n->flags |= kFlagOutput;
    Graph g;
    g.build_forward(mul(c, n, in(c, {8})));
    EXPECT_FALSE(can_fuse(g, 0, {OpKind::RMS_NORM, OpKind::MUL}));
    EXPECT_TRUE(find_fusions(g).empty());
  }
  {
    Context c;
    Tensor* x = in(c, {8, 3});
    Tensor* n = rms_norm(c, x, 1e-6f);
    Tensor* y = mul(c, x, in(c, {8}));  // does not read n
    Graph g;
    g.build_forward(n);
    g.build_forward(y);
    EXPECT_FALSE(can_fuse(g, 0, {OpKind::RMS_NORM, OpKind::MUL}));
    EXPECT_TRUE(find_fusions(g).empty());
  }
}

TEST(FindFusions, RmsNormMulGroup) {
  Context c;
  Tensor* x = in(c, {8, 3});
  Tensor* w = in(c, {8});
  Tensor* y = mul(c, rms_norm(c, x, 1e-5f), w);
  Tensor* out = scale(c, y, 2.0f);
  Graph g;
  g.build_forward(out);
  const auto groups = find_fusions(g);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].kind, FusionKind::rms_norm_mul);
  EXPECT_EQ(groups[0].first, 0u);
  EXPECT_EQ(groups[0].last, 1u);
  EXPECT_EQ(groups[0].inputs, (std::vector<Tensor*>{x, w}));
  EXPECT_EQ(groups[0].outputs, (std::vector<Tensor*>{y}));
  EXPECT_FLOAT_EQ(groups[0].eps, 1e-5f);
  EXPECT_STREQ(fusion_name(groups[0].kind), "RMS_NORM_MUL");
}

TEST(MatchPattern, ChecksEveryEdge) {
  const Pattern p{{{OpKind::SOFT_MAX, {kPatternInput, kPatternNone, kPatternNone, kPatternNone}},
                   {OpKind::TOP_K, {0, kPatternNone, kPatternNone, kPatternNone}}},
                  {1}};
  Context c;
  Tensor* logits = in(c, {6, 2});
  Tensor* ids = top_k(c, soft_max(c, logits, nullptr, 1.0f), 2);
  Graph g;
  g.build_forward(ids);
  auto m = match_pattern(g, p, ids);
  ASSERT_TRUE(m);
  EXPECT_EQ(m->inputs, (std::vector<Tensor*>{logits}));
  // a mask where the pattern wants none
  Context c2;
  Tensor* ids2 = top_k(c2, soft_max(c2, in(c2, {6, 2}), in(c2, {6, 2}), 1.0f), 2);
  Graph g2;
  g2.build_forward(ids2);
  EXPECT_FALSE(match_pattern(g2, p, ids2));
  // the intermediate read by a node outside the match
  Context c3;
  Tensor* probs = soft_max(c3, in(c3, {6, 2}), nullptr, 1.0f);
  Tensor* ids3 = top_k(c3, probs, 2);
  Graph g3;
  g3.build_forward(ids3);
  g3.build_forward(sqr(c3, probs));
  EXPECT_FALSE(match_pattern(g3, p, ids3));
}

struct Router {
  Tensor* logits;
  Tensor* bias = nullptr;
  Tensor* probs;
  Tensor* ids;
  Tensor* weights;
};

// The router of lib/model's moe_ffn (softmax, renormalized) or a sigmoid variant with bias and scale.
Router router(Context& c, int64_t E, int64_t k, int64_t T, bool sigmoid_bias_scale) {
  Router r;
  r.logits = in(c, {E, T});
  r.probs = sigmoid_bias_scale ? ops::sigmoid(c, r.logits) : soft_max(c, r.logits, nullptr, 1.0f);
  Tensor* sel = r.probs;
  if (sigmoid_bias_scale) sel = add(c, r.probs, r.bias = in(c, {E}));
  r.ids = top_k(c, sel, k);
  Tensor* w = get_rows(c, reshape(c, r.probs, {1, E, T}), r.ids);
  Tensor* w_sum = sum_rows(c, reshape(c, w, {k, T}));
  w = div(c, w, reshape(c, w_sum, {1, 1, T}));
  if (sigmoid_bias_scale) w = scale(c, w, 2.5f);
  r.weights = w;
  return r;
}

TEST(FindFusions, TopkMoeMatchesTheModelRouter) {
  Context c;
  Router r = router(c, 16, 4, 5, false);
  Graph g;
  g.build_forward(r.weights);
  const auto groups = find_fusions(g);
  ASSERT_EQ(groups.size(), 1u);
  const FusedGroup& f = groups[0];
  EXPECT_EQ(f.kind, FusionKind::topk_moe);
  EXPECT_EQ(f.gating, MoeGating::softmax);
  EXPECT_TRUE(f.normalize);
  EXPECT_FALSE(f.has_scale);
  EXPECT_EQ(f.outputs, (std::vector<Tensor*>{r.weights, r.ids}));
  EXPECT_EQ(f.inputs, (std::vector<Tensor*>{r.logits, nullptr}));
  EXPECT_EQ(f.n_expert, 16);
  EXPECT_EQ(f.k, 4);
  EXPECT_EQ(f.n_tokens, 5);
  EXPECT_EQ(f.first, 0u);
  EXPECT_EQ(f.last, g.n_nodes() - 1);
}

TEST(FindFusions, TopkMoeSigmoidBiasScale) {
  Context c;
  Router r = router(c, 32, 8, 3, true);
  Graph g;
  g.build_forward(r.weights);
  const auto groups = find_fusions(g);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].gating, MoeGating::sigmoid);
  EXPECT_TRUE(groups[0].has_scale);
  EXPECT_FLOAT_EQ(groups[0].scale, 2.5f);
  EXPECT_EQ(groups[0].inputs[1], r.bias);
}

TEST(FindFusions, TopkMoeRefusesProbsReadOutside) {
  Context c;
  Router r = router(c, 16, 4, 5, false);
  Graph g;
  g.build_forward(r.weights);
  g.build_forward(sqr(c, r.probs));
  EXPECT_TRUE(find_fusions(g).empty());
}

TEST(FindFusions, TopkMoeWithoutRenormWhenTheSumIsReadOutside) {
  // the renormalization's sum is used elsewhere: only gating, top-k and gather fuse
  Context c;
  Router r = router(c, 16, 4, 5, false);
  Tensor* sum = r.weights->src[1]->src[0];
  ASSERT_EQ(sum->op, OpKind::SUM_ROWS);
  Graph g;
  g.build_forward(r.weights);
  g.build_forward(sqr(c, sum));
  const auto groups = find_fusions(g);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_FALSE(groups[0].normalize);
  EXPECT_EQ(groups[0].outputs[0]->op, OpKind::GET_ROWS);
}

TEST(FindFusions, TopkMoeAcceptsViewsStandingForReshapes) {
  // The planner mirrors a RESHAPE as a VIEW of the same bytes; a view at another offset is no reshape.
  for (size_t offset : {size_t(0), sizeof(float)}) {
    Context c;
    const int64_t E = 8, k = 2, T = 3;
    Tensor* probs = soft_max(c, in(c, {E, T}), nullptr, 1.0f);
    Tensor* ids = top_k(c, probs, k);
    Tensor* p3 = view_3d(c, probs, 1, E - (offset ? 1 : 0), T, sizeof(float), E * sizeof(float), offset);
    Tensor* w = get_rows(c, p3, ids);
    Tensor* sum = sum_rows(c, view_2d(c, w, k, T, k * sizeof(float), 0));
    w = div(c, w, view_3d(c, sum, 1, 1, T, sizeof(float), sizeof(float), 0));
    Graph g;
    g.build_forward(w);
    EXPECT_EQ(find_fusions(g).size(), offset == 0 ? 1u : 0u) << "offset " << offset;
  }
}

TEST(FindFusions, RouterNeedsItsNodesConsecutive) {
  // As lib/model orders it today (expert matmuls read the ids before the weights are computed),
  // other nodes sit between top_k and get_rows: no fusion. Expanding the weights first fixes it.
  for (bool weights_first : {false, true}) {
    Context c;
    Router r = router(c, 8, 2, 3, false);
    Tensor* x = in(c, {16, 1, 3});
    Tensor* experts = in(c, {16, 12, 8});
    Tensor* d = mul_mat_id(c, experts, x, r.ids);  // {12, 2, 3}
    Tensor* out = mul(c, d, r.weights);
    Graph g;
    if (weights_first) g.build_forward(r.weights);
    g.build_forward(out);
    EXPECT_EQ(find_fusions(g).size(), weights_first ? 1u : 0u);
  }
}

// ---- numerics ----------------------------------------------------------------------------------

void fill(Tensor* t, std::mt19937& rng, float sigma = 1.0f) {
  std::normal_distribution<float> d(0.0f, sigma);
  float* p = static_cast<float*>(t->data);
  for (int64_t i = 0; i < t->nelements(); ++i) p[i] = d(rng);
}

void nan_fill(Tensor* t) { std::memset(t->data, 0xFF, t->nbytes()); }

std::vector<float> values(const Tensor* t) {
  const float* p = static_cast<const float*>(t->data);
  return std::vector<float>(p, p + t->nelements());
}

// Runs g on the CPU with fusion on (default) or off (LOOM_DISABLE_FUSION=1).
void compute(const Graph& g, bool fusion) {
  if (fusion) {
    unsetenv("LOOM_DISABLE_FUSION");
  } else {
    setenv("LOOM_DISABLE_FUSION", "1", 1);
  }
  ThreadPool pool(2);
  cpu::compute_graph(g, pool);
  unsetenv("LOOM_DISABLE_FUSION");
}

TEST(FusedKernels, RmsNormMulMatchesUnfusedAndSkipsTheIntermediate) {
  for (int64_t n0 : {8, 33, 4096}) {
    Context c;
    Tensor* x = in(c, {n0, 7, 2});
    Tensor* w = in(c, {n0, 1, 2});
    Tensor* n = rms_norm(c, x, 1e-6f);
    Tensor* y = mul(c, n, w);
    Graph g;
    g.build_forward(y);
    cpu::CpuDevice dev(2);
    auto buf = cpu::alloc_all(c, dev.buffer_type());
    std::mt19937 rng(7);
    fill(x, rng);
    fill(w, rng);
    nan_fill(n);
    compute(g, true);
    EXPECT_TRUE(std::isnan(values(n)[0])) << "the fused kernel ran, the intermediate was never written";
    const std::vector<float> fused = values(y);
    compute(g, false);
    EXPECT_FALSE(std::isnan(values(n)[0]));
    EXPECT_EQ(fused, values(y)) << "n0 " << n0;  // same arithmetic, same bits
  }
}

TEST(FusedKernels, RmsNormMulInPlaceAndOverlappingOutputs) {
  // y written over x exactly (as the graph allocator's in-place rule does) and y overlapping x
  // partially (falls back to the unfused nodes): both must equal a separate computation.
  for (size_t shift : {size_t(0), size_t(4 * 8)}) {
    Context c;
    Tensor* x = in(c, {16, 4});
    Tensor* w = in(c, {16});
    Tensor* n = rms_norm(c, x, 1e-6f);
    Tensor* y = mul(c, n, w);
    Graph g;
    g.build_forward(y);
    cpu::CpuDevice dev(2);
    y->data = reinterpret_cast<void*>(1);  // keep alloc_all from placing y
    auto buf = cpu::alloc_all(c, dev.buffer_type());
    std::vector<float> arena(16 * 4 + 64);
    std::mt19937 rng(3);
    x->data = arena.data();
    y->data = reinterpret_cast<char*>(arena.data()) + shift;
    fill(x, rng);
    fill(w, rng);
    std::vector<float> want((size_t)x->nelements());
    {  // reference, node by node in separate memory
      Context rc;
      Tensor* rx = in(rc, {16, 4});
      Tensor* rw = in(rc, {16});
      Tensor* ry = mul(rc, rms_norm(rc, rx, 1e-6f), rw);
      Graph rg;
      rg.build_forward(ry);
      auto rbuf = cpu::alloc_all(rc, dev.buffer_type());
      std::memcpy(rx->data, x->data, x->nbytes());
      std::memcpy(rw->data, w->data, w->nbytes());
      compute(rg, false);
      want = values(ry);
    }
    compute(g, true);
    EXPECT_EQ(values(y), want) << "shift " << shift;
  }
}

TEST(FusedKernels, TopkMoeMatchesUnfusedForEveryVariant) {
  for (bool sig : {false, true})
    for (int64_t T : {1, 7, 64}) {
      Context c;
      Router r = router(c, 32, 4, T, sig);
      Graph g;
      g.build_forward(r.weights);
      ASSERT_EQ(find_fusions(g).size(), 1u);
      cpu::CpuDevice dev(2);
      auto buf = cpu::alloc_all(c, dev.buffer_type());
      std::mt19937 rng(11);
      fill(r.logits, rng, 2.0f);
      if (r.bias) fill(r.bias, rng, 0.5f);
      nan_fill(r.probs);
      compute(g, true);
      EXPECT_TRUE(std::isnan(values(r.probs)[0]));
      const std::vector<int32_t> ids(static_cast<int32_t*>(r.ids->data), static_cast<int32_t*>(r.ids->data) + 4 * T);
      const std::vector<float> w = values(r.weights);
      compute(g, false);
      EXPECT_EQ(ids, std::vector<int32_t>(static_cast<int32_t*>(r.ids->data), static_cast<int32_t*>(r.ids->data) + 4 * T));
      EXPECT_EQ(w, values(r.weights)) << "sigmoid " << sig << " T " << T;
    }
}

TEST(FusedKernels, TopkMoeWithOutputsOverTheLogits) {
  // The graph allocator may give the weights the logits' bytes (dead after the gate when unfused):
  // the fused kernel must gate every row before writing any weight.
  for (int64_t T : {5, 64}) {
    Context c;
    Router r = router(c, 16, 4, T, false);
    Graph g;
    g.build_forward(r.weights);
    cpu::CpuDevice dev(2);
    auto buf = cpu::alloc_all(c, dev.buffer_type());
    // {1, 4, T} floats from logits row 1 on: the first token's weights land on the second token's logits
    r.weights->data = static_cast<float*>(r.logits->data) + 16;
    std::mt19937 rng(5);
    fill(r.logits, rng, 2.0f);
    const std::vector<float> logits = values(r.logits);
    compute(g, true);
    const std::vector<float> fused = values(r.weights);
    const std::vector<int32_t> ids(static_cast<int32_t*>(r.ids->data), static_cast<int32_t*>(r.ids->data) + 4 * T);
    std::memcpy(r.logits->data, logits.data(), logits.size() * sizeof(float));
    compute(g, false);
    EXPECT_EQ(fused, values(r.weights)) << "T " << T;
    EXPECT_EQ(ids, std::vector<int32_t>(static_cast<int32_t*>(r.ids->data), static_cast<int32_t*>(r.ids->data) + 4 * T));
  }
}

}  // namespace
}  // namespace loom
