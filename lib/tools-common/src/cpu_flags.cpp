// llama.cpp's CPU placement flags: -C/--cpu-mask, -Cr/--cpu-range, --cpu-strict, --numa, --poll
// (the CPU device's ThreadPlacement) and --prio (the process's scheduling priority).
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "loom/core/error.h"
#include "loom/core/log.h"
#include "loom/core/thread_pool.h"
#include "loom/tools/common.h"

#if defined(__linux__)
#include <sched.h>
#endif

namespace loom::tools {

namespace {

constexpr int kMaxCpus = 1024;  // CPU_SETSIZE: the most a mask can name

// -C: a hex number (0x optional) whose bit i is CPU i.
void add_mask(const std::string& mask, std::set<int>& cpus) {
  std::string_view hex = mask;
  if (hex.starts_with("0x") || hex.starts_with("0X")) hex.remove_prefix(2);
  LOOM_CHECK(!hex.empty() && hex.size() <= kMaxCpus / 4, usage,
             "-C '{}': expected a hex mask of at most {} digits, bit i for CPU i (e.g. 0xff)", mask, kMaxCpus / 4);
  for (size_t i = 0; i < hex.size(); ++i) {
    const char c = hex[hex.size() - 1 - i];  // the last digit holds CPUs 0-3
    int v = -1;
    if (c >= '0' && c <= '9') v = c - '0';
    if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
    LOOM_CHECK(v >= 0, usage, "-C '{}': '{}' is not a hex digit", mask, c);
    for (int b = 0; b < 4; ++b)
      if (v & (1 << b)) cpus.insert((int)(4 * i) + b);
  }
}

// -Cr: lo-hi, both included.
void add_range(const std::string& range, std::set<int>& cpus) {
  const size_t dash = range.find('-');
  int lo = -1, hi = -1;
  auto number = [](std::string_view s, int& out) {
    const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
    return !s.empty() && ec == std::errc() && p == s.data() + s.size();
  };
  LOOM_CHECK(dash != std::string::npos && number(std::string_view(range).substr(0, dash), lo) &&
                 number(std::string_view(range).substr(dash + 1), hi) && lo >= 0 && lo <= hi && hi < kMaxCpus,
             usage, "-Cr '{}': expected lo-hi, CPUs 0 to {} (e.g. 0-7)", range, kMaxCpus - 1);
  for (int c = lo; c <= hi; ++c) cpus.insert(c);
}

// The CPUs this process may run on (its affinity when it started: the main thread itself is
// placed once a pool has run, and loom-bench checks each setting's flags after that), for the
// messages and the check.
std::set<int> allowed_cpus() {
  const std::vector<int> cpus = process_cpus();
  return std::set<int>(cpus.begin(), cpus.end());
}

// sysfs's list format ("0-3,8-11"); empty where it does not parse.
std::set<int> parse_cpu_list(const std::string& text) {
  std::set<int> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    const std::string part = text.substr(at, end - at);
    int lo = -1, hi = -1;
    const size_t dash = part.find('-');
    const auto [p1, e1] =
        std::from_chars(part.data(), part.data() + (dash == std::string::npos ? part.size() : dash), lo);
    if (e1 != std::errc() || lo < 0 || lo >= kMaxCpus) return {};
    hi = lo;
    if (dash != std::string::npos) {
      const auto [p2, e2] = std::from_chars(part.data() + dash + 1, part.data() + part.size(), hi);
      if (e2 != std::errc() || hi < lo || hi >= kMaxCpus) return {};
    }
    for (int c = lo; c <= hi; ++c) out.insert(c);
    at = end + 1;
  }
  return out;
}

std::string cpu_list(const std::set<int>& cpus) {  // "0-3,8"
  std::string out;
  for (auto it = cpus.begin(); it != cpus.end();) {
    const int lo = *it;
    int hi = lo;
    while (++it != cpus.end() && *it == hi + 1) ++hi;
    if (!out.empty()) out += ',';  // piecewise: GCC 12 warns falsely on "" + string
    out += lo == hi ? std::to_string(lo) : fmt::format("{}-{}", lo, hi);
  }
  return out;
}

}  // namespace

