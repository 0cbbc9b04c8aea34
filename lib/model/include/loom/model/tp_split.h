// Split arithmetic for tensor parallelism: dividing n units (heads, rows, quant-block granules)
// among members by proportions (-ts), uneven and zero-size allowed.
#pragma once

#include <cstdint>
#include <vector>

namespace loom::tp {

// A member's half-open range [begin, end) of some axis.
struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// Splits n_units among proportions.size() members: member m gets the units between the
// rounded cumulative shares, so sizes differ from n_units * p_m / sum(p) by less than one unit
// and sum to n_units exactly. Throws usage for negative or all-zero proportions.
std::vector<Range> split_units(int64_t n_units, const std::vector<float>& proportions);

// The same split in elements: units of `granule` elements over an axis of n elements; the last
// unit may be short when granule does not divide n.
std::vector<Range> split_axis(int64_t n, int64_t granule, const std::vector<float>& proportions);

}  // namespace loom::tp
