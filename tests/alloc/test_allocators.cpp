// alloc_tensors (weights split across buffers under max_size) and GraphAllocator (reserve,
// growth, reuse of one buffer, LOOM_SCHED_NO_REALLOC naming the tensor that grew).
#include <gtest/gtest.h>

#include <cstdlib>

#include "alloc_test_util.h"

namespace loom::test {
namespace {

// ---- alloc_tensors -------------------------------------------------------------------------

std::vector<Tensor*> weights(Context& c, int n, int64_t floats) {
  std::vector<Tensor*> ts;
  for (int i = 0; i < n; ++i) ts.push_back(c.new_tensor(DType::F32, {floats}, fmt::format("w{}", i)));
  return ts;
}

bool inside(const Tensor* t, const Buffer& b) {
  const char* base = static_cast<const char*>(b.base());
  const char* p = static_cast<const char*>(t->data);
  return p >= base && p + t->nbytes() <= base + b.size();
}

// Five 400-byte tensors, 64-byte alignment, max 1000 bytes: [0,400) [448,848) per buffer, so
// buffers of 848, 848 and 400 bytes.
TEST(AllocTensors, SplitsAcrossBuffersUnderMaxSize) {
  Context c;
  auto ts = weights(c, 5, 100);
  TestBufferType bt(64, 1000);
  EXPECT_EQ(alloc::tensors_size(ts, bt), 848u + 848u + 400u);
  std::vector<std::unique_ptr<Buffer>> bufs;
  ASSERT_TRUE(alloc::alloc_tensors(ts, bt, bufs));
  ASSERT_EQ(bufs.size(), 3u);
  EXPECT_EQ(bufs[0]->size(), 848u);
  EXPECT_EQ(bufs[1]->size(), 848u);
  EXPECT_EQ(bufs[2]->size(), 400u);
  const int owner[] = {0, 0, 1, 1, 2};
  for (int i = 0; i < 5; ++i) {
    ASSERT_NE(ts[i]->data, nullptr);
    EXPECT_EQ(ts[i]->buffer, bufs[owner[i]].get()) << i;
    EXPECT_TRUE(inside(ts[i], *bufs[owner[i]])) << i;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ts[i]->data) % 64, 0u);
  }
  EXPECT_EQ(static_cast<char*>(ts[1]->data) - static_cast<char*>(ts[0]->data), 448);
  // Every byte is writable and no two tensors share one.
  for (int i = 0; i < 5; ++i)
    for (int k = 0; k < 100; ++k) static_cast<float*>(ts[i]->data)[k] = (float)(i * 1000 + k);
  for (int i = 0; i < 5; ++i)
    for (int k = 0; k < 100; ++k) ASSERT_EQ(static_cast<float*>(ts[i]->data)[k], (float)(i * 1000 + k));
}

TEST(AllocTensors, OneBufferWithoutALimit) {
  Context c;
  auto ts = weights(c, 5, 100);
  TestBufferType bt(64);
  EXPECT_EQ(alloc::tensors_size(ts, bt), 4 * 448u + 400u);
  std::vector<std::unique_ptr<Buffer>> bufs;
  ASSERT_TRUE(alloc::alloc_tensors(ts, bt, bufs));
  ASSERT_EQ(bufs.size(), 1u);
  EXPECT_EQ(bufs[0]->size(), 4 * 448u + 400u);
  EXPECT_EQ(alloc::tensors_size(ts, bt), 0u);  // everything is bound now
}

TEST(AllocTensors, SkipsBoundTensorsAndBindsViews) {
  Context c;
  auto ts = weights(c, 2, 100);
  float host[100];
  ts[0]->data = host;
  Tensor* v = ops::view_1d(c, ts[1], 10, 40);
  ts.push_back(v);
  ts.push_back(ts[1]);  // listed twice: placed once
  TestBufferType bt(64);
  EXPECT_EQ(alloc::tensors_size(ts, bt), 400u);
  std::vector<std::unique_ptr<Buffer>> bufs;
  ASSERT_TRUE(alloc::alloc_tensors(ts, bt, bufs));
  ASSERT_EQ(bufs.size(), 1u);
  EXPECT_EQ(ts[0]->data, host);
  EXPECT_EQ(ts[1]->data, bufs[0]->base());
  EXPECT_EQ(v->data, static_cast<char*>(ts[1]->data) + 40);
  EXPECT_EQ(v->buffer, bufs[0].get());
}

