// CPU device, host buffers, and the graph loop (all threads walk the nodes together, with a
// barrier after each node; a fused group from find_fusions runs as one kernel at its first node,
// a run of products of one small input (product_runs) as one phase, and a product's residual ADD
// by the product's threads (product_adds), unless LOOM_DISABLE_FUSION=1).
#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "cpu_fused.h"
#include "cpu_rows.h"
#include "dispatch.h"
#include "loom/cpu/cpu.h"
#include "loom/graph/context.h"
#include "loom/graph/fusion.h"

namespace loom::cpu {

namespace {

class HostBuffer final : public Buffer {
 public:
  HostBuffer(const BufferType& type, void* base, size_t size) : Buffer(type, base, size) {}
  ~HostBuffer() override { std::free(base_); }
  void set(Tensor* t, const void* src, size_t offset, size_t n) override {
    std::memcpy(static_cast<char*>(t->data) + offset, src, n);
  }
  void get(const Tensor* t, void* dst, size_t offset, size_t n) const override {
    std::memcpy(dst, static_cast<const char*>(t->data) + offset, n);
  }
  void clear(uint8_t value) override { std::memset(base_, value, size_); }
};

class CpuStream final : public Stream {
 public:
  explicit CpuStream(CpuDevice& dev) : dev_(dev) {}
  Status compute(const Graph& graph, std::span<Tensor* const> nodes) override {
    try {
      compute_nodes(graph, nodes, dev_.pool());
    } catch (const Error& e) {
      return Status::error(e.kind(), e.what());
    }
    return Status::ok();
  }
  void synchronize() override {}

 private:
  CpuDevice& dev_;
};

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

// LOOM_DISABLE_FUSION set to anything but "" or "0" runs every node on its own.
bool fusion_enabled() {
  const char* v = std::getenv("LOOM_DISABLE_FUSION");
  return !v || !*v || std::strcmp(v, "0") == 0;
}

// find_fusions of the last node list this thread computed (same graph uid and same nodes):
// a graph computed again and again is matched once. Whether each group may run fused (types,
// memory overlaps) is still decided on every call.
const std::vector<FusedGroup>& fusions_of(const Graph& graph, std::span<Tensor* const> nodes) {
  struct Cache {
    uint64_t uid = 0;
    std::vector<Tensor*> nodes;
    std::vector<FusedGroup> groups;
  };
  thread_local Cache cache;
  if (cache.uid != graph.uid() || !std::equal(nodes.begin(), nodes.end(), cache.nodes.begin(), cache.nodes.end())) {
    cache.uid = graph.uid();
    cache.nodes.assign(nodes.begin(), nodes.end());
    cache.groups = find_fusions(graph, nodes);
  }
  return cache.groups;
}

}  // namespace

Status HostBufferType::alloc(size_t size, std::unique_ptr<Buffer>& out) const {
  // Big buffers (weights, KV cache) sit on 2 MiB pages where the kernel gives them: streaming
  // reads then cross no 4 KiB page boundaries (prefetchers stop there) and miss the TLB less.
  constexpr size_t kHugePage = size_t(2) << 20;
  const bool huge = size >= kHugePage;
  const size_t align = huge ? kHugePage : alignment();
  const size_t bytes = align_up(size == 0 ? 1 : size, align);
  void* p = std::aligned_alloc(align, bytes);
  if (!p) return Status::error(ErrorKind::out_of_memory, fmt::format("CPU: cannot allocate {} bytes", size));
  if (huge) ::madvise(p, bytes, MADV_HUGEPAGE);  // advice only: without THP the pages stay small
  out = std::make_unique<HostBuffer>(*this, p, size);
  return Status::ok();
}

CpuDevice::CpuDevice(int n_threads, ThreadPlacement placement)
    : n_threads_(std::max(1, n_threads)), placement_(std::move(placement)), buffer_type_(*this) {}

MemoryInfo CpuDevice::memory() const {
  MemoryInfo info;
  std::ifstream in("/proc/meminfo");
  std::string key;
  size_t value;
  std::string unit;
  while (in >> key >> value >> unit) {
    if (key == "MemTotal:") info.total = value * 1024;
    if (key == "MemAvailable:") info.free = value * 1024;
  }
  return info;
}

bool CpuDevice::supports_op(const Tensor* node) const { return supports_node(node); }

std::unique_ptr<Stream> CpuDevice::create_stream() { return std::make_unique<CpuStream>(*this); }

void CpuDevice::set_n_threads(int n) {
  n = std::max(1, n);
  if (n == n_threads_) return;
  n_threads_ = n;
  // A session switching between its prompt's count (-tb) and its generation's (-t) keeps both
  // pools: their idle workers sleep, and no switch starts threads again.
  std::swap(pool_, spare_pool_);
  if (pool_ && pool_->size() != n) pool_.reset();
}

ThreadPool& CpuDevice::pool() {
  if (!pool_) pool_ = std::make_unique<ThreadPool>(n_threads_, placement_);
  return *pool_;
}

bool supports(const Tensor* node) { return supports_node(node); }

namespace {
// Views, NONE and empty nodes: the loop skips them.
bool computes_nothing(const Tensor* n) {
  return op_info(n->op).is_view || n->op == OpKind::NONE || n->nelements() == 0;
}

// Whether computing n writes bytes of t (n's result overlaps t's memory).
bool writes_into(const Tensor* n, const Tensor* t) { return overlaps(n, t); }
}  // namespace

std::vector<uint8_t> prepared_b_nodes(std::span<Tensor* const> nodes, std::span<const FusedGroup* const> groups,
                                      std::span<const size_t> sizes, int nth) {
  std::vector<uint8_t> ready(nodes.size(), 0);
  const Tensor* holder = nullptr;  // the product whose prepared b the scratch holds
  size_t next_group = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (next_group < groups.size() && groups[next_group]->first == i) {
      if (work_size_fused(*groups[next_group], nth) > 0) holder = nullptr;
      i = groups[next_group++]->last;
      continue;
    }
    const Tensor* n = nodes[i];
    if (computes_nothing(n)) continue;
    if (matmul_b_prepared_by(holder, n, nth)) {
      ready[i] = 1;
    } else if (sizes[i] > 0) {
      holder = n->op == OpKind::MUL_MAT || n->op == OpKind::MUL_MAT_ID ? n : nullptr;
    } else if (holder && writes_into(n, holder->src[1])) {  // b itself changed (an in-place step)
      holder = nullptr;
    }
  }
  return ready;
}

