// What loom-run prints: the --json objects of generation, perplexity and KL divergence, and the
// KL report (loom-bench's rows: bench_sweep.h; the loom_perf lines: tools::print_perf). The
// tools' mains only choose which to print and where.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "loom/model/generate.h"
#include "loom/model/kl_divergence.h"
#include "loom/model/session.h"

namespace loom {

// loom-run --json: text, tokens, counts, timings, the memory of every device, and the engine's
// counters under "perf" (graphs_reused: steps that ran the previous graph and plan again).
nlohmann::json generate_json(const GenerateResult& r, double load_ms, const Session& session);
// loom-run --perplexity --json: final and per-chunk PPL, token counts, speed over `seconds`.
nlohmann::json perplexity_json(const PerplexityResult& r, const Session& session, double seconds);
// loom-run --kl-divergence: the running line after each chunk (llama-perplexity's columns), the
// final statistics as text, and the --json object.
std::string kl_divergence_header();
std::string kl_divergence_chunk_line(const KlDivergenceResult& r);
std::string kl_divergence_summary(const KlDivergenceResult& r);
nlohmann::json kl_divergence_json(const KlDivergenceResult& r, double seconds);

}  // namespace loom
