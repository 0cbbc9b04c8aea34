// ThreadPool: workers park on an atomic generation counter, and a sense-reversing barrier built
// on two atomics. Every wait spins briefly (the cheap hand-off when each thread has a core),
// yields a few times, then sleeps on a futex (atomic::wait on 32-bit words). On an oversubscribed
// machine spinning only delays the peers, so it adapts: no spinning while a peer was last seen on
// our own CPU (it cannot arrive before we yield), and a per-thread spin budget that shrinks when
// waits end in sleep and grows back when they end early.
#include "loom/core/thread_pool.h"

#include <algorithm>
#include <system_error>

#include "loom/core/error.h"

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

#if defined(__x86_64__) || defined(_M_X64)
#include <immintrin.h>
#define LOOM_PAUSE() _mm_pause()
#else
#define LOOM_PAUSE() ((void)0)
#endif

namespace loom {

namespace {
// Spin budget bounds at the default poll level (50): at most about 80 us of pause instructions
// (~40 ns each on Zen 4), longer than the usual imbalance between threads at the end of a graph
// node, far shorter than a scheduler time slice. Poll 100 doubles the most, 0 never spins.
constexpr int kSpinMax = 2000, kSpinMin = 16;
// Yields before sleeping: few, since each may hand the core to another process for a whole slice.
constexpr int kYields = 3;
// Per thread, adaptive: doubled when a wait ends while spinning or yielding, halved when it has
// to sleep (the peers are not running: an oversubscribed machine).
thread_local int t_spin = kSpinMax / 2;
// Index of the calling thread in the pool it works for (the caller of run() is 0).
thread_local int t_ith = 0;
// The pool whose placement the calling thread last took (ThreadPool::id_; 0: none).
thread_local uint64_t t_placed_for = 0;
std::atomic<uint64_t> g_next_pool_id{1};
// Which of the two sets of shares (ThreadPool::claim) the calling thread's phase uses: 0 at the
// start of run(), flipped by every barrier.
thread_local int t_parity = 0;

// Zeroes a counter only where it is not zero already: a store takes the cache line from the threads
// holding it even when it writes the value it finds.
template <typename T>
void clear(std::atomic<T>& a) {
  if (a.load(std::memory_order_relaxed) != 0) a.store(0, std::memory_order_relaxed);
}

int current_cpu() {
#if defined(__linux__)
  return sched_getcpu();
#else
  return -1;
#endif
}

// Waits while value == old: spin (at most spin_max rounds; 0: not at all), then yield, then
// sleep in the kernel until notified.
template <typename T>
void wait_while_equal(const std::atomic<T>& a, T old, int spin_max) {
  const bool spin = spin_max > 0;
  const int budget = std::min(t_spin, spin_max);
  for (int i = 0; i < budget; ++i) {
    if (a.load(std::memory_order_acquire) != old) {
      t_spin = std::min(2 * t_spin, 2 * kSpinMax);
      return;
    }
    LOOM_PAUSE();
  }
  for (int i = 0; i < kYields; ++i) {
    if (a.load(std::memory_order_acquire) != old) {
      if (spin) t_spin = std::min(2 * t_spin, 2 * kSpinMax);
      return;
    }
    std::this_thread::yield();
  }
  if (spin) t_spin = std::max(t_spin / 2, kSpinMin);
  while (a.load(std::memory_order_acquire) == old) a.wait(old, std::memory_order_acquire);
}
}  // namespace

int ThreadPool::default_threads() { return std::max(1u, std::thread::hardware_concurrency()); }

ThreadPool::ThreadPool(int n_threads, ThreadPlacement placement)
    : n_threads_(std::max(1, n_threads)),
      placement_(std::move(placement)),
      spin_max_(kSpinMax * std::clamp(placement_.poll, 0, 100) / 50),
      id_(g_next_pool_id.fetch_add(1)),
      shares_(std::make_unique<Share[]>(2 * (size_t)n_threads_)),
      cpu_(std::make_unique<SeenCpu[]>((size_t)n_threads_)) {
  try {
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
  } catch (const std::system_error& e) {
    // Joinable threads must not be destroyed (std::terminate): stop the ones that started.
    const size_t started = workers_.size();
    stop_workers();
    fail(ErrorKind::out_of_memory, "cannot start thread {} of {} (-t {}): {}", started + 2, n_threads_, n_threads_,
         e.what());
  }
}

void ThreadPool::stop_workers() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& w : workers_) w.join();
  workers_.clear();
}

bool ThreadPool::note_cpu_and_check_spin(int ith) {
  const int cpu = current_cpu();
  // Written only when it changed: a store would take the line from the peers that read it.
  if (cpu_[ith].cpu.load(std::memory_order_relaxed) != cpu) cpu_[ith].cpu.store(cpu, std::memory_order_relaxed);
  if (cpu < 0) return true;
  for (int j = 0; j < n_threads_; ++j)
    if (j != ith && cpu_[j].cpu.load(std::memory_order_relaxed) == cpu) return false;
  return true;
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::place(int ith) const { place_current_thread(placement_, ith); }

#if defined(__linux__)
namespace {
// The process's CPUs, read before main() runs, so before any pool has placed a thread.
struct StartCpus {
  cpu_set_t set;
  bool known;
  StartCpus() {
    CPU_ZERO(&set);
    known = sched_getaffinity(0, sizeof set, &set) == 0;
  }
};
const StartCpus& start_cpus() {
  static const StartCpus cpus;
  return cpus;
}
[[maybe_unused]] const StartCpus& g_start_cpus = start_cpus();
}  // namespace
#endif

std::vector<int> process_cpus() {
  std::vector<int> out;
#if defined(__linux__)
  const StartCpus& cpus = start_cpus();
  if (cpus.known)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &cpus.set)) out.push_back(c);