TEST(AllocTensors, TensorLargerThanMaxSizeFailsCleanly) {
  Context c;
  auto ts = weights(c, 3, 100);
  ts.push_back(c.new_tensor(DType::F32, {300}, "huge"));  // 1200 bytes > 1000
  TestBufferType bt(64, 1000);
  std::vector<std::unique_ptr<Buffer>> bufs;
  Status st = alloc::alloc_tensors(ts, bt, bufs);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.kind(), ErrorKind::out_of_memory);
  EXPECT_NE(st.message().find("huge"), std::string::npos) << st.message();
  EXPECT_TRUE(bufs.empty());
  for (Tensor* t : ts) EXPECT_EQ(t->data, nullptr);
  EXPECT_EQ(bt.n_allocs, 0);
}

TEST(AllocTensors, ExpandedWeightsAreAllowed) {
  Context c;
  auto ts = weights(c, 2, 100);
  TestBufferType bt(64, SIZE_MAX, Expand::leaves, 100);
  EXPECT_EQ(alloc::tensors_size(ts, bt), 512u + 500u);
  std::vector<std::unique_ptr<Buffer>> bufs;
  ASSERT_TRUE(alloc::alloc_tensors(ts, bt, bufs));
  EXPECT_EQ(static_cast<char*>(ts[1]->data) - static_cast<char*>(ts[0]->data), 512);
}

// ---- GraphAllocator ------------------------------------------------------------------------

// x {16, rows} -> scale -> mul_mat(w, .) -> silu -> add x.
struct ChainGraph {
  Context c;
  Graph g;
  Tensor* x;
  Tensor* out;
  explicit ChainGraph(int64_t rows) {
    x = c.new_tensor(DType::F32, {16, rows}, "x");
    x->flags |= kFlagInput;
    Tensor* w = c.new_tensor(DType::F32, {16, 16}, "w");
    w->flags |= kFlagInput;
    Tensor* h = ops::mul_mat(c, w, ops::scale(c, x, 0.5f));
    h->name = "h";
    out = ops::add(c, ops::silu(c, h), x);
    out->name = "out";
    out->flags |= kFlagOutput;
    g.build_forward(out);
  }
};

struct EnvGuard {
  explicit EnvGuard(const char* value) { setenv("LOOM_SCHED_NO_REALLOC", value, 1); }
  ~EnvGuard() { unsetenv("LOOM_SCHED_NO_REALLOC"); }
};

TEST(GraphAllocator, ReserveSizesOnceForSmallerGraphs) {
  TestBufferType bt(64);
  alloc::GraphAllocator ga(bt);
  ChainGraph big(64), small(8);
  ASSERT_TRUE(ga.reserve(big.g));
  const size_t reserved = ga.buffer_size();
  EXPECT_EQ(reserved, alloc::plan_graph(big.g, bt).total);
  EXPECT_EQ(big.x->data, nullptr);  // reserve binds nothing
  EXPECT_EQ(bt.n_allocs, 1);
  EnvGuard env("1");
  ASSERT_TRUE(ga.alloc_graph(small.g));
  ASSERT_TRUE(ga.alloc_graph(big.g));
  EXPECT_EQ(ga.buffer_size(), reserved);
  EXPECT_EQ(bt.n_allocs, 1);
  EXPECT_NE(big.out->data, nullptr);
}

TEST(GraphAllocator, GrowsWhenAGraphNeedsMore) {
  TestBufferType bt(64);
  alloc::GraphAllocator ga(bt);
  ChainGraph small(8), big(64);
  ASSERT_TRUE(ga.alloc_graph(small.g));
  const size_t first = ga.buffer_size();
  ASSERT_TRUE(ga.alloc_graph(big.g));
  EXPECT_GT(ga.buffer_size(), first);
  EXPECT_EQ(ga.buffer_size(), alloc::plan_graph(ChainGraph(64).g, bt).total);
  EXPECT_EQ(bt.n_allocs, 2);
}

