// Token sampling as llama.cpp's common sampler chain: logit biases first, then the steps of
// `order` (default: penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature),
// then a seeded draw; with mirostat 1 or 2 the chain is temperature -> mirostat instead.
// temp <= 0 is greedy (the temperature step keeps the largest logit only). The RNG is our own
// uniform draw from mt19937_64, so a seed reproduces a run on any platform.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace loom {

enum class SamplerStep { penalties, dry, top_n_sigma, top_k, typical, top_p, min_p, xtc, temperature };

struct SamplerParams {
  float temp = 0.8f;
  int32_t top_k = 40;           // <= 0: off
  float top_p = 0.95f;          // 1: off
  float min_p = 0.05f;          // 0: off
  float typical_p = 1.0f;       // 1: off
  float top_n_sigma = -1.0f;    // <= 0: off; else keep logits >= max - n * their standard deviation
  float dynatemp_range = 0.0f;  // <= 0: off; else the temperature moves in temp -/+ range with the entropy
  float dynatemp_exponent = 1.0f;
  float repeat_penalty = 1.0f;  // 1: off
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t repeat_last_n = 64;   // tokens the penalties look at (-1: all, 0: off)
  float xtc_probability = 0.0f;  // 0: off
  float xtc_threshold = 0.1f;    // > 0.5: off
  float dry_multiplier = 0.0f;   // 0: off
  float dry_base = 1.75f;
  int32_t dry_allowed_length = 2;
  int32_t dry_last_n = -1;       // -1: all the history
  std::vector<int32_t> dry_breakers;  // token ids that end a repeated sequence
  int mirostat = 0;              // 0 off, 1 Mirostat, 2 Mirostat 2.0
  float mirostat_tau = 5.0f;
  float mirostat_eta = 0.1f;
  std::vector<std::pair<int32_t, float>> logit_bias;  // added to the logits (-inf bans a token)
  std::vector<SamplerStep> order = default_order();
  uint64_t seed = 0xdecafbad;

  static std::vector<SamplerStep> default_order();
};

// "penalties;dry;top_k;..." (llama.cpp's --samplers names, also separated by ',') or the
// one-letter form "edskypmxt" (--sampling-seq). Throws Error(usage) naming an unknown step.
std::vector<SamplerStep> parse_sampler_order(const std::string& text);
std::string sampler_order_name(const std::vector<SamplerStep>& order);

// What may come next beyond the logits: a grammar (grammar.h). sample() keeps the chain's pick
// when the constraint allows it, else runs the chain again over the allowed tokens only (as
// llama.cpp's sampler does); distribution() is over the allowed tokens.
class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  virtual bool allows(int32_t token) const = 0;
  virtual void accept(int32_t token) = 0;  // a sampled token (the prompt's are not matched)
  virtual void reset() = 0;                // a new reply starts
  // mask[t] = allows(t) for every token t < n (a constraint may answer from a cache)
  virtual void allowed_tokens(size_t n, std::vector<bool>& mask) const {
    mask.resize(n);
    for (size_t t = 0; t < n; ++t) mask[t] = allows((int32_t)t);
  }
};

class Sampler {
 public:
  explicit Sampler(const SamplerParams& p);

  struct Candidate {
    int32_t id;
    float logit;
    float p;
  };
  // The distribution the draw would use after every step of the chain (mirostat: after its
  // truncation), highest first with probabilities summing to 1. Advances the RNG when XTC
  // draws its chance, like sample(). Mirostat state is not updated.
  std::vector<Candidate> distribution(std::span<const float> logits);
  // Picks the next token from logits (n_vocab floats) and remembers it for the penalties.
  int32_t sample(std::span<const float> logits);
  void accept(int32_t token);  // remember a token (e.g. the prompt) for the penalties and DRY
  void set_constraint(std::shared_ptr<TokenConstraint> c) { constraint_ = std::move(c); }
  void reset_constraint() {  // a conversation's next reply matches the grammar from its start
    if (constraint_) constraint_->reset();
  }
  const SamplerParams& params() const { return p_; }
  float mirostat_mu() const { return mu_; }

 private:
  double uniform();  // [0, 1)
  void run_chain(std::span<const float> logits, bool constrained = false);  // constrained: over allowed_only()
  std::span<const float> allowed_only(std::span<const float> logits);  // disallowed tokens at -inf
  void softmax();    // sorts cand_ by logit (descending) and fills p
  void truncate(size_t n);
  void apply_penalties();
  void apply_dry();
  void apply_typical();
  void apply_top_n_sigma();
  void apply_temperature();
  void scale_logits(float temp);  // logits / temp; temp <= 0: the largest alone (greedy)
  void apply_xtc();
  void apply_mirostat();
  int32_t draw();

  SamplerParams p_;
  std::mt19937_64 rng_;
  std::vector<int32_t> history_;
  std::vector<Candidate> cand_, scratch_;
  std::shared_ptr<TokenConstraint> constraint_;
  std::vector<float> masked_;
  std::vector<bool> allowed_;
  bool sorted_ = false;
  float mu_ = 0;
  size_t n_vocab_ = 0;
};

}  // namespace loom
