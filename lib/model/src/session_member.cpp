// A session member: KV cache, worst-case reserve, and the step loop's graph, plan and inputs.
#include "session_member.h"

#include <algorithm>
#include <cstring>

#include "loom/alloc/alloc.h"
#include "loom/core/error.h"

namespace loom {

SessionMember::SessionMember(MemberSetup setup, const SessionParams& params, bool plan_only)
    : s_(std::move(setup)), params_(params) {
  const size_t n_dev = s_.devices.size();
  // KV cache: one K and one V tensor per layer (this member's heads), on the layer's device
  kv_.size = params.n_ctx;
  std::vector<std::vector<Tensor*>> per_device(n_dev);
  for (size_t il = 0; il < s_.kv_device.size(); ++il) {
    Tensor* k = kv_ctx_.new_tensor(params.type_k, {s_.kv_width, params.n_ctx}, fmt::format("cache_k_l{}", il));
    Tensor* v = kv_ctx_.new_tensor(params.type_v, {s_.kv_width, params.n_ctx}, fmt::format("cache_v_l{}", il));
    kv_.k.push_back(k);
    kv_.v.push_back(v);
    per_device[(size_t)s_.kv_device[il]].push_back(k);
    per_device[(size_t)s_.kv_device[il]].push_back(v);
    if (plan_only) {
      s_.leaf_devices[k] = s_.devices[(size_t)s_.kv_device[il]];
      s_.leaf_devices[v] = s_.devices[(size_t)s_.kv_device[il]];
    }
  }
  kv_bytes_.assign(n_dev, 0);
  for (size_t d = 0; d < n_dev; ++d) {
    const BufferType& bt = s_.devices[d]->buffer_type();
    kv_bytes_[d] = alloc::tensors_size(per_device[d], bt);
    if (plan_only || per_device[d].empty()) continue;
    Status st = alloc::alloc_tensors(per_device[d], bt, kv_buffers_);
    LOOM_CHECK(st.is_ok(), out_of_memory, "KV cache{}: cannot allocate {:.2f} MiB on {}: {}",
               s_.comm ? fmt::format(" of member {}", s_.rank) : "", (double)kv_bytes_[d] / (1 << 20),
               s_.devices[d]->name(), st.message());
  }
  clear();

  policy_.n_copies = s_.n_copies;
  policy_.offload = params.op_offload;
  if (plan_only) policy_.leaf_devices = s_.leaf_devices;
  if (!plan_only) {
    exec_ = std::make_unique<sched::Executor>(s_.devices);
    exec_->set_communicator(s_.comm);
  }
  // Worst cases: a full ubatch attending to the whole context with every logit and with the
  // last one only (steps pad n_kv up to kKvPad, so both meet the whole context; their layouts
  // differ), and one token.
  compute_bytes_.assign(n_dev, 0);
  const int64_t ub = std::min(params.n_ubatch, params.n_ctx);
  for (const ForwardShape& shape : {ForwardShape{ub, params.n_ctx, ub, params.flash_attn},
                                    ForwardShape{ub, params.n_ctx, 1, params.flash_attn},
                                    ForwardShape{1, params.n_ctx, 1, params.flash_attn}}) {
    Context ctx;
    ForwardInputs in = build_forward(ctx, s_.fm, kv_, shape);
    mark_inputs_refilled(in);  // as in every step: set_inputs fills them before each compute
    Graph g;
    build_graph(g, in);
    if (params.imatrix) params.imatrix->probe(ctx, g);  // their outputs count in the sizes
    sched::ExecutionPlan plan = sched::plan(g, s_.devices, policy_);
    for (size_t d = 0; d < n_dev; ++d) compute_bytes_[d] = std::max(compute_bytes_[d], plan.compute_bytes((int)d));
    if (exec_) {
      Status st = exec_->reserve(g, plan);
      LOOM_CHECK(st.is_ok(), out_of_memory, "compute buffers{}: {}",
                 s_.comm ? fmt::format(" of member {}", s_.rank) : "", st.message());
    }
  }
}

void SessionMember::clear() {
  for (auto& b : kv_buffers_) b->clear(0);
}

size_t SessionMember::compute_bytes(size_t d) const {
  return std::max(exec_ ? exec_->buffer_size((int)d) : 0, compute_bytes_[d]);
}

Session::StepPlan SessionMember::plan_step(int64_t n_tokens) const {
  Session::StepPlan sp;
  sp.ctx = std::make_unique<Context>();
  ForwardInputs in =
      build_forward(*sp.ctx, s_.fm, kv_, ForwardShape{n_tokens, params_.n_ctx, n_tokens, params_.flash_attn});
  mark_inputs_refilled(in);
  sp.graph = std::make_unique<Graph>();
  build_graph(*sp.graph, in);
  sp.plan = sched::plan(*sp.graph, s_.devices, policy_);
  return sp;
}

bool SessionMember::prepare(const ForwardShape& shape) {
  const bool same = s_.n_copies == 1 && last_ && last_->shape.n_tokens == shape.n_tokens &&
                    last_->shape.n_kv == shape.n_kv && last_->shape.n_outputs == shape.n_outputs &&
                    last_->shape.flash_attn == shape.flash_attn;
  if (!same) {
    last_.reset();
    Step st{shape, std::make_unique<Context>(), {}, std::make_unique<Graph>(), nullptr, {}};
    st.in = build_forward(*st.ctx, s_.fm, kv_, shape);
    mark_inputs_refilled(st.in);
    build_graph(*st.graph, st.in);
    if (params_.imatrix) st.probes = params_.imatrix->probe(*st.ctx, *st.graph);
    st.plan = std::make_unique<sched::ExecutionPlan>(sched::plan(*st.graph, s_.devices, policy_));
    last_ = std::move(st);
  }
  // the plan made for this graph (by its uid) stays bound while nothing else was run
  if (!same || exec_->bound_plan() != last_->plan->uid) exec_->alloc(*last_->graph, *last_->plan).throw_if_error();
  return same;
}

void SessionMember::set_inputs(std::span<const int32_t> tokens, int64_t n_past, bool all_logits) {
  const ForwardInputs& in = last_->in;
  const ForwardShape& shape = last_->shape;
  const int64_t T = (int64_t)tokens.size();
  auto* tok = static_cast<int32_t*>(in.tokens->data);
  auto* pos = static_cast<int32_t*>(in.positions->data);
  auto* slots = static_cast<int32_t*>(in.kv_slots->data);
  for (int64_t i = 0; i < T; ++i) {
    if (tok) tok[i] = tokens[(size_t)i];
    if (pos) pos[i] = (int32_t)(n_past + i);
    if (slots) slots[i] = (int32_t)(n_past + i);
  }
  fill_masks(in, *s_.fm.hp, n_past, T, shape.n_kv);  // causal, and sliding-window where the model has one
  fill_attn_temp(in, *s_.fm.hp);
  if (in.out_rows && in.out_rows->data) {
    auto* rows = static_cast<int32_t*>(in.out_rows->data);
    for (int64_t i = 0; i < shape.n_outputs; ++i) rows[i] = (int32_t)(all_logits ? i : T - 1);
  }
}

Status SessionMember::compute() {
  Status st = exec_->compute(*last_->graph, *last_->plan);
  if (st.is_ok() && params_.imatrix) params_.imatrix->accumulate(last_->probes);
  return st;
}

bool SessionMember::read_logits(float* out) const {
  const Tensor* t = last_->in.logits;
  if (!t) return false;
  const size_t bytes = (size_t)t->nelements() * sizeof(float);
  if (t->buffer && !t->buffer->type().is_host())
    t->buffer->get(t, out, 0, bytes);
  else
    std::memcpy(out, t->data, bytes);
  return true;
}

}  // namespace loom
