// Tensor parallelism, the model side: how each weight role splits (declared here per role, not
// by name), the ranges every member owns (whole KV-head groups, FFN rows in quant-block
// granules, expert inner rows, vocabulary rows), and a member's shard of the weights.
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
  rows,         // output rows (ne[1]) by the member's range: q/k/v, gate/up (+ experts), output
  columns,      // input columns (ne[0]): attn_output, ffn_down (+ experts); its product is a partial sum
  vector_rows,  // a bias over output rows (q/k/v biases, gpt-oss expert gate/up biases), sinks by head
  fused_rows,   // rows of several blocks at once: phi3's q|k|v and gate|up matrices
  first_member, // a bias added once to a partial sum: the first member holds it, the others none
  host,         // token embeddings: looked up on the host, never split
};
TpSplit tp_split_of(TensorRole role);

// The ranges of every member, the same in every process.
struct TpLayout {
  int n_members = 0;
  int64_t head_granule = 1;          // KV heads per unit (so attn_output columns stay block-aligned)
  int64_t ff_granule = 1;            // FFN rows per unit (ffn_down's block size)
  std::vector<tp::Range> head_kv;  // KV heads; q heads follow (n_head / n_head_kv per KV head)
  std::vector<tp::Range> ff;       // dense FFN rows
  std::vector<tp::Range> ff_exp;   // expert FFN rows (qwen3moe)
  std::vector<tp::Range> vocab;    // output rows (logits)
};

// Throws usage for a bad number of proportions.
TpLayout make_tp_layout(const HParams& hp, const std::vector<Tensor*>& weights, int n_members,
                        const std::vector<float>& proportions);

}  // namespace loom
