// A bracketing search for the largest integer that still fits: false position on each
// constraint's slack (memory is close to affine in layers and in context), then bisection, so a
// search over n values takes about 3 probes when costs are affine and never more than
// log2(n) + 4.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace loom::fit {

// What a probe at one value says: whether it fits, and per constraint how many bytes are
// left (negative: missing). fixed: the part of the usage that appears as soon as anything is
// placed (a compute buffer), used to interpolate from a synthetic empty point.
struct Step {
  bool ok = false;
  std::vector<double> slack;
  std::vector<double> fixed;
};

struct Point {
  int64_t k = 0;
  Step step;
  bool synthetic = false;  // not probed: "nothing placed", usage 0
};

// Largest k in [lo.k, hi.k) with eval(k).ok, given lo fits and hi does not.
int64_t search_max(Point lo, Point hi, const std::function<Step(int64_t)>& eval, int max_interpolations = 3);

}  // namespace loom::fit
