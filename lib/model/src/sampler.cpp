// Sampler implementation (see sampler.h for the order of the steps).
#include "loom/model/sampler.h"

#include <algorithm>
#include <cmath>

#include "loom/core/error.h"

namespace loom {

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed) {
  LOOM_CHECK(std::isfinite(p.temp), usage, "--temp must be a finite number");
  LOOM_CHECK(p.top_p >= 0 && p.top_p <= 1 && p.min_p >= 0 && p.min_p <= 1, usage, "--top-p/--min-p must be in [0, 1]");
  LOOM_CHECK(p.repeat_penalty > 0, usage, "--repeat-penalty must be positive");
}

double Sampler::uniform() { return (double)(rng_() >> 11) * (1.0 / 9007199254740992.0); }

void Sampler::accept(int32_t token) {
  history_.push_back(token);
  if (p_.repeat_last_n > 0 && history_.size() > (size_t)p_.repeat_last_n * 4)
    history_.erase(history_.begin(), history_.end() - p_.repeat_last_n);
}

int32_t Sampler::sample(std::span<const float> logits) {
  cand_.clear();
  cand_.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) cand_.push_back({(int32_t)i, logits[i], 0.0f});
  if (p_.repeat_penalty != 1.0f && p_.repeat_last_n != 0) {
    const size_t n = p_.repeat_last_n < 0 ? history_.size() : std::min(history_.size(), (size_t)p_.repeat_last_n);
    std::vector<bool> seen(logits.size(), false);
    for (size_t i = history_.size() - n; i < history_.size(); ++i) {
      const int32_t t = history_[i];
      if (t < 0 || (size_t)t >= logits.size() || seen[(size_t)t]) continue;
      seen[(size_t)t] = true;
      float& l = cand_[(size_t)t].logit;
      l = l > 0 ? l / p_.repeat_penalty : l * p_.repeat_penalty;
    }
  }
  int32_t chosen;
  if (p_.temp <= 0.0f) {  // greedy: first maximum
    chosen = std::max_element(cand_.begin(), cand_.end(),
                              [](const Candidate& a, const Candidate& b) { return a.logit < b.logit; })
                 ->id;
  } else {
    auto by_logit = [](const Candidate& a, const Candidate& b) {
      return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
    };
    size_t n = cand_.size();
    if (p_.top_k > 0 && (size_t)p_.top_k < n) {
      std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
      n = (size_t)p_.top_k;
    } else {
      std::sort(cand_.begin(), cand_.end(), by_logit);
    }
    auto softmax = [&](size_t count) {
      const float mx = cand_[0].logit;
      double sum = 0;
      for (size_t i = 0; i < count; ++i) sum += (cand_[i].p = std::exp(cand_[i].logit - mx));
      for (size_t i = 0; i < count; ++i) cand_[i].p = (float)(cand_[i].p / sum);
    };
    softmax(n);
    if (p_.top_p < 1.0f) {
      double cum = 0;
      size_t keep = n;
      for (size_t i = 0; i < n; ++i) {
        cum += cand_[i].p;
        if (cum >= p_.top_p) {
          keep = i + 1;
          break;
        }
      }
      n = std::max<size_t>(1, keep);
    }
    if (p_.min_p > 0.0f) {
      const float limit = cand_[0].p * p_.min_p;
      size_t keep = 1;
      while (keep < n && cand_[keep].p >= limit) ++keep;
      n = keep;
    }
    for (size_t i = 0; i < n; ++i) cand_[i].logit /= p_.temp;
    softmax(n);
    double r = uniform(), cum = 0;
    chosen = cand_[n - 1].id;
    for (size_t i = 0; i < n; ++i) {
      cum += cand_[i].p;
      if (r < cum) {
        chosen = cand_[i].id;
        break;
      }
    }
  }
  accept(chosen);
  return chosen;
}

}  // namespace loom
