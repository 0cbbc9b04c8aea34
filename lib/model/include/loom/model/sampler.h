// Token sampling: repeat penalty -> top-k -> top-p -> min-p -> temperature -> draw, in
// llama.cpp's order. temp <= 0 is greedy (argmax, deterministic). The RNG is seeded and
// portable (our own uniform draw from mt19937_64), so a seed reproduces a run anywhere.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace loom {

struct SamplerParams {
  float temp = 0.8f;
  int32_t top_k = 40;      // <= 0: off
  float top_p = 0.95f;     // >= 1: off
  float min_p = 0.05f;     // <= 0: off
  float repeat_penalty = 1.0f;  // 1: off
  int32_t repeat_last_n = 64;
  uint64_t seed = 0xdecafbad;
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);
  // Picks the next token from logits (n_vocab floats) and remembers it for the penalty.
  int32_t sample(std::span<const float> logits);
  void accept(int32_t token);  // remember a token (e.g. the prompt) for the repeat penalty
  const SamplerParams& params() const { return p_; }

 private:
  double uniform();  // [0, 1)
  SamplerParams p_;
  std::mt19937_64 rng_;
  std::vector<int32_t> history_;
  struct Candidate {
    int32_t id;
    float logit;
    float p;
  };
  std::vector<Candidate> cand_;
};

}  // namespace loom
