// Bracketing search: false position on the slacks while it pays, bisection after.
#include "search.h"

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"

namespace loom::fit {

namespace {

// The k where the first violated constraint crosses zero on the line through a and b.
int64_t interpolate(const Point& a, const Point& b) {
  int64_t guess = b.k - 1;
  const size_t n = std::min(a.step.slack.size(), b.step.slack.size());
  for (size_t i = 0; i < n; ++i) {
    const double sb = b.step.slack[i];
    if (sb >= 0) continue;  // this constraint holds at b: it does not limit k
    double sa = a.step.slack[i];
    if (a.synthetic && i < b.step.fixed.size()) sa -= b.step.fixed[i];  // the fixed part appears at k > a
    int64_t g = a.k;
    if (sa > 0) g = a.k + (int64_t)std::floor(sa / (sa - sb) * (double)(b.k - a.k));
    guess = std::min(guess, g);
  }
  return guess;
}

}  // namespace

int64_t search_max(Point lo, Point hi, const std::function<Step(int64_t)>& eval, int max_interpolations) {
  LOOM_ASSERT(lo.k < hi.k, "search bracket [{}, {})", lo.k, hi.k);
  int interpolations = 0;
  while (hi.k - lo.k > 1) {
    int64_t k = interpolations < max_interpolations ? interpolate(lo, hi) : lo.k + (hi.k - lo.k) / 2;
    ++interpolations;
    k = std::clamp(k, lo.k + 1, hi.k - 1);
    Point p{k, eval(k), false};
    if (p.step.ok)
      lo = std::move(p);
    else
      hi = std::move(p);
  }
  return lo.k;
}

}  // namespace loom::fit
