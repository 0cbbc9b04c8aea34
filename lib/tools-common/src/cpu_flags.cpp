// llama.cpp's CPU placement flags: -C/--cpu-mask, -Cr/--cpu-range, --cpu-strict, --poll (the CPU
// device's ThreadPlacement) and --prio (the process's scheduling priority).
#include <fmt/format.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <set>

#include "loom/core/error.h"
#include "loom/core/log.h"
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

// The CPUs this process may run on (its affinity), for the messages and the check.
std::set<int> allowed_cpus() {
  std::set<int> out;
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) out.insert(c);
#endif
  return out;
}

std::string cpu_list(const std::set<int>& cpus) {  // "0-3,8"
  std::string out;
  for (auto it = cpus.begin(); it != cpus.end();) {
    const int lo = *it;
    int hi = lo;
    while (++it != cpus.end() && *it == hi + 1) ++hi;
    out += (out.empty() ? "" : ",") + (lo == hi ? std::to_string(lo) : fmt::format("{}-{}", lo, hi));
  }
  return out;
}

}  // namespace

ThreadPlacement cpu_placement(const CommonOptions& o) {
  ThreadPlacement p;
  std::set<int> cpus;
  if (!o.cpu_mask.empty()) add_mask(o.cpu_mask, cpus);
  if (!o.cpu_range.empty()) add_range(o.cpu_range, cpus);  // complements -C, as in llama.cpp
  LOOM_CHECK(o.cpu_mask.empty() || !cpus.empty() || !o.cpu_range.empty(), usage, "-C '{}': names no CPU", o.cpu_mask);
  const std::set<int> allowed = allowed_cpus();
  for (int c : cpus)
    LOOM_CHECK(allowed.empty() || allowed.count(c), usage, "-C/-Cr: CPU {} is not one this process may run on ({})", c,
               cpu_list(allowed));
  p.cpus.assign(cpus.begin(), cpus.end());
  LOOM_CHECK(o.cpu_strict == 0 || o.cpu_strict == 1, usage, "--cpu-strict {}: expected 0 or 1", o.cpu_strict);
  p.strict = o.cpu_strict == 1;
  LOOM_CHECK(o.poll >= 0 && o.poll <= 100, usage, "--poll {}: expected 0 (no polling) to 100", o.poll);
  p.poll = o.poll;
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
