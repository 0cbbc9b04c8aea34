// Control vector files (control_vector.h): reading and summing them, and random ones for tests.
#include "loom/model/control_vector.h"

#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

#include "loom/core/error.h"
#include "loom/gguf/gguf.h"
#include "loom/model/arch.h"
#include "loom/model/model.h"
#include "loom/model/model_file.h"

namespace loom {

ControlVectorData load_control_vectors(const std::vector<ControlVectorSpec>& files, int64_t n_embd) {
  ControlVectorData out;
  out.n_embd = n_embd;
  for (const ControlVectorSpec& spec : files) {
    LOOM_CHECK(std::isfinite(spec.scale), usage, "--control-vector-scaled {}: the scale must be a finite number",
               spec.path);
    std::unique_ptr<gguf::File> f = gguf::File::open(spec.path, "control vector");
    LOOM_CHECK(!f->tensors().empty(), invalid_input, "{}: no direction tensors", spec.path);
    for (const gguf::TensorInfo& t : f->tensors()) {
      int64_t layer = -1;
      if (t.name.rfind("direction.", 0) == 0) {
        const char* b = t.name.data() + 10;
        const char* e = t.name.data() + t.name.size();
        const auto [end, ec] = std::from_chars(b, e, layer);
        if (ec != std::errc() || end != e) layer = -1;
      }
      LOOM_CHECK(layer >= 1, invalid_input, "{}: tensor '{}' is not a direction.N with N >= 1", spec.path, t.name);
      LOOM_CHECK(t.type == DType::F32 && t.n_dims == 1, invalid_input, "{}: '{}' must be a 1-D f32 tensor", spec.path,
                 t.name);
      LOOM_CHECK(t.ne[0] == n_embd, invalid_input, "{}: '{}' has {} values, the model's n_embd is {}", spec.path,
                 t.name, t.ne[0], n_embd);
      LOOM_CHECK(layer < (int64_t)1 << 20, invalid_input, "{}: '{}': layer out of range", spec.path, t.name);
      if ((size_t)layer >= out.has.size()) {
        out.has.resize((size_t)layer + 1, false);
        out.data.resize((size_t)(layer * n_embd), 0.0f);
      }
      out.has[(size_t)layer] = true;
      const auto* src = reinterpret_cast<const float*>(f->tensor_data(t));
      float* dst = out.data.data() + (layer - 1) * n_embd;
      for (int64_t j = 0; j < n_embd; ++j) {  // as llama.cpp: each file's direction times its scale, added
        float v;
        std::memcpy(&v, src + j, sizeof v);
        dst[j] += v * spec.scale;
      }
    }
    f->check_size();
  }
  return out;
}

void Model::add_control_vectors(const ControlVectorOptions& o, bool bind_data) {
  LOOM_CHECK(o.layer_start >= 0 && o.layer_end >= 0, usage, "--control-vector-layer-range {} {}: layers are 0 or more",
             o.layer_start, o.layer_end);
  const ControlVectorData d = load_control_vectors(o.files, hp_.n_embd);
  cvec_data_ = d.data;
  const int64_t first = std::max<int64_t>(1, o.layer_start), last = o.layer_end > 0 ? o.layer_end : hp_.n_layer;
  for (int64_t il = first; il <= std::min(last, hp_.n_layer - 1); ++il) {
    if ((size_t)il >= d.has.size() || !d.has[(size_t)il]) continue;
    Tensor* t = weights_.new_tensor(DType::F32, {hp_.n_embd}, fmt::format("direction.{}", il));
    t->flags |= kFlagParam;
    if (bind_data) t->data = cvec_data_.data() + (il - 1) * hp_.n_embd;
    layers[(size_t)il].cvec = t;
    n_bytes_ += t->nbytes();
  }
  cvec_range_ = {first, last};
}

void make_random_control_vector(const std::string& base, const std::string& output, float sigma, uint64_t seed) {
  LOOM_CHECK(std::isfinite(sigma) && sigma >= 0, usage, "--sigma {}: must be a finite number >= 0", sigma);
  std::unique_ptr<gguf::File> f = gguf::File::open(base);
  const HParams hp = read_hparams(*f);
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::string("controlvector"));
  w.set("controlvector.model_hint", gguf::Value::string(arch_name(hp.arch)));
  w.set("controlvector.layer_count", gguf::Value::integer(gguf::ValueType::I32, hp.n_layer - 1));
  for (int64_t il = 1; il < hp.n_layer; ++il) {
    const int64_t ne[1] = {hp.n_embd};
    w.add_tensor(fmt::format("direction.{}", il), DType::F32, 1, ne, [=](uint8_t* dst, size_t nbytes) {
      NormalRng rng(seed * 1000003u + (uint64_t)il);
      for (size_t i = 0; i < nbytes / 4; ++i) {
        const float v = sigma * rng.next();
        std::memcpy(dst + 4 * i, &v, 4);
      }
    });
  }
  w.write(output);
}

}  // namespace loom
