// Work units of one graph node shared among the threads: claimed from the thread pool in
// shrinking contiguous ranges (ThreadPool::claim), so a thread slowed down by memory contention
// or a busy core takes fewer and all finish together; all units on a single thread.
#pragma once

#include <cstdint>

#include "kernels.h"

namespace loom::cpu {

// Runs f(u) for the units u of [0, total) this thread gets. Every thread of the node must call it
// (once per phase between barriers) with the same total.
template <class F>
void for_units(const KernelArgs& args, int64_t total, F&& f) {
  if (!args.pool) {
    for (int64_t u = 0; u < total; ++u) f(u);
    return;
  }
  int64_t first, last;
  while (args.pool->claim(total, 1, first, last))
    for (int64_t u = first; u < last; ++u) f(u);
}

// for_units with f(first, last) once per claimed range of units [first, last).
template <class F>
void for_unit_ranges(const KernelArgs& args, int64_t total, F&& f) {
  if (!args.pool) {
    if (total > 0) f(int64_t(0), total);
    return;
  }
  int64_t first, last;
  while (args.pool->claim(total, 1, first, last)) f(first, last);
}

}  // namespace loom::cpu
