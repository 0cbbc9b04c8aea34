// loom-bench's value lists and its printers (see bench_sweep.h).
#include "loom/model/bench_sweep.h"

#include <fmt/format.h>

#include <charconv>
#include <nlohmann/json.hpp>

#include "loom/core/error.h"

namespace loom {

namespace {

std::vector<std::string_view> split_on(std::string_view s, char sep) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for (size_t i = 0; i <= s.size(); ++i)
    if (i == s.size() || s[i] == sep) {
      out.push_back(s.substr(start, i - start));
      start = i + 1;
    }
  return out;
}

// A non-negative decimal number making up all of s.
bool parse_count(std::string_view s, int64_t& v) {
  if (s.empty() || s[0] < '0' || s[0] > '9') return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  return ec == std::errc() && p == s.data() + s.size();
}

constexpr size_t kMaxListValues = 10000;  // a typo'd range should not make a million tests

}  // namespace

std::vector<int64_t> parse_bench_ints(std::string_view text, const char* flag) {
  std::vector<int64_t> out;
  for (std::string_view item : split_on(text, ',')) {
    auto bad = [&]() {
      fail(ErrorKind::usage, "{} '{}': expected numbers >= 0 or ranges first-last[+step|*mult], comma separated", flag,
           item);
    };
    int64_t v = 0;
    if (parse_count(item, v)) {
      out.push_back(v);
      continue;
    }
    const size_t dash = item.find('-');
    if (dash == std::string_view::npos || dash == 0) bad();
    int64_t first = 0, last = 0, step = 1;
    char kind = '+';
    std::string_view rest = item.substr(dash + 1);
    const size_t op = rest.find_first_of("+*");
    if (!parse_count(item.substr(0, dash), first) || !parse_count(rest.substr(0, op), last)) bad();
    if (op != std::string_view::npos) {
      kind = rest[op];
      if (!parse_count(rest.substr(op + 1), step)) bad();
    }
    LOOM_CHECK(first <= last, usage, "{} '{}': the range ends before it starts", flag, item);
    LOOM_CHECK(kind == '+' ? step >= 1 : (step >= 2 && first >= 1), usage,
               "{} '{}': a range needs a step >= 1 (+) or a multiplier >= 2 from a first value >= 1 (*)", flag, item);
    for (int64_t x = first; x <= last; x = kind == '+' ? x + step : x * step) {
      out.push_back(x);
      LOOM_CHECK(out.size() <= kMaxListValues, usage, "{} '{}': more than {} values", flag, item, kMaxListValues);
    }
  }
  return out;
}

std::vector<std::string> parse_bench_words(std::string_view text, const char* flag) {
  std::vector<std::string> out;
  for (std::string_view item : split_on(text, ',')) {
    LOOM_CHECK(!item.empty(), usage, "{} '{}': an empty item in the list", flag, text);
    out.emplace_back(item);
  }
  return out;
}

std::vector<std::pair<int64_t, int64_t>> parse_bench_pairs(std::string_view text, const char* flag) {
  std::vector<std::pair<int64_t, int64_t>> out;
  for (std::string_view pair : split_on(text, ';')) {
    const std::vector<std::string_view> v = split_on(pair, ',');
    int64_t pp = 0, tg = 0;
    LOOM_CHECK(v.size() == 2 && parse_count(v[0], pp) && parse_count(v[1], tg) && pp + tg > 0, usage,
               "{} '{}': expected pp,tg (prompt and generated tokens), pairs separated by ';'", flag, pair);
    out.emplace_back(pp, tg);
  }
  return out;
}

