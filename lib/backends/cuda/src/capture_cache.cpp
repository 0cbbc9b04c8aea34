#include "capture_cache.h"

#include <cstdlib>
#include <cstring>

namespace loom::cuda {

namespace {
uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h;
}
}  // namespace

uint64_t address_hash(std::span<Tensor* const> nodes) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (const Tensor* n : nodes) {
    h = mix(h, reinterpret_cast<uintptr_t>(n->data));
    for (const Tensor* s : n->src) h = mix(h, s ? reinterpret_cast<uintptr_t>(s->data) : 0);
  }
  return h;
}

void* CaptureCache::lookup(const CaptureKey& key, uint64_t addresses) {
  if (!enabled_) return nullptr;
  auto it = entries_.find(key);
  if (it == entries_.end() || it->second.addresses != addresses) return nullptr;
  it->second.last_use = ++tick_;
  ++stats_.hits;
  return it->second.handle;
}

bool CaptureCache::should_capture(const CaptureKey& key, uint64_t addresses) {
  if (!enabled_) {
    ++stats_.eager;
    return false;
  }
  if (entries_.count(key)) return true;  // captured before with other addresses: recapture
  auto [it, fresh] = seen_.try_emplace(key, addresses);
  if (!fresh && it->second == addresses) {
    seen_.erase(it);
    return true;
  }
  it->second = addresses;
  if (seen_.size() > 4 * max_) seen_.clear();  // bounded: old one-shot splits are forgotten
  ++stats_.eager;
  return false;
}

void CaptureCache::store(const CaptureKey& key, uint64_t addresses, void* handle, Deleter deleter) {
  auto it = entries_.find(key);
  if (it != entries_.end()) {
    release(it->second);
    ++stats_.recaptures;
  } else {
    ++stats_.captures;
    if (entries_.size() >= max_ && max_ > 0) {  // evict the least recently used
      auto oldest = entries_.begin();
      for (auto e = entries_.begin(); e != entries_.end(); ++e)
        if (e->second.last_use < oldest->second.last_use) oldest = e;
      release(oldest->second);
      entries_.erase(oldest);
    }
  }
  Entry& e = entries_[key];
  e.addresses = addresses;
  e.handle = handle;
  e.deleter = std::move(deleter);
  e.last_use = ++tick_;
}

void CaptureCache::release(Entry& e) {
  if (e.handle && e.deleter) e.deleter(e.handle);
  e.handle = nullptr;
}

void CaptureCache::clear() {
  for (auto& [k, e] : entries_) release(e);
  entries_.clear();
  seen_.clear();
}

bool graphs_enabled_by_env() {
  const char* v = std::getenv("LOOM_CUDA_GRAPHS");
  return !(v && std::strcmp(v, "0") == 0);
}

}  // namespace loom::cuda
