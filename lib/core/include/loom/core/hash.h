// A fast non-cryptographic 64-bit checksum for integrity checks (checkpoint files, the identity
// of a model across MPI ranks). Streaming: update() with pieces of any size gives the same digest
// as one call with the whole input. Not for adversaries: it catches corruption, not forgery.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace loom {

class Hasher {
 public:
  void update(const void* data, size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  template <typename T>
  void update_value(const T& v) {
    update(&v, sizeof(T));
  }
  uint64_t digest() const;

 private:
  void block(const uint8_t* p);  // 32 bytes into the four lanes
  uint64_t lanes_[4] = {0x243f6a8885a308d3ull, 0x13198a2e03707344ull, 0xa4093822299f31d0ull, 0x082efa98ec4e6c89ull};
  uint8_t tail_[32] = {};
  size_t tail_len_ = 0;
  uint64_t total_ = 0;
};

inline uint64_t hash_bytes(const void* data, size_t n) {
  Hasher h;
  h.update(data, n);
  return h.digest();
}

}  // namespace loom