namespace {

std::string human_size(double bytes) {
  return bytes >= 1024.0 * 1024 * 1024 ? fmt::format("{:.2f} GiB", bytes / (1024.0 * 1024 * 1024))
                                       : fmt::format("{:.2f} MiB", bytes / (1024.0 * 1024));
}
std::string human_params(double n) { return n >= 1e9 ? fmt::format("{:.2f} B", n / 1e9) : fmt::format("{:.2f} M", n / 1e6); }

// Every field of a row, in the order csv, json and sql print them.
nlohmann::ordered_json row_json(const BenchRow& r) {
  const BenchTest& t = r.test;
  return {{"model_filename", r.model_filename},
          {"model_type", r.model_type},
          {"model_size", r.model_size},
          {"model_n_params", r.model_n_params},
          {"backend", r.backend},
          {"devices", r.devices},
          {"n_threads", r.n_threads},
          {"n_batch", r.n_batch},
          {"n_ubatch", r.n_ubatch},
          {"n_gpu_layers", r.n_gpu_layers},
          {"no_kv_offload", r.no_kv_offload},
          {"flash_attn", r.flash_attn},
          {"use_mmap", r.use_mmap},
          {"type_k", r.type_k},
          {"type_v", r.type_v},
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

// row_json plus, with --bandwidth, the weights' and the probe's read rates: the averages in every
// row (0 where the test was not probed, so csv and sql keep one set of columns), the per-token
// samples where it was.
nlohmann::ordered_json row_json_probed(const BenchRow& r, bool bandwidth) {
  nlohmann::ordered_json j = row_json(r);
  const BenchTest& t = r.test;
  if (!bandwidth) return j;
  j["avg_weight_gbps"] = t.avg_token_gbps();
  j["avg_read_gbps"] = t.avg_probe_gbps();
  j["median_read_ratio"] = t.median_bandwidth_ratio();
  if (!t.probed()) return j;
  j["samples_weight_gbps"] = t.token_gbps;
  j["samples_read_gbps"] = t.probe_gbps;
  return j;
}

class MarkdownPrinter : public BenchPrinter {
 public:
  MarkdownPrinter(const BenchColumns& c, FILE* out) : c_(c), out_(out) {}
  void header() override {
    std::string names = "| model | size | params | backend | threads |", rule = "| --- | ---: | ---: | --- | ---: |";
    auto add = [&](bool on, const char* name, const char* align) {
      if (!on) return;
      names += fmt::format(" {} |", name);
      rule += fmt::format(" {} |", align);
    };
    add(c_.n_batch, "n_batch", "---:");
    add(c_.n_ubatch, "n_ubatch", "---:");
    add(c_.n_gpu_layers, "ngl", "---:");
    add(c_.no_kv_offload, "nkvo", "---:");
    add(c_.flash_attn, "fa", "---:");
    add(c_.use_mmap, "mmap", "---:");
    add(c_.type_k, "type_k", "---");
    add(c_.type_v, "type_v", "---");
    add(c_.devices, "dev", "---");
    if (c_.bandwidth) {
      fmt::print(out_, "{} test | t/s | weights GB/s | read GB/s | % of read |\n", names);
      fmt::print(out_, "{} ---: | ---: | ---: | ---: | ---: |\n", rule);
      return;
    }
    fmt::print(out_, "{} test | t/s |\n{} ---: | ---: |\n", names, rule);
  }
  void row(const BenchRow& r) override {
    std::string s = fmt::format("| {} | {} | {} | {} | {} |", r.model_type, human_size((double)r.model_size),
                                human_params((double)r.model_n_params), r.backend, r.n_threads);
    auto add = [&](bool on, const auto& v) {
      if (on) s += fmt::format(" {} |", v);
    };
    add(c_.n_batch, r.n_batch);
    add(c_.n_ubatch, r.n_ubatch);
    add(c_.n_gpu_layers, r.n_gpu_layers);
    add(c_.no_kv_offload, (int)r.no_kv_offload);
    add(c_.flash_attn, r.flash_attn);
    add(c_.use_mmap, (int)r.use_mmap);
    add(c_.type_k, r.type_k);
    add(c_.type_v, r.type_v);
    add(c_.devices, r.devices);
    s += fmt::format(" {} | {:.2f} ± {:.2f} |", r.test.name, r.test.avg_ts(), r.test.stddev_ts());
    if (c_.bandwidth && r.test.probed())
      s += fmt::format(" {:.1f} | {:.1f} | {:.1f}% |", r.test.avg_token_gbps(), r.test.avg_probe_gbps(),
                       100.0 * r.test.median_bandwidth_ratio());
    else if (c_.bandwidth)
      s += " - | - | - |";
    fmt::print(out_, "{}\n", s);
  }

 private:
  BenchColumns c_;
  FILE* out_;
};

// A scalar field as csv / sql write it (strings quoted, '' / "" doubled; arrays left out).
std::string scalar(const nlohmann::ordered_json& v, char quote) {
  if (v.is_string()) {
    std::string s(1, quote);
    for (char ch : v.get<std::string>()) s += ch == quote ? std::string(2, quote) : std::string(1, ch);
    return s + quote;
  }
  if (v.is_number_float()) return fmt::format("{:.6f}", v.get<double>());
  return v.dump();
}

class CsvPrinter : public BenchPrinter {
 public:
  CsvPrinter(FILE* out, bool bandwidth) : out_(out), bandwidth_(bandwidth) {}
  void row(const BenchRow& r) override {
    const nlohmann::ordered_json j = row_json_probed(r, bandwidth_);
    std::string names, values;
    for (const auto& [k, v] : j.items()) {
      if (v.is_array()) continue;
      if (!names.empty()) names += ',';  // appended piecewise: GCC 12 warns (falsely) on "" + string
      names += k;
      if (!values.empty()) values += ',';
      values += scalar(v, '"');
    }
    if (!printed_header_) fmt::print(out_, "{}\n", names);
    printed_header_ = true;
    fmt::print(out_, "{}\n", values);
  }

 private:
  FILE* out_;
  bool bandwidth_;
  bool printed_header_ = false;
};

class JsonPrinter : public BenchPrinter {
 public:
  JsonPrinter(FILE* out, bool lines, bool bandwidth) : out_(out), lines_(lines), bandwidth_(bandwidth) {}
  void header() override {
    if (!lines_) fmt::print(out_, "[\n");
  }
  void row(const BenchRow& r) override {
    const std::string j = row_json_probed(r, bandwidth_).dump(lines_ ? -1 : 2);
    if (lines_) {
      fmt::print(out_, "{}\n", j);
      return;
    }
    fmt::print(out_, "{}{}", n_ ? ",\n" : "", j);
    ++n_;
  }
  void footer() override {
    if (!lines_) fmt::print(out_, "{}]\n", n_ ? "\n" : "");
  }

 private:
  FILE* out_;
  bool lines_;
  bool bandwidth_;
  int n_ = 0;
};

class SqlPrinter : public BenchPrinter {
 public:
  SqlPrinter(FILE* out, bool bandwidth) : out_(out), bandwidth_(bandwidth) {}
  void row(const BenchRow& r) override {
    const nlohmann::ordered_json j = row_json_probed(r, bandwidth_);
    std::string names, values, decls;
    for (const auto& [k, v] : j.items()) {
      if (v.is_array()) continue;
      names += (names.empty() ? "" : ", ") + k;
      values += (values.empty() ? "" : ", ") + scalar(v, '\'');
      decls += fmt::format("{}  {} {}", decls.empty() ? "" : ",\n", k,
                           v.is_string() ? "TEXT" : v.is_number_float() ? "REAL" : "INTEGER");
    }
    if (!created_) fmt::print(out_, "CREATE TABLE IF NOT EXISTS test (\n{}\n);\n\n", decls);
    created_ = true;
    fmt::print(out_, "INSERT INTO test ({}) VALUES ({});\n", names, values);
  }

 private:
  FILE* out_;
  bool bandwidth_;
  bool created_ = false;
};

}  // namespace

bool is_bench_format(std::string_view f) { return f == "md" || f == "csv" || f == "json" || f == "jsonl" || f == "sql"; }

std::unique_ptr<BenchPrinter> make_bench_printer(std::string_view format, const BenchColumns& columns, FILE* out) {
  if (format == "md") return std::make_unique<MarkdownPrinter>(columns, out);
  if (format == "csv") return std::make_unique<CsvPrinter>(out, columns.bandwidth);
  if (format == "json" || format == "jsonl")
    return std::make_unique<JsonPrinter>(out, format == "jsonl", columns.bandwidth);
  if (format == "sql") return std::make_unique<SqlPrinter>(out, columns.bandwidth);
  fail(ErrorKind::usage, "-o '{}': expected md, csv, json, jsonl or sql", format);
}

}  // namespace loom
