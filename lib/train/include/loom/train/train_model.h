// A model being trained: lib/model's Model loaded with writable F32 copies of the trainable
// tensors (on the devices the placement gives their layers; frozen tensors as they are), the
// source GGUF it came from (a base model, a model made by --init, or a checkpoint), and writers
// for checkpoints (trainable tensors in F32, bit-exact) and for the output model (each tensor in
// its original or a requested type, same names and keys).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/gguf/gguf.h"
#include "loom/model/model.h"
#include "loom/tokenizer/tokenizer.h"

namespace loom::train {

struct TrainTensor {
  TensorSpec spec;                 // name, shape, role, layer
  DType source_type = DType::F32;  // type in the source file (checkpoints: the base model's type)
  Tensor* tensor = nullptr;        // the Model's tensor: F32 when trainable
  bool trainable = false;
};

struct TrainModelOptions {
  std::string train_tensors;  // regex on tensor names (std::regex_search); empty: every float tensor
  // Checkpoints: the names to train and their base types, as saved (overrides train_tensors).
  std::optional<std::vector<std::pair<std::string, DType>>> trainable;
  // Devices and layer placement (-dev, -ngl, -ts, -ot; devices empty: the CPU alone). Split mode
  // tensor is refused (usage).
  PlacementParams placement;
};

class TrainModel {
 public:
  // Throws invalid_input naming the file and the missing or misshapen tensor, out_of_memory
  // when the weights do not fit their devices.
  static std::unique_ptr<TrainModel> open(const std::string& path, const TrainModelOptions& opt);

  Model& model() { return *model_; }
  const Model& model() const { return *model_; }
  const HParams& hparams() const { return model_->hparams(); }
  const Tokenizer& tokenizer() const { return model_->tokenizer(); }
  const std::vector<TrainTensor>& tensors() const { return tensors_; }
  const gguf::File& file() const { return model_->file(); }
  std::vector<Tensor*> params() const;  // trainable tensors, in file order
  int64_t n_params() const;             // elements of all tensors
  int64_t n_trainable() const;          // elements of trainable tensors
  // Frozen because quantized (not because of --train-tensors): "12 tensors (q8_0)".
  std::string frozen_quantized() const;

  // The source's metadata without train.* keys (what an output model carries).
  std::vector<std::pair<std::string, gguf::Value>> model_metadata() const;
  // Adds every model tensor to w in file order. checkpoint: trainable tensors in F32; else in
  // out_type (matrices; vectors stay F32) or, without one, in their source type. Values are read
  // from the tensors' devices while w writes.
  void add_tensors(gguf::Writer& w, bool checkpoint, std::optional<DType> out_type) const;

 private:
  TrainModel() = default;
  std::unique_ptr<Model> model_;
  std::vector<TrainTensor> tensors_;
};

// The F32 values of a tensor on any device, and writing them back.
std::vector<float> read_f32(const Tensor* t);
void write_f32(Tensor* t, const std::vector<float>& values);

}  // namespace loom::train
