// Hasher: four independent multiply-rotate lanes over 32-byte blocks (several GB/s), folded and
// finalized with a splitmix64-style avalanche.
#include "loom/core/hash.h"

#include <algorithm>
#include <cstring>

namespace loom {

namespace {
constexpr uint64_t kMul = 0x9e3779b97f4a7c15ull;
uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
}  // namespace

void Hasher::block(const uint8_t* p) {
  for (int i = 0; i < 4; ++i) {
    uint64_t w;
    std::memcpy(&w, p + 8 * i, 8);
    lanes_[i] = rotl((lanes_[i] ^ w) * kMul, 29) + w;
  }
}

void Hasher::update(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  total_ += n;
  if (tail_len_ > 0) {
    const size_t take = std::min(n, sizeof(tail_) - tail_len_);
    std::memcpy(tail_ + tail_len_, p, take);
    tail_len_ += take;
    p += take;
    n -= take;
    if (tail_len_ < sizeof(tail_)) return;
    block(tail_);
    tail_len_ = 0;
  }
  for (; n >= 32; p += 32, n -= 32) block(p);
  std::memcpy(tail_, p, n);
  tail_len_ = n;
}

uint64_t Hasher::digest() const {
  uint64_t h = total_ * kMul;
  for (uint64_t lane : lanes_) h = mix(h ^ lane);
  for (size_t i = 0; i < tail_len_; ++i) h = mix(h ^ ((uint64_t)tail_[i] << (8 * (i % 8))) ^ i);
  return h;
}

}  // namespace loom
