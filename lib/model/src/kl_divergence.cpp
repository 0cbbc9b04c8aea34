// The base logits file (llama.cpp's layout, kl_divergence.h) and the KL divergence run over it.
#include "loom/model/kl_divergence.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "loom/core/error.h"
#include "loom/core/files.h"
#include "loom/model/generate.h"
#include "loom/model/model.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom {

namespace {

constexpr char kMagic[8] = {'_', 'l', 'o', 'g', 'i', 't', 's', '_'};
constexpr int64_t kHeaderBytes = 8 + 4 + 4 + 4;

class FileReader {
 public:
  FileReader(const std::string& path, std::string_view what) : path_(path), fd_(open_regular_file(path, what)) {}
  ~FileReader() { ::close(fd_); }
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;
  int64_t size() const {
    const off_t end = ::lseek(fd_, 0, SEEK_END);
    LOOM_CHECK(end >= 0, io, "'{}': cannot seek", path_);
    return (int64_t)end;
  }
  void read(int64_t offset, void* out, size_t n) const {
    auto* p = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t got = ::pread(fd_, p, n, (off_t)offset);
      LOOM_CHECK(got > 0, invalid_input, "'{}': the file ends early (truncated?)", path_);
      p += got;
      offset += got;
      n -= (size_t)got;
    }
  }

 private:
  std::string path_;
  int fd_;
};

// Mean and standard error of a quantity from its sum and sum of squares (llama-perplexity's).
std::pair<double, double> mean_and_error(double sum, double sum2, int64_t count) {
  if (count < 1) return {0.0, 0.0};
  const double f = sum / (double)count, var = sum2 / (double)count - f * f;
  return {f, var > 0 && count > 10 ? std::sqrt(var / (double)(count - 1)) : 0.0};
}
double covariance(double sa, double sb, double sab, int64_t count) {
  if (count < 10) return 0.0;
  return (sab / (double)count - (sa / (double)count) * (sb / (double)count)) / (double)(count - 1);
}
double percentile(const std::vector<float>& sorted, double fraction) {
  if (sorted.empty()) return 0.0;
  if (fraction <= 0) return sorted.front();
  if (fraction >= 1) return sorted.back();
  const double p = fraction * (double)(sorted.size() - 1);
  const size_t i = (size_t)p;
  const double w = p - (double)i;
  return (1 - w) * sorted[i] + w * sorted[std::min(i + 1, sorted.size() - 1)];
}

struct Sums {
  double nll = 0, nll2 = 0, base = 0, base2 = 0, nll_base = 0, kld = 0, kld2 = 0, pd = 0, pd2 = 0, pd4 = 0;
  int64_t same_top = 0, count = 0;
};

void summarize(const Sums& s, KlDivergenceResult& r) {
  r.count = s.count;
  const auto [lp, lp_err] = mean_and_error(s.nll, s.nll2, s.count);
  const auto [lb, lb_err] = mean_and_error(s.base, s.base2, s.count);
  const double cov = covariance(s.nll, s.base, s.nll_base, s.count);
  r.ppl = std::exp(lp);
  r.ppl_err = r.ppl * lp_err;
  r.ppl_base = std::exp(lb);
  r.ppl_base_err = r.ppl_base * lb_err;
  r.ppl_correlation = lp_err > 0 && lb_err > 0 ? cov / (lp_err * lb_err) : 0.0;
  r.log_ratio = lp - lb;
  r.log_ratio_err = std::sqrt(std::max(0.0, lp_err * lp_err + lb_err * lb_err - 2 * cov));
  r.ppl_ratio = std::exp(r.log_ratio);
  r.ppl_ratio_err = r.ppl_ratio * r.log_ratio_err;
  r.ppl_diff = r.ppl - r.ppl_base;
  r.ppl_diff_err =
      std::sqrt(std::max(0.0, r.ppl_err * r.ppl_err + r.ppl_base_err * r.ppl_base_err - 2 * r.ppl * r.ppl_base * cov));
  std::tie(r.kld, r.kld_err) = mean_and_error(s.kld, s.kld2, s.count);
  std::tie(r.p_diff, r.p_diff_err) = mean_and_error(s.pd, s.pd2, s.count);
  const auto [mse, mse_err] = mean_and_error(s.pd2, s.pd4, s.count);
  r.p_diff_rms = std::sqrt(mse);
  r.p_diff_rms_err = r.p_diff_rms > 0 ? 0.5 / r.p_diff_rms * mse_err : 0.0;
  r.same_top = s.count > 0 ? (double)s.same_top / (double)s.count : 0.0;
  r.same_top_err = s.count > 1 ? std::sqrt(r.same_top * (1 - r.same_top) / (double)(s.count - 1)) : 0.0;
}

