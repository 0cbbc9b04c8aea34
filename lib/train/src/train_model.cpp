// TrainModel: loading (architecture tensor list checked against the file), trainable F32
// copies, and writing the tensors back for checkpoints and outputs.
#include "loom/train/train_model.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <map>

#include "loom/core/error.h"
#include "loom/cpu/cpu.h"
#include "loom/model/model_file.h"

namespace loom::train {

namespace {

// Rows of a tensor's bytes (any type) -> f32.
void to_f32(DType type, const uint8_t* src, float* dst, int64_t ne0, int64_t rows) {
  const DTypeInfo& info = dtype_info(type);
  const size_t rb = row_size(type, ne0);
  for (int64_t r = 0; r < rows; ++r) info.to_float(src + (size_t)r * rb, dst + r * ne0, ne0);
}

}  // namespace

std::unique_ptr<TrainModel> TrainModel::open(const std::string& path, const TrainModelOptions& opt) {
  std::unique_ptr<TrainModel> m(new TrainModel());
  m->file_ = gguf::File::open(path);
  const gguf::File& f = *m->file_;
  HParams hp = read_hparams(f);
  m->tokenizer_ = Tokenizer::from_gguf(f);
  LOOM_CHECK(m->tokenizer_->n_vocab() == hp.n_vocab, invalid_input, "{}: tokenizer has {} tokens, model vocab is {}",
             path, m->tokenizer_->n_vocab(), hp.n_vocab);
  LOOM_CHECK(f.file_size() >= f.data_offset() + f.tensor_bytes_total(), invalid_input,
             "{}: tensor data missing (header-only file?)", path);
  LOOM_CHECK(!f.data_is_hole(), usage, "{}: a header-only file (no tensor data) cannot be trained", path);
  m->weights_.hp = hp;
  m->weights_.layers.resize((size_t)hp.n_layer);

  std::optional<std::regex> re;
  if (!opt.train_tensors.empty()) {
    try {
      re.emplace(opt.train_tensors, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      fail(ErrorKind::usage, "--train-tensors '{}': not a regular expression ({})", opt.train_tensors, e.what());
    }
  }
  std::map<std::string, DType> saved;
  if (opt.trainable)
    for (const auto& [name, type] : *opt.trainable) saved[name] = type;

  size_t n_found = 0;
  for (const TensorSpec& spec : arch_tensors(hp)) {
    const gguf::TensorInfo* info = f.find_tensor(spec.name);
    if (!info) {
      if (spec.role == TensorRole::output) continue;  // tied to token_embd
      fail(ErrorKind::invalid_input, "{}: missing tensor '{}'", path, spec.name);
    }
    ++n_found;
    for (int i = 0; i < 4; ++i)
      LOOM_CHECK(info->ne[i] == spec.ne[i], invalid_input, "{}: tensor '{}' has shape [{}, {}, {}, {}], expected [{}, {}, {}, {}]",
                 path, spec.name, info->ne[0], info->ne[1], info->ne[2], info->ne[3], spec.ne[0], spec.ne[1],
                 spec.ne[2], spec.ne[3]);
    if (tensor_role_is_vector(spec.role))
      LOOM_CHECK(info->type == DType::F32, invalid_input, "{}: tensor '{}' must be f32, is {}", path, spec.name,
                 dtype_name(info->type));
    TrainTensor tt;
    tt.spec = spec;
    tt.source_type = info->type;
    if (opt.trainable) {
      auto it = saved.find(spec.name);
      tt.trainable = it != saved.end();
      if (tt.trainable) {
        LOOM_CHECK(info->type == DType::F32, invalid_input, "{}: trained tensor '{}' must be f32 in a checkpoint",
                   path, spec.name);
        tt.source_type = it->second;
      }
    } else {
      tt.trainable = dtype_info(info->type).is_float && (!re || std::regex_search(spec.name, *re));
    }
    if (tt.trainable) {
      tt.tensor = m->ctx_.new_tensor(DType::F32, 4, info->ne, spec.name);
      tt.tensor->flags |= kFlagParam;
    } else {
      tt.tensor = m->ctx_.new_tensor(info->type, 4, info->ne, spec.name);
      tt.tensor->data = const_cast<uint8_t*>(f.tensor_data(*info));
    }
    LayerWeights* l = spec.layer >= 0 ? &m->weights_.layers[(size_t)spec.layer] : nullptr;
    *role_slot(m->weights_, l, spec.role) = tt.tensor;
    m->tensors_.push_back(tt);
  }
  if (!m->weights_.output) m->weights_.output = m->weights_.tok_embd;
  const size_t n_model = n_found;
  size_t n_extra = 0;
  for (const gguf::TensorInfo& t : f.tensors())
    if (t.name.rfind("opt.", 0) == 0) ++n_extra;
  LOOM_CHECK(n_model + n_extra == f.tensors().size(), invalid_input, "{}: {} tensors in the file, {} belong to a {} model",
             path, f.tensors().size(), n_model, arch_name(hp.arch));
  if (opt.trainable)
    for (const auto& [name, type] : saved)
      LOOM_CHECK(f.find_tensor(name), invalid_input, "{}: trained tensor '{}' is missing", path, name);

  // Writable copies of the trainable tensors.
  m->cpu_ = std::make_unique<cpu::CpuDevice>(1);
  bool any = false;
  for (const TrainTensor& t : m->tensors_) any = any || t.trainable;
  if (any) {
    m->buffer_ = cpu::alloc_all(m->ctx_, m->cpu_->buffer_type());
    for (const TrainTensor& t : m->tensors_) {
      if (!t.trainable) continue;
      const gguf::TensorInfo* info = f.find_tensor(t.spec.name);
      to_f32(info->type, f.tensor_data(*info), static_cast<float*>(t.tensor->data), info->ne[0],
             info->ne[1] * info->ne[2] * info->ne[3]);
    }
  }
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
  for (const TrainTensor& t : tensors_) n += t.tensor->nelements();
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
  for (const auto& kv : file_->metadata())
    if (kv.first.rfind("train.", 0) != 0) out.push_back(kv);
  return out;
}

void TrainModel::add_tensors(gguf::Writer& w, bool checkpoint, std::optional<DType> out_type) const {
  for (const TrainTensor& t : tensors_) {
    const TensorSpec& s = t.spec;
    const gguf::TensorInfo* info = file_->find_tensor(s.name);
    if (!t.trainable) {  // the source bytes as they are
      w.add_tensor(s.name, info->type, s.n_dims, s.ne, file_->tensor_data(*info));
      continue;
    }
    const float* src = static_cast<const float*>(t.tensor->data);
    if (checkpoint) {
      w.add_tensor(s.name, DType::F32, s.n_dims, s.ne, src);
      continue;
    }
    const DType type = out_type ? tensor_type_for(s, weights_.hp, *out_type) : t.source_type;
    const DTypeInfo& ti = dtype_info(type);
    const int64_t ne0 = s.ne[0];
    const size_t rb = row_size(type, ne0);
    w.add_tensor_rows(s.name, type, s.n_dims, s.ne, [src, ne0, rb, &ti](uint8_t* dst, int64_t row0, int64_t n) {
      for (int64_t r = 0; r < n; ++r) ti.from_float(src + (row0 + r) * ne0, dst + (size_t)r * rb, ne0);
    });
  }
}

}  // namespace loom::train
