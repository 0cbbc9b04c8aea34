// Renderings of a FitReport: the one-line flags, the --fit-print table and the --json object
// (docs/CLI.md: sizes in MiB with two decimals plus the same fields in bytes).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <nlohmann/json.hpp>

#include "loom/fit/fit.h"

namespace loom::fit {

namespace {

constexpr double kMiB = 1024.0 * 1024.0;

double mib(double bytes) { return std::round(bytes / kMiB * 100.0) / 100.0; }

const char* status_name(FitStatus s) {
  switch (s) {
    case FitStatus::unchanged:
      return "unchanged";
    case FitStatus::fit:
      return "fit";
    case FitStatus::no_fit:
      return "no_fit";
  }
  return "no_fit";
}

void put(nlohmann::json& j, const std::string& key, double bytes) {
  j[key + "_mib"] = mib(bytes);
  j[key + "_bytes"] = (int64_t)bytes;
}

}  // namespace

std::string format_args(const Config& answer, const Config& given, const std::vector<std::string>& new_overrides) {
  std::vector<std::string> parts;
  if (answer.n_ctx != given.n_ctx) parts.push_back(fmt::format("-c {}", answer.n_ctx));
  if (answer.n_gpu_layers != given.n_gpu_layers) parts.push_back(fmt::format("-ngl {}", answer.n_gpu_layers));
  if (answer.tensor_split != given.tensor_split && !answer.tensor_split.empty())
    parts.push_back(fmt::format("-ts {}", fmt::join(answer.tensor_split, ",")));
  if (!new_overrides.empty()) parts.push_back(fmt::format("-ot \"{}\"", fmt::join(new_overrides, ",")));
  if (parts.empty()) return "-c 0 -ngl -1";
  return fmt::format("{}", fmt::join(parts, " "));
}

std::string format_json(const FitReport& r) {
  nlohmann::json j;
  j["status"] = status_name(r.status);
  j["args"] = r.args;
  j["n_ctx"] = r.config.n_ctx;
  j["n_gpu_layers"] = r.n_gpu_layers;
  j["tensor_split"] = r.tensor_split;
  j["overrides"] = r.overrides;
  nlohmann::json devs = nlohmann::json::array();
  for (const DeviceReport& d : r.devices) {
    nlohmann::json x;
    x["name"] = d.name;
    x["known"] = d.known;
    put(x, "total", (double)d.total);
    put(x, "free", (double)d.free);
    put(x, "target", (double)d.target);
    put(x, "reserve", (double)d.reserve);
    put(x, "model", (double)d.usage.model);
    put(x, "context", (double)d.usage.context);
    put(x, "compute", (double)d.usage.compute);
    put(x, "projected_free", (double)d.projected_free);
    devs.push_back(x);
    if (d.is_cpu) {
      nlohmann::json h;
      h["name"] = d.name;
      h["checked"] = d.known;
      put(h, "total", (double)d.total);
      put(h, "available", (double)d.free);
      put(h, "reserve", (double)d.reserve);
      put(h, "needed", (double)d.usage.total());
      put(h, "projected_free", (double)d.projected_free);
      j["host"] = h;
    }
  }
  j["devices"] = devs;
  if (r.status == FitStatus::no_fit) j["message"] = r.message;
  j["probes"] = r.probes;
  j["elapsed_ms"] = std::round(r.elapsed_ms * 100.0) / 100.0;
  return j.dump(2) + "\n";
}

std::string format_table(const FitReport& r) {
  std::string out =
      fmt::format("{:<8} {:>12} {:>12} {:>12} {:>12}\n", "NAME", "model MiB", "context MiB", "compute MiB", "free MiB");
  for (const DeviceReport& d : r.devices)
    out += fmt::format("{:<8} {:>12.2f} {:>12.2f} {:>12.2f} {:>12.2f}{}\n", d.is_cpu ? "Host" : d.name,
                       (double)d.usage.model / kMiB, (double)d.usage.context / kMiB, (double)d.usage.compute / kMiB,
                       (double)d.projected_free / kMiB,
                       d.is_cpu ? "" : fmt::format("  (target {:.2f})", (double)d.target / kMiB));
  return out;
}

}  // namespace loom::fit