// One position: the model's logits against the base's stored row; adds to the sums and returns
// (KL divergence, p - p_base of the next token).
std::pair<float, float> compare_row(std::span<const float> logits, const uint16_t* row, int32_t next, Sums& s) {
  float scale, min_log_prob;
  std::memcpy(&scale, row, sizeof(float));
  std::memcpy(&min_log_prob, row + 2, sizeof(float));
  const uint16_t* q = row + 4;
  float mx = logits[0];
  size_t top = 0;
  for (size_t i = 1; i < logits.size(); ++i)
    if (logits[i] > mx) {
      mx = logits[i];
      top = i;
    }
  double sum_exp = 0;
  for (float x : logits) sum_exp += std::exp(x - mx);
  const float log_norm = mx + (float)std::log(sum_exp);  // log p_i = logits_i - log_norm
  const double nll = log_norm - logits[(size_t)next];
  const double nll_base = -(scale * q[next] + min_log_prob);
  double kld = 0;
  size_t top_base = 0;
  float best = -std::numeric_limits<float>::infinity();
  for (size_t i = 0; i < logits.size(); ++i) {
    const float lb = scale * q[i] + min_log_prob;
    if (lb > best) {
      best = lb;
      top_base = i;
    }
    if (lb > -16.0f) kld += std::exp(lb) * (lb - (logits[i] - log_norm));  // the base's tail below e^-16 is not stored
  }
  const double p_diff = std::exp(-nll) - std::exp(-nll_base);
  s.nll += nll;
  s.nll2 += nll * nll;
  s.base += nll_base;
  s.base2 += nll_base * nll_base;
  s.nll_base += nll * nll_base;
  s.kld += kld;
  s.kld2 += kld * kld;
  s.pd += p_diff;
  s.pd2 += p_diff * p_diff;
  s.pd4 += p_diff * p_diff * p_diff * p_diff;
  s.same_top += top == top_base ? 1 : 0;
  ++s.count;
  return {(float)kld, (float)p_diff};
}

}  // namespace

LogitsFileHeader read_logits_header(const std::string& path, std::vector<int32_t>* tokens) {
  const FileReader f(path, "--kl-divergence-base");
  const int64_t size = f.size();
  LOOM_CHECK(size >= kHeaderBytes, invalid_input, "'{}' is not a logits file (too short)", path);
  char magic[8];
  f.read(0, magic, 8);
  LOOM_CHECK(std::memcmp(magic, kMagic, 8) == 0, invalid_input,
             "'{}' is not a logits file (llama-perplexity's or loom-run's --kl-divergence-base)", path);
  uint32_t n_ctx = 0;
  int32_t n_vocab = 0, n_chunk = 0;
  f.read(8, &n_ctx, 4);
  f.read(12, &n_vocab, 4);
  f.read(16, &n_chunk, 4);
  LOOM_CHECK(n_ctx >= 3 && n_ctx <= (1u << 24) && n_vocab >= 1 && n_vocab <= (1 << 28) && n_chunk >= 1, invalid_input,
             "'{}': a logits file with n_ctx {}, n_vocab {} and {} chunks is not valid", path, n_ctx, n_vocab, n_chunk);
  LogitsFileHeader h{n_ctx, n_vocab, n_chunk};
  // as long double: a hostile header's products cannot wrap around to the file's size
  const long double want = (long double)kHeaderBytes + (long double)h.n_chunk * h.n_ctx * 4 +
                           (long double)h.n_chunk * h.n_scored() * h.row_values() * 2;
  LOOM_CHECK((long double)size == want, invalid_input,
             "'{}': {} bytes, but a logits file of {} chunks of {} tokens over {} tokens' vocabulary has {:.0f} "
             "(truncated or not whole)",
             path, size, h.n_chunk, h.n_ctx, h.n_vocab, (double)want);
  if (tokens != nullptr) {
    tokens->resize((size_t)(h.n_chunk * h.n_ctx));
    f.read(kHeaderBytes, tokens->data(), tokens->size() * sizeof(int32_t));
    for (int32_t t : *tokens)
      LOOM_CHECK(t >= 0 && t < n_vocab, invalid_input, "'{}': token {} is outside the vocabulary of {}", path, t,
                 n_vocab);
  }
  return h;
}

