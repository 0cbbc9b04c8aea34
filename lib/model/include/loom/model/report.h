// What loom-run and loom-bench print: the --json objects and the markdown and CSV rows (the
// loom_perf lines: tools::print_perf). The tools' mains only choose which to print and where.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "loom/model/bench.h"
#include "loom/model/generate.h"
#include "loom/model/session.h"

namespace loom {

// loom-run --json: text, tokens, counts, timings, the memory of every device, and the engine's
// counters under "perf" (graphs_reused: steps that ran the previous graph and plan again).
nlohmann::json generate_json(const GenerateResult& r, double load_ms, const Session& session);
// loom-run --perplexity --json: final and per-chunk PPL, token counts, speed over `seconds`.
nlohmann::json perplexity_json(const PerplexityResult& r, const Session& session, double seconds);

enum class BenchOutput { md, csv, json };
// "md", "csv", "json"; throws usage naming -o.
BenchOutput parse_bench_output(const std::string& name);

// The model and settings a bench row describes.
struct BenchModelInfo {
  std::string path;
  std::string type_name;  // Model::type_name()
  size_t n_bytes = 0;
  size_t n_params = 0;
  std::string backend = "CPU";
  int n_threads = 0;
};

// The lines before the first row (md: header and rule; csv: the column names; json: none).
std::string bench_header(BenchOutput o);
// One md or csv row, '\n'-terminated.
std::string bench_row(BenchOutput o, const BenchModelInfo& m, const BenchTest& t);
// One element of the json array.
nlohmann::json bench_json(const BenchModelInfo& m, const BenchTest& t);

}  // namespace loom
