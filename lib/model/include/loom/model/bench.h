// Model throughput measurement behind loom-bench (llama-bench's method): pp = one prompt of
// n_prompt tokens; tg = n_gen single-token decodes; pp+tg (-pg) = both, timed together; r
// repetitions each, every one from a cache first filled with n_depth tokens (not timed; -d).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/model/session.h"

namespace loom {

struct BenchTest {
  std::string name;  // "pp512" / "tg128" / "pp512+tg128" / "tg128 @ d4096"
  int64_t n_prompt = 0;
  int64_t n_gen = 0;
  int64_t n_depth = 0;
  std::vector<double> samples_ns;
  std::vector<double> samples_ts;  // tokens per second per repetition
  double avg_ns() const;
  double stddev_ns() const;
  double avg_ts() const;
  double stddev_ts() const;
};

// Runs one test (a prompt of n_prompt tokens, then n_gen decodes; either may be 0) reps times after
// a warm-up, each after n_depth tokens of context.
BenchTest bench_run(Session& session, int64_t n_prompt, int64_t n_gen, int reps, int64_t n_depth = 0);

}  // namespace loom
