// TrainModel: lib/model's Model loaded for training (which tensors train, their F32 copies on
// their devices), and writing the tensors back for checkpoints and outputs.
#include "loom/train/train_model.h"

#include <fmt/format.h>

#include <cstring>
#include <map>
#include <regex>

#include "loom/core/error.h"
#include "loom/model/model_file.h"

namespace loom::train {

std::unique_ptr<TrainModel> TrainModel::open(const std::string& path, const TrainModelOptions& opt) {
  std::optional<std::regex> re;
  if (!opt.train_tensors.empty()) {
    try {
      re.emplace(opt.train_tensors, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      fail(ErrorKind::usage, "--train-tensors '{}': not a regular expression ({})", opt.train_tensors, e.what());
    }
  }
  LOOM_CHECK(opt.placement.split_mode != SplitMode::tensor, usage, "-sm tensor: training runs on one device per layer (-sm layer)");
  std::map<std::string, DType> saved;
  if (opt.trainable)
    for (const auto& [name, type] : *opt.trainable) saved[name] = type;

  ModelLoadOptions lo;
  lo.placement = opt.placement;
  lo.placement.mmap = true;     // frozen CPU weights are read in place (trained ones are copied)
  lo.placement.repack = false;  // the backward pass reads frozen matrices in the file's layout
  lo.ignore_prefix = "opt.";    // a checkpoint's optimizer state
  lo.trainable = [&](const TensorSpec& spec, DType file_type) {
    // RoPE's frequency divisors (Llama 3, phi3) are the context scaling's constants, not weights;
    // glm4moe's selection bias only picks experts (no gradient reaches it: DeepSeek-V3-style
    // routers move it by a load-balancing rule, not by descent)
    if (spec.role == TensorRole::rope_freqs || spec.role == TensorRole::rope_factors_long ||
        spec.role == TensorRole::rope_factors_short || spec.role == TensorRole::ffn_exp_probs_b)
      return false;
    if (!opt.trainable) return dtype_info(file_type).is_float && (!re || std::regex_search(spec.name, *re));
    if (!saved.count(spec.name)) return false;
    LOOM_CHECK(file_type == DType::F32, invalid_input, "{}: trained tensor '{}' must be f32 in a checkpoint", path,
               spec.name);
    return true;
  };
  std::unique_ptr<TrainModel> m(new TrainModel());
  m->model_ = Model::load(path, lo);
  Model& model = *m->model_;
  const gguf::File& f = model.file();
  for (const TensorSpec& spec : arch_tensors(model.hparams())) {
    const gguf::TensorInfo* info = f.find_tensor(spec.name);
    if (!info) continue;  // output tied to token_embd (Model::load checked the rest)
    TrainTensor tt;
    tt.spec = spec;
    // glm4moe's unused multi-token-prediction layers: not loaded, written back as the file has them
    if (!spec.unused)
      tt.tensor = *role_slot(model, spec.layer >= 0 ? &model.layers[(size_t)spec.layer] : nullptr, spec.role);
    tt.trainable = tt.tensor && tt.tensor->has_flag(kFlagParam);
    tt.source_type = info->type;
    if (auto it = saved.find(spec.name); it != saved.end()) tt.source_type = it->second;
    m->tensors_.push_back(tt);
  }
  for (const auto& [name, type] : saved)
    LOOM_CHECK(f.find_tensor(name), invalid_input, "{}: trained tensor '{}' is missing", path, name);
  return m;
}

std::vector<Tensor*> TrainModel::params() const {
  std::vector<Tensor*> out;
  for (const TrainTensor& t : tensors_)
    if (t.trainable) out.push_back(t.tensor);
  return out;
}

int64_t TrainModel::n_params() const {
  int64_t n = 0;
  for (const TrainTensor& t : tensors_)
    if (t.tensor) n += t.tensor->nelements();
  return n;
}

int64_t TrainModel::n_trainable() const {
  int64_t n = 0;
  for (const TrainTensor& t : tensors_)
    if (t.trainable) n += t.tensor->nelements();
  return n;
}

std::string TrainModel::frozen_quantized() const {
  std::map<std::string, int> types;
  int n = 0;
  for (const TrainTensor& t : tensors_)
    if (!t.trainable && dtype_info(t.source_type).is_quantized) {
      ++types[dtype_name(t.source_type)];
      ++n;
    }
  if (n == 0) return {};
  std::string names;
  for (const auto& [name, count] : types) names += (names.empty() ? "" : ", ") + name;
  return fmt::format("{} tensor{} ({})", n, n == 1 ? "" : "s", names);
}

std::vector<std::pair<std::string, gguf::Value>> TrainModel::model_metadata() const {
  std::vector<std::pair<std::string, gguf::Value>> out;
  for (const auto& kv : file().metadata())
    if (kv.first.rfind("train.", 0) != 0) out.push_back(kv);
  return out;
}

void TrainModel::add_tensors(gguf::Writer& w, bool checkpoint, std::optional<DType> out_type) const {
  for (const TrainTensor& t : tensors_) {
    const TensorSpec& s = t.spec;
    if (!t.trainable) {  // the source bytes as they are
      const gguf::TensorInfo* info = file().find_tensor(s.name);
      w.add_tensor(s.name, info->type, s.n_dims, s.ne, file().tensor_data(*info));
      continue;
    }
    const Tensor* src = t.tensor;
    const int64_t ne0 = s.ne[0];
    if (checkpoint) {
      w.add_tensor_rows(s.name, DType::F32, s.n_dims, s.ne, [src, ne0](uint8_t* dst, int64_t row0, int64_t n) {
        const size_t rb = (size_t)ne0 * sizeof(float);
        src->buffer->get(src, dst, (size_t)row0 * rb, (size_t)n * rb);
      });
      continue;
    }
    const DType type = out_type ? tensor_type_for(s, hparams(), *out_type) : t.source_type;
    const DTypeInfo& ti = dtype_info(type);
    const size_t rb = row_size(type, ne0);
    w.add_tensor_rows(s.name, type, s.n_dims, s.ne, [src, ne0, rb, &ti](uint8_t* dst, int64_t row0, int64_t n) {
      std::vector<float> rows((size_t)(n * ne0));
      src->buffer->get(src, rows.data(), (size_t)(row0 * ne0) * sizeof(float), rows.size() * sizeof(float));
      for (int64_t r = 0; r < n; ++r) ti.from_float(rows.data() + r * ne0, dst + (size_t)r * rb, ne0);
    });
  }
}

std::vector<float> read_f32(const Tensor* t) {
  LOOM_ASSERT(t->type == DType::F32 && t->buffer, "read_f32 of '{}'", t->name);
  std::vector<float> v((size_t)t->nelements());
  t->buffer->get(t, v.data(), 0, v.size() * sizeof(float));
  return v;
}

void write_f32(Tensor* t, const std::vector<float>& values) {
  LOOM_ASSERT(t->type == DType::F32 && t->buffer && values.size() == (size_t)t->nelements(), "write_f32 of '{}'",
              t->name);
  t->buffer->set(t, values.data(), 0, values.size() * sizeof(float));
}

}  // namespace loom::train
