// LoRA adapters: reading an adapter file into the model's weights, and the products with them.
#include "loom/model/lora.h"

#include <fmt/format.h>

#include <cmath>
#include <map>

#include "loom/core/error.h"
#include "loom/model/model.h"

namespace loom {

Tensor* add_lora(Context& c, std::span<const LoraLink> links, const Tensor* w, Tensor* x, Tensor* y) {
  for (const LoraLink& l : links)
    if (l.base == w) y = ops::add(c, y, ops::scale(c, ops::mul_mat(c, l.b, ops::mul_mat(c, l.a, x)), l.scale));
  return y;
}

namespace {

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// The types an adapter's matrices may have: what llama.cpp's converter writes.
bool adapter_type_ok(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16 || t == DType::Q8_0; }

}  // namespace

void Model::add_adapter(const LoraAdapterSpec& spec, bool bind_data) {
  const std::string& path = spec.path;
  LOOM_CHECK(std::isfinite(spec.scale), usage, "--lora-scaled {}: the scale must be a finite number", path);
  std::unique_ptr<gguf::File> f = gguf::File::open(path, "LoRA adapter");
  const std::string type = f->find_string("general.type").value_or("");
  LOOM_CHECK(type == "adapter", invalid_input, "{}: not a LoRA adapter (general.type is '{}', expected 'adapter')",
             path, type);
  const std::string adapter_type = f->find_string("adapter.type").value_or("");
  LOOM_CHECK(adapter_type == "lora", unsupported, "{}: adapter.type is '{}'; loom reads LoRA adapters ('lora')", path,
             adapter_type);
  const std::string arch = f->find_string("general.architecture").value_or("");
  LOOM_CHECK(arch == arch_name(hp_.arch), invalid_input, "{}: an adapter for '{}', the model is '{}'", path, arch,
             arch_name(hp_.arch));
  const double alpha = f->find_float("adapter.lora.alpha").value_or(0.0);
  LOOM_CHECK(std::isfinite(alpha), invalid_input, "{}: adapter.lora.alpha is not a finite number", path);
  const bool data_present = f->file_size() >= f->data_offset() + f->tensor_bytes_total();
  LOOM_CHECK(!bind_data || (data_present && !f->data_is_hole()), invalid_input,
             "{}: the adapter's tensor data is missing (header-only or truncated file)", path);

  // Pairs by the name of the matrix they adapt. Norm vectors are left out, as llama.cpp does.
  std::map<std::string, std::pair<const gguf::TensorInfo*, const gguf::TensorInfo*>> pairs;
  for (const gguf::TensorInfo& t : f->tensors()) {
    if (ends_with(t.name, ".lora_a"))
      pairs[t.name.substr(0, t.name.size() - 7)].first = &t;
    else if (ends_with(t.name, ".lora_b"))
      pairs[t.name.substr(0, t.name.size() - 7)].second = &t;
    else
      LOOM_CHECK(ends_with(t.name, "_norm.weight"), invalid_input,
                 "{}: tensor '{}' is not a LoRA pair's (.lora_a / .lora_b)", path, t.name);
  }
  LOOM_CHECK(!pairs.empty(), invalid_input, "{}: the adapter holds no .lora_a / .lora_b pairs", path);

  for (const auto& [name, ab] : pairs) {
    const auto [ia, ib] = ab;
    LOOM_CHECK(ia && ib, invalid_input, "{}: '{}' has {} but not {}", path, name, ia ? ".lora_a" : ".lora_b",
               ia ? ".lora_b" : ".lora_a");
    Tensor* base = weights_.find(name);
    LOOM_CHECK(base, invalid_input, "{}: '{}' is not a tensor of the model", path, name);
    // Where the products with base are built: the layer's attention, dense FFN and shared expert
    // matrices and the output (a tied output is token_embd, which takes no adapter here).
    LayerWeights* layer = nullptr;
    for (LayerWeights& l : layers)
      for (const Tensor* w : {l.wq, l.wk, l.wv, l.wqkv, l.wo, l.ffn_gate, l.ffn_up, l.ffn_down, l.ffn_gate_shexp,
                              l.ffn_up_shexp, l.ffn_down_shexp})
        if (w == base) layer = &l;
    LOOM_CHECK(layer || (base == output && output != tok_embd), unsupported,
               "{}: an adapter for '{}' (loom applies them to attention, dense FFN, shared expert and output "
               "matrices)",
               path, name);
    for (const gguf::TensorInfo* t : {ia, ib}) {
      LOOM_CHECK(t->n_dims == 2, invalid_input, "{}: '{}' has {} dimensions, expected 2", path, t->name, t->n_dims);
      LOOM_CHECK(adapter_type_ok(t->type), unsupported, "{}: '{}' is {}; adapters hold f32, f16, bf16 or q8_0", path,
                 t->name, dtype_name(t->type));
    }
    const int64_t rank = ia->ne[1];
    LOOM_CHECK(ia->ne[0] == base->ne[0] && ib->ne[1] == base->ne[1] && ib->ne[0] == rank, invalid_input,
               "{}: '{}' pair has shapes [{}, {}] and [{}, {}]; for the model's [{}, {}] expected [{}, r] and [r, {}]",
               path, name, ia->ne[0], ia->ne[1], ib->ne[0], ib->ne[1], base->ne[0], base->ne[1], base->ne[0],
               base->ne[1]);
    // The n-th adapter's tensors are named "<name>@n" from the second on: several adapters (or
    // one given twice, which llama.cpp applies twice) may adapt one matrix.
    const std::string tag = adapter_files_.empty() ? "" : fmt::format("@{}", adapter_files_.size() + 1);
    auto make = [&](const gguf::TensorInfo* t) {
      Tensor* x = weights_.new_tensor(t->type, 2, t->ne, t->name + tag);
      x->flags |= kFlagParam;  // a weight, as inference flags every weight
      if (bind_data) x->data = const_cast<uint8_t*>(f->tensor_data(*t));
      n_bytes_ += x->nbytes();
      return x;
    };
    LoraLink link{base, make(ia), make(ib), 0.0f};
    link.scale = alpha != 0.0 ? spec.scale * (float)alpha / (float)rank : spec.scale;  // as llama.cpp, in float
    (layer ? layer->lora : output_lora).push_back(link);
  }
  adapter_files_.push_back(std::move(f));
  adapter_scales_.push_back(spec.scale);
}

}  // namespace loom
