// loom-run's and loom-bench's output formats (see report.h).
#include "loom/model/report.h"

#include <fmt/format.h>

#include "loom/core/error.h"

namespace loom {

namespace {
double tokens_per_s(double ms, int64_t n) { return ms > 0 ? 1000.0 * (double)n / ms : 0.0; }

std::string human_size(double bytes) {
  return bytes >= 1024.0 * 1024 * 1024 ? fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024 * 1024))
                                       : fmt::format("{:.2f} MiB", bytes / (1024.0 * 1024));
}
std::string human_params(double n) { return n >= 1e9 ? fmt::format("{:.2f} B", n / 1e9) : fmt::format("{:.2f} M", n / 1e6); }
}  // namespace

nlohmann::json generate_json(const GenerateResult& r, double load_ms, const Session& session) {
  nlohmann::json j;
  j["text"] = r.text;
  j["tokens"] = r.tokens;
  j["n_prompt"] = r.n_prompt;
  j["n_gen"] = r.n_gen;
  j["timings"] = {{"load_ms", load_ms},
                  {"prompt_ms", r.prompt_ms},
                  {"eval_ms", r.eval_ms},
                  {"prompt_tps", tokens_per_s(r.prompt_ms, r.n_prompt)},
                  {"eval_tps", tokens_per_s(r.eval_ms, r.n_gen)}};
  nlohmann::json devs = nlohmann::json::array();
  for (const MemoryBreakdown& m : session.memory_breakdown())
    devs.push_back({{"name", m.device},
                    {"model_bytes", m.model_bytes},
                    {"context_bytes", m.context_bytes},
                    {"compute_bytes", m.compute_bytes}});
  j["devices"] = devs;
  j["perf"] = {{"graphs_reused", session.n_graphs_reused()},
               {"syncs", session.n_syncs()},
               {"all_reduces", session.n_all_reduce()},
               {"all_reduce_bytes", session.all_reduce_bytes()}};
  nlohmann::json counters = nlohmann::json::object();  // the devices' own (graph replays, queue submits)
  for (const Device* d : session.model().devices()) {
    nlohmann::json c = nlohmann::json::object();
    for (const Device::Counter& k : d->counters()) c[k.name] = k.value;
    if (!c.empty()) counters[d->name()] = c;
  }
  j["perf"]["device_counters"] = counters;
  return j;
}

nlohmann::json perplexity_json(const PerplexityResult& r, const Session& session, double seconds) {
  const double evaluated = (double)r.running_ppl.size() * (double)session.n_ctx();
  return {{"ppl", r.ppl},
          {"ppl_stderr", r.ppl_err},
          {"chunks", r.running_ppl},
          {"n_ctx", session.n_ctx()},
          {"n_tokens", r.n_tokens},
          {"n_scored", r.n_scored},
          {"seconds", seconds},
          {"tokens_per_second", seconds > 0 ? evaluated / seconds : 0.0}};
}

BenchOutput parse_bench_output(const std::string& name) {
  if (name == "md") return BenchOutput::md;
  if (name == "csv") return BenchOutput::csv;
  if (name == "json") return BenchOutput::json;
  fail(ErrorKind::usage, "-o '{}': md, json or csv", name);
}

std::string bench_header(BenchOutput o) {
  switch (o) {
    case BenchOutput::md:
      return "| model | size | params | backend | threads | test | t/s |\n"
             "| --- | ---: | ---: | --- | ---: | ---: | ---: |\n";
    case BenchOutput::csv:
      return "model_type,model_size,model_n_params,backend,n_threads,n_prompt,n_gen,n_depth,avg_ns,stddev_ns,avg_ts,"
             "stddev_ts\n";
    case BenchOutput::json: return "";
  }
  return "";
}

std::string bench_row(BenchOutput o, const BenchModelInfo& m, const BenchTest& t) {
  if (o == BenchOutput::md)
    return fmt::format("| {} | {} | {} | {} | {} | {} | {:.2f} ± {:.2f} |\n", m.type_name,
                       human_size((double)m.n_bytes), human_params((double)m.n_params), m.backend, m.n_threads, t.name,
                       t.avg_ts(), t.stddev_ts());
  if (o == BenchOutput::csv)
    return fmt::format("\"{}\",{},{},{},{},{},{},{},{:.0f},{:.0f},{:.6f},{:.6f}\n", m.type_name, m.n_bytes, m.n_params,
                       m.backend, m.n_threads, t.n_prompt, t.n_gen, t.n_depth, t.avg_ns(), t.stddev_ns(), t.avg_ts(),
                       t.stddev_ts());
  return "";
}

nlohmann::json bench_json(const BenchModelInfo& m, const BenchTest& t) {
  return {{"model_filename", m.path},
          {"model_type", m.type_name},
          {"model_size", m.n_bytes},
          {"model_n_params", m.n_params},
          {"backend", m.backend},
          {"n_threads", m.n_threads},
          {"n_prompt", t.n_prompt},
          {"n_gen", t.n_gen},
          {"n_depth", t.n_depth},
          {"avg_ns", t.avg_ns()},
          {"stddev_ns", t.stddev_ns()},
          {"avg_ts", t.avg_ts()},
          {"stddev_ts", t.stddev_ts()},
          {"samples_ns", t.samples_ns},
          {"samples_ts", t.samples_ts}};
}

}  // namespace loom
