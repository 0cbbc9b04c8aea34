// Epoch statistics and the progress line.
#include "loom/train/progress.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

namespace loom::train {

void EpochStats::add(double loss, int64_t correct, int64_t tokens) {
  loss_sum += loss;
  loss_sq += loss * loss;
  ++n_batches;
  n_correct += correct;
  n_tokens += tokens;
}

double EpochStats::loss() const { return n_batches ? loss_sum / (double)n_batches : 0.0; }

double EpochStats::loss_unc() const {
  if (n_batches < 2) return 0.0;
  const double n = (double)n_batches, mean = loss_sum / n;
  const double var = std::max(0.0, loss_sq / n - mean * mean) * n / (n - 1);
  return std::sqrt(var / n);
}

double EpochStats::acc() const { return n_tokens ? (double)n_correct / (double)n_tokens : 0.0; }

double EpochStats::acc_unc() const {
  if (n_tokens < 2) return 0.0;
  const double a = acc();
  return std::sqrt(a * (1.0 - a) / (double)(n_tokens - 1));
}

namespace {
std::string hms(double s) {
  const int64_t t = s > 0 && std::isfinite(s) ? (int64_t)std::llround(s) : 0;
  return fmt::format("{:02}:{:02}:{:02}", t / 3600, (t / 60) % 60, t % 60);
}
}  // namespace

std::string format_progress(const char* label, int64_t done, int64_t total, const EpochStats& s, double elapsed_s,
                            double eta_s) {
  static const char* const kEighths[] = {" ", "▏", "▎", "▍", "▌", "▋", "▊", "▉", "█"};
  constexpr int64_t kCells = 8;
  std::string bar;
  const int64_t filled = total > 0 ? std::min<int64_t>(kCells * 8, done * kCells * 8 / total) : 0;  // eighths
  for (int64_t c = 0; c < kCells; ++c) bar += kEighths[std::clamp<int64_t>(filled - 8 * c, 0, 8)];
  // "train: [" and "val:   [" as ggml-opt aligns them
  const std::string head = std::string(label) == "val" ? "val:   " : fmt::format("{}: ", label);
  return fmt::format("{}[{}] data={:07}/{:07} loss={:.5f}±{:.5f} acc={:.2f}±{:.2f}% t={} ETA={}", head, bar, done,
                     total, s.loss(), s.loss_unc(), 100.0 * s.acc(), 100.0 * s.acc_unc(), hms(elapsed_s), hms(eta_s));
}

}  // namespace loom::train
