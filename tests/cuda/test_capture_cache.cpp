// The CUDA backend's capture bookkeeping, which needs no GPU: when a split is captured, replayed,
// re-captured or run eagerly, and that every captured handle is released exactly once.
#include <gtest/gtest.h>

#include <cstdlib>

#include "capture_cache.h"

namespace loom::cuda {
namespace {

struct Handles {
  int released = 0;
  CaptureCache::Deleter deleter() {
    return [this](void*) { ++released; };
  }
};

void* handle(int i) { return reinterpret_cast<void*>(static_cast<uintptr_t>(0x1000 + i)); }

TEST(CaptureCache, CapturesOnTheSecondSightingAndReplaysAfter) {
  CaptureCache cache;
  Handles h;
  Tensor t;
  const CaptureKey key{7, &t, 3};
  EXPECT_EQ(cache.lookup(key, 42), nullptr);
  EXPECT_FALSE(cache.should_capture(key, 42));  // first sighting: eager
  EXPECT_EQ(cache.lookup(key, 42), nullptr);
  EXPECT_TRUE(cache.should_capture(key, 42));   // second: capture
  cache.store(key, 42, handle(1), h.deleter());
  EXPECT_EQ(cache.lookup(key, 42), handle(1));
  EXPECT_EQ(cache.lookup(key, 42), handle(1));
  EXPECT_EQ(cache.stats().hits, 2u);
  EXPECT_EQ(cache.stats().captures, 1u);
  EXPECT_EQ(cache.stats().eager, 1u);
  EXPECT_EQ(h.released, 0);
}

TEST(CaptureCache, MovedAddressesRecaptureAndReleaseTheOldGraph) {
  CaptureCache cache;
  Handles h;
  Tensor t;
  const CaptureKey key{7, &t, 3};
  (void)cache.should_capture(key, 1);
  ASSERT_TRUE(cache.should_capture(key, 1));
  cache.store(key, 1, handle(1), h.deleter());
  EXPECT_EQ(cache.lookup(key, 2), nullptr);     // a tensor moved: the graph is stale
  EXPECT_TRUE(cache.should_capture(key, 2));    // captured before: recapture at once
  cache.store(key, 2, handle(2), h.deleter());
  EXPECT_EQ(h.released, 1);
  EXPECT_EQ(cache.stats().recaptures, 1u);
  EXPECT_EQ(cache.lookup(key, 2), handle(2));
  EXPECT_EQ(cache.size(), 1u);
}

TEST(CaptureCache, OtherGraphUidIsAnotherSplit) {
  CaptureCache cache;
  Handles h;
  Tensor t;
  (void)cache.should_capture({7, &t, 3}, 1);
  ASSERT_TRUE(cache.should_capture({7, &t, 3}, 1));
  cache.store({7, &t, 3}, 1, handle(1), h.deleter());
  EXPECT_EQ(cache.lookup({8, &t, 3}, 1), nullptr);
  EXPECT_EQ(cache.lookup({7, &t, 4}, 1), nullptr);
  EXPECT_FALSE(cache.should_capture({8, &t, 3}, 1));
}

TEST(CaptureCache, EvictsTheLeastRecentlyUsedAndReleasesAllAtTheEnd) {
  Handles h;
  Tensor t[3];
  {
    CaptureCache cache(true, 2);
    for (int i = 0; i < 3; ++i) {
      const CaptureKey key{1, &t[i], 1};
      (void)cache.should_capture(key, 0);
      ASSERT_TRUE(cache.should_capture(key, 0));
      cache.store(key, 0, handle(i), h.deleter());
      if (i == 1) (void)cache.lookup({1, &t[0], 1}, 0);  // t[0] used more recently than t[1]
    }
    EXPECT_EQ(cache.size(), 2u);
    EXPECT_EQ(h.released, 1);
    EXPECT_EQ(cache.lookup({1, &t[1], 1}, 0), nullptr);  // the evicted one
    EXPECT_EQ(cache.lookup({1, &t[0], 1}, 0), handle(0));
  }
  EXPECT_EQ(h.released, 3);
}

TEST(CaptureCache, DisabledNeverCapturesAndCountsEagerRuns) {
  CaptureCache cache(false);
  Tensor t;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(cache.lookup({1, &t, 1}, 0), nullptr);
    EXPECT_FALSE(cache.should_capture({1, &t, 1}, 0));
  }
  EXPECT_EQ(cache.stats().eager, 3u);
}

TEST(CaptureCache, EnvironmentSwitch) {
  setenv("LOOM_CUDA_GRAPHS", "0", 1);
  EXPECT_FALSE(graphs_enabled_by_env());
  setenv("LOOM_CUDA_GRAPHS", "1", 1);
  EXPECT_TRUE(graphs_enabled_by_env());
  unsetenv("LOOM_CUDA_GRAPHS");
  EXPECT_TRUE(graphs_enabled_by_env());
}

TEST(CaptureCache, AddressHashSeesEveryNodeAndSource) {
  Tensor a, b, c;
  float x[4];
  a.data = &x[0];
  b.data = &x[1];
  c.data = &x[2];
  c.src[0] = &a;
  c.src[1] = &b;
  Tensor* nodes[] = {&c};
  const uint64_t h0 = address_hash(nodes);
  b.data = &x[3];
  EXPECT_NE(address_hash(nodes), h0);
  b.data = &x[1];
  EXPECT_EQ(address_hash(nodes), h0);
}

}  // namespace
}  // namespace loom::cuda