#endif
  return out;
}

void unpin_current_thread() {
#if defined(__linux__)
  const StartCpus& cpus = start_cpus();
  if (cpus.known) (void)pthread_setaffinity_np(pthread_self(), sizeof cpus.set, &cpus.set);
#endif
}

void place_current_thread(const ThreadPlacement& placement, int ith) {
#if defined(__linux__)
  const auto& sets = placement.cpu_sets;
  if (sets.empty()) return;
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int c : sets[(size_t)ith % sets.size()])
    if (c >= 0 && c < CPU_SETSIZE) CPU_SET(c, &set);
  // The tools check the CPUs against the process's own set first; a CPU taken away since is left
  // to the OS (the threads still run, wherever they may).
  (void)pthread_setaffinity_np(pthread_self(), sizeof set, &set);
#else
  (void)ith;
#endif
}

void ThreadPool::worker(int ith) {
  t_ith = ith;
  place(ith);
  uint32_t seen = 0;
  for (;;) {
    wait_while_equal(generation_, seen, note_cpu_and_check_spin(ith) ? spin_max_ : 0);
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    t_parity = 0;
    (*job_)(ith, n_threads_);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::reset_claims() {
  clear(claimed_);
  for (int i = 0; i < 2 * n_threads_; ++i) clear(shares_[i].taken);
}

void ThreadPool::run(const std::function<void(int, int)>& fn) {
  if (t_placed_for != id_) {  // the caller works as thread 0
    place(0);
    t_placed_for = id_;
  }
  reset_claims();
  t_parity = 0;
  if (n_threads_ == 1) {
    fn(0, 1);
    return;
  }
  t_ith = 0;
  job_ = &fn;
  pending_.store(n_threads_ - 1, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  fn(0, n_threads_);
  const int spin = note_cpu_and_check_spin(0) ? spin_max_ : 0;
  for (int p; (p = pending_.load(std::memory_order_acquire)) != 0;) wait_while_equal(pending_, p, spin);
  job_ = nullptr;
}

void ThreadPool::barrier() {
  if (n_threads_ == 1) {
    reset_claims();
    return;
  }
  // The shares alternate between two sets: the phase that starts here claims from the set the
  // last one did not use, and each thread clears its own share of the set just used for the
  // phase after next (nobody reads it before then). No thread writes another's share at the
  // barrier, so a thread's first claims stay in its own cache.
  const int spin = note_cpu_and_check_spin(t_ith) ? spin_max_ : 0;
  const uint32_t phase = barrier_phase_.load(std::memory_order_acquire);
  if (barrier_count_.fetch_add(1, std::memory_order_acq_rel) == n_threads_ - 1) {
    barrier_count_.store(0, std::memory_order_relaxed);
    // the one-counter claims (totals >= 2^31), published by the phase increment below
    clear(claimed_);
    barrier_phase_.fetch_add(1, std::memory_order_acq_rel);
    barrier_phase_.notify_all();
  } else {
    wait_while_equal(barrier_phase_, phase, spin);
  }
  clear(shares_[t_parity * n_threads_ + std::clamp(t_ith, 0, n_threads_ - 1)].taken);
  t_parity ^= 1;
}

bool ThreadPool::claim(int64_t total, int64_t min_items, int64_t& first, int64_t& last) {
  min_items = std::max<int64_t>(min_items, 1);
  if (n_threads_ == 1 || total >= (int64_t(1) << 31)) {  // one counter
    int64_t cur = claimed_.load(std::memory_order_relaxed);
    for (;;) {
      if (cur >= total) return false;
      const int64_t n = std::min(total - cur, std::max(min_items, (total - cur) / (2 * n_threads_)));
      if (claimed_.compare_exchange_weak(cur, cur + n, std::memory_order_relaxed)) {
        first = cur;
        last = cur + n;
        return true;
      }
    }
  }
  const int nth = n_threads_, self = std::clamp(t_ith, 0, nth - 1);
  for (int s = 0; s < nth; ++s) {  // own share first, then the others'
    const int r = (self + s) % nth;
    const int64_t lo = total * r / nth, size = total * (r + 1) / nth - lo;
    std::atomic<uint64_t>& taken = shares_[t_parity * nth + r].taken;
    uint64_t cur = taken.load(std::memory_order_relaxed);
    for (;;) {
      const auto front = (int64_t)(cur & 0xffffffffu), back = (int64_t)(cur >> 32);
      const int64_t left = size - front - back;
      if (left <= 0) break;
      if (s == 0) {
        const int64_t n = std::min(left, std::max(min_items, left / 4));
        if (taken.compare_exchange_weak(cur, cur + (uint64_t)n, std::memory_order_relaxed)) {
          first = lo + front;
          last = first + n;
          return true;
        }
      } else {
        const int64_t n = std::min(left, std::max(min_items, left / (2 * nth)));
        if (taken.compare_exchange_weak(cur, cur + ((uint64_t)n << 32), std::memory_order_relaxed)) {
          last = lo + size - back;
          first = last - n;
          return true;
        }
      }
    }
  }
  return false;
}

}  // namespace loom
