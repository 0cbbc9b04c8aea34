// Computing an importance matrix as llama-imatrix does, while a session runs: each product of a
// model weight gets its input's sums of squares per column as extra graph nodes (a few hundred
// floats to read back per product), or, for an expert stack, its input and expert ids, which the
// host splits by expert. The sums and counts are written in llama-imatrix's GGUF form.
#include <fmt/format.h>

#include <cstring>
#include <unordered_map>

#include "loom/backend/device.h"
#include "loom/core/error.h"
#include "loom/gguf/gguf.h"
#include "loom/graph/context.h"
#include "loom/graph/graph.h"
#include "loom/graph/ops.h"
#include "loom/model/imatrix.h"

namespace loom {
namespace {

// A weight of the model file: a named leaf ending in ".weight" (adapters' matrices end in
// .lora_a / .lora_b, caches and inputs have other names).
bool is_model_weight(const Tensor* w) {
  const std::string_view suffix = ".weight";
  return w && w->op == OpKind::NONE && !w->is_view() && w->name.size() > suffix.size() &&
         w->name.compare(w->name.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The elements of a (possibly strided) 3-D tensor after a compute, in order, from host or device.
template <class T>
std::vector<T> read_elements(const Tensor* t) {
  const size_t span = t->nbytes();
  std::vector<uint8_t> raw(span);
  if (t->buffer && !t->buffer->type().is_host())
    t->buffer->get(t, raw.data(), 0, span);
  else
    std::memcpy(raw.data(), t->data, span);
  std::vector<T> out((size_t)t->nelements());
  size_t k = 0;
  for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
    for (int64_t i1 = 0; i1 < t->ne[1]; ++i1)
      for (int64_t i0 = 0; i0 < t->ne[0]; ++i0)
        std::memcpy(&out[k++], raw.data() + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2], sizeof(T));
  return out;
}

void mark_output(Graph& g, Tensor* t) {
  t->flags |= kFlagOutput;
  g.build_forward(t);
}

}  // namespace

std::vector<ImatrixProbe> ImatrixCollector::probe(Context& c, Graph& g) const {
  std::vector<ImatrixProbe> probes;
  std::unordered_map<const Tensor*, Tensor*> stat_of;  // an input -> its sums (q, k and v share one)
  const std::vector<Tensor*> nodes = g.nodes();        // a copy: the probes' nodes are appended
  for (Tensor* n : nodes) {
    if (n->op != OpKind::MUL_MAT && n->op != OpKind::MUL_MAT_ID) continue;
    const Tensor* w = n->src[0];
    Tensor* x = n->src[1];
    // as llama-imatrix: the blocks' matrices, output.weight when asked (a tied embedding's product
    // is not collected)
    if (!is_model_weight(w) || x->type != DType::F32) continue;
    if (w->name.rfind("blk.", 0) != 0 && !(process_output_ && w->name == "output.weight")) continue;
    ImatrixProbe p;
    p.weight = w->name;
    if (n->op == OpKind::MUL_MAT) {
      Tensor*& stat = stat_of[x];
      if (!stat) {  // {K, T}: squares, transposed to {T, K}, each row summed: {1, K}
        stat = ops::sum_rows(c, ops::cont(c, ops::transpose(c, ops::sqr(c, x))));
        mark_output(g, stat);
      }
      p.stat = stat;
    } else {
      p.n_mat = w->ne[2];
      p.x = x;
      p.ids = n->src[2];
      mark_output(g, x);
      mark_output(g, p.ids);
    }
    probes.push_back(std::move(p));
  }
  return probes;
}

void ImatrixCollector::accumulate(const std::vector<ImatrixProbe>& probes) {
  std::unordered_map<const Tensor*, std::vector<float>> read;  // each tensor read once
  auto floats = [&](const Tensor* t) -> const std::vector<float>& {
    auto [it, fresh] = read.emplace(t, std::vector<float>());
    if (fresh) it->second = read_elements<float>(t);
    return it->second;
  };
  for (const ImatrixProbe& p : probes) {
    Entry& e = entries_[p.weight];
    if (p.stat) {  // a dense product: one matrix, T activations
      const int64_t K = p.stat->ne[1], T = p.stat->src[0]->ne[0];
      if (e.sums.empty()) e = Entry{K, std::vector<double>((size_t)K), std::vector<int64_t>(1)};
      LOOM_ASSERT(e.n_col == K, "imatrix: {} has {} and {} columns", p.weight, e.n_col, K);
      const std::vector<float>& s = floats(p.stat);
      for (int64_t i = 0; i < K; ++i) e.sums[(size_t)i] += s[(size_t)i];
      e.counts[0] += T;
      continue;
    }
    // an expert stack: x {K, 1 or n_used, T}, ids {n_used, T}; each (token, slot) adds its
    // column to the expert the slot chose
    const int64_t K = p.x->ne[0], n_x = p.x->ne[1], n_used = p.ids->ne[0], T = p.ids->ne[1];
    if (e.sums.empty()) e = Entry{K, std::vector<double>((size_t)(K * p.n_mat)), std::vector<int64_t>((size_t)p.n_mat)};
    const std::vector<float>& x = floats(p.x);
    const std::vector<int32_t> ids = read_elements<int32_t>(p.ids);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t k = 0; k < n_used; ++k) {
        const int32_t ex = ids[(size_t)(t * n_used + k)];
        LOOM_ASSERT(ex >= 0 && ex < p.n_mat, "imatrix: expert id {} of {}", ex, p.n_mat);
        const float* col = x.data() + (t * n_x + (n_x == 1 ? 0 : k)) * K;
        double* sum = e.sums.data() + ex * K;
        for (int64_t i = 0; i < K; ++i) sum[i] += (double)col[i] * col[i];
        ++e.counts[(size_t)ex];
      }
  }
}

ImportanceMatrix ImatrixCollector::result() const {
  ImportanceMatrix m;
  for (const auto& [name, e] : entries_) {
    std::vector<float> v(e.sums.size());
    for (size_t j = 0; j < e.counts.size(); ++j)
      for (int64_t i = 0; i < e.n_col; ++i) {
        const size_t k = j * (size_t)e.n_col + (size_t)i;
        v[k] = e.counts[j] > 0 ? (float)(e.sums[k] / (double)e.counts[j]) : 1.0f;
      }
    m.entries.emplace(name, std::move(v));
  }
  return m;
}

void ImatrixCollector::write(const std::string& path, const std::vector<std::string>& datasets, int64_t chunk_count,
                             int64_t chunk_size) const {
  LOOM_CHECK(!entries_.empty(), invalid_input, "no products of model weights were seen: nothing to write to {}", path);
  gguf::Writer w;
  w.set("general.type", gguf::Value::string("imatrix"));
  w.set("imatrix.datasets", gguf::Value::string_array(datasets));
  w.set("imatrix.chunk_count", gguf::Value::u32((uint32_t)chunk_count));
  w.set("imatrix.chunk_size", gguf::Value::u32((uint32_t)chunk_size));
  for (const auto& [name, e] : entries_) {
    const int64_t n_mat = (int64_t)e.counts.size();
    std::vector<float> sums(e.sums.begin(), e.sums.end()), counts(e.counts.begin(), e.counts.end());
    const int64_t ns[4] = {e.n_col, n_mat, 1, 1}, nc[4] = {1, n_mat, 1, 1};
    w.add_tensor(name + ".in_sum2", DType::F32, 2, ns,
                 [sums](uint8_t* dst, size_t n) { std::memcpy(dst, sums.data(), n); });
    w.add_tensor(name + ".counts", DType::F32, 2, nc,
                 [counts](uint8_t* dst, size_t n) { std::memcpy(dst, counts.data(), n); });
  }
  w.write(path);
}

}  // namespace loom
