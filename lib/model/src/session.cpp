// Session: the KV cache on each layer's device, and the decode loop (ubatches -> forward graph
// -> plan across devices -> executor -> logits). Planning-only sessions size everything
// without allocating (fit-params, split-inspect) through the same code.
#include "loom/model/session.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "loom/model/forward.h"
#include "loom/alloc/alloc.h"
#include "loom/cpu/cpu.h"
#include "loom/sched/executor.h"
#include "session_impl.h"

namespace loom {

namespace {

// The policy's leaf placement: weights and KV cache of a model whose memory is not allocated.
void add_leaf_devices(sched::PlanPolicy& policy, const Model& model, const KvCache& kv,
                      const std::vector<int>& layer_device) {
  const auto& devs = model.devices();
  for (Tensor& t : const_cast<Model&>(model).weights().tensors())
    if (!t.buffer) policy.leaf_devices[&t] = devs[(size_t)model.device_of(&t)];
  for (size_t il = 0; il < kv.k.size(); ++il) {
    if (!kv.k[il]->buffer) policy.leaf_devices[kv.k[il]] = devs[(size_t)layer_device[il]];
    if (!kv.v[il]->buffer) policy.leaf_devices[kv.v[il]] = devs[(size_t)layer_device[il]];
  }
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
  if (params_.n_threads > 0)
    if (auto* cpu = dynamic_cast<cpu::CpuDevice*>(im.devices.back())) cpu->set_n_threads(params_.n_threads);

  if (model.tensor_parallel()) {
    im.tp = std::make_unique<TpRunner>(model, params_, im.plan_only);
    return;
  }
  // KV cache: one K and one V tensor per layer, on the layer's device
  const std::vector<int>& layer_device = model.placement().layer_device;
  std::vector<std::vector<Tensor*>> per_device(im.devices.size());
  im.kv.size = params_.n_ctx;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    Tensor* k = im.kv_ctx.new_tensor(params_.type_k, {hp.n_embd_kv(), params_.n_ctx}, fmt::format("cache_k_l{}", il));
    Tensor* v = im.kv_ctx.new_tensor(params_.type_v, {hp.n_embd_kv(), params_.n_ctx}, fmt::format("cache_v_l{}", il));
    im.kv.k.push_back(k);
    im.kv.v.push_back(v);
    per_device[(size_t)layer_device[(size_t)il]].push_back(k);
    per_device[(size_t)layer_device[(size_t)il]].push_back(v);
  }
  im.kv_bytes.assign(im.devices.size(), 0);
  for (size_t d = 0; d < im.devices.size(); ++d) {
    const BufferType& bt = im.devices[d]->buffer_type();
    im.kv_bytes[d] = alloc::tensors_size(per_device[d], bt);
    if (im.plan_only || per_device[d].empty()) continue;
    Status st = alloc::alloc_tensors(per_device[d], bt, im.kv_buffers);
    LOOM_CHECK(st.is_ok(), out_of_memory, "KV cache: cannot allocate {:.2f} MiB on {}: {}",
               (double)im.kv_bytes[d] / (1 << 20), im.devices[d]->name(), st.message());
  }
  for (auto& b : im.kv_buffers) b->clear(0);

  im.policy.n_copies = params_.n_copies;
  if (im.plan_only) add_leaf_devices(im.policy, model, im.kv, layer_device);
  if (!im.plan_only) im.exec = std::make_unique<sched::Executor>(im.devices);

