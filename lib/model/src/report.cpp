// loom-run's and loom-bench's output formats (see report.h).
#include "loom/model/report.h"

#include <fmt/format.h>

#include "loom/core/error.h"

namespace loom {

namespace {
double per_token(double ms, int64_t n) { return n > 0 ? ms / (double)n : 0.0; }
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
               {"all_reduces", session.n_all_reduce()},
               {"all_reduce_bytes", session.all_reduce_bytes()}};
  return j;
}

std::string generate_timing_lines(const GenerateResult& r, double load_ms) {
  std::string s = fmt::format("loom_perf: load time = {:.2f} ms\n", load_ms);
  s += fmt::format(
      "loom_perf: prompt eval time = {:.2f} ms / {} tokens ({:8.2f} ms per token, {:8.2f} tokens per second)\n",
      r.prompt_ms, r.n_prompt, per_token(r.prompt_ms, r.n_prompt), tokens_per_s(r.prompt_ms, r.n_prompt));
  s += fmt::format("loom_perf: eval time = {:.2f} ms / {} runs ({:8.2f} ms per token, {:8.2f} tokens per second)\n",
                   r.eval_ms, r.n_gen, per_token(r.eval_ms, r.n_gen), tokens_per_s(r.eval_ms, r.n_gen));
  s += fmt::format("loom_perf: total time = {:.2f} ms / {} tokens\n", load_ms + r.prompt_ms + r.eval_ms,
                   r.n_prompt + r.n_gen);
  return s;
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
