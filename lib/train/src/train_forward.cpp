// The training forward: lib/model's build_forward in its window mode, then the loss head.
#include "loom/train/train_forward.h"

#include <cstring>

#include "loom/graph/ops.h"

namespace loom::train {

ForwardGraph build_train_forward(Context& c, const Model& model, const BatchShape& s) {
  const HParams& hp = model.hparams();
  const int64_t T = s.n_tokens();
  ForwardShape shape;
  shape.n_tokens = T;
  shape.n_kv = s.n_ctx;
  shape.n_outputs = T;
  shape.n_seq = s.n_seq;
  shape.flash_attn = false;  // the fused kernel has no gradient rule
  KvCache kv;
  kv.size = s.n_ctx;  // the context a window sees: phi3 picks its long or short RoPE factors by it
  ForwardGraph fg;
  fg.in = build_forward(c, forward_model(model), kv, shape);
  fg.hp = &hp;
  fg.logits = fg.in.logits;
  fg.logits->flags &= ~kFlagOutput;  // read by the loss only
  fg.targets = c.new_tensor(DType::F32, {hp.n_vocab, T}, "inp_targets");
  fg.target_ids = c.new_tensor(DType::I32, {T}, "inp_target_ids");
  fg.targets->flags |= kFlagInput;
  fg.target_ids->flags |= kFlagInput;
  fg.loss = ops::cross_entropy_loss(c, fg.logits, fg.targets);
  fg.loss->name = "loss";
  fg.loss->flags |= kFlagLoss | kFlagOutput;
  fg.n_correct = ops::count_equal(c, ops::argmax(c, fg.logits), fg.target_ids);
  fg.n_correct->name = "n_correct";
  fg.n_correct->flags |= kFlagOutput;
  return fg;
}

void build_train_graph(Graph& g, const ForwardGraph& fg) {
  for (Tensor* t : fg.in.expand_first) g.build_forward(t);
  g.build_forward(fg.loss);
  g.build_forward(fg.n_correct);
}

void fill_inputs(const ForwardGraph& g, const BatchShape& s, const std::vector<const int32_t*>& tokens,
                 const std::vector<const int32_t*>& next) {
  const int64_t L = s.n_ctx, V = g.targets->ne[0];
  auto* tok = static_cast<int32_t*>(g.in.tokens->data);
  auto* pos = static_cast<int32_t*>(g.in.positions->data);
  auto* ids = static_cast<int32_t*>(g.target_ids->data);
  auto* onehot = static_cast<float*>(g.targets->data);
  std::memset(onehot, 0, sizeof(float) * (size_t)(V * s.n_tokens()));
  for (int64_t w = 0; w < s.n_seq; ++w)
    for (int64_t i = 0; i < L; ++i) {
      const int64_t t = w * L + i;
      tok[t] = tokens[(size_t)w][i];
      pos[t] = (int32_t)i;
      ids[t] = next[(size_t)w][i];
      onehot[t * V + ids[t]] = 1.0f;
    }
  fill_masks(g.in, *g.hp, 0, L, L);  // causal within a window, sliding-window layers as in inference
  fill_attn_temp(g.in, *g.hp);
}

}  // namespace loom::train
