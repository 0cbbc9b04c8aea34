// Checkpoint files: GGUF with the model, optimizer moments and train.* state keys.
#include "loom/train/checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "loom/core/error.h"

namespace loom::train {

namespace {
constexpr uint32_t kCheckpointVersion = 1;
}

void write_gguf_atomic(const gguf::Writer& w, const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path p(path);
  const std::string tmp = (p.parent_path() / fmt::format(".{}.{}.tmp", p.filename().string(), ::getpid())).string();
  std::error_code ec;
  try {
    w.write(tmp);  // itself TMP.tmp, then renamed to TMP
  } catch (...) {
    fs::remove(tmp + ".tmp", ec);
    fs::remove(tmp, ec);
    throw;
  }
  fs::rename(tmp, path, ec);
  if (ec) {
    fs::remove(tmp, ec);
    fail(ErrorKind::io, "{}: cannot rename the written file into place", path);
  }
}

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
  write_gguf_atomic(w, path);
}

TrainState read_train_state(const gguf::File& f) {
  LOOM_CHECK(f.find("train.version"), invalid_input, "{}: not a loom-train checkpoint (no train.version)", f.path());
  const int64_t version = f.get_int("train.version");
  LOOM_CHECK(version == kCheckpointVersion, invalid_input, "{}: checkpoint version {} (this loom-train reads {})",
             f.path(), version, kCheckpointVersion);
  TrainState s;
  s.step = f.get_int("train.step");
  s.epoch = f.get_int("train.epoch");
  s.epoch_pos = f.get_int("train.epoch_pos");
  s.seed = (uint64_t)f.get_int("train.seed");
  s.n_ctx = f.get_int("train.n_ctx");
  s.n_batch = f.get_int("train.n_batch");
  s.n_ubatch = f.get_int("train.n_ubatch");
  s.stride = f.get_int("train.stride");
  s.val_split = f.get_float("train.val_split");
  s.optimizer = f.get_string("train.optimizer");
  LOOM_CHECK(s.step >= 0 && s.epoch >= 0 && s.epoch_pos >= 0 && s.n_ctx > 0 && s.n_batch > 0 && s.n_ubatch > 0,
             invalid_input, "{}: corrupt training state", f.path());
  const gguf::Value* st = f.find("train.stats");
  LOOM_CHECK(st && st->type == gguf::ValueType::ARRAY && st->floats.size() == 6, invalid_input,
             "{}: train.stats must be 6 f64 values", f.path());
  s.stats.loss_sum = st->floats[0];
  s.stats.loss_sq = st->floats[1];
  s.stats.n_batches = (int64_t)st->floats[2];
  s.stats.n_correct = (int64_t)st->floats[3];
  s.stats.n_tokens = (int64_t)st->floats[4];
  s.elapsed_s = st->floats[5];
  const gguf::Value* names = f.find("train.tensors");
  const gguf::Value* types = f.find("train.tensor_types");
  LOOM_CHECK(names && types && names->type == gguf::ValueType::ARRAY && types->type == gguf::ValueType::ARRAY &&
                 names->strings.size() == types->ints.size(),
             invalid_input, "{}: train.tensors / train.tensor_types missing or of different lengths", f.path());
  for (size_t i = 0; i < names->strings.size(); ++i) {
    const auto type = dtype_from_id(types->ints[i]);
    LOOM_CHECK(type && dtype_info(*type).is_float, invalid_input, "{}: tensor '{}' has base type id {}", f.path(),
               names->strings[i], types->ints[i]);
    s.trainable.emplace_back(names->strings[i], *type);
  }
  return s;
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
