// Work units of one graph node shared among the threads: claimed from the thread pool in
// shrinking contiguous ranges (ThreadPool::claim), so a thread slowed down by memory contention
// or a busy core takes fewer and all finish together; all units on a single thread.
#pragma once

#include <cstdint>

#include "kernels.h"

namespace loom::cpu {

// Runs f(first, last) once per range of units [first, last) of [0, total) this thread claims
// (all of them in one range on a single thread). Every thread of the node must call it (once per
// phase between barriers) with the same total.
template <class F>
void for_unit_ranges(const KernelArgs& args, int64_t total, F&& f) {
  if (!args.pool) {
    if (total > 0) f(int64_t(0), total);
    return;
  }
  int64_t first, last;
  while (args.pool->claim(total, 1, first, last)) f(first, last);
}

// for_unit_ranges with f(u) for each unit u.
template <class F>
void for_units(const KernelArgs& args, int64_t total, F&& f) {
  for_unit_ranges(args, total, [&](int64_t first, int64_t last) {
    for (int64_t u = first; u < last; ++u) f(u);
  });
}

}  // namespace loom::cpu