  // Worst cases: a full ubatch attending to the whole context with every logit and with the last
  // one only (steps pad n_kv up to kKvPad, so both meet the whole context; their layouts
  // differ), and one token.
  im.compute_bytes.assign(im.devices.size(), 0);
  const int64_t ub = std::min(params_.n_ubatch, params_.n_ctx);
  for (const ForwardShape& shape : {ForwardShape{ub, params_.n_ctx, ub, params_.flash_attn},
                                    ForwardShape{ub, params_.n_ctx, 1, params_.flash_attn},
                                    ForwardShape{1, params_.n_ctx, 1, params_.flash_attn}}) {
    Context ctx;
    ForwardInputs in = build_forward(ctx, model_, im.kv, shape);
    Graph g;
    build_graph(g, in);
    sched::ExecutionPlan plan = sched::plan(g, im.devices, im.policy);
    for (size_t d = 0; d < im.devices.size(); ++d)
      im.compute_bytes[d] = std::max(im.compute_bytes[d], plan.compute_bytes((int)d));
    if (im.exec) {
      Status st = im.exec->reserve(g, plan);
      LOOM_CHECK(st.is_ok(), out_of_memory, "compute buffers: {}", st.message());
    }
  }
}

Session::~Session() = default;

Session::StepPlan Session::plan_step(bool decode) const {
  const Impl& im = *impl_;
  const int64_t ub = decode ? 1 : std::min(params_.n_ubatch, params_.n_ctx);
  if (im.tp) return im.tp->plan_step(ub, params_.n_ctx);
  StepPlan sp;
  sp.ctx = std::make_unique<Context>();
  ForwardInputs in = build_forward(*sp.ctx, model_, im.kv, ForwardShape{ub, params_.n_ctx, ub, params_.flash_attn});
  sp.graph = std::make_unique<Graph>();
  build_graph(*sp.graph, in);
  sp.plan = sched::plan(*sp.graph, im.devices, im.policy);
  return sp;
}

void Session::clear() {
  n_past_ = 0;
  n_outputs_ = 0;
  for (auto& b : impl_->kv_buffers) b->clear(0);
  if (impl_->tp) impl_->tp->clear();
}

uint64_t Session::n_all_reduce() const { return impl_->tp ? impl_->tp->n_all_reduce() : 0; }
size_t Session::all_reduce_bytes() const { return impl_->tp ? impl_->tp->all_reduce_bytes() : 0; }

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
    if (!im.tp) shape.n_kv = std::min(params_.n_ctx, (shape.n_kv + kKvPad - 1) / kKvPad * kKvPad);
    if (im.tp) {
      im.tp->decode(tokens.subspan((size_t)start, (size_t)T), n_past_, shape.n_outputs, all_logits,
                    all_logits || last, logits_);
      n_past_ += T;
      if (all_logits || last) n_outputs_ += shape.n_outputs;
      continue;
    }
    // Pipeline copies rotate input buffers per compute: those runs build every step, as before.
    const bool same = params_.n_copies == 1 && im.last_step && im.last_step->shape.n_tokens == shape.n_tokens &&
                      im.last_step->shape.n_kv == shape.n_kv && im.last_step->shape.n_outputs == shape.n_outputs &&
                      im.last_step->shape.flash_attn == shape.flash_attn;
    if (!same) {
      im.last_step.reset();
      Impl::Step st{shape, std::make_unique<Context>(), {}, std::make_unique<Graph>(), nullptr};
      st.in = build_forward(*st.ctx, model_, im.kv, shape);
      build_graph(*st.graph, st.in);
      st.plan = std::make_unique<sched::ExecutionPlan>(sched::plan(*st.graph, im.devices, im.policy));
      im.last_step = std::move(st);
    }
    const ForwardInputs& in = im.last_step->in;
    const Graph& g = *im.last_step->graph;
    const sched::ExecutionPlan& plan = *im.last_step->plan;
    if (!same || im.exec->bound_plan() != plan.uid) im.exec->alloc(g, plan).throw_if_error();

    auto* tok = static_cast<int32_t*>(in.tokens->data);
    auto* pos = static_cast<int32_t*>(in.positions->data);
    auto* slots = static_cast<int32_t*>(in.kv_slots->data);
    for (int64_t i = 0; i < T; ++i) {
      tok[i] = tokens[(size_t)(start + i)];
      pos[i] = slots[i] = (int32_t)(n_past_ + i);
    }
    fill_masks(in, model_.hparams(), n_past_, T, shape.n_kv);
    if (in.out_rows) {
      auto* rows = static_cast<int32_t*>(in.out_rows->data);
      for (int64_t i = 0; i < shape.n_outputs; ++i) rows[i] = (int32_t)(all_logits ? i : T - 1);
    }
    im.exec->compute(g, plan).throw_if_error();
    n_past_ += T;
    if (all_logits || last) {
      const size_t old = logits_.size();
      logits_.resize(old + (size_t)in.logits->nelements());
      const size_t bytes = (size_t)in.logits->nelements() * sizeof(float);
      if (in.logits->buffer && !in.logits->buffer->type().is_host())
        in.logits->buffer->get(in.logits, logits_.data() + old, 0, bytes);
      else
        std::memcpy(logits_.data() + old, in.logits->data, bytes);
      n_outputs_ += in.logits->ne[1];
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
  std::vector<MemoryBreakdown> out;
  const Impl& im = *impl_;
  if (im.tp) {
    const std::vector<size_t> kv = im.tp->kv_bytes(), compute = im.tp->compute_bytes();
    for (size_t d = 0; d < im.devices.size(); ++d)
      out.push_back({im.devices[d]->name(), model_.device_bytes()[d], kv[d], compute[d]});
    return out;
  }
  for (size_t d = 0; d < im.devices.size(); ++d) {
    MemoryBreakdown m;
    m.device = im.devices[d]->name();
    m.model_bytes = model_.device_bytes()[d];
    m.context_bytes = im.kv_bytes[d];
    m.compute_bytes = im.exec ? std::max(im.exec->buffer_size((int)d), im.compute_bytes[d]) : im.compute_bytes[d];
    out.push_back(m);
  }
  return out;
}

}  // namespace loom
