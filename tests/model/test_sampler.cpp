// The sampler chain against distributions computed by hand from each step's definition.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "loom/core/error.h"
#include "loom/model/sampler.h"

namespace {

using loom::Sampler;
using loom::SamplerParams;
using loom::SamplerStep;

// Only the listed steps, temperature 1 and nothing truncating unless a test turns it on.
SamplerParams only(std::vector<SamplerStep> order) {
  SamplerParams p;
  p.order = std::move(order);
  p.top_k = 0;
  p.top_p = 1;
  p.min_p = 0;
  p.temp = 1;
  return p;
}

// Probabilities by token id (0 for a token the chain removed).
std::vector<double> probs(Sampler& s, const std::vector<float>& logits) {
  std::vector<double> out(logits.size(), 0.0);
  for (const Sampler::Candidate& c : s.distribution(logits)) out[(size_t)c.id] = c.p;
  return out;
}

std::vector<float> log_of(std::vector<double> p) {
  std::vector<float> l;
  for (double x : p) l.push_back((float)std::log(x));
  return l;
}

void expect_probs(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-5) << "token " << i;
}

const std::vector<double> kP = {0.5, 0.25, 0.15, 0.1};

TEST(Sampler, PenaltiesRepeatFrequencyPresence) {
  SamplerParams p = only({SamplerStep::penalties});
  p.repeat_penalty = 2;
  p.frequency_penalty = 0.5f;
  p.presence_penalty = 0.25f;
  Sampler s(p);
  for (int t : {2, 3, 3}) s.accept(t);
  // token 2 (once): 3 / 2 - 0.5 - 0.25 = 0.75; token 3 (twice): -1 * 2 - 2 * 0.5 - 0.25 = -3.25
  const double z = std::exp(1.0) + std::exp(2.0) + std::exp(0.75) + std::exp(-3.25);
  expect_probs(probs(s, {1, 2, 3, -1}), {std::exp(1.0) / z, std::exp(2.0) / z, std::exp(0.75) / z, std::exp(-3.25) / z});
}

TEST(Sampler, TopPKeepsTheSmallestSetReachingP) {
  SamplerParams p = only({SamplerStep::top_p});
  p.top_p = 0.7f;  // 0.5 < 0.7 <= 0.75
  Sampler s(p);
  expect_probs(probs(s, log_of(kP)), {2.0 / 3, 1.0 / 3, 0, 0});
}

TEST(Sampler, MinPKeepsTokensAtLeastThatFractionOfTheBest) {
  SamplerParams p = only({SamplerStep::min_p});
  p.min_p = 0.4f;  // limit 0.2
  Sampler s(p);
  expect_probs(probs(s, log_of(kP)), {2.0 / 3, 1.0 / 3, 0, 0});
}

TEST(Sampler, TopK) {
  SamplerParams p = only({SamplerStep::top_k});
  p.top_k = 3;
  Sampler s(p);
  expect_probs(probs(s, log_of(kP)), {0.5 / 0.9, 0.25 / 0.9, 0.15 / 0.9, 0});
}

TEST(Sampler, TypicalKeepsTokensNearestTheEntropy) {
  SamplerParams p = only({SamplerStep::typical});
  p.typical_p = 0.5f;
  Sampler s(p);
  // H = 1.2080 nats; |surprise - H| = 0.515, 0.178, 0.689, 1.095: token 1 (0.25), then token 0
  // (cumulative 0.75 > 0.5) are kept
  expect_probs(probs(s, log_of(kP)), {2.0 / 3, 1.0 / 3, 0, 0});
}

TEST(Sampler, XtcRemovesTheTopChoicesButTheLeastLikelyOfThem) {
  SamplerParams p = only({SamplerStep::xtc});
  p.xtc_probability = 1;
  p.xtc_threshold = 0.2f;  // tokens 0 and 1 are above; token 1 stays
  Sampler s(p);
  expect_probs(probs(s, log_of(kP)), {0, 0.5, 0.3, 0.2});
  p.xtc_threshold = 0.3f;  // one token above: nothing removed
  Sampler one(p);
  expect_probs(probs(one, log_of(kP)), kP);
}

TEST(Sampler, TemperatureScalesLogits) {
  SamplerParams p = only({SamplerStep::temperature});
  p.temp = 2;  // p^(1/2), renormalized
  Sampler s(p);
  double z = 0;
  for (double x : kP) z += std::sqrt(x);
  expect_probs(probs(s, log_of(kP)), {std::sqrt(0.5) / z, std::sqrt(0.25) / z, std::sqrt(0.15) / z, std::sqrt(0.1) / z});
  p.temp = 0;  // greedy
  Sampler g(p);
  expect_probs(probs(g, log_of(kP)), {1, 0, 0, 0});
}

