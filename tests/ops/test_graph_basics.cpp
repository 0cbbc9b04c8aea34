// Graph-building basics from lib/graph, checked by hand: view ops (reshape, permute, transpose,
// view_nd) set shapes, strides and aliasing as documented; Graph orders nodes topologically,
// dedups shared sources, counts uses and hands out unique uids; a multi-node graph computes
// on the CPU like its double reference.
#include <algorithm>
#include <cmath>
#include <set>
#include <thread>

#include "op_harness.h"

namespace loom::test {
namespace {

template <typename F>
void expect_error(ErrorKind kind, F f) {
  try {
    f();
    ADD_FAILURE() << "no error thrown";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
  }
}

// ---- views ---------------------------------------------------------------------------------------

TEST(GraphViews, ReshapeAliasesWithContiguousStrides) {
  OpRunner r;
  Tensor* a = r.input(DType::F32, {6, 4});
  Tensor* v = ops::reshape(r.ctx, a, {3, 8});
  EXPECT_EQ(v->op, OpKind::RESHAPE);
  EXPECT_EQ(v->src[0], a);
  EXPECT_EQ(v->view_src, a);
  EXPECT_EQ(v->view_offs, 0u);
  EXPECT_EQ(v->ne[0], 3);
  EXPECT_EQ(v->ne[1], 8);
  EXPECT_EQ(v->nb[0], 4u);
  EXPECT_EQ(v->nb[1], 12u);
  EXPECT_EQ(v->nb[2], 96u);
  EXPECT_TRUE(v->is_contiguous());
  Tensor* vv = ops::reshape(r.ctx, v, {24});
  EXPECT_EQ(vv->view_src, a);  // views of views point at the root
  r.alloc();
  EXPECT_EQ(v->data, a->data);
  EXPECT_EQ(vv->data, a->data);
  expect_error(ErrorKind::invalid_input, [&] { ops::reshape(r.ctx, a, {5, 5}); });
  expect_error(ErrorKind::invalid_input, [&] { ops::reshape(r.ctx, ops::transpose(r.ctx, a), {24}); });
}

TEST(GraphViews, PermuteMovesDimsAndStrides) {
  OpRunner r;
  Tensor* a = r.input(DType::F32, {2, 3, 4, 5});
  Tensor* p = ops::permute(r.ctx, a, 1, 2, 0, 3);  // dim i of a -> dim axis_i
  const int64_t want_ne[4] = {4, 2, 3, 5};
  const size_t want_nb[4] = {24, 4, 8, 96};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(p->ne[i], want_ne[i]) << i;
    EXPECT_EQ(p->nb[i], want_nb[i]) << i;
  }
  EXPECT_FALSE(p->is_contiguous());
  EXPECT_EQ(p->op, OpKind::PERMUTE);
  r.alloc();
  r.fill_normal(a);
  const auto av = r.get_f32(a), pv = r.get_f32(p);
  const int64_t na[4] = {2, 3, 4, 5};
  for (int64_t i3 = 0; i3 < 5; ++i3)
    for (int64_t i2 = 0; i2 < 3; ++i2)
      for (int64_t i1 = 0; i1 < 2; ++i1)
        for (int64_t i0 = 0; i0 < 4; ++i0)
          ASSERT_EQ(pv[idx(want_ne, i0, i1, i2, i3)], av[idx(na, i1, i2, i0, i3)]);
  expect_error(ErrorKind::invalid_input, [&] { ops::permute(r.ctx, a, 0, 0, 1, 2); });
  expect_error(ErrorKind::invalid_input, [&] { ops::permute(r.ctx, a, 0, 1, 2, 4); });
}

TEST(GraphViews, TransposeSwapsFirstTwoDimsAndTwiceIsIdentity) {
  OpRunner r;
  Tensor* a = r.input(DType::F16, {5, 3, 2});
  Tensor* t = ops::transpose(r.ctx, a);
  EXPECT_EQ(t->op, OpKind::TRANSPOSE);
  EXPECT_EQ(t->ne[0], 3);
  EXPECT_EQ(t->ne[1], 5);
  EXPECT_EQ(t->nb[0], a->nb[1]);
  EXPECT_EQ(t->nb[1], a->nb[0]);
  EXPECT_EQ(t->nb[2], a->nb[2]);
  Tensor* tt = ops::transpose(r.ctx, t);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(tt->ne[i], a->ne[i]);
    EXPECT_EQ(tt->nb[i], a->nb[i]);
  }
  EXPECT_TRUE(tt->is_contiguous());
}

