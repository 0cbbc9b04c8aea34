// Session: KV cache and the decode loop (ubatches, inputs, graph, compute, logits).
#include "loom/model/session.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "forward.h"
#include "loom/alloc/alloc.h"
#include "loom/cpu/cpu.h"

namespace loom {

struct Session::Impl {
  cpu::CpuDevice cpu;
  Context kv_ctx;
  KvCache kv;
  std::unique_ptr<Buffer> kv_buffer;
  std::unique_ptr<alloc::GraphAllocator> compute;
  explicit Impl(int n_threads) : cpu(n_threads) {
    compute = std::make_unique<alloc::GraphAllocator>(cpu.buffer_type());
  }
};

Session::Session(Model& model, const SessionParams& params) : model_(model), params_(params) {
  const HParams& hp = model.hparams();
  if (params_.n_ctx <= 0) params_.n_ctx = hp.n_ctx_train;
  LOOM_CHECK(params_.n_ctx >= 1 && params_.n_ctx <= (int64_t)1 << 24, usage, "context size {} out of range",
             params_.n_ctx);
  LOOM_CHECK(params_.n_ubatch >= 1 && params_.n_batch >= 1, usage, "batch sizes must be positive");
  params_.n_ubatch = std::min(params_.n_ubatch, params_.n_batch);
  for (DType t : {params_.type_k, params_.type_v})
    LOOM_CHECK(t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0, usage,
               "KV cache type {} not supported (f32, f16, bf16, q8_0)", dtype_name(t));
  const int n_threads = params_.n_threads > 0 ? params_.n_threads : ThreadPool::default_threads();
  impl_ = std::make_unique<Impl>(n_threads);
  impl_->kv.size = params_.n_ctx;
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    impl_->kv.k.push_back(
        impl_->kv_ctx.new_tensor(params_.type_k, {hp.n_embd_kv(), params_.n_ctx}, fmt::format("cache_k_l{}", il)));
    impl_->kv.v.push_back(
        impl_->kv_ctx.new_tensor(params_.type_v, {hp.n_embd_kv(), params_.n_ctx}, fmt::format("cache_v_l{}", il)));
  }
  impl_->kv_buffer = cpu::alloc_all(impl_->kv_ctx, impl_->cpu.buffer_type());
  impl_->kv_buffer->clear(0);
}

Session::~Session() = default;

void Session::clear() {
  n_past_ = 0;
  n_outputs_ = 0;
  impl_->kv_buffer->clear(0);
}

void Session::decode(std::span<const int32_t> tokens, bool all_logits) {
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
    ForwardShape shape;
    shape.n_tokens = T;
    shape.n_kv = n_past_ + T;
    shape.n_outputs = all_logits ? T : 1;
    shape.flash_attn = params_.flash_attn;
    Context ctx;
    ForwardInputs in = build_forward(ctx, model_, impl_->kv, shape);
    Graph g;
    g.build_forward(in.logits);
    impl_->compute->alloc_graph(g).throw_if_error();

    auto* tok = static_cast<int32_t*>(in.tokens->data);
    auto* pos = static_cast<int32_t*>(in.positions->data);
    auto* slots = static_cast<int32_t*>(in.kv_slots->data);
    for (int64_t i = 0; i < T; ++i) {
      tok[i] = tokens[(size_t)(start + i)];
      pos[i] = slots[i] = (int32_t)(n_past_ + i);
    }
    auto* mask = static_cast<float*>(in.mask->data);
    const float neg_inf = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < shape.n_kv; ++j) mask[i * shape.n_kv + j] = j <= n_past_ + i ? 0.0f : neg_inf;
    if (in.out_rows) {
      auto* rows = static_cast<int32_t*>(in.out_rows->data);
      for (int64_t i = 0; i < shape.n_outputs; ++i) rows[i] = (int32_t)(all_logits ? i : T - 1);
    }
    cpu::compute_graph(g, impl_->cpu.pool());
    n_past_ += T;
    if (all_logits || last) {
      const auto* l = static_cast<const float*>(in.logits->data);
      logits_.insert(logits_.end(), l, l + in.logits->nelements());
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
  MemoryBreakdown cpu;
  cpu.device = "CPU";
  cpu.model_bytes = model_.n_bytes();
  cpu.context_bytes = impl_->kv_buffer->size();
  cpu.compute_bytes = impl_->compute->buffer_size();
  return {cpu};
}

}  // namespace loom
