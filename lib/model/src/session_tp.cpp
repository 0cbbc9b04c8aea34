// Tensor-parallel sessions (see tp_runner.h). In one process every member runs on its own
// thread and the members take turns (InProcessGroup); under MPI this process is one member.
#include <algorithm>
#include <cstring>
#include <limits>
#include <thread>

#include "loom/alloc/alloc.h"
#include "loom/core/error.h"
#include "loom/cpu/cpu.h"
#include "tp_runner.h"

namespace loom {

struct TpRunner::Member {
  const TpShard* shard = nullptr;
  std::vector<Device*> devices;   // the member's device, then the host (CPU) unless it is the member
  std::vector<int> model_device;  // index of each in model.devices()
  Communicator* comm = nullptr;
  Context kv_ctx;
  KvCache kv;
  std::vector<std::unique_ptr<Buffer>> kv_buffers;
  size_t kv_bytes = 0;
  std::vector<size_t> compute_bytes;  // per entry of devices
  sched::PlanPolicy policy;
  std::unique_ptr<sched::Executor> exec;
  // the step being run
  std::unique_ptr<Context> ctx;
  std::unique_ptr<Graph> graph;
  sched::ExecutionPlan plan;
  ForwardInputs in;
};

TpRunner::TpRunner(Model& model, const SessionParams& params, bool plan_only)
    : model_(model), params_(params), plan_only_(plan_only) {
  const HParams& hp = model.hparams();
  const auto& shards = model.tp_shards();
  const std::vector<Device*>& all = model.devices();
  Device* host = all.back();
  const bool one_rank = (int)shards.size() < n_members();
  if (one_rank) {
    LOOM_CHECK(params.comm && params.comm->size() == n_members() && params.comm->rank() == shards[0]->rank, usage,
               "-sm tensor: this process holds member {} of {} but no communicator of that size was given (--comm)",
               shards[0]->rank, n_members());
  } else if (!plan_only) {
    group_ = std::make_unique<meta::InProcessGroup>((int)shards.size());
  }
  for (const auto& sh : shards) {
    auto m = std::make_unique<Member>();
    m->shard = sh.get();
    m->devices = {sh->device};
    if (sh->device != host) m->devices.push_back(host);
    for (Device* d : m->devices) m->model_device.push_back((int)(std::find(all.begin(), all.end(), d) - all.begin()));
    m->comm = one_rank ? params.comm : group_ ? &group_->rank(sh->rank) : nullptr;
    if (m->comm) m->comm->set_bf16_min_elements(params.reduce_bf16_min);
    // KV cache: this member's KV heads only
    m->kv.size = params.n_ctx;
    std::vector<Tensor*> kv_tensors;
    const int64_t width = hp.head_dim * sh->n_head_kv;
    for (DType t : {params.type_k, params.type_v})
      LOOM_CHECK(width % dtype_info(t).block_size == 0, usage,
                 "-sm tensor: member {} holds {} KV heads of {} ({} values a row), not a whole number of {} blocks of "
                 "{}; use an f16/f32 cache or another -ts",
                 sh->rank, sh->n_head_kv, hp.head_dim, width, dtype_name(t), dtype_info(t).block_size);
    for (int64_t il = 0; il < hp.n_layer && width > 0; ++il) {
      Tensor* k = m->kv_ctx.new_tensor(params.type_k, {width, params.n_ctx}, fmt::format("cache_k_l{}", il));
      Tensor* v = m->kv_ctx.new_tensor(params.type_v, {width, params.n_ctx}, fmt::format("cache_v_l{}", il));
      m->kv.k.push_back(k);
      m->kv.v.push_back(v);
      kv_tensors.push_back(k);
      kv_tensors.push_back(v);
    }
    const BufferType& bt = sh->device->buffer_type();
    m->kv_bytes = alloc::tensors_size(kv_tensors, bt);
    if (!plan_only && !kv_tensors.empty()) {
      Status st = alloc::alloc_tensors(kv_tensors, bt, m->kv_buffers);
      LOOM_CHECK(st.is_ok(), out_of_memory, "KV cache of member {}: cannot allocate {:.2f} MiB on {}: {}", sh->rank,
                 (double)m->kv_bytes / (1 << 20), sh->device->name(), st.message());
      for (auto& b : m->kv_buffers) b->clear(0);
    }
    m->policy.n_copies = 1;
    if (plan_only) {
      for (Tensor& t : const_cast<Context&>(sh->ctx).tensors())
        if (!t.buffer) m->policy.leaf_devices[&t] = sh->device;
      for (Tensor* t : kv_tensors) m->policy.leaf_devices[t] = sh->device;
      if (!model.tok_embd->data) m->policy.leaf_devices[model.tok_embd] = host;
    } else {
      m->exec = std::make_unique<sched::Executor>(m->devices);
      m->exec->set_communicator(m->comm);
    }
    members_.push_back(std::move(m));
  }
  // Worst cases, as the one-device session: a full ubatch over the whole context, and one token.
  const int64_t ub = std::min(params.n_ubatch, params.n_ctx);
  for (auto& mp : members_) {
    Member* m = mp.get();
    m->compute_bytes.assign(m->devices.size(), 0);
    for (const int64_t T : {ub, (int64_t)1}) {
      Context ctx;
      ForwardInputs in = build_forward(ctx, forward_model(model, *m->shard), m->kv,
                                       ForwardShape{T, params.n_ctx, T, params.flash_attn});
      Graph g;
      build_graph(g, in);
      sched::ExecutionPlan plan = sched::plan(g, m->devices, m->policy);
      for (size_t d = 0; d < m->devices.size(); ++d)
        m->compute_bytes[d] = std::max(m->compute_bytes[d], plan.compute_bytes((int)d));
      if (m->exec) {
        Status st = m->exec->reserve(g, plan);
        LOOM_CHECK(st.is_ok(), out_of_memory, "compute buffers of member {}: {}", m->shard->rank, st.message());
      }
    }
  }
}

TpRunner::~TpRunner() = default;

void TpRunner::clear() {
  for (auto& m : members_)
    for (auto& b : m->kv_buffers) b->clear(0);
}

Session::StepPlan TpRunner::plan_step(int64_t n_tokens, int64_t n_ctx) const {
  const Member& m = *members_.front();
  Session::StepPlan sp;
  sp.ctx = std::make_unique<Context>();
  ForwardInputs in = build_forward(*sp.ctx, forward_model(model_, *m.shard), m.kv,
                                   ForwardShape{n_tokens, n_ctx, n_tokens, params_.flash_attn});
  sp.graph = std::make_unique<Graph>();
  build_graph(*sp.graph, in);
  sp.plan = sched::plan(*sp.graph, m.devices, m.policy);
  return sp;
}

std::vector<size_t> TpRunner::kv_bytes() const {
  std::vector<size_t> out(model_.devices().size(), 0);
  for (const auto& m : members_) out[(size_t)m->model_device[0]] += m->kv_bytes;
  return out;
}

std::vector<size_t> TpRunner::compute_bytes() const {
  std::vector<size_t> out(model_.devices().size(), 0);
  for (const auto& m : members_)
    for (size_t d = 0; d < m->devices.size(); ++d) {
      const size_t live = m->exec ? m->exec->buffer_size((int)d) : 0;
      out[(size_t)m->model_device[d]] += std::max(live, m->compute_bytes[d]);
    }
  return out;
}

std::vector<TpRunner::KvColumns> TpRunner::kv_columns() const {
  std::vector<KvColumns> out;
  for (const auto& m : members_)
    out.push_back(
        {&m->kv, model_.tp_layout().head_kv[(size_t)m->shard->rank].begin * model_.hparams().head_dim, m->shard->rank});
  return out;
}

Communicator* TpRunner::remote_comm() const {
  return (int)members_.size() < n_members() ? members_.front()->comm : nullptr;
}

size_t TpRunner::all_reduce_bytes() const {
  return members_.front()->comm ? members_.front()->comm->bytes_reduced() : 0;
}

uint64_t TpRunner::n_all_reduce() const { return members_.front()->comm ? members_.front()->comm->n_all_reduce() : 0; }

namespace {

void read_tensor(const Tensor* t, float* out) {
  const size_t bytes = (size_t)t->nelements() * sizeof(float);
  if (t->buffer && !t->buffer->type().is_host())
    t->buffer->get(t, out, 0, bytes);
  else
    std::memcpy(out, t->data, bytes);
}

}  // namespace

void TpRunner::decode(std::span<const int32_t> tokens, int64_t n_past, int64_t n_outputs, bool all_logits,
                      bool want_logits, std::vector<float>& logits) {
  const int64_t T = (int64_t)tokens.size();
  const ForwardShape shape{T, n_past + T, n_outputs, params_.flash_attn};
  for (auto& mp : members_) {
    Member& m = *mp;
    m.ctx = std::make_unique<Context>();
    m.in = build_forward(*m.ctx, forward_model(model_, *m.shard), m.kv, shape);
    m.graph = std::make_unique<Graph>();
    build_graph(*m.graph, m.in);
    m.plan = sched::plan(*m.graph, m.devices, m.policy);
    m.exec->alloc(*m.graph, m.plan).throw_if_error();
    // inputs a member's graph does not read (no heads here) have no memory
    ForwardInputs& in = m.in;
    auto* tok = static_cast<int32_t*>(in.tokens->data);
    auto* pos = static_cast<int32_t*>(in.positions->data);
    auto* slots = static_cast<int32_t*>(in.kv_slots->data);
    for (int64_t i = 0; i < T; ++i) {
      if (tok) tok[i] = tokens[(size_t)i];
      if (pos) pos[i] = (int32_t)(n_past + i);
      if (slots) slots[i] = (int32_t)(n_past + i);
    }
    fill_masks(in, model_.hparams(), n_past, T, shape.n_kv);
    if (in.out_rows && in.out_rows->data) {
      auto* rows = static_cast<int32_t*>(in.out_rows->data);
      for (int64_t i = 0; i < n_outputs; ++i) rows[i] = (int32_t)(all_logits ? i : T - 1);
    }
  }
  // Run: members meet in their AllReduce nodes, so in one process each needs its own thread.
  if (members_.size() == 1) {
    Member& m = *members_.front();
    m.exec->compute(*m.graph, m.plan).throw_if_error();
  } else {
    std::vector<Status> results(members_.size());
    auto run_member = [&](size_t i) {
      Member& m = *members_[i];
      try {
        results[i] = m.exec->compute(*m.graph, m.plan);
      } catch (const Error& e) {
        results[i] = Status::error(e.kind(), e.what());
      }
      if (!results[i]) group_->abort(fmt::format("member {} failed: {}", i, results[i].message()));
    };
    std::vector<std::thread> threads;  // member 0 runs on this thread
    for (size_t i = 1; i < members_.size(); ++i) threads.emplace_back(run_member, i);
    run_member(0);
    for (auto& t : threads) t.join();
    for (Status& st : results) st.throw_if_error();
  }
  if (!want_logits) return;
  // Logits: member r holds vocabulary rows vocab[r] of every output row.
  const TpLayout& lay = model_.tp_layout();
  const int64_t n_vocab = model_.hparams().n_vocab;
  std::vector<float> blocks((size_t)(n_vocab * n_outputs));
  std::vector<size_t> counts, offsets;
  size_t off = 0;
  for (const meta::Range& r : lay.vocab) {
    counts.push_back((size_t)(r.size() * n_outputs));
    offsets.push_back(off);
    off += counts.back();
  }
  for (auto& m : members_)
    if (m->in.logits) read_tensor(m->in.logits, blocks.data() + offsets[(size_t)m->shard->rank]);
  if (members_.size() < (size_t)lay.n_members) {  // other processes hold the other rows
    Member& m = *members_.front();
    std::vector<float> mine(
        blocks.begin() + (ptrdiff_t)offsets[(size_t)m.shard->rank],
        blocks.begin() + (ptrdiff_t)(offsets[(size_t)m.shard->rank] + counts[(size_t)m.shard->rank]));
    m.comm->all_gather(mine.data(), counts, blocks.data());
  }
  const size_t old = logits.size();
  logits.resize(old + (size_t)(n_vocab * n_outputs));
  for (size_t r = 0; r < lay.vocab.size(); ++r) {
    const int64_t nv = lay.vocab[r].size();
    for (int64_t o = 0; o < n_outputs; ++o)
      std::memcpy(logits.data() + old + (size_t)(o * n_vocab + lay.vocab[r].begin),
                  blocks.data() + offsets[r] + (size_t)(o * nv), (size_t)nv * sizeof(float));
  }
}

}  // namespace loom