TEST(GraphViews, ViewOffsetsAccumulateAndBoundsAreChecked) {
  OpRunner r;
  Tensor* a = r.input(DType::F32, {10, 6});
  Tensor* v = ops::view_2d(r.ctx, a, 4, 3, a->nb[1], 2 * a->nb[1] + 3 * sizeof(float));
  Tensor* w = ops::view_1d(r.ctx, v, 2, v->nb[1] + sizeof(float));  // row 1 of v, from column 1
  EXPECT_EQ(v->view_src, a);
  EXPECT_EQ(w->view_src, a);
  EXPECT_EQ(w->view_offs, v->view_offs + v->nb[1] + sizeof(float));
  EXPECT_FALSE(v->is_contiguous());
  r.alloc();
  r.fill_normal(a);
  const auto av = r.get_f32(a);
  const auto wv = r.get_f32(w);
  ASSERT_EQ(wv.size(), 2u);
  EXPECT_EQ(wv[0], av[3 * 10 + 4]);  // a[4, 3]: row 2 + 1, column 3 + 1
  EXPECT_EQ(wv[1], av[3 * 10 + 5]);
  expect_error(ErrorKind::invalid_input, [&] { ops::view_1d(r.ctx, a, 61, 0); });
  expect_error(ErrorKind::invalid_input, [&] { ops::view_2d(r.ctx, a, 10, 2, a->nb[1], 5 * a->nb[1]); });
}

// ---- graph order, use counts, uids ------------------------------------------------------------

TEST(GraphBuild, DiamondIsTopologicalAndDeduplicated) {
  Context c;
  Tensor* x = c.new_tensor(DType::F32, {8}, "x");
  Tensor* a = ops::silu(c, x);
  Tensor* b = ops::exp(c, x);
  Tensor* s = ops::add(c, a, b);
  Tensor* d = ops::mul(c, s, a);
  Graph g;
  g.build_forward(d);
  // depth first, sources in order: s needs a then b; d then revisits a (already there)
  EXPECT_EQ(g.nodes(), (std::vector<Tensor*>{a, b, s, d}));
  EXPECT_EQ(g.leafs(), (std::vector<Tensor*>{x}));
  g.build_forward(s);  // already present: nothing added
  g.build_forward(d);
  EXPECT_EQ(g.n_nodes(), 4u);
  EXPECT_EQ(g.use_count(x), 2);
  EXPECT_EQ(g.use_count(a), 2);
  EXPECT_EQ(g.use_count(b), 1);
  EXPECT_EQ(g.use_count(s), 1);
  EXPECT_EQ(g.use_count(d), 0);
  EXPECT_TRUE(g.contains(x));
  EXPECT_TRUE(g.contains(d));

  Tensor* e = ops::sqr(c, a);  // a new output reading a: counts must refresh
  g.build_forward(e);
  EXPECT_EQ(g.n_nodes(), 5u);
  EXPECT_EQ(g.node(4), e);
  EXPECT_EQ(g.use_count(a), 3);
}