TEST(Sampler, DryPenalizesTheTokenThatWouldExtendARepeat) {
  SamplerParams p = only({SamplerStep::dry});
  p.dry_multiplier = 1;
  p.dry_base = 2;
  p.dry_allowed_length = 1;
  Sampler s(p);
  for (int t : {5, 6, 7, 5, 6}) s.accept(t);
  // "5 6" was followed by 7 before: 7 would make a repeat of length 2 -> 1 * 2^(2 - 1) = 2
  const double z = 7 + std::exp(-2.0);
  std::vector<double> want(8, 1 / z);
  want[7] = std::exp(-2.0) / z;
  expect_probs(probs(s, std::vector<float>(8, 0.0f)), want);
  // a breaker inside the repeat ends it: nothing is penalized
  p.dry_breakers = {6};
  Sampler b(p);
  for (int t : {5, 6, 7, 5, 6}) b.accept(t);
  expect_probs(probs(b, std::vector<float>(8, 0.0f)), std::vector<double>(8, 1.0 / 8));
}

TEST(Sampler, Mirostat2TruncatesBySurpriseAndLearnsMu) {
  SamplerParams p = only({});
  p.mirostat = 2;
  p.mirostat_tau = 1;  // mu starts at 2 bits: tokens 0 (1 bit) and 1 (2 bits) stay
  p.mirostat_eta = 0.1f;
  Sampler s(p);
  expect_probs(probs(s, log_of(kP)), {2.0 / 3, 1.0 / 3, 0, 0});
  const std::vector<float> peaked = log_of({0.97, 0.01, 0.01, 0.01});  // only token 0 (0.044 bits) is kept
  EXPECT_EQ(s.sample(peaked), 0);
  EXPECT_NEAR(s.mirostat_mu(), 2 - 0.1 * (0 - 1), 1e-5);  // the kept token has p = 1 after truncation
}

TEST(Sampler, Mirostat1EstimatesZipfExponent) {
  SamplerParams p = only({});
  p.mirostat = 1;
  p.mirostat_tau = 1;  // mu = 2
  Sampler s(p);
  // p ~ 1/(i+1)^2: s_hat = 2, eps = 1, k = floor((2^2 / (1 - 4^-1))^(1/2)) = floor(2.31) = 2
  const std::vector<double> zipf = {1.0, 0.25, 1.0 / 9, 1.0 / 16};
  double z = 0;
  for (double x : zipf) z += x;
  std::vector<double> pz;
  for (double x : zipf) pz.push_back(x / z);
  expect_probs(probs(s, log_of(pz)), {0.8, 0.2, 0, 0});
}

TEST(Sampler, LogitBiasAndBans) {
  SamplerParams p = only({});
  p.logit_bias = {{1, (float)std::log(2.0)}, {2, -std::numeric_limits<float>::infinity()}};
  Sampler s(p);
  expect_probs(probs(s, {0, 0, 0}), {1.0 / 3, 2.0 / 3, 0});
}

TEST(Sampler, TopNSigmaKeepsLogitsNearTheTop) {
  // logits 0, -1, -2, -3: mean -1.5, standard deviation sqrt(1.25) = 1.118
  const std::vector<float> logits = {0, -1, -2, -3};
  SamplerParams p = only({SamplerStep::top_n_sigma});
  p.top_n_sigma = 1.0f;  // limit -1.118: tokens 0 and 1
  Sampler s(p);
  const double z = 1 + std::exp(-1.0);
  expect_probs(probs(s, logits), {1 / z, std::exp(-1.0) / z, 0, 0});
  p.top_n_sigma = 2.0f;  // limit -2.236: three tokens
  Sampler s2(p);
  EXPECT_EQ(s2.distribution(logits).size(), 3u);
  p.top_n_sigma = -1.0f;  // off
  Sampler off(p);
  EXPECT_EQ(off.distribution(logits).size(), 4u);
  // a banned token (-inf) counts in neither the mean nor the deviation
  p.top_n_sigma = 1.0f;
  Sampler banned(p);
  expect_probs(probs(banned, {0, -1, -2, -3, -std::numeric_limits<float>::infinity()}),
               {1 / z, std::exp(-1.0) / z, 0, 0, 0});
}

TEST(Sampler, DynamicTemperatureFollowsTheEntropy) {
  SamplerParams p = only({SamplerStep::temperature});
  p.temp = 1.0f;
  p.dynatemp_range = 0.5f;  // temp in [0.5, 1.5]
  // uniform candidates: normalized entropy 1, temp 1.5 (still uniform)
  Sampler u(p);
  expect_probs(probs(u, {0, 0, 0, 0}), {0.25, 0.25, 0.25, 0.25});
  // kP's entropy H over log 4 gives the temperature; the result is kP^(1/T), renormalized
  double h = 0;
  for (double x : kP) h -= x * std::log(x);
  for (float e : {1.0f, 2.0f}) {
    p.dynatemp_exponent = e;
    const double t = 0.5 + 1.0 * std::pow(h / std::log(4.0), e);
    double z = 0;
    for (double x : kP) z += std::pow(x, 1 / t);
    std::vector<double> want;
    for (double x : kP) want.push_back(std::pow(x, 1 / t) / z);
    Sampler s(p);
    expect_probs(probs(s, log_of(kP)), want);
  }
  // a range reaching 0 with a certain choice is greedy
  p.temp = 0.2f;
  p.dynatemp_range = 0.5f;
  p.dynatemp_exponent = 1;
  Sampler g(p);
  expect_probs(probs(g, {0, -60, -60}), {1, 0, 0});
  p.dynatemp_exponent = -1;
  EXPECT_THROW(Sampler{p}, loom::Error);
}

