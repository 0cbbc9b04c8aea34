// Model loading: hyper-parameters, tokenizer and weight tensors checked against the
// architecture's tensor list (names, shapes), data bound to the file mapping.
#include "loom/model/model.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>

#include "loom/alloc/alloc.h"
#include "loom/core/error.h"
#include "loom/core/hash.h"
#include "loom/backend/registry.h"

namespace loom {

namespace {

std::string shape_str(int n, const int64_t* ne) {
  std::string s = "[";
  for (int i = 0; i < n; ++i) s += fmt::format("{}{}", i ? ", " : "", ne[i]);
  return s + "]";
}

// Writes a weight stored as file_type in the file (src) into t, an F32 tensor, a chunk of rows
// at a time.
void upload_converted(Tensor* t, DType file_type, const void* src) {
  LOOM_ASSERT(t->type == DType::F32, "{} converted to {}", t->name, dtype_name(t->type));
  const DTypeInfo& info = dtype_info(file_type);
  const int64_t ne0 = t->ne[0], rows = t->nelements() / ne0;
  const size_t src_row = row_size(file_type, ne0);
  const int64_t chunk = std::max<int64_t>(1, ((int64_t)1 << 22) / ne0);  // 16 MiB of F32
  std::vector<float> rows_f32((size_t)(std::min(chunk, rows) * ne0));
  for (int64_t r0 = 0; r0 < rows; r0 += chunk) {
    const int64_t n = std::min(chunk, rows - r0);
    for (int64_t r = 0; r < n; ++r)
      info.to_float(static_cast<const uint8_t*>(src) + (size_t)(r0 + r) * src_row, rows_f32.data() + r * ne0, ne0);
    t->buffer->set(t, rows_f32.data(), (size_t)(r0 * ne0) * sizeof(float), (size_t)(n * ne0) * sizeof(float));
  }
}

// Whether `dev` can multiply by a matrix of w's type. A weight it cannot (the i-quants on Vulkan and
// CUDA) stays in host memory, as llama.cpp keeps it: its products run on the CPU either way, and
// in the device's memory the whole weight would cross to the host at every step.
bool device_multiplies(const Device& dev, const Tensor& w) {
  if (dev.kind() == DeviceKind::cpu || !dtype_info(w.type).is_quantized) return true;
  Tensor a = w, col, mm;  // a probe product of one matrix of w by one column
  a.ne[2] = a.ne[3] = 1;
  col.ne[0] = w.ne[0];
  set_contiguous_strides(col);
  mm.op = OpKind::MUL_MAT;
  mm.src[0] = &a;
  mm.src[1] = &col;
  mm.ne[0] = w.ne[1];
  set_contiguous_strides(mm);
  return dev.supports_op(&mm);
}

}  // namespace

std::unique_ptr<Model> Model::load(const std::string& path, const ModelLoadOptions& opt) {
  std::unique_ptr<Model> m(new Model());
  m->file_ = gguf::File::open(path);
  const std::string arch = m->file_->find_string("general.architecture").value_or("");
  for (const KvOverride& o : opt.kv_overrides)  // "{arch}." keys (the RoPE flags) take the file's architecture
    m->file_->set_value(o.key.starts_with("{arch}.") ? arch + o.key.substr(6) : o.key, o.value);
  const gguf::File& f = *m->file_;
  m->hp_ = read_hparams(f);
  m->hp_.yarn = opt.yarn;
  m->tokenizer_ = Tokenizer::from_gguf(f);
  const HParams& hp = m->hp_;
  LOOM_CHECK(m->tokenizer_->n_vocab() == hp.n_vocab, invalid_input, "{}: tokenizer has {} tokens, model vocab is {}",
             path, m->tokenizer_->n_vocab(), hp.n_vocab);
  m->layers.resize((size_t)hp.n_layer);

  const bool data_present = f.file_size() >= f.data_offset() + f.tensor_bytes_total();
  LOOM_CHECK(data_present || !opt.need_data, invalid_input, "{}: tensor data missing (header-only file?)", path);
  // Running on a sparse hole would compute on zeros (and read gigabytes of them).
  LOOM_CHECK(!opt.need_data || !f.data_is_hole(), usage,
             "{}: a header-only file (no tensor data): only planning tools (loom-gguf info, loom-fit-params, "
             "loom-split-inspect) accept it",
             path);

  size_t n_used = 0;
  for (const TensorSpec& spec : arch_tensors(hp)) {
    const gguf::TensorInfo* info = f.find_tensor(spec.name);
    if (!info) {
      if (spec.role == TensorRole::output || spec.optional) continue;  // output: tied to token_embd
      fail(ErrorKind::invalid_input, "{}: missing tensor '{}'", path, spec.name);
    }
    bool shape_ok = true;
    for (int i = 0; i < 4; ++i) shape_ok = shape_ok && info->ne[i] == spec.ne[i];
    LOOM_CHECK(shape_ok, invalid_input, "{}: tensor '{}' has shape {}, expected {}", path, spec.name,
               shape_str(info->n_dims, info->ne), shape_str(spec.n_dims, spec.ne));
    if (spec.unused) {  // glm4moe's multi-token-prediction layers: in the file, never loaded
      ++n_used;
      continue;
    }
    if (tensor_role_is_vector(spec.role))
      LOOM_CHECK(info->type == DType::F32, invalid_input, "{}: tensor '{}' must be f32, is {}", path, spec.name,
                 dtype_name(info->type));
    const bool trained = opt.trainable && opt.trainable(spec, info->type);
    Tensor* t = m->weights_.new_tensor(trained ? DType::F32 : info->type, 4, info->ne, spec.name);
    if (trained || !opt.trainable) t->flags |= kFlagParam;
    if (trained) m->trained_.insert(t);
    if (data_present && opt.need_data) t->data = const_cast<uint8_t*>(f.tensor_data(*info));
    *role_slot(*m, spec.layer >= 0 ? &m->layers[(size_t)spec.layer] : nullptr, spec.role) = t;
    m->n_params_ += (size_t)t->nelements();
    m->n_bytes_ += t->nbytes();
    ++n_used;
  }
  if (!m->output) m->output = m->tok_embd;
  if (!opt.ignore_prefix.empty())
    for (const gguf::TensorInfo& t : f.tensors()) n_used += t.name.rfind(opt.ignore_prefix, 0) == 0;
  LOOM_CHECK(n_used == f.tensors().size(), invalid_input, "{}: {} tensors in the file, {} belong to a {} model", path,
             f.tensors().size(), n_used, arch_name(hp.arch));
  LOOM_CHECK(opt.adapters.empty() || !opt.trainable, usage,
             "--lora: adapters apply to inference; loom-train trains the model's own weights");
  for (const LoraAdapterSpec& a : opt.adapters) m->add_adapter(a, data_present && opt.need_data);
  LOOM_CHECK(opt.control_vectors.files.empty() || !opt.trainable, usage,
             "--control-vector: control vectors apply to inference; loom-train trains the model's own weights");
  if (!opt.control_vectors.files.empty()) m->add_control_vectors(opt.control_vectors, data_present && opt.need_data);
  m->has_data_ = data_present && opt.need_data;
  if (!m->has_data_)
    for (Tensor& t : m->weights_.tensors()) t.data = nullptr;  // planning: never touch the mapping
  m->place(opt.placement, opt.progress);
  return m;
}

void Model::place(const PlacementParams& params, const std::function<void(size_t, size_t)>& progress) {
  PlacementParams p = params;
  if (p.devices.empty()) {
    std::shared_ptr<Device> host = registry().host_device();
    p.devices = {host.get()};
    owned_devices_ = host;
  }
  tp_shards_.clear();
  if (p.split_mode == SplitMode::tensor) {
    LOOM_CHECK(adapter_files_.empty(), usage, "-sm tensor: --lora is not supported (yet); use -sm layer");
    LOOM_CHECK(cvec_data_.empty(), usage, "-sm tensor: --control-vector is not supported (yet); use -sm layer");
    LOOM_CHECK(p.overrides.empty() && !p.cpu_moe && p.n_cpu_moe == 0, usage,
               "-sm tensor: -ot, -cmoe and -ncmoe are not supported (yet)");
    place_tensor_parallel(p);
    return;
  }
  std::vector<std::string> names;
  for (Tensor& t : weights_.tensors()) names.push_back(t.name);
  placement_ = place_weights(hp_, names, p);
  for (Tensor& t : weights_.tensors()) {
    int& dev = placement_.tensor_device[t.name];
    if (!device_multiplies(*placement_.devices[(size_t)dev], t)) dev = (int)placement_.devices.size() - 1;
  }
  for (const LayerWeights& l : layers)  // an adapter's pair lives with the matrix it adapts
    for (const LoraLink& k : l.lora)
      placement_.tensor_device[k.a->name] = placement_.tensor_device[k.b->name] = device_of(k.base);
  for (const LayerWeights& l : layers)
    if (l.cvec) placement_.tensor_device[l.cvec->name] = device_of(l.attn_norm);
  for (const LoraLink& k : output_lora)
    placement_.tensor_device[k.a->name] = placement_.tensor_device[k.b->name] = device_of(k.base);
  const size_t n_dev = placement_.devices.size();
  device_bytes_.assign(n_dev, 0);
  std::vector<std::vector<Tensor*>> per_device(n_dev);
  for (Tensor& t : weights_.tensors()) per_device[(size_t)device_of(&t)].push_back(&t);
  const size_t cpu = n_dev - 1;
  // A copy that would not fit the RAM available now stays in the mapping instead (the kernel
  // pages it), rather than overcommitting into the OOM killer.
  size_t cpu_bytes = 0;
  for (Tensor* t : per_device[cpu]) cpu_bytes += t->nbytes();
  cpu_mapped_ = p.mmap || (has_data_ && cpu_bytes > placement_.devices[cpu]->memory().free);
  if (cpu_mapped_) {  // used where the file maps them, except trained weights (written, maybe converted)
    auto mapped = std::stable_partition(per_device[cpu].begin(), per_device[cpu].end(),
                                        [&](Tensor* t) { return trained_.count(t) != 0; });
    for (auto it = mapped; it != per_device[cpu].end(); ++it) device_bytes_[cpu] += (*it)->nbytes();
    per_device[cpu].erase(mapped, per_device[cpu].end());
  }
  size_t copy_total = 0, copied = 0;
  if (has_data_)
    for (size_t d = 0; d < n_dev; ++d)
      for (Tensor* t : per_device[d]) copy_total += t->nbytes();
  for (size_t d = 0; d < n_dev; ++d) {
    const BufferType& bt = placement_.devices[d]->buffer_type();
    std::vector<const void*> src;  // the mapped bytes, copied below
    for (Tensor* t : per_device[d]) {
      src.push_back(t->data);
      t->data = nullptr;  // alloc_tensors places tensors without memory
    }
    device_bytes_[d] += alloc::tensors_size(per_device[d], bt);
    if (!has_data_ || per_device[d].empty()) continue;
    const size_t first_buffer = buffers_.size();
    Status st = alloc::alloc_tensors(per_device[d], bt, buffers_);
    for (size_t b = first_buffer; b < buffers_.size(); ++b) buffers_[b]->set_usage(BufferUsage::weights);
    LOOM_CHECK(st.is_ok(), out_of_memory, "{}: cannot place {} of weights on {}: {}{}", file_->path(),
               fmt::format("{:.2f} MiB", (double)device_bytes_[d] / (1 << 20)), placement_.devices[d]->name(),
               st.message(), d == cpu ? " (--mmap uses them in place in the file mapping)" : "");
    for (size_t i = 0; i < per_device[d].size(); ++i) {
      Tensor* t = per_device[d][i];
      const gguf::TensorInfo* info = file_->find_tensor(t->name);
      const DType file_type = info ? info->type : t->type;  // an adapter's tensors are never converted
      if (t->type != file_type) {
        upload_converted(t, file_type, src[i]);
      } else {
        // Matrices in the layout the device's kernels read fastest, where it has one (--no-repack
        // keeps the file's); trained weights stay as they are, and so do token embeddings unless
        // they are also the output matrix (tied), which every decode step streams whole.
        bt.upload_weight(t, src[i], p.repack && (t != tok_embd || tok_embd == output) && !trained_.count(t));
      }
      copied += t->nbytes();
      if (progress) progress(copied, copy_total);
    }
  }
  if (has_data_) {  // truncated during the copy: do not run on what was read
    file_->check_size();
    for (const auto& f : adapter_files_) f->check_size();
  }
}

void Model::set_placement(const PlacementParams& p) {
  LOOM_CHECK(!has_data_, usage, "set_placement: only a model without data (planning) can be placed again");
  place(p);
}

int Model::device_of(const Tensor* weight) const {
  auto it = placement_.tensor_device.find(weight->name);
  return it == placement_.tensor_device.end() ? (int)placement_.devices.size() - 1 : it->second;
}

uint64_t Model::identity() const {
  uint64_t h = file_->identity();
  auto mix = [&h](uint64_t x) { h ^= x + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2); };
  for (size_t i = 0; i < adapter_files_.size(); ++i) {
    mix(adapter_files_[i]->identity());
    mix(std::bit_cast<uint32_t>(adapter_scales_[i]));
  }
  if (!cvec_data_.empty()) {
    mix(hash_bytes(cvec_data_.data(), cvec_data_.size() * sizeof(float)));
    mix((uint64_t)cvec_range_.first * 1000003u + (uint64_t)cvec_range_.second);
  }
  return h;
}

