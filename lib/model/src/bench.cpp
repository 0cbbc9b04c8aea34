// loom-bench measurements: timed decode calls on random tokens.
#include "loom/model/bench.h"

#include <fmt/format.h>

#include <algorithm>
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
double BenchTest::avg_token_gbps() const { return mean_of(token_gbps); }
double BenchTest::avg_probe_gbps() const { return mean_of(probe_gbps); }
double BenchTest::median_bandwidth_ratio() const {
  std::vector<double> r;
  for (size_t i = 0; i < token_gbps.size() && i < probe_gbps.size(); ++i)
    if (probe_gbps[i] > 0) r.push_back(token_gbps[i] / probe_gbps[i]);
  if (r.empty()) return 0;
  std::sort(r.begin(), r.end());
  return r.size() % 2 ? r[r.size() / 2] : 0.5 * (r[r.size() / 2 - 1] + r[r.size() / 2]);
}

BenchTest bench_run(Session& session, int64_t n_prompt, int64_t n_gen, int reps, int64_t n_depth,
                    const ReadProbeFn* probe, const std::function<void(const std::string&)>& progress) {
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
  using Clock = std::chrono::steady_clock;
  auto ns_since = [](Clock::time_point t0) {
    return (double)std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0).count();
  };
  // A phase's progress line in llama-bench's words (rep 0: the warm-up).
  auto phase = [&](const char* what, int rep) {
    if (progress)
      progress(rep == 0 ? fmt::format("warmup {} run", what) : fmt::format("{} run {}/{}", what, rep, reps));
  };
  // Repetition rep (0: the warm-up, not recorded): the cache filled to the depth (not timed), then
  // the test; its nanoseconds. Probed, each token's time alone and the probe's reading after it
  // (one before the first).
  auto run_once = [&](int rep) {
    const bool record = rep > 0;
    session.clear();
    prompt(0, n_depth);
    if (n_prompt > 0) phase("prompt", rep);
    auto t0 = Clock::now();
    if (n_prompt > 0) prompt(n_depth, n_prompt);
    double ns = probe ? ns_since(t0) : 0;
    if (n_gen > 0) {
      phase("generation", rep);
      int32_t tok = tokens[0];
      double before = probe ? probe->gbps() : 0;
      for (int64_t i = 0; i < n_gen; ++i) {
        if (probe) t0 = Clock::now();
        if (probe && probe->instead_of_decode)
          probe->instead_of_decode();
        else
          session.decode(std::span<const int32_t>(&tok, 1));
        tok = (int32_t)((tok + 1) % n_vocab);
        if (!probe) continue;
        const double tok_ns = ns_since(t0), after = probe->gbps();
        ns += tok_ns;
        if (record) {
          t.token_gbps.push_back((double)probe->bytes_per_token / tok_ns);
          t.probe_gbps.push_back(0.5 * (before + after));
        }
        before = after;
      }
    }
    return probe ? ns : ns_since(t0);
  };
  run_once(0);  // warm-up: pages, caches, thread pool
  for (int r = 0; r < reps; ++r) {
    const double ns = run_once(r + 1);
    t.samples_ns.push_back(ns);
    t.samples_ts.push_back(1e9 * (double)(n_prompt + n_gen) / ns);
  }
  return t;
}

}  // namespace loom