TEST(GraphAllocator, NoReallocNamesTheTensorThatGrew) {
  TestBufferType bt(64);
  alloc::GraphAllocator ga(bt);
  ChainGraph reserved(8);
  ASSERT_TRUE(ga.reserve(reserved.g));
  // x {16, 64} and its scale are 4 KiB each; "grown" (both side by side) is the largest past the reserve.
  Context c;
  Tensor* x = c.new_tensor(DType::F32, {16, 64}, "x");
  x->flags |= kFlagInput;
  Tensor* a = ops::scale(c, x, 2.0f);
  Tensor* grown = ops::concat(c, a, a, 1);
  grown->name = "grown";
  grown->flags |= kFlagOutput;
  Graph bigger;
  bigger.build_forward(grown);
  EnvGuard env("1");
  Status st = ga.alloc_graph(bigger);
  ASSERT_FALSE(st);
  EXPECT_NE(st.message().find("'grown'"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("LOOM_SCHED_NO_REALLOC"), std::string::npos) << st.message();
  EXPECT_EQ(grown->data, nullptr);
  EXPECT_EQ(x->data, nullptr);
  EXPECT_EQ(bt.n_allocs, 1);
}

TEST(GraphAllocator, NoReallocOffMeansGrow) {
  TestBufferType bt(64);
  alloc::GraphAllocator ga(bt);
  ChainGraph reserved(8), bigger(64);
  ASSERT_TRUE(ga.reserve(reserved.g));
  EnvGuard env("0");
  EXPECT_TRUE(ga.alloc_graph(bigger.g));
  EXPECT_EQ(bt.n_allocs, 2);
}

// Running the same graph twice re-plans its tensors into the same places and computes the same.
TEST(GraphAllocator, SameGraphTwiceAndComputes) {
  TestBufferType bt(64);
  alloc::GraphAllocator ga(bt);
  ChainGraph cg(8);
  ASSERT_TRUE(ga.alloc_graph(cg.g));
  Tensor* w = cg.c.find("w");
  auto run = [&] {
    for (int i = 0; i < 128; ++i) static_cast<float*>(cg.x->data)[i] = 0.01f * (float)i;
    for (int i = 0; i < 256; ++i) static_cast<float*>(w->data)[i] = (float)(i % 7) - 3.0f;
    interpret(cg.g);
    return bits(cg.out);
  };
  const auto first = run();
  void* out_data = cg.out->data;
  ASSERT_TRUE(ga.alloc_graph(cg.g));
  EXPECT_EQ(cg.out->data, out_data);
  EXPECT_EQ(run(), first);
  EXPECT_EQ(bt.n_allocs, 1);
  // An independent reference: out = silu(w * (0.5 x)) + x for element (m, r).
  for (int r = 0; r < 8; ++r)
    for (int m = 0; m < 16; ++m) {
      float h = 0;
      for (int k = 0; k < 16; ++k) h += ((float)((m * 16 + k) % 7) - 3.0f) * (0.01f * (float)(r * 16 + k) * 0.5f);
      const float want = h / (1.0f + std::exp(-h)) + 0.01f * (float)(r * 16 + m);
      EXPECT_NEAR(static_cast<float*>(cg.out->data)[r * 16 + m], want, 1e-5f);
    }
}

TEST(GraphAllocator, ReportsBufferTypeBugsAsStatus) {
  TestBufferType bt(64, SIZE_MAX, Expand::all);
  alloc::GraphAllocator ga(bt);
  ChainGraph cg(8);
  Status st = ga.alloc_graph(cg.g);
  ASSERT_FALSE(st);
  EXPECT_EQ(st.kind(), ErrorKind::internal);
  EXPECT_FALSE(ga.reserve(cg.g));
}

}  // namespace
}  // namespace loom::test
