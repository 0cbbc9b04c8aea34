// Model throughput measurement behind loom-bench (llama-bench's method): pp = one prompt of
// n_prompt tokens; tg = n_gen single-token decodes; pp+tg (-pg) = both, timed together; r
// repetitions each, every one from a cache first filled with n_depth tokens (not timed; -d).
#pragma once

#include <cstdint>
#include <functional>
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
  // With a read probe (loom-bench --bandwidth; tg tests): per generated token, the weight bytes
  // it read per second, and the probe's read bandwidth around it (the mean of the probe just
  // before and just after it). Probe time is not part of samples_ns.
  std::vector<double> token_gbps, probe_gbps;
  double avg_ns() const;
  double stddev_ns() const;
  double avg_ts() const;
  double stddev_ts() const;
  bool probed() const { return !token_gbps.empty(); }
  double avg_token_gbps() const;
  double avg_probe_gbps() const;
  // Median over the tokens of token_gbps / probe_gbps: how close decode comes to the memory.
  double median_bandwidth_ratio() const;
};

// Reads memory between generated tokens (loom-bench --bandwidth): returns 1e9 bytes per second.
struct ReadProbeFn {
  std::function<double()> gbps;
  size_t bytes_per_token = 0;  // weight bytes one token reads (Model::bytes_read_per_token)
  // Set: timed in place of each generated token (loom-bench --bandwidth-control: a plain read of
  // bytes_per_token bytes, the score of a decode that only read).
  std::function<void()> instead_of_decode;
};

// Runs one test (a prompt of n_prompt tokens, then n_gen decodes; either may be 0) reps times after
// a warm-up, each after n_depth tokens of context.
// With a probe, each generated token is timed alone and followed by one probe reading.
// progress (may be empty) hears each phase as it starts, in llama-bench's words: "warmup prompt
// run", "generation run 2/5", ...
BenchTest bench_run(Session& session, int64_t n_prompt, int64_t n_gen, int reps, int64_t n_depth = 0,
                    const ReadProbeFn* probe = nullptr, const std::function<void(const std::string&)>& progress = {});

}  // namespace loom
