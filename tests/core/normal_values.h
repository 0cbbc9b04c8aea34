// Deterministic normal data for the quantization-error tests.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace loom::test {

inline std::vector<float> normal_values(int64_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, sigma);
  std::vector<float> x((size_t)n);
  for (float& v : x) v = dist(rng);
  return x;
}

}  // namespace loom::test
