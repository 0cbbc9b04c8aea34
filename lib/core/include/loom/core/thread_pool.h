// A fixed pool of worker threads for data-parallel kernels. run() executes fn(ith, nth) on
// every thread (the caller is thread 0) and returns when all are done; inside fn, barrier()
// lines threads up between dependent steps (one graph node after another) cheaply, and claim()
// shares the work of one step dynamically (a thread slowed down by a busy core takes less).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace loom {

// Where a pool's threads run and how they wait (llama.cpp's -C / -Cr, --cpu-strict, --numa, --poll).
struct ThreadPlacement {
  // thread i may run on the CPUs of cpu_sets[i % cpu_sets.size()]; none: wherever the OS puts it
  std::vector<std::vector<int>> cpu_sets;
  int poll = 50;  // 0..100: how long a waiting thread spins before it sleeps (0: never)
};

// The calling thread onto placement's CPUs for thread ith (nothing when it names none). Threads a
// placed thread starts inherit its CPUs: helpers that should spread (the bandwidth probe) place
// themselves like the pool's threads.
void place_current_thread(const ThreadPlacement& placement, int ith);
// The calling thread back onto the CPUs the process started with. For helper threads that split
// one-off work across all cores (repacking weights at load, writing models): started from a pool's
// caller after its first run() they would inherit its placement, one CPU under --cpu-strict.
void unpin_current_thread();
// The CPUs the process started with (its affinity before any pool placed a thread), ascending;
// empty where the OS does not say. What -C/-Cr are checked against: a later call of
// sched_getaffinity on a pool's caller sees only its placement.
std::vector<int> process_cpus();

class ThreadPool {
 public:
  // Throws out_of_memory when a worker thread cannot be started (the started ones are joined).
  explicit ThreadPool(int n_threads, ThreadPlacement placement = {});
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return n_threads_; }
  void run(const std::function<void(int ith, int nth)>& fn);
  // All threads of the current run() wait here until every one has arrived.
  void barrier();
  // Work sharing within one phase (between two barriers): claims the next range [first, last)
  // of [0, total) for the caller (at least min_items); false when nothing is left. Thread ith
  // owns the ith of nth equal shares and takes consecutive ranges from its front (a quarter of
  // what is left each time), so its memory reads are one forward stream the hardware prefetcher
  // follows; a thread done with its share helps the others from the back of theirs, so threads
  // that run faster take more. Every caller in a phase must pass the same total; the shares
  // restart with each barrier() and run().
  bool claim(int64_t total, int64_t min_items, int64_t& first, int64_t& last);

  static int default_threads();  // hardware threads, at least 1

 private:
  void worker(int ith);
  void place(int ith) const;  // the calling thread onto the placement's CPUs (thread ith's share)
  void stop_workers();  // joins the started workers
  // Records the CPU thread ith runs on; false when another thread of the pool was last seen on
  // the same CPU (it cannot make progress while we spin, so waiting should yield at once).
  bool note_cpu_and_check_spin(int ith);
  int n_threads_;
  ThreadPlacement placement_;
  int spin_max_;  // pause rounds a wait may spin (placement_.poll; 0: sleeps at once)
  uint64_t id_;   // which pool the caller's thread was last placed for (run())
  std::vector<std::thread> workers_;
  const std::function<void(int, int)>* job_ = nullptr;
  // 32-bit words: atomic::wait on them is a futex wait (wrap-around is harmless).
  std::atomic<uint32_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<int> barrier_count_{0};
  std::atomic<uint32_t> barrier_phase_{0};
  alignas(64) std::atomic<int64_t> claimed_{0};  // items handed out in this phase (totals >= 2^31)
  // Per thread's share of this phase: items taken from its front (low 32 bits) and back (high).
  struct alignas(64) Share {
    std::atomic<uint64_t> taken{0};
  };
  std::unique_ptr<Share[]> shares_;  // two sets of n_threads_, alternating phase by phase (barrier())
  void reset_claims();
  std::atomic<bool> stop_{false};
  struct alignas(64) SeenCpu {  // the last CPU a thread was seen on (-1: unknown), a line each
    std::atomic<int> cpu{-1};
  };
  std::unique_ptr<SeenCpu[]> cpu_;
};

}  // namespace loom