std::vector<uint32_t> product_runs(std::span<Tensor* const> nodes, std::span<const FusedGroup* const> groups, int nth) {
  std::vector<uint32_t> last(nodes.size(), 0);
  size_t next_group = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    while (next_group < groups.size() && groups[next_group]->last < i) ++next_group;
    const bool in_group = next_group < groups.size() && groups[next_group]->first <= i;
    if (in_group || nodes[i]->op != OpKind::MUL_MAT || computes_nothing(nodes[i])) continue;
    const Tensor* members[kMaxProductRun] = {nodes[i]};
    size_t count = 1, end = i;
    for (size_t j = i + 1; j < nodes.size() && count < kMaxProductRun; ++j) {
      const Tensor* n = nodes[j];
      if (next_group < groups.size() && groups[next_group]->first <= j) break;
      if (computes_nothing(n)) continue;
      if (!mul_mat_joins_run(nodes[i], n, nth)) break;
      const bool apart = std::none_of(members, members + count, [&](const Tensor* m) {
        return writes_into(n, m) || writes_into(n, m->src[0]) || writes_into(n, m->src[1]) || writes_into(m, n->src[0]);
      });
      if (!apart) break;
      members[count++] = n;
      end = j;
    }
    if (end > i) last[i] = (uint32_t)end;
    i = end;
  }
  return last;
}

std::vector<uint32_t> product_adds(std::span<Tensor* const> nodes, std::span<const FusedGroup* const> groups,
                                   std::span<const uint32_t> run_last, int nth) {
  std::vector<uint32_t> add(nodes.size(), 0);
  size_t next_group = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    while (next_group < groups.size() && groups[next_group]->last < i) ++next_group;
    if (nodes[i]->op != OpKind::MUL_MAT || run_last[i] || computes_nothing(nodes[i]) ||
        (next_group < groups.size() && groups[next_group]->first <= i))
      continue;
    size_t j = i + 1;
    while (j < nodes.size() && computes_nothing(nodes[j])) ++j;
    if (j == nodes.size() || (next_group < groups.size() && groups[next_group]->first <= j)) continue;
    if (mul_mat_add_fusable(nodes[i], nodes[j], nth)) add[i] = (uint32_t)j;
  }
  return add;
}

