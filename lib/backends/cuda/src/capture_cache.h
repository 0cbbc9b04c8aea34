// Bookkeeping of CUDA graph capture, kept free of CUDA so it is tested without a GPU: a split's
// kernels are captured once and replayed while the split is the same (same graph uid, same first
// node and node count, and the same tensor addresses); anything else re-captures. Entries hold an
// opaque handle (the instantiated cudaGraphExec_t) released through the deleter given with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>

#include "loom/graph/tensor.h"

namespace loom::cuda {

struct CaptureKey {
  uint64_t graph_uid = 0;
  const Tensor* first = nullptr;
  size_t n_nodes = 0;
  bool operator==(const CaptureKey&) const = default;
};

struct CaptureKeyHash {
  size_t operator()(const CaptureKey& k) const {
    return std::hash<uint64_t>()(k.graph_uid) ^ (std::hash<const void*>()(k.first) << 1) ^ (k.n_nodes << 7);
  }
};

// A hash of every address the nodes read or write: a replay is valid only if none moved.
uint64_t address_hash(std::span<Tensor* const> nodes);

struct CaptureStats {
  uint64_t hits = 0;        // replays of a captured split
  uint64_t captures = 0;    // first captures
  uint64_t recaptures = 0;  // captures replacing a stale entry (addresses changed)
  uint64_t eager = 0;       // splits run without capture (disabled, or capture not possible)
};

class CaptureCache {
 public:
  using Deleter = std::function<void(void*)>;
  // max_entries bounds the handles kept (oldest-used evicted first); enabled false: never capture.
  explicit CaptureCache(bool enabled = true, size_t max_entries = 64) : enabled_(enabled), max_(max_entries) {}
  ~CaptureCache() { clear(); }
  CaptureCache(const CaptureCache&) = delete;
  CaptureCache& operator=(const CaptureCache&) = delete;

  bool enabled() const { return enabled_; }
  // The handle to replay for this split, or nullptr. Counts a hit.
  void* lookup(const CaptureKey& key, uint64_t addresses);
  // After a miss: whether to capture now. A split is captured the second time it is seen with
  // the same addresses (a one-shot graph, such as a prompt, runs eagerly); counts eager runs.
  bool should_capture(const CaptureKey& key, uint64_t addresses);
  // Keeps a freshly captured handle; counts a capture or a recapture.
  void store(const CaptureKey& key, uint64_t addresses, void* handle, Deleter deleter);
  void count_eager() { ++stats_.eager; }
  void clear();
  const CaptureStats& stats() const { return stats_; }
  size_t size() const { return entries_.size(); }

 private:
  struct Entry {
    uint64_t addresses = 0;
    void* handle = nullptr;
    Deleter deleter;
    uint64_t last_use = 0;
  };
  void release(Entry& e);

  bool enabled_;
  size_t max_;
  uint64_t tick_ = 0;
  CaptureStats stats_;
  std::unordered_map<CaptureKey, Entry, CaptureKeyHash> entries_;
  std::unordered_map<CaptureKey, uint64_t, CaptureKeyHash> seen_;  // splits run once: their addresses
};

// LOOM_CUDA_GRAPHS=0 turns capture off (any other value, or unset: on).
bool graphs_enabled_by_env();

}  // namespace loom::cuda
