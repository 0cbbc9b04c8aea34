// loom-bench measurements: timed decode calls on random tokens.
#include "loom/model/bench.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <numeric>
#include <random>

namespace loom {

namespace {
double mean_of(const std::vector<double>& v) {
  return v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / (double)v.size();
}
double stddev_of(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double m = mean_of(v);
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return std::sqrt(s / (double)(v.size() - 1));
}
}  // namespace

double BenchTest::avg_ns() const { return mean_of(samples_ns); }
double BenchTest::stddev_ns() const { return stddev_of(samples_ns); }
double BenchTest::avg_ts() const { return mean_of(samples_ts); }
double BenchTest::stddev_ts() const { return stddev_of(samples_ts); }

BenchTest bench_run(Session& session, int64_t n_prompt, int64_t n_gen, int reps, int64_t n_depth) {
  BenchTest t;
  t.n_prompt = n_prompt;
  t.n_gen = n_gen;
  t.n_depth = n_depth;
  t.name = n_prompt > 0 && n_gen > 0 ? fmt::format("pp{}+tg{}", n_prompt, n_gen)
           : n_prompt > 0             ? fmt::format("pp{}", n_prompt)
                                      : fmt::format("tg{}", n_gen);
  if (n_depth > 0) t.name += " @ d" + std::to_string(n_depth);
  const int64_t n_vocab = session.model().hparams().n_vocab;
  std::mt19937 rng(1234);
  std::vector<int32_t> tokens((size_t)std::max<int64_t>(n_depth + n_prompt, 1));
  for (auto& x : tokens) x = (int32_t)(rng() % (uint32_t)n_vocab);
  auto prompt = [&](int64_t from, int64_t n_tokens) {
    for (int64_t i = 0; i < n_tokens; i += session.params().n_batch) {
      const int64_t n = std::min(session.params().n_batch, n_tokens - i);
      session.decode(std::span<const int32_t>(tokens.data() + from + i, (size_t)n));
    }
  };
  // One repetition: the cache filled to the depth (not timed), then the test; its nanoseconds.
  auto run_once = [&]() {
    session.clear();
    prompt(0, n_depth);
    const auto t0 = std::chrono::steady_clock::now();
    if (n_prompt > 0) prompt(n_depth, n_prompt);
    if (n_gen > 0) {
      int32_t tok = tokens[0];
      for (int64_t i = 0; i < n_gen; ++i) {
        session.decode(std::span<const int32_t>(&tok, 1));
        tok = (int32_t)((tok + 1) % n_vocab);
      }
    }
    return (double)std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - t0).count();
  };
  run_once();  // warm-up: pages, caches, thread pool
  for (int r = 0; r < reps; ++r) {
    const double ns = run_once();
    t.samples_ns.push_back(ns);
    t.samples_ts.push_back(1e9 * (double)(n_prompt + n_gen) / ns);
  }
  return t;
}

}  // namespace loom