std::vector<std::vector<int>> numa_node_cpus(const std::string& root) {
  std::vector<std::pair<int, std::set<int>>> nodes;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    int id = -1;
    if (!name.starts_with("node") ||
        std::from_chars(name.data() + 4, name.data() + name.size(), id).ptr != name.data() + name.size())
      continue;
    std::ifstream in(e.path() / "cpulist");
    std::string text;
    std::getline(in, text);
    if (std::set<int> cpus = parse_cpu_list(text); !cpus.empty()) nodes.emplace_back(id, std::move(cpus));
  }
  std::sort(nodes.begin(), nodes.end());
  std::vector<std::vector<int>> out;
  for (auto& [id, cpus] : nodes) out.emplace_back(cpus.begin(), cpus.end());
  return out;
}

ThreadPlacement cpu_placement(const CommonOptions& o, const std::string& numa_root) {
  ThreadPlacement p;
  std::set<int> cpus;
  if (!o.cpu_mask.empty()) add_mask(o.cpu_mask, cpus);
  if (!o.cpu_range.empty()) add_range(o.cpu_range, cpus);  // complements -C, as in llama.cpp
  LOOM_CHECK(o.cpu_mask.empty() || !cpus.empty() || !o.cpu_range.empty(), usage, "-C '{}': names no CPU", o.cpu_mask);
  const std::set<int> allowed = allowed_cpus();
  for (int c : cpus)
    LOOM_CHECK(allowed.empty() || allowed.count(c), usage, "-C/-Cr: CPU {} is not one this process may run on ({})", c,
               cpu_list(allowed));
  LOOM_CHECK(o.cpu_strict == 0 || o.cpu_strict == 1, usage, "--cpu-strict {}: expected 0 or 1", o.cpu_strict);
  LOOM_CHECK(o.poll >= 0 && o.poll <= 100, usage, "--poll {}: expected 0 (no polling) to 100", o.poll);
  LOOM_CHECK(o.numa.empty() || o.numa == "distribute" || o.numa == "isolate" || o.numa == "numactl", usage,
             "--numa '{}': expected distribute, isolate or numactl", o.numa);
  p.poll = o.poll;
  const bool strict = o.cpu_strict == 1;
  if (cpus.empty() && !strict && o.numa.empty()) return p;  // the OS places the threads
  if (cpus.empty()) cpus = allowed;                         // numactl's map is the process's own affinity
  // The sets the threads take in turn: all the CPUs, or one set per NUMA node (distribute), or the
  // node the run starts on (isolate). Strict splits them into single CPUs, taken from the sets in
  // turn so that consecutive threads land on different nodes.
  std::vector<std::vector<int>> sets;
  if (o.numa == "distribute" || o.numa == "isolate") {
    const int here = sched_getcpu();
    for (const std::vector<int>& node : numa_node_cpus(numa_root)) {
      if (o.numa == "isolate" && std::find(node.begin(), node.end(), here) == node.end()) continue;
      std::vector<int> mine;
      for (int c : node)
        if (cpus.count(c)) mine.push_back(c);
      if (!mine.empty()) sets.push_back(std::move(mine));
    }
  }
  if (sets.empty()) sets.emplace_back(cpus.begin(), cpus.end());  // no NUMA information: every CPU
  if (strict) {
    std::vector<std::vector<int>> single;
    for (size_t k = 0, added = 1; added > 0; ++k) {
      added = 0;
      for (const std::vector<int>& s : sets)
        if (k < s.size()) single.push_back({s[k]}), ++added;
    }
    sets = std::move(single);
  }
  p.cpu_sets = std::move(sets);
  return p;
}

void apply_priority(int prio) {
  LOOM_CHECK(prio >= -1 && prio <= 3, usage, "--prio {}: expected -1 (low) to 3 (realtime)", prio);
  if (prio == 0) return;
  // llama.cpp's niceness for each level; raising it needs CAP_SYS_NICE, so a refusal is a warning
  static const int kNice[] = {5, 0, -5, -10, -20};
  if (setpriority(PRIO_PROCESS, 0, kNice[prio + 1]) != 0)
    logger().warn("--prio {}: cannot set the process priority (nice {}): {}", prio, kNice[prio + 1],
                  std::strerror(errno));
}

}  // namespace loom::tools
