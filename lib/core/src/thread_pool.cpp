// ThreadPool: workers park on an atomic generation counter (spin briefly, then wait), and a
// sense-reversing barrier built on two atomics.
#include "loom/core/thread_pool.h"

#include <algorithm>

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define LOOM_PAUSE() _mm_pause()
#else
#define LOOM_PAUSE() ((void)0)
#endif

namespace loom {

namespace {
// Waits while value == old: spin briefly (cheap hand-off when every thread has a core), then
// yield (a descheduled peer on an oversubscribed machine gets the core), then sleep in the kernel.
template <typename T>
void wait_while_equal(const std::atomic<T>& a, T old) {
  for (int i = 0; i < 2000; ++i) {
    if (a.load(std::memory_order_acquire) != old) return;
    LOOM_PAUSE();
  }
  for (int i = 0; i < 50; ++i) {
    if (a.load(std::memory_order_acquire) != old) return;
    std::this_thread::yield();
  }
  while (a.load(std::memory_order_acquire) == old) a.wait(old);
}
}  // namespace

int ThreadPool::default_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
  for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
}

void ThreadPool::worker(int ith) {
  uint64_t seen = 0;
  for (;;) {
    wait_while_equal(generation_, seen);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    (*job_)(ith, n_threads_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  fn(0, n_threads_);
  for (int p; (p = pending_.load(std::memory_order_acquire)) != 0;) wait_while_equal(pending_, p);
  job_ = nullptr;
}

void ThreadPool::barrier() {
  if (n_threads_ == 1) return;
  const uint64_t phase = barrier_phase_.load(std::memory_order_acquire);
  if (barrier_count_.fetch_add(1, std::memory_order_acq_rel) == n_threads_ - 1) {
    barrier_count_.store(0, std::memory_order_relaxed);
    barrier_phase_.fetch_add(1, std::memory_order_acq_rel);
    barrier_phase_.notify_all();
    return;
  }
  wait_while_equal(barrier_phase_, phase);
}

}  // namespace loom
