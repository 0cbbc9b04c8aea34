// Checkpoint files: GGUF with the model, optimizer moments and train.* state keys.
#include "loom/train/checkpoint.h"

#include <fmt/format.h>

#include <cstring>

#include "loom/core/error.h"

namespace loom::train {

void save_checkpoint(const std::string& path, const TrainModel& model, const std::vector<ParamState>& params,
                     const TrainState& s) {
  using gguf::Value;
  gguf::Writer w;
  for (const auto& [key, value] : model.model_metadata()) w.set(key, value);
  w.set("train.version", Value::u32(kCheckpointVersion));
  w.set("train.step", Value::u64((uint64_t)s.step));
  w.set("train.epoch", Value::u64((uint64_t)s.epoch));
  w.set("train.epoch_pos", Value::u64((uint64_t)s.epoch_pos));
  w.set("train.seed", Value::u64(s.seed));
  w.set("train.n_ctx", Value::u64((uint64_t)s.n_ctx));
  w.set("train.n_batch", Value::u64((uint64_t)s.n_batch));
  w.set("train.n_ubatch", Value::u64((uint64_t)s.n_ubatch));
  w.set("train.stride", Value::u64((uint64_t)s.stride));
  w.set("train.val_split", Value::floating(gguf::ValueType::F64, s.val_split));
  w.set("train.optimizer", Value::string(s.optimizer));
  w.set("train.text_hash", Value::u64(s.text_hash));
  w.set("train.base", Value::string(s.base));
  w.set("train.stats", Value::float_array(gguf::ValueType::F64,
                                          {s.stats.loss_sum, s.stats.loss_sq, (double)s.stats.n_batches,
                                           (double)s.stats.n_correct, (double)s.stats.n_tokens, s.elapsed_s}));
  std::vector<std::string> names;
  std::vector<int64_t> types;
  for (const auto& [name, type] : s.trainable) {
    names.push_back(name);
    types.push_back((int64_t)type);
  }
  w.set("train.tensors", Value::string_array(std::move(names)));
  w.set("train.tensor_types", Value::i32_array(std::move(types)));
  model.add_tensors(w, /*checkpoint=*/true, std::nullopt);
  for (const ParamState& p : params) {
    if (!p.m) continue;
    const Tensor* t = p.param;
    for (auto [prefix, src] : {std::pair{"opt.m.", p.m}, std::pair{"opt.v.", p.v}})
      w.add_tensor(prefix + t->name, DType::F32, t->n_dims(), t->ne,
                   [src](uint8_t* dst, size_t n) { src->buffer->get(src, dst, 0, n); });
  }
  w.set_checksum_key(kCheckpointChecksumKey);
  w.write(path);  // AtomicFile: readers see the old checkpoint or the new one
}

void load_optimizer_state(const gguf::File& f, std::vector<ParamState>& params) {
  for (ParamState& p : params) {
    if (!p.m) continue;
    for (auto [prefix, dst] : {std::pair{"opt.m.", p.m}, std::pair{"opt.v.", p.v}}) {
      const std::string name = prefix + p.param->name;
      const gguf::TensorInfo* info = f.find_tensor(name);
      LOOM_CHECK(info && info->type == DType::F32 && info->nelements() == p.param->nelements(), invalid_input,
                 "{}: optimizer state '{}' missing or misshapen (was the checkpoint written with -opt sgd?)",
                 f.path(), name);
      dst->buffer->set(dst, f.tensor_data(*info), 0, info->nbytes);
    }
  }
}

}  // namespace loom::train
