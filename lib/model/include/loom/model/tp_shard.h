// Tensor parallelism, the model side: how each weight role splits (declared here per role, not
// by name), the ranges every member owns (whole KV-head groups, FFN rows, expert inner rows,
// embedding rows, vocabulary rows), and a member's shard of the weights. Every matrix splits by
// output rows, so each result element is one member's whole dot product: the same bits as on one
// device (docs/TENSOR-PARALLEL.md).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "loom/backend/device.h"
#include "loom/graph/context.h"
#include "loom/model/tp_split.h"
#include "loom/model/arch.h"

namespace loom {

// How a role's weight is laid out under tensor parallelism.
enum class TpSplit {
  mirrored,     // every member holds all of it (norms, router, q/k norms)
  rows,         // output rows (ne[1]) by the member's range: q/k/v, gate/up, attn_output, ffn_down
                // (+ experts; the last two by embedding rows), output
  vector_rows,  // a bias over output rows (q/k/v/attn_output biases, expert biases), sinks by head
  fused_rows,   // rows of several blocks at once: phi3's q|k|v and gate|up matrices
  host,         // token embeddings: looked up on the host, never split
};
TpSplit tp_split_of(TensorRole role);

// Rows the CPU's repacked weights group together (cpu_repack.h's kRepackRows): row ranges start
// on multiples of it and a shard is repacked exactly when the whole tensor would be.
inline constexpr int64_t kTpRowGroup = 8;

// The ranges of every member, the same in every process.
struct TpLayout {
  int n_members = 0;
  int64_t row_granule = 1;         // rows per unit of the ff, ff_exp, embd and vocab ranges
  std::vector<tp::Range> head_kv;  // KV heads; q heads follow (n_head / n_head_kv per KV head)
  std::vector<tp::Range> ff;       // dense FFN rows (gate/up)
  std::vector<tp::Range> ff_exp;   // expert FFN rows (gate/up of every expert)
  std::vector<tp::Range> ff_shexp;  // shared expert FFN rows (glm4moe)
  std::vector<tp::Range> embd;     // embedding rows (attn_output, ffn_down)
  std::vector<tp::Range> vocab;    // output rows (logits)
};

// Throws usage for a bad number of proportions.
TpLayout make_tp_layout(const HParams& hp, int n_members, const std::vector<float>& proportions);

}  // namespace loom
