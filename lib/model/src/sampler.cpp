// The sampler chain (see sampler.h for the order and docs/CLI.md for the flags). Each step works
// on the candidate list in place; softmax() sorts it once and later steps keep it sorted.
#include "loom/model/sampler.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <unordered_map>

#include "loom/core/error.h"

namespace loom {

namespace {

struct StepName {
  SamplerStep step;
  const char* name;
  char letter;
};
// llama.cpp's names and letters (--samplers / --sampling-seq), with its accepted aliases.
constexpr StepName kSteps[] = {
    {SamplerStep::penalties, "penalties", 'e'},
    {SamplerStep::dry, "dry", 'd'},
    {SamplerStep::top_n_sigma, "top_n_sigma", 's'},
    {SamplerStep::top_n_sigma, "top-n-sigma", 0},
    {SamplerStep::top_k, "top_k", 'k'},
    {SamplerStep::typical, "typ_p", 'y'},
    {SamplerStep::top_p, "top_p", 'p'},
    {SamplerStep::min_p, "min_p", 'm'},
    {SamplerStep::xtc, "xtc", 'x'},
    {SamplerStep::temperature, "temperature", 't'},
    {SamplerStep::typical, "typical_p", 0},
    {SamplerStep::typical, "typical", 0},
    {SamplerStep::top_k, "top-k", 0},
    {SamplerStep::top_p, "top-p", 0},
    {SamplerStep::top_p, "nucleus", 0},
    {SamplerStep::min_p, "min-p", 0},
    {SamplerStep::temperature, "temp", 0},
    {SamplerStep::typical, "typ-p", 0},
};

}  // namespace

std::vector<SamplerStep> SamplerParams::default_order() {
  return {SamplerStep::penalties, SamplerStep::dry,     SamplerStep::top_n_sigma,
          SamplerStep::top_k,     SamplerStep::typical, SamplerStep::top_p,
          SamplerStep::min_p,     SamplerStep::xtc,     SamplerStep::temperature};
}

std::vector<SamplerStep> parse_sampler_order(const std::string& text) {
  std::vector<SamplerStep> out;
  const bool letters = text.find_first_of(";,_") == std::string::npos && text.size() <= 12 &&
                       std::all_of(text.begin(), text.end(), [](char c) {
                         return std::any_of(std::begin(kSteps), std::end(kSteps),
                                            [c](const StepName& s) { return s.letter == c; });
                       });
  if (letters) {
    for (char c : text)
      for (const StepName& s : kSteps)
        if (s.letter == c) out.push_back(s.step);
    return out;
  }
  size_t start = 0;
  while (start <= text.size()) {
    size_t end = text.find_first_of(";,", start);
    if (end == std::string::npos) end = text.size();
    const std::string name = text.substr(start, end - start);
    if (!name.empty()) {
      const StepName* found = nullptr;
      for (const StepName& s : kSteps)
        if (name == s.name) found = &s;
      LOOM_CHECK(
          found != nullptr, usage,
          "--samplers: unknown step '{}' (penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature)",
          name);
      out.push_back(found->step);
    }
    start = end + 1;
  }
  return out;
}

std::string sampler_order_name(const std::vector<SamplerStep>& order) {
  std::string s;
  for (SamplerStep st : order)
    for (const StepName& n : kSteps)
      if (n.step == st && n.letter != 0) {
        if (!s.empty()) s += ';';
        s += n.name;
      }
  return s;
}

Sampler::Sampler(const SamplerParams& p) : p_(p), rng_(p.seed), mu_(2.0f * p.mirostat_tau) {
  LOOM_CHECK(std::isfinite(p.temp), usage, "--temp must be a finite number");
  LOOM_CHECK(p.top_p >= 0 && p.top_p <= 1, usage, "--top-p {}: must be in [0, 1]", p.top_p);
  LOOM_CHECK(p.min_p >= 0 && p.min_p <= 1, usage, "--min-p {}: must be in [0, 1]", p.min_p);
  LOOM_CHECK(p.typical_p >= 0 && p.typical_p <= 1, usage, "--typical {}: must be in [0, 1]", p.typical_p);
  // NaN or an infinite penalty would turn logits into NaN (inf * 0, inf - inf) and sample garbage
  LOOM_CHECK(p.repeat_penalty > 0 && std::isfinite(p.repeat_penalty), usage, "--repeat-penalty must be positive");
  LOOM_CHECK(std::isfinite(p.presence_penalty) && std::isfinite(p.frequency_penalty), usage,
             "--presence-penalty and --frequency-penalty must be finite numbers");
  LOOM_CHECK(p.repeat_last_n >= -1, usage, "--repeat-last-n {}: must be -1 (all), 0 (off) or more", p.repeat_last_n);
  LOOM_CHECK(p.xtc_probability >= 0 && p.xtc_probability <= 1, usage, "--xtc-probability must be in [0, 1]");
  // any threshold above 0.5 turns XTC off, as in llama.cpp; NaN is no threshold at all
  LOOM_CHECK(!std::isnan(p.xtc_threshold), usage, "--xtc-threshold must be a number");
  LOOM_CHECK(p.dry_multiplier >= 0 && std::isfinite(p.dry_multiplier) && p.dry_base >= 1 && std::isfinite(p.dry_base) &&
                 p.dry_allowed_length >= 0,
             usage, "--dry-multiplier must be >= 0, --dry-base >= 1 and --dry-allowed-length >= 0");
  LOOM_CHECK(p.mirostat >= 0 && p.mirostat <= 2, usage, "--mirostat {}: 0 (off), 1 or 2", p.mirostat);
  LOOM_CHECK(
      std::isfinite(p.mirostat_tau) && p.mirostat_tau >= 0 && std::isfinite(p.mirostat_eta) && p.mirostat_eta >= 0,
      usage, "--mirostat-lr and --mirostat-ent must be finite and not negative");
  LOOM_CHECK(!std::isnan(p.top_n_sigma), usage, "--top-nsigma must be a number");
  LOOM_CHECK(std::isfinite(p.dynatemp_range) && std::isfinite(p.dynatemp_exponent) && p.dynatemp_exponent >= 0, usage,
             "--dynatemp-range must be finite and --dynatemp-exp finite and not negative");
  for (const auto& [id, bias] : p.logit_bias)
    LOOM_CHECK(!std::isnan(bias), usage, "--logit-bias for token {}: NaN is not a bias", id);
}

double Sampler::uniform() { return (double)(rng_() >> 11) * (1.0 / 9007199254740992.0); }

void Sampler::accept(int32_t token) { history_.push_back(token); }

namespace {
// Highest logit first, ties by id: a total order, so every sort of the same candidates agrees.
bool by_logit(const Sampler::Candidate& a, const Sampler::Candidate& b) {
  return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
}

// The logit's bits as a key whose ascending order is by_logit's (largest logit first); -0 is 0.
uint32_t descending_key(float logit) {
  uint32_t u;
  std::memcpy(&u, &logit, sizeof u);
  if (u == 0x80000000u) u = 0;
  return (u & 0x80000000u) ? u : ~(u | 0x80000000u);
}

// Sorts by by_logit. A long list still in id order (as run_chain builds it) without NaN goes
// through a stable radix sort of the keys instead: ties keep their id order, so the order is
// by_logit's exactly, and 128k tokens sort several times faster than by comparisons.
void sort_by_logit(std::vector<Sampler::Candidate>& v, std::vector<Sampler::Candidate>& tmp) {
  bool radix = v.size() >= 4096;
  for (size_t i = 0; radix && i < v.size(); ++i) radix = !std::isnan(v[i].logit) && (i == 0 || v[i - 1].id < v[i].id);
  if (!radix) {
    std::sort(v.begin(), v.end(), by_logit);
    return;
  }
  tmp.resize(v.size());
  for (int shift = 0; shift < 32; shift += 8) {  // least significant byte first
    size_t count[257] = {};
    for (const auto& c : v) ++count[((descending_key(c.logit) >> shift) & 255) + 1];
    for (int b = 0; b < 256; ++b) count[b + 1] += count[b];
    for (const auto& c : v) tmp[count[(descending_key(c.logit) >> shift) & 255]++] = c;
    v.swap(tmp);
  }
}

}  // namespace

void Sampler::softmax() {
  if (!sorted_) {
    sort_by_logit(cand_, scratch_);
    sorted_ = true;
  }
  const float mx = cand_[0].logit;
  double sum = 0;
  for (Candidate& c : cand_) sum += (c.p = std::exp(c.logit - mx));
  for (Candidate& c : cand_) c.p = (float)(c.p / sum);
}

void Sampler::truncate(size_t n) { cand_.resize(std::max<size_t>(1, std::min(n, cand_.size()))); }

// repeat (llama.cpp's: divide positive logits, multiply negative ones), frequency (per
// occurrence) and presence (once) penalties over the last repeat_last_n tokens.
void Sampler::apply_penalties() {
  if (p_.repeat_last_n == 0 ||
      (p_.repeat_penalty == 1.0f && p_.frequency_penalty == 0.0f && p_.presence_penalty == 0.0f))
    return;
  const size_t n = p_.repeat_last_n < 0 ? history_.size() : std::min(history_.size(), (size_t)p_.repeat_last_n);
  std::unordered_map<int32_t, int> count;
  for (size_t i = history_.size() - n; i < history_.size(); ++i) ++count[history_[i]];
  for (Candidate& c : cand_) {
    auto it = count.find(c.id);
    if (it == count.end()) continue;
    c.logit = c.logit <= 0 ? c.logit * p_.repeat_penalty : c.logit / p_.repeat_penalty;
    c.logit -= (float)it->second * p_.frequency_penalty + p_.presence_penalty;
  }
}

// DRY ("don't repeat yourself"): a token that would extend a sequence already seen in the
// history by a repeat of length n >= allowed_length loses multiplier * base^(n - allowed_length).
// Breaker tokens end a sequence (they never match).
void Sampler::apply_dry() {
  if (p_.dry_multiplier <= 0 || history_.size() < 2) return;
  const size_t window = p_.dry_last_n < 0 ? history_.size() : std::min(history_.size(), (size_t)p_.dry_last_n);
  const int32_t* h = history_.data() + (history_.size() - window);
  const size_t L = window;
  auto breaker = [&](int32_t t) {
    return std::find(p_.dry_breakers.begin(), p_.dry_breakers.end(), t) != p_.dry_breakers.end();
  };
  std::unordered_map<int32_t, size_t> longest;  // next token -> longest repeat it would continue
  for (size_t j = 0; j + 1 < L; ++j) {          // h[j] ends an earlier occurrence of the suffix
    size_t m = 0;
    while (m <= j && !breaker(h[j - m]) && h[j - m] == h[L - 1 - m] && L - 1 - m > j - m) ++m;
    if (m == 0 || breaker(h[j + 1])) continue;
    size_t& best = longest[h[j + 1]];
    best = std::max(best, m);
  }
  for (Candidate& c : cand_) {
    auto it = longest.find(c.id);
    if (it == longest.end() || it->second < (size_t)p_.dry_allowed_length) continue;
    c.logit -= p_.dry_multiplier * std::pow(p_.dry_base, (float)(it->second - (size_t)p_.dry_allowed_length));
  }
}

// Locally typical sampling: keep the tokens whose surprise is closest to the entropy, up to a
// probability mass of typical_p.
void Sampler::apply_typical() {
  if (p_.typical_p >= 1.0f) return;
  softmax();
  double entropy = 0;
  for (const Candidate& c : cand_)
    if (c.p > 0) entropy -= c.p * std::log((double)c.p);
  std::vector<std::pair<double, size_t>> shifted;
  for (size_t i = 0; i < cand_.size(); ++i)
    shifted.push_back({std::abs(-std::log((double)cand_[i].p) - entropy), i});
  std::stable_sort(shifted.begin(), shifted.end(),
                   [](const auto& a, const auto& b) { return a.first < b.first; });
  double cum = 0;
  size_t keep = shifted.size();
  for (size_t i = 0; i < shifted.size(); ++i) {
    cum += cand_[shifted[i].second].p;
    if (cum > p_.typical_p) {
      keep = i + 1;
      break;
    }
  }
  std::vector<Candidate> kept;
  for (size_t i = 0; i < keep; ++i) kept.push_back(cand_[shifted[i].second]);
  cand_ = std::move(kept);
  sorted_ = false;
}

// Top-n-sigma: drop the tokens whose logit is below the largest by more than n standard
// deviations of the (finite) logits.
void Sampler::apply_top_n_sigma() {
  if (!(p_.top_n_sigma > 0) || cand_.size() <= 1) return;
  double sum = 0, sq = 0, mx = -std::numeric_limits<double>::infinity();
  size_t n = 0;
  for (const Candidate& c : cand_)
    if (std::isfinite(c.logit)) {
      sum += c.logit;
      mx = std::max(mx, (double)c.logit);
      ++n;
    }
  if (n == 0) return;
  const double mean = sum / (double)n;
  for (const Candidate& c : cand_)
    if (std::isfinite(c.logit)) sq += ((double)c.logit - mean) * ((double)c.logit - mean);
  const double limit = mx - p_.top_n_sigma * std::sqrt(sq / (double)n);
  std::erase_if(cand_, [&](const Candidate& c) { return (double)c.logit < limit; });
}

// Temperature: logits divided by temp (temp <= 0: the first largest logit only). With a
// dynatemp range, llama.cpp's "temp-ext": temp runs from max(0, temp - range) to temp + range
// with the normalized entropy of the candidates (to the power dynatemp_exponent); one candidate
// is left as it is.
void Sampler::apply_temperature() {
  float temp = p_.temp;
  if (p_.dynatemp_range > 0) {
    if (cand_.size() <= 1) return;
    softmax();
    double entropy = 0;
    for (const Candidate& c : cand_)
      if (c.p > 0) entropy -= c.p * std::log((double)c.p);
    const double lo = std::max(0.0f, p_.temp - p_.dynatemp_range), hi = p_.temp + p_.dynatemp_range;
    const double normalized = entropy / std::log((double)cand_.size());
    temp = (float)(lo + (hi - lo) * std::pow(normalized, (double)p_.dynatemp_exponent));
  }
  scale_logits(temp);
}

void Sampler::scale_logits(float temp) {
  if (temp <= 0) {  // greedy: the first largest logit only (found without sorting the rest)
    if (!sorted_) cand_.front() = *std::min_element(cand_.begin(), cand_.end(), by_logit);
    sorted_ = true;
    truncate(1);
    return;
  }
  for (Candidate& c : cand_) c.logit /= temp;
}

// XTC ("exclude top choices"): with probability xtc_probability, drop every token at or above
// the threshold except the least likely of them (needs two or more above it).
void Sampler::apply_xtc() {
  if (p_.xtc_probability <= 0 || p_.xtc_threshold > 0.5f || cand_.size() < 2) return;
  if (uniform() >= p_.xtc_probability) return;
  softmax();
  size_t last = 0;
  while (last + 1 < cand_.size() && cand_[last + 1].p >= p_.xtc_threshold) ++last;
  if (last == 0) return;
  cand_.erase(cand_.begin(), cand_.begin() + (ptrdiff_t)last);
}

// Mirostat 1 (k from the estimated Zipf exponent) and 2 (drop tokens more surprising than mu).
void Sampler::apply_mirostat() {
  softmax();
  if (p_.mirostat == 1) {
    const size_t m = std::min<size_t>(100, cand_.size());
    double sum_tb = 0, sum_t2 = 0;
    for (size_t i = 0; i + 1 < m; ++i) {
      const double t = std::log((double)(i + 2) / (double)(i + 1));
      const double b = std::log((double)cand_[i].p / (double)cand_[i + 1].p);
      sum_tb += t * b;
      sum_t2 += t * t;
    }
    const double s_hat = sum_t2 > 0 ? sum_tb / sum_t2 : 1.0;
    const double eps = s_hat - 1;
    const double n = (double)n_vocab_;
    const double k = std::pow(eps * std::pow(2.0, (double)mu_) / (1 - std::pow(n, -eps)), 1 / s_hat);
    truncate(std::isfinite(k) ? (size_t)std::max(1.0, std::floor(k)) : cand_.size());  // k truncated as llama.cpp
  } else {
    size_t keep = 0;
    while (keep < cand_.size() && -std::log2((double)cand_[keep].p) <= mu_) ++keep;
    truncate(keep);
  }
  softmax();
}

void Sampler::run_chain(std::span<const float> logits, bool constrained) {
  LOOM_CHECK(!logits.empty(), internal, "sampling from no logits");
  n_vocab_ = logits.size();
  cand_.clear();
  cand_.reserve(logits.size());
  for (size_t i = 0; i < logits.size(); ++i) cand_.push_back({(int32_t)i, logits[i], 0.0f});
  sorted_ = false;
  for (const auto& [id, bias] : p_.logit_bias)
    if (id >= 0 && (size_t)id < cand_.size()) cand_[(size_t)id].logit += bias;
  // Over a grammar's allowed tokens the chain runs without the rest (most of the vocabulary; only
  // dynamic temperature, which counts the candidates, could tell). Other bans stay, as in llama.cpp.
  if (constrained) std::erase_if(cand_, [](const Candidate& c) { return !(c.logit > -INFINITY); });
  LOOM_CHECK(std::any_of(cand_.begin(), cand_.end(), [](const Candidate& c) { return c.logit > -INFINITY; }),
             invalid_input,
             "no token can be sampled: every one is banned (by --logit-bias, --ignore-eos or --grammar)");
  if (p_.mirostat != 0) {  // plain temperature, as llama.cpp's mirostat chains
    scale_logits(p_.temp);
    if (p_.temp > 0) apply_mirostat();
  } else {
    for (SamplerStep step : p_.order) switch (step) {
        case SamplerStep::penalties: apply_penalties(); sorted_ = false; break;
        case SamplerStep::dry: apply_dry(); sorted_ = false; break;
        case SamplerStep::top_n_sigma:
          apply_top_n_sigma();
          break;
        case SamplerStep::top_k:
          if (p_.top_k > 0 && (size_t)p_.top_k < cand_.size()) {
            // Only the k kept need an order: a partial sort puts them as a full one would (the
            // comparison is a total order). p is left to the next softmax(): every step makes its own.
            if (!sorted_) std::partial_sort(cand_.begin(), cand_.begin() + p_.top_k, cand_.end(), by_logit);
            sorted_ = true;
            truncate((size_t)p_.top_k);
          }
          break;
        case SamplerStep::typical: apply_typical(); break;
        case SamplerStep::top_p:
          if (p_.top_p < 1.0f) {
            softmax();
            double cum = 0;
            size_t keep = cand_.size();
            for (size_t i = 0; i < cand_.size(); ++i) {
              cum += cand_[i].p;
              if (cum >= p_.top_p) {
                keep = i + 1;
                break;
              }
            }
            truncate(keep);
          }
          break;
        case SamplerStep::min_p:
          if (p_.min_p > 0.0f) {
            softmax();
            const float limit = cand_[0].p * p_.min_p;
            size_t keep = 1;
            while (keep < cand_.size() && cand_[keep].p >= limit) ++keep;
            truncate(keep);
          }
          break;
        case SamplerStep::xtc: apply_xtc(); break;
        case SamplerStep::temperature:
          apply_temperature();
          break;
      }
  }
  softmax();
}

std::span<const float> Sampler::allowed_only(std::span<const float> logits) {
  masked_.assign(logits.begin(), logits.end());
  constraint_->allowed_tokens(masked_.size(), allowed_);
  for (size_t i = 0; i < masked_.size(); ++i)
    if (!allowed_[i]) masked_[i] = -INFINITY;
  return masked_;
}

std::vector<Sampler::Candidate> Sampler::distribution(std::span<const float> logits) {
  if (constraint_)
    run_chain(allowed_only(logits), true);
  else
    run_chain(logits);
  return cand_;
}

int32_t Sampler::draw() {
  const double r = uniform();
  double cum = 0;
  for (const Candidate& c : cand_) {
    cum += c.p;
    if (r < cum) return c.id;
  }
  // r past the rounded sum: the last token that has a chance (a banned one at p 0 never)
  for (auto c = cand_.rbegin(); c != cand_.rend(); ++c)
    if (c->p > 0) return c->id;
  return cand_.front().id;
}

int32_t Sampler::sample(std::span<const float> logits) {
  run_chain(logits);
  int32_t chosen = cand_.size() == 1 ? cand_[0].id : draw();
  if (constraint_ && !constraint_->allows(chosen)) {
    run_chain(allowed_only(logits), true);
    chosen = cand_.size() == 1 ? cand_[0].id : draw();
  }
  if (constraint_) constraint_->accept(chosen);
  if (p_.mirostat != 0 && p_.temp > 0) {
    float p = 0;
    for (const Candidate& c : cand_)
      if (c.id == chosen) p = c.p;
    mu_ -= p_.mirostat_eta * (float)(-std::log2((double)p) - p_.mirostat_tau);
  }
  accept(chosen);
  return chosen;
}

}  // namespace loom
