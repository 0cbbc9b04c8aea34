// Session: its members (one, or one per tensor-parallel shard held here) and the decode loop
// (ubatches -> each member's graph and plan, reused while the shape stays -> executors ->
// logits). Planning-only sessions size everything without allocating (fit-params,
// split-inspect) through the same code.
#include "loom/model/session.h"

#include <algorithm>
#include <cstring>
#include <system_error>
#include <thread>

#include "loom/backend/registry.h"
#include "loom/core/error.h"
#include "loom/core/thread_pool.h"
#include "session_impl.h"

namespace loom {

namespace {

// The index of the host device (the CPU, last in a model's devices) in `devices`.
int host_index(const std::vector<Device*>& devices) {
  for (size_t i = 0; i < devices.size(); ++i)
    if (devices[i]->buffer_type().is_host()) return (int)i;
  fail(ErrorKind::usage, "--no-kv-offload: no host device (CPU) to hold the KV cache");
}

// The whole model as one member: each layer's KV cache on the layer's device, or (no KV offload)
// on the host, where the attention that reads it then runs (the planner puts a node with its
// largest fixed source).
MemberSetup whole_model(const Model& model, bool plan_only, bool kv_offload) {
  const HParams& hp = model.hparams();
  MemberSetup s;
  s.fm = forward_model(model);
  s.devices = model.devices();
  for (size_t d = 0; d < s.devices.size(); ++d) s.model_device.push_back((int)d);
  s.kv_device = model.placement().layer_device;
  if (!kv_offload) s.kv_device.assign(s.kv_device.size(), host_index(s.devices));
  s.kv_width = hp.n_embd_kv();
  s.vocab = {0, hp.n_vocab};
  if (plan_only)
    for (Tensor* t : model.weight_tensors())
      if (!t->buffer) s.leaf_devices[t] = s.devices[(size_t)model.device_of(t)];
  return s;
}

// A tensor-parallel shard as a member: its KV heads on its device, the host beside it.
MemberSetup shard_member(const Model& model, const TpShard& sh, const SessionParams& params, bool plan_only) {
  const HParams& hp = model.hparams();
  const std::vector<Device*>& all = model.devices();
  Device* host = all.back();
  MemberSetup s;
  s.fm = forward_model(model, sh);
  s.devices = {sh.device};
  if (sh.device != host) s.devices.push_back(host);
  for (Device* d : s.devices) s.model_device.push_back((int)(std::find(all.begin(), all.end(), d) - all.begin()));
  s.kv_width = hp.head_dim * sh.n_head_kv;
  for (DType t : {params.type_k, params.type_v})
    LOOM_CHECK(s.kv_width % dtype_info(t).block_size == 0, usage,
               "-sm tensor: member {} holds {} KV heads of {} ({} values a row), not a whole number of {} blocks of "
               "{}; use an f16/f32 cache or another -ts",
               sh.rank, sh.n_head_kv, hp.head_dim, s.kv_width, dtype_name(t), dtype_info(t).block_size);
  if (s.kv_width > 0) s.kv_device.assign((size_t)hp.n_layer, params.kv_offload ? 0 : host_index(s.devices));
  s.kv_col = model.tp_layout().head_kv[(size_t)sh.rank].begin * hp.head_dim;
  s.vocab = model.tp_layout().vocab[(size_t)sh.rank];
  s.rank = sh.rank;
  if (plan_only) {
    for (Tensor& t : const_cast<Context&>(sh.ctx).tensors())
      if (!t.buffer) s.leaf_devices[&t] = sh.device;
    if (!model.tok_embd->data) s.leaf_devices[model.tok_embd] = host;
  }
  return s;
}

constexpr const char* kKvCacheTypes[] = {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1"};

}  // namespace

std::optional<DType> kv_cache_type(std::string_view name) {
  for (const char* n : kKvCacheTypes)
    if (name == n) {
      const std::optional<DType> t = dtype_from_name(n);
      if (t && dtype_info(*t).to_float && dtype_info(*t).from_float) return t;
    }
  return std::nullopt;
}

std::string kv_cache_type_names() {
  std::string out;
  for (const char* n : kKvCacheTypes)
    if (kv_cache_type(n)) out += (out.empty() ? "" : ", ") + std::string(n);
  return out;
}

Session::Session(Model& model, const SessionParams& params) : model_(model), params_(params) {
  const HParams& hp = model.hparams();
  if (params_.n_ctx <= 0) params_.n_ctx = hp.n_ctx_train;
  LOOM_CHECK(params_.n_ctx >= 1 && params_.n_ctx <= (int64_t)1 << 24, usage, "context size {} out of range",
             params_.n_ctx);
  LOOM_CHECK(params_.n_ubatch >= 1 && params_.n_batch >= 1, usage, "batch sizes must be positive");
  LOOM_CHECK(params_.n_copies >= 1 && params_.n_copies <= 8, usage, "pipeline copies {} out of range (1-8)",
             params_.n_copies);
  params_.n_ubatch = std::min(params_.n_ubatch, params_.n_batch);
  for (DType t : {params_.type_k, params_.type_v})
    LOOM_CHECK(kv_cache_type(dtype_name(t)), usage, "KV cache type {} not supported ({})", dtype_name(t),
               kv_cache_type_names());
  LOOM_CHECK(params_.flash_attn || !dtype_info(params_.type_v).is_quantized, usage,
             "-ctv {}: a quantized V cache needs flash attention (-fa on)", dtype_name(params_.type_v));
  for (DType t : {params_.type_k, params_.type_v})
    LOOM_CHECK(model.hparams().head_dim % dtype_info(t).block_size == 0, usage,
               "KV cache type {}: head size {} is not a whole number of its {}-value blocks", dtype_name(t),
               model.hparams().head_dim, dtype_info(t).block_size);
  impl_ = std::make_unique<Impl>();
  Impl& im = *impl_;
  im.devices = model.devices();
  im.plan_only = !model.has_data() || params_.plan_only;
  if (params_.n_threads > 0) im.devices.back()->set_n_threads(params_.n_threads);

  if (!model.tensor_parallel()) {
    MemberSetup s = whole_model(model, im.plan_only, params_.kv_offload);
    s.n_copies = params_.n_copies;
    im.members.push_back(std::make_unique<SessionMember>(std::move(s), params_, im.plan_only));
    return;
  }
  im.tensor_parallel = true;
  const auto& shards = model.tp_shards();
  const int n_members = model.tp_layout().n_members;
  if ((int)shards.size() < n_members) {  // this process holds one member; the others are ranks elsewhere
    LOOM_CHECK(params_.comm && params_.comm->size() == n_members && params_.comm->rank() == shards[0]->rank, usage,
               "-sm tensor: this process holds member {} of {} but no communicator of that size was given (--comm)",
               shards[0]->rank, n_members);
    im.remote = params_.comm;
  } else if (!im.plan_only) {
    im.group = registry().in_process_group((int)shards.size());
  }
  for (const auto& sh : shards) {
    MemberSetup s = shard_member(model, *sh, params_, im.plan_only);
    s.comm = im.remote ? im.remote : im.group ? &im.group->rank(sh->rank) : nullptr;
    if (s.comm) s.comm->set_bf16_min_elements(params_.reduce_bf16_min);
    im.members.push_back(std::make_unique<SessionMember>(std::move(s), params_, im.plan_only));
  }
}

Session::~Session() = default;

Session::StepPlan Session::plan_step(bool decode) const {
  return impl_->members.front()->plan_step(decode ? 1 : std::min(params_.n_ubatch, params_.n_ctx));
}

void Session::clear() {
  n_past_ = 0;
  n_outputs_ = 0;
  for (auto& m : impl_->members) m->clear();
}

void Session::keep_first(int64_t n) {
  LOOM_CHECK(n >= 0, internal, "keep_first({})", n);
  // The rows past n stay finite (they were computed) and the masks hide them until written over.
  n_past_ = std::min(n_past_, n);
  n_outputs_ = 0;
}

uint64_t Session::n_graphs_reused() const { return impl_->graphs_reused; }

uint64_t Session::n_syncs() const {
  uint64_t n = 0;
  for (const auto& m : impl_->members) n += m->n_syncs();
  return n;
}

uint64_t Session::n_all_reduce() const {
  const Communicator* c = impl_->members.front()->setup().comm;
  return c ? c->n_all_reduce() : 0;
}

size_t Session::all_reduce_bytes() const {
  const Communicator* c = impl_->members.front()->setup().comm;
  return c ? c->bytes_reduced() : 0;
}

namespace {

// Runs every member's step. Members meet in their AllReduce nodes, so in one process each needs
// its own thread; a failing one aborts the group so the others leave their collectives.
void run_members(Session::Impl& im) {
  if (im.members.size() == 1) {
    im.members.front()->compute().throw_if_error();
    return;
  }
  std::vector<Status> results(im.members.size());
  auto run_member = [&](size_t i) {
    try {
      results[i] = im.members[i]->compute();
    } catch (const Error& e) {
      results[i] = Status::error(e.kind(), e.what());
    }
    if (!results[i]) im.group->abort(fmt::format("member {} failed: {}", i, results[i].message()));
  };
  std::vector<std::thread> threads;  // member 0 runs on this thread
  try {
    for (size_t i = 1; i < im.members.size(); ++i) threads.emplace_back(run_member, i);
  } catch (const std::system_error& e) {
    // The members meet in collectives, so they cannot take turns: end the started ones.
    im.group->abort(fmt::format("cannot start the thread of member {}: {}", threads.size() + 1, e.what()));
    for (auto& t : threads) t.join();
    fail(ErrorKind::out_of_memory, "-sm tensor: cannot start the thread of member {} of {}: {}", threads.size() + 1,
         im.members.size(), e.what());
  }
  run_member(0);
  for (auto& t : threads) t.join();
  for (Status& st : results) st.throw_if_error();
}

// Appends n_outputs rows of full logits. Under tensor parallelism member r holds vocabulary
// rows vocab[r] of each output row; rows held by other processes are all-gathered.
void gather_logits(Session::Impl& im, const Model& model, int64_t n_outputs, std::vector<float>& logits) {
  const int64_t n_vocab = model.hparams().n_vocab;
  const size_t old = logits.size();
  logits.resize(old + (size_t)(n_vocab * n_outputs));
  if (!im.tensor_parallel) {  // one member with every row: straight in
    im.members.front()->read_logits(logits.data() + old);
    return;
  }
  const TpLayout& lay = model.tp_layout();
  std::vector<float> blocks((size_t)(n_vocab * n_outputs));
  std::vector<size_t> counts, offsets;
  size_t off = 0;
  for (const tp::Range& r : lay.vocab) {
    counts.push_back((size_t)(r.size() * n_outputs));
    offsets.push_back(off);
    off += counts.back();
  }
  for (auto& m : im.members) m->read_logits(blocks.data() + offsets[(size_t)m->setup().rank]);
  if (im.remote) {  // other processes hold the other rows
    const size_t r = (size_t)im.members.front()->setup().rank;
    std::vector<float> mine(blocks.begin() + (ptrdiff_t)offsets[r], blocks.begin() + (ptrdiff_t)(offsets[r] + counts[r]));
    im.remote->all_gather(mine.data(), counts, blocks.data());
  }
  for (size_t r = 0; r < lay.vocab.size(); ++r) {
    const int64_t nv = lay.vocab[r].size();
    for (int64_t o = 0; o < n_outputs; ++o)
      std::memcpy(logits.data() + old + (size_t)(o * n_vocab + lay.vocab[r].begin),
                  blocks.data() + offsets[r] + (size_t)(o * nv), (size_t)nv * sizeof(float));
  }
}

}  // namespace

void Session::decode(std::span<const int32_t> tokens, bool all_logits) {
  Impl& im = *impl_;
  LOOM_CHECK(!im.plan_only, usage, "this session only plans (the model has no data)");
  const int64_t n = (int64_t)tokens.size();
  LOOM_CHECK(n > 0, invalid_input, "nothing to decode: empty token list");
  LOOM_CHECK(n_past_ + n <= params_.n_ctx, invalid_input,
             "context is full: {} tokens in the cache + {} new exceed the context size {} (context shift is not "
             "supported; raise -c)",
             n_past_, n, params_.n_ctx);
  const int64_t n_vocab = model_.hparams().n_vocab;
  for (int32_t t : tokens)
    LOOM_CHECK(t >= 0 && t < n_vocab, invalid_input, "token id {} out of range (vocab {})", t, n_vocab);
  logits_.clear();
  n_outputs_ = 0;
  for (int64_t start = 0; start < n; start += params_.n_ubatch) {
    const int64_t T = std::min(params_.n_ubatch, n - start);
    const bool last = start + T == n;
    ForwardShape shape{T, n_past_ + T, all_logits ? T : 1, params_.flash_attn};
    shape.n_kv = std::min(params_.n_ctx, (shape.n_kv + kKvPad - 1) / kKvPad * kKvPad);
    bool reused = true;
    for (auto& m : im.members) {
      reused = m->prepare(shape) && reused;
      m->set_inputs(tokens.subspan((size_t)start, (size_t)T), n_past_, all_logits);
    }
    if (reused) ++im.graphs_reused;
    if (params_.n_threads_batch > 0)  // llama.cpp's choice: -tb for a batch, -t for one token
      im.devices.back()->set_n_threads(T > 1                   ? params_.n_threads_batch
                                       : params_.n_threads > 0 ? params_.n_threads
                                                               : ThreadPool::default_threads());
    run_members(im);
    n_past_ += T;
    if (all_logits || last) {
      gather_logits(im, model_, shape.n_outputs, logits_);
      n_outputs_ += shape.n_outputs;
    }
  }
  if (!all_logits) n_outputs_ = 1;
}

std::span<const float> Session::logits(int64_t i) const {
  const int64_t n_vocab = model_.hparams().n_vocab;
  LOOM_ASSERT(i >= 0 && i < n_outputs_, "logits row {} of {}", i, n_outputs_);
  return {logits_.data() + i * n_vocab, (size_t)n_vocab};
}

std::vector<MemoryBreakdown> Session::memory_breakdown() const {
  const Impl& im = *impl_;
  std::vector<MemoryBreakdown> out;
  for (size_t d = 0; d < im.devices.size(); ++d)
    out.push_back({im.devices[d]->name(), model_.device_bytes()[d], 0, 0});
  for (const auto& m : im.members)
    for (size_t d = 0; d < m->setup().devices.size(); ++d) {
      MemoryBreakdown& b = out[(size_t)m->setup().model_device[d]];
      b.context_bytes += m->kv_bytes(d);
      b.compute_bytes += m->compute_bytes(d);
    }
  return out;
}

}  // namespace loom
