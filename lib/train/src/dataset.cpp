// Dataset windows, the validation split and per-epoch shuffles (Fisher-Yates over a
// splitmix64 stream, so the order is the same on every platform and standard library).
#include "loom/train/dataset.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "loom/core/error.h"

namespace loom::train {

uint64_t mix_seed(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

Dataset::Dataset(std::vector<int32_t> tokens, const DatasetOptions& opts) : opts_(opts), tokens_(std::move(tokens)) {
  LOOM_CHECK(opts_.n_ctx >= 1, usage, "-c {}: the training context must be at least 1 token", opts_.n_ctx);
  if (opts_.stride <= 0) opts_.stride = opts_.n_ctx;
  LOOM_CHECK(opts_.val_split >= 0.0 && opts_.val_split < 1.0, usage, "--val-split {}: must be in [0, 1)",
             opts_.val_split);
  const int64_t n = (int64_t)tokens_.size();
  LOOM_CHECK(opts_.n_ctx < n, invalid_input,
             "the text has {} tokens, a training window needs -c + 1 = {} (use a longer text or a smaller -c)", n,
             opts_.n_ctx + 1);
  std::vector<int64_t> starts;
  // a stride past the text's end gives the one window at 0 (and s + stride must not overflow)
  const int64_t last_start = n - opts_.n_ctx - 1, stride = std::min(opts_.stride, n);
  for (int64_t s = 0; s <= last_start; s += stride) starts.push_back(s);
  int64_t n_val = (int64_t)std::floor((double)starts.size() * opts_.val_split);
  if (opts_.val_split > 0 && n_val == 0 && starts.size() >= 2) n_val = 1;
  // Held-out windows come from the end of the text and must not share tokens with training
  // windows: drop training windows that overlap the first validation window.
  const size_t n_train_max = starts.size() - (size_t)n_val;
  val_.assign(starts.begin() + (ptrdiff_t)n_train_max, starts.end());
  for (size_t i = 0; i < n_train_max; ++i)
    if (val_.empty() || starts[i] + opts_.n_ctx + 1 <= val_.front()) train_.push_back(starts[i]);
  LOOM_CHECK(!train_.empty(), invalid_input,
             "no training windows left: {} tokens make {} windows of {} and --val-split {} holds out {}", n,
             starts.size(), opts_.n_ctx + 1, opts_.val_split, n_val);
}

std::vector<int64_t> Dataset::epoch_order(int64_t epoch) const {
  std::vector<int64_t> order(train_.size());
  std::iota(order.begin(), order.end(), 0);
  uint64_t state = mix_seed(opts_.seed ^ mix_seed((uint64_t)epoch + 0x5eed));
  for (size_t i = order.size(); i > 1; --i) {
    state = mix_seed(state);
    const size_t j = (size_t)(((unsigned __int128)state * i) >> 64);  // uniform in [0, i)
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

}  // namespace loom::train
