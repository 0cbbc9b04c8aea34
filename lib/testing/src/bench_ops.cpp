// loom-bench-ops: option checks, the device list (SIM0.., extra test devices, the broken devices
// of a LOOM_BROKEN_KERNELS build, the CPU), case selection (-o, -p), the mode loop over devices
// and cases, --list-ops, --show-coverage and --limits.
#include "loom/testing/bench_ops.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <memory>
#include <regex>
#include <set>

#include "loom/core/error.h"
#include "loom/core/thread_pool.h"
#include "loom/graph/fusion.h"
#include "loom/backend/registry.h"
#include "loom/testing/broken_device.h"
#include "loom/testing/limits.h"
#include "loom/testing/runner.h"
#include "placed_case.h"
#include "printers.h"

namespace loom::testing {

namespace {

Mode mode_of(const std::string& m) {
  if (m == "test" || m == "support") return kModeTest;
  if (m == "perf") return kModePerf;
  if (m == "grad") return kModeGrad;
  fail(ErrorKind::usage, "unknown mode '{}' (test, perf, grad or support)", m);
}

// Names -o accepts: ops of the op table with cases, in table order, then fused patterns.
std::vector<std::string> case_op_names() {
  std::set<std::string> have;
  for (const OpCase& c : catalog()) have.insert(c.op);
  std::vector<std::string> out;
  for (int i = 0; i < kOpCount; ++i)
    if (have.erase(op_name((OpKind)i))) out.push_back(op_name((OpKind)i));
  for (const std::string& rest : have) out.push_back(rest);
  return out;
}

int show_coverage(std::FILE* out) {
  struct Count {
    int test = 0, grad = 0, perf = 0, inside = 0;
  };
  std::map<std::string, Count> count;
  for (const OpCase& c : catalog()) {
    Count& k = count[c.op];
    k.test += (c.modes & kModeTest) != 0;
    k.grad += (c.modes & kModeGrad) != 0;
    k.perf += (c.modes & kModePerf) != 0;
    detail::PlacedCase pc(c, 0);
    std::set<OpKind> seen;
    for (const Tensor* n : pc.graph().nodes())
      if (seen.insert(n->op).second && op_name(n->op) != c.op) ++count[op_name(n->op)].inside;
  }
  fmt::print(out, "op coverage (cases per mode; 'in graphs' = cases of other ops whose graphs use it)\n");
  int covered = 0, ops = 0;
  std::vector<std::string> missing;
  for (int i = 1; i < kOpCount; ++i) {
    const OpInfo& info = op_info((OpKind)i);
    const Count k = count[info.name];
    ++ops;
    const bool ok = info.is_view ? k.inside > 0 : k.test > 0;
    covered += ok;
    if (!ok) missing.push_back(info.name);
    fmt::print(out, "  {:<24} {:>4} test {:>4} grad {:>4} perf {:>5} in graphs{}\n", info.name, k.test, k.grad, k.perf,
               k.inside, info.is_view ? " (view)" : "");
  }
  for (FusionKind f : {FusionKind::rms_norm_mul, FusionKind::topk_moe}) {
    const Count k = count[fusion_name(f)];
    fmt::print(out, "  {:<24} {:>4} test {:>4} grad {:>4} perf {:>5} in graphs (fused)\n", fusion_name(f), k.test, k.grad,
               k.perf, k.inside);
  }
  fmt::print(out, "{}/{} ops covered, {} cases\n", covered, ops, catalog().size());
  if (!missing.empty()) fmt::print(out, "no case: {}\n", fmt::join(missing, ", "));
  return missing.empty() ? 0 : 1;
}

std::vector<std::string> split_list(const std::vector<std::string>& items) {
  std::vector<std::string> out;
  for (const std::string& s : items) {
    size_t start = 0;
    while (start <= s.size()) {
      const size_t comma = s.find(',', start);
      std::string part = s.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
      if (!part.empty()) out.push_back(part);
      if (comma == std::string::npos) break;
      start = comma + 1;
    }
  }
  return out;
}

}  // namespace

int run_bench_ops(const BenchOpsOptions& o, std::FILE* out) {
  // NaN included: a case would never end
  LOOM_CHECK(o.perf_seconds > 0 && o.perf_seconds <= 3600, usage,
             "--perf-seconds {}: must be more than 0 and at most 3600", o.perf_seconds);
  LOOM_CHECK(o.output == "console" || o.output == "json" || o.output == "csv" || o.output == "sql", usage,
             "--output '{}': expected console, json, csv or sql", o.output);
  if (o.limits) {
    const MachineLimits m = measure_limits(o.n_threads);
    fmt::print(out, "{}", o.output == "json" ? limits_json(m) : limits_text(m));
    return 0;
  }
  const std::vector<std::string> names = case_op_names();
  if (o.list_ops) {
    for (const std::string& n : names) fmt::print(out, "{}\n", n);
    return 0;
  }
  if (o.show_coverage) return show_coverage(out);

  const Mode mode = mode_of(o.mode);
  const std::vector<std::string> op_filter = split_list(o.ops);
  for (const std::string& op : op_filter)
    LOOM_CHECK(std::find(names.begin(), names.end(), op) != names.end(), usage, "-o {}: no such op (see --list-ops)", op);
  std::regex re;
  try {
    // Case-insensitive: type names are spelled as llama.cpp prints them (q4_K, iq4_xs), and
    // users type them either way.
    re = std::regex(o.params_regex.empty() ? std::string(".*") : o.params_regex, std::regex::ECMAScript | std::regex::icase);
  } catch (const std::regex_error& e) {
    fail(ErrorKind::usage, "-p '{}': {}", o.params_regex, e.what());
  }
  std::vector<const OpCase*> cases;
  for (const OpCase* c : cases_for(mode))
    if ((op_filter.empty() || std::find(op_filter.begin(), op_filter.end(), c->op) != op_filter.end()) &&
        std::regex_search(c->name(), re))
      cases.push_back(c);
  if (cases.empty()) {  // a filter that selects nothing is a mistake, not a pass (exit 1, as a failed case)
    fmt::print(stderr, "error: no case matches{}{}{}\n", op_filter.empty() ? "" : " -o ", fmt::join(op_filter, ","),
               o.params_regex.empty() ? std::string() : fmt::format(" -p '{}'", o.params_regex));
    return 1;
  }

  // Devices: SIM0.., extra (tests), broken (test builds), then the CPU.
  const int threads = o.n_threads > 0 ? o.n_threads : ThreadPool::default_threads();
  DeviceSet set = make_devices(o.sim_devices, threads);
  std::vector<Device*> all = set.named_only;  // listed first: Vulkan0 on lavapipe, only with -b
  all.insert(all.end(), set.all.begin(), set.all.end() - 1);
  all.insert(all.end(), o.extra_devices.begin(), o.extra_devices.end());
  std::vector<std::unique_ptr<Device>> broken;
#ifdef LOOM_BROKEN_KERNELS
  broken.push_back(std::make_unique<BrokenDevice>("BROKEN_VALUE", *set.cpu, Breakage::wrong_value, OpKind::MUL_MAT));
  broken.push_back(std::make_unique<BrokenDevice>("BROKEN_OOB", *set.cpu, Breakage::write_past_end, OpKind::MUL_MAT));
  broken.push_back(std::make_unique<BrokenDevice>("BROKEN_NAN", *set.cpu, Breakage::nan, OpKind::MUL_MAT));
  for (auto& b : broken) all.push_back(b.get());
#endif
  all.push_back(set.cpu);
  std::vector<Device*> devices;
  const std::vector<std::string> wanted = split_list(o.backends);
  for (const std::string& name : wanted) {
    auto it = std::find_if(all.begin(), all.end(), [&](Device* d) { return d->name() == name; });
    if (it == all.end()) {
      std::vector<std::string> avail;
      for (Device* d : all) avail.push_back(d->name());
      fail(ErrorKind::usage, "-b {}: no such device (available: {})", name, fmt::join(avail, ", "));
    }
    if (std::find(devices.begin(), devices.end(), *it) == devices.end()) devices.push_back(*it);
  }
  if (wanted.empty()) {
    devices = all;
    std::erase_if(devices, [&](Device* d) {
      return std::find(set.named_only.begin(), set.named_only.end(), d) != set.named_only.end();
    });
    if (!broken.empty())
      std::erase_if(devices, [](Device* d) { return d->name().rfind("BROKEN_", 0) == 0; });  // only when asked for
  }

  RunOptions ro;
  ro.perf_seconds = o.perf_seconds;
  std::unique_ptr<detail::Printer> printer = detail::make_printer(o.output, out);
  printer->begin(o.mode, devices.size());
  size_t devices_ok = 0;
  for (size_t i = 0; i < devices.size(); ++i) {
    Device& d = *devices[i];
    printer->device_begin(i, devices.size(), d);
    if (o.mode == "test" && &d == set.cpu && wanted.empty()) {  // the reference compared with itself
      printer->device_skipped(d, "");
      ++devices_ok;
      continue;
    }
    size_t passed = 0, total = 0;
    for (const OpCase* c : cases) {
      CaseResult r = o.mode == "test"    ? run_test(*c, d, ro)
                     : o.mode == "perf"  ? run_perf(*c, d, ro)
                     : o.mode == "grad"  ? run_grad(*c, d, ro)
                                         : run_support(*c, d);
      printer->result(r);
      if (o.mode == "support") {
        ++total;
        passed += r.status == CaseStatus::ok;
      } else if (r.status == CaseStatus::ok || r.status == CaseStatus::fail) {
        ++total;
        passed += r.status == CaseStatus::ok;
      }
    }
    const bool ok = o.mode == "support" || passed == total;
    printer->device_end(d, passed, total, ok);
    devices_ok += ok;
  }
  const bool ok = devices_ok == devices.size();
  printer->end(devices_ok, devices.size(), ok);
  return ok ? 0 : 1;
}

}  // namespace loom::testing
