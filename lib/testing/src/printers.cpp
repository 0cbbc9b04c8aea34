// Printers: console lines `  OP(params): OK`, perf lines `%8d runs - %8.2f us/run - ...`,
// per-device and overall summaries; JSON, CSV and SQL carry the same fields per result.
#include "printers.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>
#include <vector>

namespace loom::testing::detail {

namespace {

double per_second(double per_run, double us) { return us > 0 ? per_run / (us * 1e-6) : 0.0; }

// "134.22 G" style: value scaled to k/M/G/T with the unit letter.
std::string si(double v) {
  const char* units[] = {"", "k", "M", "G", "T", "P"};
  int u = 0;
  while (u < 5 && v >= 1000.0) {
    v /= 1000.0;
    ++u;
  }
  return fmt::format("{:6.2f} {}", v, units[u]);
}

class ConsolePrinter final : public Printer {
 public:
  using Printer::Printer;
  void begin(const std::string& mode, size_t n_devices) override {
    mode_ = mode;
    fmt::print(out_, "Testing {} devices\n\n", n_devices);
  }
  void device_begin(size_t i, size_t n, const Device& d) override {
    const MemoryInfo m = d.memory();
    fmt::print(out_, "Backend {}/{}: {}\n", i + 1, n, d.name());
    fmt::print(out_, "  Device description: {} device\n", device_kind_name(d.kind()));
    fmt::print(out_, "  Device memory: {} MB ({} MB free)\n\n", m.total >> 20, m.free >> 20);
    std::fflush(out_);
  }
  void device_skipped(const Device& d, const std::string& why) override {
    fmt::print(out_, "  Skipping {} backend{}\n", d.name(), why.empty() ? "" : " (" + why + ")");
  }
  void result(const CaseResult& r) override {
    const std::string head = "  " + r.name() + ":";
    if (r.status == CaseStatus::not_supported || r.status == CaseStatus::skipped) {
      fmt::print(out_, "{} {} [{}]\n", head, case_status_name(r.status), r.message);
    } else if (r.status == CaseStatus::fail) {
      fmt::print(out_, "{} {} FAIL\n", head, r.message);
    } else if (r.mode == "perf") {
      // pad the name to a multiple of 8 columns, at least 5 spaces of it
      size_t col = (head.size() + 7) / 8 * 8;
      if (col - head.size() < 5) col += 8;
      fmt::print(out_, "{}{}{:8d} runs - {:8.2f} us/run - ", head, std::string(col - head.size(), ' '), r.runs, r.us_per_run);
      if (r.flops > 0) {
        fmt::print(out_, "{}FLOP/run - {}FLOPS\n", si(r.flops), si(per_second(r.flops, r.us_per_run)));
      } else {
        fmt::print(out_, "{:8d} kB/run - {:7.2f} GB/s\n", (int64_t)(r.bytes / 1024), per_second(r.bytes, r.us_per_run) / 1e9);
      }
    } else if (r.mode == "support") {
      fmt::print(out_, "{} supported\n", head);
    } else {
      fmt::print(out_, "{} OK\n", head);
    }
    std::fflush(out_);
  }
  void device_end(const Device& d, size_t passed, size_t total, bool ok) override {
    if (mode_ == "support") {
      fmt::print(out_, "  {}/{} cases supported\n", passed, total);
    } else {
      fmt::print(out_, "  {}/{} tests passed\n", passed, total);
    }
    fmt::print(out_, "  Backend {}: {}\n", d.name(), ok ? "OK" : "FAIL");
  }
  void end(size_t devices_ok, size_t devices, bool ok) override {
    fmt::print(out_, "{}/{} backends passed\n{}\n", devices_ok, devices, ok ? "OK" : "FAIL");
    std::fflush(out_);
  }