TEST(GraphBuild, EveryNodeComesAfterItsSources) {
  Context c;
  Tensor* x = c.new_tensor(DType::F32, {16, 4}, "x");
  Tensor* y = c.new_tensor(DType::F32, {16, 4}, "y");
  std::vector<Tensor*> pool = {x, y};
  std::mt19937 rng(7);
  for (int i = 0; i < 200; ++i) {  // a random DAG of binary ops
    std::uniform_int_distribution<size_t> pick(0, pool.size() - 1);
    pool.push_back(ops::add(c, pool[pick(rng)], pool[pick(rng)]));
  }
  Graph g;
  g.build_forward(pool.back());
  std::set<const Tensor*> seen(g.leafs().begin(), g.leafs().end());
  for (Tensor* n : g.nodes()) {
    for (Tensor* s : n->src) {
      if (s) {
        EXPECT_TRUE(seen.count(s)) << "source of node " << n->id << " not yet placed";
      }
    }
    EXPECT_TRUE(seen.insert(n).second) << "node " << n->id << " twice";
  }
  EXPECT_EQ(g.nodes().back(), pool.back());
}

TEST(GraphBuild, DeepChainDoesNotOverflowTheStack) {
  Context c;
  Tensor* t = c.new_tensor(DType::F32, {4}, "x");
  std::vector<Tensor*> chain;
  for (int i = 0; i < 100000; ++i) chain.push_back(t = ops::scale(c, t, 1.0f));
  Graph g;
  g.build_forward(t);
  ASSERT_EQ(g.n_nodes(), chain.size());
  EXPECT_EQ(g.nodes(), chain);
}

TEST(GraphBuild, UidsAreUniqueAcrossGraphsThreadsAndInvalidation) {
  std::set<uint64_t> uids;
  std::vector<Graph> graphs(100);
  for (const Graph& g : graphs) EXPECT_TRUE(uids.insert(g.uid()).second);
  const uint64_t before = graphs[0].uid();
  graphs[0].invalidate();
  EXPECT_NE(graphs[0].uid(), before);
  EXPECT_TRUE(uids.insert(graphs[0].uid()).second);

  std::vector<std::vector<uint64_t>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&got, t] {
      for (int i = 0; i < 2000; ++i) got[(size_t)t].push_back(next_graph_uid());
    });
  for (auto& th : threads) th.join();
  for (const auto& v : got)
    for (uint64_t u : v) EXPECT_TRUE(uids.insert(u).second) << "uid " << u << " handed out twice";
}

// ---- a multi-node graph on the CPU -------------------------------------------------------------

TEST(GraphBuild, DiamondComputesLikeItsReference) {
  for (int nth : {1, 3}) {
    OpRunner r;
    Tensor* x = r.input(DType::F32, {37, 5});
    Tensor* w = r.input(DType::F32, {37});
    Tensor* a = ops::silu(r.ctx, x);
    Tensor* s = ops::add(r.ctx, a, ops::exp(r.ctx, x));
    Tensor* n = ops::rms_norm(r.ctx, ops::mul(r.ctx, s, a), 1e-6f);
    Tensor* out = ops::sum_rows(r.ctx, ops::mul(r.ctx, ops::cont(r.ctx, ops::transpose(r.ctx, ops::transpose(r.ctx, n))), w));
    r.alloc();
    r.fill_normal(x);
    r.fill_normal(w);
    const auto xv = r.get_f32(x), wv = r.get_f32(w);
    r.compute(out, nth);
    std::vector<double> want(5, 0.0);
    for (int row = 0; row < 5; ++row) {
      std::vector<double> v(37);
      double ss = 0;
      for (int i = 0; i < 37; ++i) {
        const double xi = xv[(size_t)(row * 37 + i)];
        const double si = xi / (1 + std::exp(-xi));
        v[(size_t)i] = (si + std::exp(xi)) * si;
        ss += v[(size_t)i] * v[(size_t)i];
      }
      const double rr = 1 / std::sqrt(ss / 37 + 1e-6);
      for (int i = 0; i < 37; ++i) want[(size_t)row] += v[(size_t)i] * rr * wv[(size_t)i];
    }
    EXPECT_LE(nmse(r.get_f32(out), want), 1e-7) << "threads=" << nth;
  }
}

}  // namespace
}  // namespace loom::test
