// A fixed pool of worker threads for data-parallel kernels. run() executes fn(ith, nth) on
// every thread (the caller is thread 0) and returns when all are done; inside fn, barrier()
// lines threads up between dependent steps (one graph node after another) cheaply.
#pragma once

#include <atomic>
#include <functional>
#include <thread>
#include <vector>

namespace loom {

class ThreadPool {
 public:
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  void run(const std::function<void(int ith, int nth)>& fn);
  // All threads of the current run() wait here until every one has arrived.
  void barrier();

  static int default_threads();  // hardware threads, at least 1

 private:
  void worker(int ith);
  int n_threads_;
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> barrier_count_{0};
  std::atomic<uint64_t> barrier_phase_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace loom
