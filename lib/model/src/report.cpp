// loom-run's --json output (see report.h).
#include "loom/model/report.h"

#include <fmt/format.h>


namespace loom {

namespace {
double tokens_per_s(double ms, int64_t n) { return ms > 0 ? 1000.0 * (double)n / ms : 0.0; }
}  // namespace

nlohmann::json generate_json(const GenerateResult& r, double load_ms, const Session& session) {
  nlohmann::json j;
  j["text"] = r.text;
  j["tokens"] = r.tokens;
  j["n_prompt"] = r.n_prompt;
  j["n_cached"] = r.n_cached;
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

}  // namespace loom