void write_logits_header(AtomicFile& out, const LogitsFileHeader& h, std::span<const int32_t> tokens) {
  const uint32_t n_ctx = (uint32_t)h.n_ctx;
  const int32_t n_vocab = (int32_t)h.n_vocab, n_chunk = (int32_t)h.n_chunk;
  out.write(kMagic, sizeof kMagic);
  out.write(&n_ctx, 4);
  out.write(&n_vocab, 4);
  out.write(&n_chunk, 4);
  out.write(tokens.data(), (size_t)(h.n_chunk * h.n_ctx) * sizeof(int32_t));
}

double encode_log_probs(std::span<const float> logits, int32_t next, std::span<uint16_t> row) {
  const size_t n = logits.size();
  LOOM_CHECK(row.size() >= 4 + n, internal, "a log-prob row of {} values for {} logits", row.size(), n);
  float mx = logits[0], mn = logits[0];
  for (float x : logits) {
    mx = std::max(mx, x);
    mn = std::min(mn, x);
  }
  mn = std::max(mn, mx - 16);  // the tail below e^-16 of the largest is not worth 16 bits
  double sum_exp = 0;
  for (float x : logits) sum_exp += std::exp(x - mx);
  const float log_sum = (float)std::log(sum_exp);
  const float min_log_prob = mn - mx - log_sum, scale = (mx - mn) / 65535.0f;
  std::memcpy(row.data(), &scale, sizeof(float));
  std::memcpy(row.data() + 2, &min_log_prob, sizeof(float));
  std::fill(row.begin() + 4, row.end(), uint16_t{0});
  if (scale > 0)
    for (size_t i = 0; i < n; ++i)
      if (logits[i] > mn) row[4 + i] = (uint16_t)std::min(65535L, std::lrint((logits[i] - mn) / scale));
  return mx + log_sum - logits[(size_t)next];
}

double KlDivergenceResult::kld_percentile(double fraction) const { return percentile(kld_values, fraction); }
double KlDivergenceResult::p_diff_percentile(double fraction) const { return percentile(p_diff_values, fraction); }

KlDivergenceResult kl_divergence(Session& session, const std::string& base_path,
                                 const std::function<void(const KlDivergenceResult&)>& on_chunk) {
  std::vector<int32_t> tokens;
  const LogitsFileHeader h = read_logits_header(base_path, &tokens);
  const Tokenizer& tok = session.model().tokenizer();
  LOOM_CHECK(h.n_vocab == tok.n_vocab(), invalid_input,
             "'{}' holds distributions over {} tokens, the model's vocabulary has {}: a base file of another model "
             "family",
             base_path, h.n_vocab, tok.n_vocab());
  LOOM_CHECK(h.n_ctx == session.n_ctx(), usage, "'{}' was made with a context of {} tokens; run with -c {}", base_path,
             h.n_ctx, h.n_ctx);
  const FileReader f(base_path, "--kl-divergence-base");
  const int64_t first = h.n_ctx / 2, per_chunk = h.n_scored(), nv = h.row_values();
  const int64_t rows_at = kHeaderBytes + h.n_chunk * h.n_ctx * 4;
  std::vector<uint16_t> rows((size_t)(per_chunk * nv));
  KlDivergenceResult r;
  Sums s;
  for (int64_t c = 0; c < h.n_chunk; ++c) {
    f.read(rows_at + c * per_chunk * nv * 2, rows.data(), rows.size() * sizeof(uint16_t));
    score_chunk(session, tokens, c, [&](int64_t j, std::span<const float> l, int32_t next) {
      LOOM_CHECK((int64_t)l.size() == h.n_vocab, invalid_input, "the model gives {} logits per token, '{}' holds {}",
                 l.size(), base_path, h.n_vocab);
      const auto [kld, p_diff] = compare_row(l, rows.data() + (j - first) * nv, next, s);
      r.kld_values.push_back(kld);
      r.p_diff_values.push_back(p_diff);
    });
    r.n_chunks = c + 1;
    summarize(s, r);
    if (on_chunk) on_chunk(r);
  }
  std::sort(r.kld_values.begin(), r.kld_values.end());
  std::sort(r.p_diff_values.begin(), r.p_diff_values.end());
  return r;
}

}  // namespace loom
