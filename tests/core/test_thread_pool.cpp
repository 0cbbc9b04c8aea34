// ThreadPool placement (llama.cpp's -C / -Cr, --cpu-strict, --numa, --poll): the threads run on the
// CPU sets they are given, in turn, and a pool that never polls still lines them up.
#include <gtest/gtest.h>
#include <sched.h>

#include <atomic>
#include <set>
#include <vector>

#include "loom/core/thread_pool.h"

namespace loom {
namespace {

std::set<int> affinity() {
  cpu_set_t set;
  CPU_ZERO(&set);
  EXPECT_EQ(sched_getaffinity(0, sizeof set, &set), 0);
  std::set<int> out;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) out.insert(c);
  return out;
}

// Runs fn(ith) on every thread of a pool on a thread of its own (the caller's affinity changes).
std::vector<std::set<int>> affinities(int n, const ThreadPlacement& p) {
  std::vector<std::set<int>> seen((size_t)n);
  std::thread caller([&] {
    ThreadPool pool(n, p);
    pool.run([&](int ith, int) { seen[(size_t)ith] = affinity(); });
  });
  caller.join();
  return seen;
}

TEST(ThreadPool, ThreadsRunOnTheirPlacementsCpus) {
  const std::set<int> all = affinity();
  ASSERT_FALSE(all.empty());
  const int first = *all.begin(), last = *all.rbegin();
  // one set: every thread may run on each of its CPUs
  for (const std::set<int>& s : affinities(3, ThreadPlacement{{{first, last}}, 50}))
    EXPECT_EQ(s, (std::set<int>{first, last}));
  // a set per thread (--cpu-strict, --numa distribute): thread i on the i-th set, in turn
  const std::vector<std::set<int>> strict = affinities(3, ThreadPlacement{{{first}, {last}}, 50});
  EXPECT_EQ(strict[0], std::set<int>{first});
  EXPECT_EQ(strict[1], std::set<int>{last});
  EXPECT_EQ(strict[2], std::set<int>{first});
  // no placement: the threads keep the process's CPUs
  for (const std::set<int>& s : affinities(2, ThreadPlacement{})) EXPECT_EQ(s, all);
  EXPECT_EQ(affinity(), all) << "the test's own thread was not moved";
}

// A pool's caller stays placed after run(); threads it starts inherit that, so the helpers that
// split one-off work (weight repacking at a second model's load) unpin themselves.
TEST(ThreadPool, HelpersStartedByAPlacedCallerCanTakeTheProcesssCpus) {
  const std::set<int> all = affinity();
  if (all.size() < 2) GTEST_SKIP() << "fewer than two CPUs to place threads on";
  const int first = *all.begin(), last = *all.rbegin();
  std::set<int> inherited, unpinned;
  std::thread caller([&] {
    ThreadPool pool(2, ThreadPlacement{{{first}, {last}}, 50});
    pool.run([](int, int) {});
    std::thread([&] { inherited = affinity(); }).join();
    std::thread([&] {
      unpin_current_thread();
      unpinned = affinity();
    }).join();
  });
  caller.join();
  EXPECT_EQ(inherited, std::set<int>{first});
  EXPECT_EQ(unpinned, all);
}

TEST(ThreadPool, PollZeroStillMeetsAtEveryBarrier) {
  for (int poll : {0, 1, 100}) {
    ThreadPool pool(3, ThreadPlacement{{}, poll});
    std::atomic<int> phase_sum{0};
    std::vector<int> seen(3, -1);
    pool.run([&](int ith, int nth) {
      for (int step = 0; step < 200; ++step) {
        phase_sum.fetch_add(1);
        pool.barrier();
        if (ith == 0) {
          EXPECT_EQ(phase_sum.load(), nth * (step + 1)) << "poll " << poll;  // all arrived
        }
        pool.barrier();
      }
      seen[(size_t)ith] = ith;
    });
    EXPECT_EQ(seen, (std::vector<int>{0, 1, 2}));
  }
}

}  // namespace
}  // namespace loom