 private:
  std::string mode_;
};

nlohmann::json to_json(const CaseResult& r) {
  nlohmann::json j = {{"backend", r.backend}, {"mode", r.mode},     {"op", r.op},
                      {"params", r.params},   {"name", r.name()},   {"status", case_status_name(r.status)},
                      {"passed", r.passed()}, {"message", r.message}};
  if (r.mode == "test") {
    j["nmse"] = r.nmse;
    j["max_nmse"] = r.max_nmse;
  } else if (r.mode == "perf") {
    j["runs"] = r.runs;
    j["us_per_run"] = r.us_per_run;
    j["flops_per_run"] = r.flops;
    j["gflops"] = per_second(r.flops, r.us_per_run) / 1e9;
    j["bytes_per_run"] = r.bytes;
    j["gbps"] = per_second(r.bytes, r.us_per_run) / 1e9;
  } else if (r.mode == "grad") {
    j["maa"] = r.maa;
    j["max_maa"] = r.max_maa;
  }
  return j;
}

class JsonPrinter final : public Printer {
 public:
  using Printer::Printer;
  void begin(const std::string& mode, size_t) override { doc_ = {{"mode", mode}, {"results", nlohmann::json::array()}, {"backends", nlohmann::json::array()}}; }
  void device_skipped(const Device& d, const std::string& why) override {
    doc_["backends"].push_back({{"name", d.name()}, {"skipped", true}, {"reason", why}});
  }
  void result(const CaseResult& r) override { doc_["results"].push_back(to_json(r)); }
  void device_end(const Device& d, size_t passed, size_t total, bool ok) override {
    doc_["backends"].push_back({{"name", d.name()}, {"passed", passed}, {"total", total}, {"ok", ok}});
  }
  void end(size_t, size_t, bool ok) override {
    doc_["ok"] = ok;
    fmt::print(out_, "{}\n", doc_.dump(2));
  }

 private:
  nlohmann::json doc_;
};

const char* kColumns[] = {"backend", "mode", "op", "params", "status", "message", "nmse", "max_nmse", "runs",
                          "us_per_run", "flops_per_run", "gflops", "bytes_per_run", "gbps", "maa"};

std::vector<std::string> row(const CaseResult& r, std::string (*quote)(const std::string&)) {
  const double s = r.us_per_run;
  return {quote(r.backend), quote(r.mode), quote(r.op), quote(r.params), quote(case_status_name(r.status)),
          quote(r.message), fmt::format("{:g}", r.nmse), fmt::format("{:g}", r.max_nmse), fmt::format("{}", r.runs),
          fmt::format("{:.3f}", s), fmt::format("{:g}", r.flops), fmt::format("{:.3f}", per_second(r.flops, s) / 1e9),
          fmt::format("{:g}", r.bytes), fmt::format("{:.3f}", per_second(r.bytes, s) / 1e9), fmt::format("{:g}", r.maa)};
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

std::string quote_with(const std::string& s, char q) {
  std::string out(1, q);
  for (char c : s) {
    if (c == q) out += q;
    out += c;
  }
  return out + q;
}

class CsvPrinter final : public Printer {
 public:
  using Printer::Printer;
  void begin(const std::string&, size_t) override {
    fmt::print(out_, "{}\n", join(std::vector<std::string>(std::begin(kColumns), std::end(kColumns)), ","));
  }
  void result(const CaseResult& r) override {
    fmt::print(out_, "{}\n", join(row(r, [](const std::string& s) { return quote_with(s, '"'); }), ","));
    std::fflush(out_);
  }
};

class SqlPrinter final : public Printer {
 public:
  using Printer::Printer;
  void begin(const std::string&, size_t) override {
    fmt::print(out_,
               "CREATE TABLE IF NOT EXISTS bench_ops (backend TEXT, mode TEXT, op TEXT, params TEXT, status TEXT, "
               "message TEXT, nmse REAL, max_nmse REAL, runs INTEGER, us_per_run REAL, flops_per_run REAL, gflops REAL, "
               "bytes_per_run REAL, gbps REAL, maa REAL);\n");
  }
  void result(const CaseResult& r) override {
    fmt::print(out_, "INSERT INTO bench_ops ({}) VALUES ({});\n",
               join(std::vector<std::string>(std::begin(kColumns), std::end(kColumns)), ", "),
               join(row(r, [](const std::string& s) { return quote_with(s, '\''); }), ", "));
    std::fflush(out_);
  }
};

}  // namespace

std::unique_ptr<Printer> make_printer(const std::string& format, std::FILE* out) {
  if (format == "json") return std::make_unique<JsonPrinter>(out);
  if (format == "csv") return std::make_unique<CsvPrinter>(out);
  if (format == "sql") return std::make_unique<SqlPrinter>(out);
  return std::make_unique<ConsolePrinter>(out);
}

}  // namespace loom::testing::detail
