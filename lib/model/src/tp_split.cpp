// Split arithmetic: cumulative rounding of proportional shares (see split.h).
#include "loom/model/tp_split.h"

#include <cmath>

#include "loom/core/error.h"

namespace loom::tp {

std::vector<Range> split_units(int64_t n_units, const std::vector<float>& proportions) {
  LOOM_CHECK(!proportions.empty(), usage, "[tensor split] no members");
  double sum = 0;
  for (float p : proportions) {
    LOOM_CHECK(p >= 0 && std::isfinite(p), usage, "[tensor split] proportion {} must be a non-negative number", p);
    sum += p;
  }
  LOOM_CHECK(sum > 0, usage, "[tensor split] -ts proportions sum to zero");
  std::vector<Range> out(proportions.size());
  double cum = 0;
  int64_t prev = 0;
  for (size_t m = 0; m < proportions.size(); ++m) {
    cum += proportions[m];
    int64_t end = m + 1 == proportions.size() ? n_units : (int64_t)std::llround((double)n_units * cum / sum);
    if (end < prev) end = prev;
    if (end > n_units) end = n_units;
    out[m] = {prev, end};
    prev = end;
  }
  return out;
}

std::vector<Range> split_axis(int64_t n, int64_t granule, const std::vector<float>& proportions) {
  LOOM_CHECK(granule >= 1, internal, "[tensor split] granule {}", granule);
  const int64_t units = (n + granule - 1) / granule;
  std::vector<Range> out = split_units(units, proportions);
  for (Range& r : out) {
    r.begin = std::min(n, r.begin * granule);
    r.end = std::min(n, r.end * granule);
  }
  return out;
}

}  // namespace loom::tp
