// A model being trained: the source GGUF (a base model, a model made by --init, or a
// checkpoint) kept mapped, writable F32 copies of the trainable tensors, the frozen tensors
// read in place, and writers for checkpoints (trainable tensors in F32, bit-exact) and for the
// output model (each tensor in its original or a requested type, same names and keys).
#pragma once

#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "loom/backend/device.h"
#include "loom/graph/context.h"
#include "loom/gguf/gguf.h"
#include "loom/tokenizer/tokenizer.h"
#include "loom/train/train_forward.h"

namespace loom::train {

struct TrainTensor {
  TensorSpec spec;                 // name, shape, role, layer
  DType source_type = DType::F32;  // type in the source file (checkpoints: the base model's type)
  Tensor* tensor = nullptr;        // F32 copy when trainable, else the file's bytes in place
  bool trainable = false;
};

struct TrainModelOptions {
  std::string train_tensors;  // regex on tensor names (std::regex_search); empty: every float tensor
  // Checkpoints: the names to train and their base types, as saved (overrides train_tensors).
  std::optional<std::vector<std::pair<std::string, DType>>> trainable;
};

class TrainModel {
 public:
  // Throws invalid_input naming the file and the missing or misshapen tensor.
  static std::unique_ptr<TrainModel> open(const std::string& path, const TrainModelOptions& opt);

  const HParams& hparams() const { return weights_.hp; }
  const Tokenizer& tokenizer() const { return *tokenizer_; }
  const ModelWeights& weights() const { return weights_; }
  const std::vector<TrainTensor>& tensors() const { return tensors_; }
  const gguf::File& file() const { return *file_; }
  std::vector<Tensor*> params() const;  // trainable tensors, in file order
  int64_t n_params() const;             // elements of all tensors
  int64_t n_trainable() const;          // elements of trainable tensors
  // Frozen because quantized (not because of --train-tensors): "12 tensors (q8_0)".
  std::string frozen_quantized() const;

  // The source's metadata without train.* keys (what an output model carries).
  std::vector<std::pair<std::string, gguf::Value>> model_metadata() const;
  // Adds every model tensor to w in file order. checkpoint: trainable tensors in F32; else in
  // out_type (matrices; vectors stay F32) or, without one, in their source type.
  void add_tensors(gguf::Writer& w, bool checkpoint, std::optional<DType> out_type) const;

 private:
  TrainModel() = default;
  std::unique_ptr<gguf::File> file_;
  std::unique_ptr<Tokenizer> tokenizer_;
  Context ctx_;  // frozen tensors (data in the mapping) and trainable copies
  std::unique_ptr<Device> cpu_;
  std::unique_ptr<Buffer> buffer_;  // trainable copies
  ModelWeights weights_;
  std::vector<TrainTensor> tensors_;
};

}  // namespace loom::train