void compute_nodes(const Graph& graph, std::span<Tensor* const> nodes, ThreadPool& pool) {
  const int nth = pool.size();
  size_t wsize = 0;
  std::vector<size_t> sizes(nodes.size());  // each node's scratch
  for (size_t i = 0; i < nodes.size(); ++i) {
    const Tensor* n = nodes[i];
    LOOM_CHECK(supports_node(n), unsupported, "CPU has no kernel for {} '{}' ({}; src0 {})", op_name(n->op), n->name,
               describe(*n), n->src[0] ? describe(*n->src[0]) : "none");
    LOOM_CHECK(n->data || n->nelements() == 0, internal, "node '{}' ({}) has no memory", n->name, op_name(n->op));
    sizes[i] = work_size(n, nth);
    wsize = std::max(wsize, sizes[i]);
  }
  std::vector<const FusedGroup*> groups;
  if (fusion_enabled())
    for (const FusedGroup& g : fusions_of(graph, nodes))
      if (fused_supported(g)) {
        groups.push_back(&g);
        wsize = std::max(wsize, work_size_fused(g, nth));
      }
  const std::vector<uint8_t> b_ready = prepared_b_nodes(nodes, groups, sizes, nth);
  const std::vector<uint32_t> run_last =
      fusion_enabled() ? product_runs(nodes, groups, nth) : std::vector<uint32_t>(nodes.size(), 0);
  const std::vector<uint32_t> add_at =
      fusion_enabled() ? product_adds(nodes, groups, run_last, nth) : std::vector<uint32_t>(nodes.size(), 0);
  // Kernels write their scratch before reading it: one buffer per calling thread, grown, never
  // cleared (a fresh zeroed one per graph cost a memset of up to the packed b of a prompt).
  thread_local std::vector<uint8_t> work;
  if (work.size() < wsize + 64) work.resize(wsize + 64);
  void* wdata = work.data();
  pool.run([&](int ith, int n_threads) {
    KernelArgs args{ith, n_threads, wdata, wsize, n_threads > 1 ? &pool : nullptr};
    size_t next_group = 0;
    for (size_t i = 0; i < nodes.size(); ++i) {
      if (next_group < groups.size() && groups[next_group]->first == i) {
        compute_fused(args, *groups[next_group]);
        args.barrier();
        i = groups[next_group++]->last;
        continue;
      }
      Tensor* n = nodes[i];
      if (computes_nothing(n)) continue;
      if (run_last[i]) {
        Tensor* members[kMaxProductRun];
        size_t count = 0;
        for (size_t j = i; j <= run_last[i]; ++j)
          if (nodes[j]->op == OpKind::MUL_MAT && nodes[j]->nelements() > 0) members[count++] = nodes[j];
        mul_mat_run(args, std::span<Tensor* const>(members, count));
        args.barrier();
        i = run_last[i];
        continue;
      }
      args.b_ready = b_ready[i] != 0;
      if (add_at[i]) {
        mul_mat_add(args, n, nodes[add_at[i]]);
        args.barrier();
        i = add_at[i];
        continue;
      }
      compute_node(args, n);
      args.barrier();
    }
  });
}

void compute_graph(const Graph& graph, ThreadPool& pool) {
  compute_nodes(graph, std::span<Tensor* const>(graph.nodes().data(), graph.nodes().size()), pool);
}

std::unique_ptr<Buffer> alloc_all(Context& ctx, const BufferType& bt) {
  std::vector<std::pair<Tensor*, size_t>> placed;
  size_t offset = 0;
  for (Tensor& t : ctx.tensors()) {
    if (t.view_src || t.data) continue;
    offset = align_up(offset, bt.alignment());
    placed.emplace_back(&t, offset);
    offset += bt.alloc_size(&t);
  }
  std::unique_ptr<Buffer> buf;
  bt.alloc(offset, buf).throw_if_error();
  for (auto& [t, off] : placed) buf->init_tensor(t, off).throw_if_error();
  for (Tensor& t : ctx.tensors())
    if (t.view_src && !t.data && t.view_src->data) {
      t.data = static_cast<char*>(t.view_src->data) + t.view_offs;
      t.buffer = t.view_src->buffer;
    }
  return buf;
}

}  // namespace loom::cpu
