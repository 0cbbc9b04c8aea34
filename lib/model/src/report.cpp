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

std::string kl_divergence_header() {
  return "chunk             PPL               ln(PPL(Q)/PPL(base))          KL Divergence              \u0394p RMS"
         "            Same top p\n";
}

std::string kl_divergence_chunk_line(const KlDivergenceResult& r) {
  return fmt::format(
      "{:4d}    {:9.4f} \u00b1 {:9.4f}    {:10.5f} \u00b1 {:10.5f}    {:10.5f} \u00b1 {:10.5f}    {:6.3f} \u00b1 "
      "{:6.3f} %    {:6.3f} \u00b1 {:6.3f} %\n",
      r.n_chunks, r.ppl, r.ppl_err, r.log_ratio, r.log_ratio_err, r.kld, r.kld_err, 100 * r.p_diff_rms,
      100 * r.p_diff_rms_err, 100 * r.same_top, 100 * r.same_top_err);
}

std::string kl_divergence_summary(const KlDivergenceResult& r) {
  std::string s = "====== Perplexity statistics ======\n";
  auto line = [&](std::string text) { s += text + "\n"; };
  line(fmt::format("Mean PPL(Q)                   : {:10.6f} \u00b1 {:10.6f}", r.ppl, r.ppl_err));
  line(fmt::format("Mean PPL(base)                : {:10.6f} \u00b1 {:10.6f}", r.ppl_base, r.ppl_base_err));
  line(fmt::format("Cor(ln(PPL(Q)), ln(PPL(base))): {:6.2f}%", 100 * r.ppl_correlation));
  line(fmt::format("Mean ln(PPL(Q)/PPL(base))     : {:10.6f} \u00b1 {:10.6f}", r.log_ratio, r.log_ratio_err));
  line(fmt::format("Mean PPL(Q)/PPL(base)         : {:10.6f} \u00b1 {:10.6f}", r.ppl_ratio, r.ppl_ratio_err));
  line(fmt::format("Mean PPL(Q)-PPL(base)         : {:10.6f} \u00b1 {:10.6f}", r.ppl_diff, r.ppl_diff_err));
  line("");
  line("====== KL divergence statistics ======");
  line(fmt::format("Mean    KLD: {:10.6f} \u00b1 {:10.6f}", r.kld, r.kld_err));
  const std::pair<const char*, double> kld_rows[] = {
      {"Maximum KLD", 1.0},  {"99.9%   KLD", 0.999}, {"99.0%   KLD", 0.99}, {"95.0%   KLD", 0.95},
      {"90.0%   KLD", 0.9},  {"Median  KLD", 0.5},   {"10.0%   KLD", 0.1},  {" 5.0%   KLD", 0.05},
      {" 1.0%   KLD", 0.01}, {" 0.1%   KLD", 0.001}, {"Minimum KLD", 0.0}};
  for (const auto& [name, f] : kld_rows) line(fmt::format("{}: {:10.6f}", name, r.kld_percentile(f)));
  line("");
  line("====== Token probability statistics ======");
  line(fmt::format("Mean    \u0394p: {:6.3f} \u00b1 {:5.3f} %", 100 * r.p_diff, 100 * r.p_diff_err));
  const std::pair<const char*, double> p_rows[] = {
      {"Maximum \u0394p", 1.0}, {"99.9%   \u0394p", 0.999}, {"99.0%   \u0394p", 0.99}, {"95.0%   \u0394p", 0.95},
      {"90.0%   \u0394p", 0.9}, {"75.0%   \u0394p", 0.75},  {"Median  \u0394p", 0.5},  {"25.0%   \u0394p", 0.25},
      {"10.0%   \u0394p", 0.1}, {" 5.0%   \u0394p", 0.05},  {" 1.0%   \u0394p", 0.01}, {" 0.1%   \u0394p", 0.001},
      {"Minimum \u0394p", 0.0}};
  for (const auto& [name, f] : p_rows) line(fmt::format("{}: {:6.3f}%", name, 100 * r.p_diff_percentile(f)));
  line(fmt::format("RMS \u0394p    : {:6.3f} \u00b1 {:5.3f} %", 100 * r.p_diff_rms, 100 * r.p_diff_rms_err));
  line(fmt::format("Same top p: {:6.3f} \u00b1 {:5.3f} %", 100 * r.same_top, 100 * r.same_top_err));
  return s;
}

nlohmann::json kl_divergence_json(const KlDivergenceResult& r, double seconds) {
  return {{"chunks", r.n_chunks},
          {"n_scored", r.count},
          {"ppl", r.ppl},
          {"ppl_stderr", r.ppl_err},
          {"ppl_base", r.ppl_base},
          {"ppl_base_stderr", r.ppl_base_err},
          {"ln_ppl_ratio", r.log_ratio},
          {"ln_ppl_ratio_stderr", r.log_ratio_err},
          {"kld_mean", r.kld},
          {"kld_stderr", r.kld_err},
          {"kld_median", r.kld_percentile(0.5)},
          {"kld_p99", r.kld_percentile(0.99)},
          {"kld_max", r.kld_percentile(1.0)},
          {"p_diff_mean", r.p_diff},
          {"p_diff_rms", r.p_diff_rms},
          {"same_top_p", r.same_top},
          {"seconds", seconds}};
}

}  // namespace loom