TEST(Sampler, DefaultOrderIsLlamaCpps) {
  EXPECT_EQ(SamplerParams::default_order(), loom::parse_sampler_order("edskypmxt"));
  EXPECT_EQ(SamplerParams::default_order(),
            loom::parse_sampler_order("penalties;dry;top_n_sigma;top_k;typ_p;top_p;min_p;xtc;temperature"));
  EXPECT_EQ(loom::sampler_order_name(loom::parse_sampler_order("top_k,temp")), "top_k;temperature");
  EXPECT_THROW(loom::parse_sampler_order("top_k;bogus"), loom::Error);
}

TEST(Sampler, OrderChangesTheResult) {
  // top_p before temperature keeps 2 tokens; temperature 4 first flattens the distribution so
  // top_p 0.7 needs 3 of them
  SamplerParams p = only({SamplerStep::top_p, SamplerStep::temperature});
  p.top_p = 0.7f;
  p.temp = 4;
  Sampler a(p);
  std::vector<double> pa = probs(a, log_of(kP));
  EXPECT_EQ(pa[2], 0.0);
  p.order = {SamplerStep::temperature, SamplerStep::top_p};
  Sampler b(p);
  std::vector<double> pb = probs(b, log_of(kP));
  EXPECT_GT(pb[2], 0.0);
}

TEST(Sampler, RefusesOutOfRangeValues) {
  SamplerParams p;
  p.top_p = 2;
  EXPECT_THROW(Sampler{p}, loom::Error);
  p = {};
  p.mirostat = 3;
  EXPECT_THROW(Sampler{p}, loom::Error);
  // non-finite penalties and Mirostat settings: NaN logits otherwise
  using Field = float SamplerParams::*;
  for (const Field field :
       {&SamplerParams::repeat_penalty, &SamplerParams::presence_penalty, &SamplerParams::frequency_penalty,
        &SamplerParams::dry_multiplier, &SamplerParams::dry_base, &SamplerParams::mirostat_tau,
        &SamplerParams::mirostat_eta, &SamplerParams::xtc_threshold, &SamplerParams::top_n_sigma,
        &SamplerParams::dynatemp_range, &SamplerParams::dynatemp_exponent})
    for (const float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
      // inf: XTC off, every token within infinitely many sigmas
      if ((field == &SamplerParams::xtc_threshold || field == &SamplerParams::top_n_sigma) && std::isinf(bad)) continue;
      p = {};
      p.*field = bad;
      EXPECT_THROW(Sampler{p}, loom::Error) << bad;
    }
  p = {};
  p.logit_bias = {{3, std::nanf("")}};
  EXPECT_THROW(Sampler{p}, loom::Error);
}

TEST(Sampler, SeedReproducesDraws) {
  SamplerParams p;
  p.temp = 1.5f;
  p.top_k = 0;
  p.top_p = 1;
  p.min_p = 0;
  p.seed = 5;
  Sampler a(p), b(p);
  std::vector<float> l = log_of({0.3, 0.3, 0.2, 0.2});
  for (int i = 0; i < 20; ++i) EXPECT_EQ(a.sample(l), b.sample(l));
}

TEST(Sampler, LongListsSortLikeTheComparison) {
  // 20,000 logits with many ties, -0 and +0, and large and tiny magnitudes: the chain's order
  // (radix sorted above 4,096 candidates) must be highest logit first, ties by id
  std::mt19937 rng(5);
  std::vector<float> logits(20000);
  const float pool[] = {0.0f, -0.0f, 1.5f, -1.5f, 3.0e-39f, -2.0e30f, 7.25f, -7.25f, 1e-3f};
  for (float& l : logits) l = rng() % 3 == 0 ? pool[rng() % 9] : std::uniform_real_distribution<float>(-20, 20)(rng);
  loom::Sampler s(only({SamplerStep::temperature}));
  const auto dist = s.distribution(logits);
  ASSERT_EQ(dist.size(), logits.size());
  std::vector<int32_t> want(logits.size());
  for (size_t i = 0; i < want.size(); ++i) want[i] = (int32_t)i;
  std::sort(want.begin(), want.end(),
            [&](int32_t a, int32_t b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; });
  for (size_t i = 0; i < want.size(); ++i) ASSERT_EQ(dist[i].id, want[i]) << "position " << i;
}

}  // namespace
