// Parsing of simulated device capacities ("8GiB,8GiB", "2x24GiB", "3x64MiB,1.5GiB").
#include <cctype>
#include <cmath>
#include <string>

#include "loom/sim/sim.h"

namespace loom::sim {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = (char)std::tolower((unsigned char)c);
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace((unsigned char)s.front())) s.remove_prefix(1);
  while (!s.empty() && std::isspace((unsigned char)s.back())) s.remove_suffix(1);
  return s;
}

[[noreturn]] void bad(std::string_view item, std::string_view spec) {
  fail(ErrorKind::usage,
       "[sim-devices] bad size '{}' in '{}': expected [COUNTx]SIZE[,...] with a unit B, KiB, MiB, GiB or TiB "
       "(e.g. 2x8GiB,512MiB)",
       item, spec);
}

// "24GiB" -> bytes; throws Error(usage) naming the item.
size_t parse_one(std::string_view s, std::string_view item, std::string_view spec) {
  size_t i = 0;
  while (i < s.size() && (std::isdigit((unsigned char)s[i]) || s[i] == '.')) ++i;
  const std::string number(s.substr(0, i));
  if (number.empty() || number.find('.') != number.rfind('.') || number == ".") bad(item, spec);
  const std::string unit = lower(trim(s.substr(i)));
  double mult;
  if (unit.empty() || unit == "b")
    mult = 1;
  else if (unit == "k" || unit == "kib")
    mult = 1024.0;
  else if (unit == "m" || unit == "mib")
    mult = 1024.0 * 1024;
  else if (unit == "g" || unit == "gib")
    mult = 1024.0 * 1024 * 1024;
  else if (unit == "t" || unit == "tib")
    mult = 1024.0 * 1024 * 1024 * 1024;
  else
    bad(item, spec);
  const double bytes = std::stod(number) * mult;
  if (!(bytes >= 1.0) || bytes > 1099511627776.0 * 1024) bad(item, spec);  // 1 byte .. 1 PiB
  return (size_t)std::llround(bytes);
}

}  // namespace

std::vector<size_t> parse_sim_sizes(std::string_view spec) {
  std::vector<size_t> sizes;
  if (trim(spec).empty()) return sizes;
  size_t start = 0;
  for (;;) {
    const size_t comma = spec.find(',', start);
    const std::string_view item = trim(spec.substr(start, comma == std::string_view::npos ? spec.npos : comma - start));
    if (item.empty()) bad(item, spec);
    size_t count = 1;
    std::string_view size = item;
    if (const size_t x = lower(item).find('x'); x != std::string::npos) {
      const std::string_view n = trim(item.substr(0, x));
      if (n.empty() || n.size() > 4) bad(item, spec);
      for (char c : n)
        if (!std::isdigit((unsigned char)c)) bad(item, spec);
      count = std::stoul(std::string(n));
      if (count == 0) bad(item, spec);
      if (count > 64) fail(ErrorKind::usage, "[sim-devices] '{}': more than 64 devices", spec);
      size = trim(item.substr(x + 1));
    }
    const size_t bytes = parse_one(size, item, spec);
    sizes.insert(sizes.end(), count, bytes);
    if (sizes.size() > 64) fail(ErrorKind::usage, "[sim-devices] '{}': more than 64 devices", spec);
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return sizes;
}

}  // namespace loom::sim
