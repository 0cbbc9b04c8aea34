// Shared by the task-score tests (HellaSwag, Winogrande, multiple choice): a tiny random llama
// and the double-precision log-probability the tests check loom's float scores against.
#pragma once

#include <algorithm>
#include <cmath>
#include <memory>
#include <span>

#include "gguf_test_util.h"
#include "loom/model/model.h"
#include "loom/model/model_file.h"

namespace loom::test {

inline std::unique_ptr<Model> tiny_llama(const ScratchDir& dir) {
  NewModelOptions n;
  n.hparams = preset_hparams(Arch::llama, "tiny");
  n.output = dir.file("m.gguf");
  make_random_model(n);
  return Model::load(n.output);
}

// log p(token) under a logits row, in double
inline double logprob(std::span<const float> l, int32_t token) {
  double m = l[0], z = 0;
  for (float v : l) m = std::max(m, (double)v);
  for (float v : l) z += std::exp(v - m);
  return l[(size_t)token] - m - std::log(z);
}

}  // namespace loom::test