std::vector<Tensor*> Model::weight_tensors() const {
  std::vector<Tensor*> out;
  for (Tensor& t : const_cast<Context&>(weights_).tensors()) out.push_back(&t);
  return out;
}

size_t Model::bytes_read_per_token() const {
  double bytes = (double)n_bytes_;  // every weight
  if (tok_embd != output) bytes -= (double)(tok_embd->nbytes() - tok_embd->nb[1]);
  if (hp_.is_moe()) {
    const double unused = 1.0 - (double)hp_.n_expert_used / (double)hp_.n_expert;
    for (const LayerWeights& l : layers)
      for (const Tensor* t : {l.ffn_gate_exps, l.ffn_up_exps, l.ffn_down_exps})
        if (t) bytes -= (double)t->nbytes() * unused;
  }
  return (size_t)bytes;
}

std::string Model::type_name() const {
  const double p = (double)n_params_;
  std::string size = p >= 1e9 ? fmt::format("{:.0f}B", p / 1e9) : fmt::format("{:.0f}M", p / 1e6);
  DType main = tok_embd->type;
  if (!layers.empty() && (layers[0].wq || layers[0].wqkv)) main = (layers[0].wq ? layers[0].wq : layers[0].wqkv)->type;
  std::string tname = dtype_name(main);
  for (char& c : tname) c = (char)std::toupper((unsigned char)c);
  return fmt::format("{} {} {}", arch_name(hp_.arch), size, tname);
}

}  // namespace loom
