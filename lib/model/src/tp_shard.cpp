// Tensor parallelism, the model side: the split of each weight role, the members' ranges, and
// each member's shard, copied out of the file mapping into the member device's memory (slices
// of rows are contiguous; slices of columns are gathered row by row, whole quant blocks only).
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <unordered_map>

#include "loom/alloc/alloc.h"
#include "loom/core/error.h"
#include "loom/model/model.h"

namespace loom {

TpSplit tp_split_of(TensorRole role) {
  switch (role) {
    case TensorRole::token_embd:
      return TpSplit::host;
    case TensorRole::output:
    case TensorRole::attn_q:
    case TensorRole::attn_k:
    case TensorRole::attn_v:
    case TensorRole::attn_output:
    case TensorRole::ffn_gate:
    case TensorRole::ffn_up:
    case TensorRole::ffn_down:
    case TensorRole::ffn_gate_exps:
    case TensorRole::ffn_up_exps:
    case TensorRole::ffn_down_exps:
    case TensorRole::ffn_gate_shexp:  // by shared expert rows, its down by embedding rows
    case TensorRole::ffn_up_shexp:
    case TensorRole::ffn_down_shexp:
      return TpSplit::rows;
    case TensorRole::attn_q_bias:
    case TensorRole::attn_k_bias:
    case TensorRole::attn_v_bias:
    case TensorRole::attn_output_bias:
    case TensorRole::attn_sinks:          // one per query head
    case TensorRole::ffn_gate_exps_bias:  // {n_ff_exp, n_expert}: the member's expert rows
    case TensorRole::ffn_up_exps_bias:
    case TensorRole::ffn_down_exps_bias:  // {n_embd, n_expert}: the member's embedding rows
      return TpSplit::vector_rows;
    case TensorRole::output_norm:
    case TensorRole::attn_norm:
    case TensorRole::attn_q_norm:
    case TensorRole::attn_k_norm:
    case TensorRole::attn_post_norm:
    case TensorRole::ffn_norm:
    case TensorRole::ffn_post_norm:
    case TensorRole::ffn_gate_inp:
    case TensorRole::ffn_gate_inp_bias:
    case TensorRole::ffn_exp_probs_b:
    case TensorRole::ffn_gate_inp_shexp:
    case TensorRole::rope_freqs:
    case TensorRole::rope_factors_long:
    case TensorRole::rope_factors_short:
      return TpSplit::mirrored;
    case TensorRole::attn_qkv:  // phi3: the member's q, k and v row ranges (its gate|up ffn_up likewise)
      return TpSplit::fused_rows;
    case TensorRole::nextn_eh_proj:  // never loaded (glm4moe's multi-token-prediction layers)
    case TensorRole::nextn_enorm:
    case TensorRole::nextn_hnorm:
    case TensorRole::nextn_embed_tokens:
    case TensorRole::nextn_shared_head_head:
    case TensorRole::nextn_shared_head_norm:
      return TpSplit::mirrored;
  }
  return TpSplit::mirrored;
}

TpLayout make_tp_layout(const HParams& hp, int n_members, const std::vector<float>& proportions) {
  LOOM_CHECK((int)proportions.size() == n_members, usage, "-ts has {} values for {} tensor-parallel members",
             proportions.size(), n_members);
  TpLayout l;
  l.n_members = n_members;
  // Row ranges start on whole groups of the CPU's repacked layout (two of them), so a member's
  // rows are computed by the same kernel, in the same order, as on one device.
  l.row_granule = 2 * kTpRowGroup;
  l.head_kv = tp::split_axis(hp.n_head_kv, 1, proportions);
  l.ff = tp::split_axis(hp.n_ff, l.row_granule, proportions);
  if (hp.n_ff_exp > 0)
    l.ff_exp = tp::split_axis(hp.n_ff_exp, l.row_granule, proportions);
  else
    l.ff_exp.assign((size_t)n_members, {});
  if (hp.n_ff_shexp() > 0)
    l.ff_shexp = tp::split_axis(hp.n_ff_shexp(), l.row_granule, proportions);
  else
    l.ff_shexp.assign((size_t)n_members, {});
  l.embd = tp::split_axis(hp.n_embd, l.row_granule, proportions);
  l.vocab = tp::split_axis(hp.n_vocab, l.row_granule, proportions);
  return l;
}

namespace {

// A shard tensor and where its bytes come from: axis -1 (whole), 0 (columns) or 1 (rows: r, then
// the ranges in more, concatenated: phi3's fused q|k|v and gate|up).
struct Slice {
  Tensor* dst;
  const Tensor* src;
  int axis;
  tp::Range r;
  std::vector<tp::Range> more = {};
};

void gather_slice(const Slice& s, std::vector<uint8_t>& out) {
  const Tensor* t = s.src;
  const auto* base = static_cast<const uint8_t*>(t->data);
  out.resize(s.dst->nbytes());
  if (s.axis < 0) {
    std::memcpy(out.data(), base, out.size());
    return;
  }
  uint8_t* o = out.data();
  if (s.axis == 1) {  // whole rows: one contiguous run per (i2, i3) and range
    for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
      for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
        for (size_t k = 0; k <= s.more.size(); ++k) {
          const tp::Range& r = k == 0 ? s.r : s.more[k - 1];
          const size_t run = (size_t)r.size() * t->nb[1];
          std::memcpy(o, base + i3 * t->nb[3] + i2 * t->nb[2] + r.begin * t->nb[1], run);
          o += run;
        }
    return;
  }
  const size_t skip = row_size(t->type, s.r.begin), run = row_size(t->type, s.r.size());
  const int64_t rows = t->ne[1] * t->ne[2] * t->ne[3];
  for (int64_t i = 0; i < rows; ++i, o += run) std::memcpy(o, base + i * t->nb[1] + skip, run);
}

}  // namespace

void Model::place_tensor_parallel(const PlacementParams& p) {
  const HParams& hp = hp_;
  const int cpu = (int)p.devices.size() - 1;
  std::vector<Device*> members = p.tp_members;
  if (members.empty())
    for (int i = 0; i < cpu; ++i) members.push_back(p.devices[(size_t)i]);
  if (members.empty()) members.push_back(p.devices[(size_t)cpu]);
  const bool one_rank = p.tp_rank >= 0;
  LOOM_CHECK(!one_rank || (members.size() == 1 && p.tp_rank < p.tp_size), usage,
             "-sm tensor across processes: rank {} of {} needs exactly one device", p.tp_rank, p.tp_size);
  const int n_members = one_rank ? p.tp_size : (int)members.size();
  std::vector<float> props = p.tensor_split;
  if (props.empty()) {  // as the layer split: by free memory; across processes: even
    for (int r = 0; r < n_members; ++r)
      props.push_back(one_rank ? 1.0f : (float)std::max<size_t>(1, members[(size_t)r]->memory().free >> 20));
  }
  LOOM_CHECK((int)props.size() == n_members, usage, "-ts has {} values for {} tensor-parallel members", props.size(),
             n_members);
  tp_layout_ = make_tp_layout(hp, n_members, props);

  // Bookkeeping of the other split modes: everything "lives" on the host; shards are extra.
  placement_ = WeightPlacement{};
  placement_.devices = p.devices;
  placement_.layer_device.assign((size_t)hp.n_layer, cpu);
  placement_.output_device = cpu;
  for (Tensor& t : weights_.tensors()) placement_.tensor_device[t.name] = cpu;
  device_bytes_.assign(p.devices.size(), 0);
  device_bytes_[(size_t)cpu] = tok_embd->nbytes();  // mapped, looked up on the host

  std::unordered_map<std::string, Tensor*> by_name;
  for (Tensor& t : weights_.tensors()) by_name.emplace(t.name, &t);
  tp_shards_.clear();
  for (int r = 0; r < n_members; ++r) {
    if (one_rank && r != p.tp_rank) continue;
    auto sh = std::make_unique<TpShard>();
    TpShard& s = *sh;
    s.rank = r;
    s.device = members[one_rank ? 0 : (size_t)r];
    const tp::Range heads = tp_layout_.head_kv[(size_t)r];
    const int64_t q_per_kv = hp.n_head / hp.n_head_kv, hd = hp.head_dim;
    s.n_head_kv = heads.size();
    s.n_head = heads.size() * q_per_kv;
    s.n_ff = tp_layout_.ff[(size_t)r].size();
    s.n_ff_exp = tp_layout_.ff_exp[(size_t)r].size();
    s.n_ff_shexp = tp_layout_.ff_shexp[(size_t)r].size();
    s.n_vocab = tp_layout_.vocab[(size_t)r].size();
    s.first = {.q = heads.begin * q_per_kv * hd,
               .embd = tp_layout_.embd[(size_t)r].begin,
               .ff = tp_layout_.ff[(size_t)r].begin,
               .ff_exp = tp_layout_.ff_exp[(size_t)r].begin,
               .ff_shexp = tp_layout_.ff_shexp[(size_t)r].begin};
    s.layers.resize((size_t)hp.n_layer);
    std::vector<Slice> slices;
    auto add = [&](const Tensor* src, int axis, tp::Range range, std::vector<tp::Range> more = {}) -> Tensor* {
      if (axis >= 0 && range.size() == 0) return nullptr;
      int64_t ne[4] = {src->ne[0], src->ne[1], src->ne[2], src->ne[3]};
      if (axis >= 0) ne[axis] = range.size();
      for (const tp::Range& m : more) ne[1] += m.size();
      Tensor* t = s.ctx.new_tensor(src->type, 4, ne, src->name);
      t->flags |= kFlagParam;
      slices.push_back({t, src, axis, range, std::move(more)});
      return t;
    };
    for (const TensorSpec& spec : arch_tensors(hp)) {
      if (spec.layer < 0 || spec.unused) continue;
      const Tensor* src = by_name.at(spec.name);
      const TensorRole role = spec.role;
      const bool embd_rows = role == TensorRole::attn_output || role == TensorRole::attn_output_bias ||
                             role == TensorRole::ffn_down || role == TensorRole::ffn_down_exps ||
                             role == TensorRole::ffn_down_exps_bias || role == TensorRole::ffn_down_shexp;
      const bool ffn_exp = role == TensorRole::ffn_gate_exps || role == TensorRole::ffn_up_exps ||
                           role == TensorRole::ffn_gate_exps_bias || role == TensorRole::ffn_up_exps_bias;
      const bool ffn = role == TensorRole::ffn_gate || role == TensorRole::ffn_up;
      const bool ffn_shexp = role == TensorRole::ffn_gate_shexp || role == TensorRole::ffn_up_shexp;
      const bool q = role == TensorRole::attn_q || role == TensorRole::attn_q_bias;
      const tp::Range q_rows{heads.begin * q_per_kv * hd, heads.end * q_per_kv * hd};
      const tp::Range kv_rows{heads.begin * hd, heads.end * hd};
      const tp::Range range = embd_rows                        ? tp_layout_.embd[(size_t)r]
                              : ffn_exp                        ? tp_layout_.ff_exp[(size_t)r]
                              : ffn                            ? tp_layout_.ff[(size_t)r]
                              : ffn_shexp                      ? tp_layout_.ff_shexp[(size_t)r]
                              : role == TensorRole::attn_sinks ? tp::Range{heads.begin * q_per_kv, heads.end * q_per_kv}
                              : q                              ? q_rows
                                                               : kv_rows;
      TpSplit split = tp_split_of(spec.role);
      if (arch_fused_gate_up(hp.arch) && spec.role == TensorRole::ffn_up) split = TpSplit::fused_rows;
      // Command R+'s q/k norms hold a row per head: the member's heads
      const bool head_rows = spec.n_dims == 2 && (role == TensorRole::attn_q_norm || role == TensorRole::attn_k_norm);
      if (head_rows) split = TpSplit::rows;
      Tensor* t = nullptr;
      switch (split) {
        case TpSplit::rows:
          if (head_rows)
            t = add(src, 1,
                    role == TensorRole::attn_q_norm ? tp::Range{heads.begin * q_per_kv, heads.end * q_per_kv} : heads);
          else
            t = add(src, 1, range);
          break;
        case TpSplit::fused_rows:  // q | k | v (phi3 attn_qkv) or gate | up (phi3 ffn_up)
          if (spec.role == TensorRole::attn_qkv) {
            const int64_t n_q = hp.n_embd_q(), n_kv = hp.n_embd_kv();
            t = add(src, 1, q_rows,
                    {{n_q + kv_rows.begin, n_q + kv_rows.end}, {n_q + n_kv + kv_rows.begin, n_q + n_kv + kv_rows.end}});
          } else {
            t = add(src, 1, range, {{hp.n_ff + range.begin, hp.n_ff + range.end}});
          }
          break;
        case TpSplit::vector_rows:
          t = add(src, 0, range);
          break;
        case TpSplit::mirrored:
          t = add(src, -1, {});
          break;
        case TpSplit::host:
          break;
      }
      *layer_role_slot(s.layers[(size_t)spec.layer], spec.role) = t;
    }
    s.output_norm = add(output_norm, -1, {});
    if (rope_freqs) s.rope_freqs = add(rope_freqs, -1, {});
    if (rope_long) s.rope_long = add(rope_long, -1, {});
    if (rope_short) s.rope_short = add(rope_short, -1, {});
    s.output = add(output, 1, tp_layout_.vocab[(size_t)r]);

    std::vector<Tensor*> tensors;
    for (Tensor& t : s.ctx.tensors()) tensors.push_back(&t);
    const BufferType& bt = s.device->buffer_type();
    s.bytes = alloc::tensors_size(tensors, bt);
    const auto dev_it = std::find(p.devices.begin(), p.devices.end(), s.device);
    LOOM_CHECK(dev_it != p.devices.end(), usage, "-sm tensor: member {} is not a selected device", s.device->name());
    device_bytes_[(size_t)(dev_it - p.devices.begin())] += s.bytes;
    if (has_data_) {
      Status st = alloc::alloc_tensors(tensors, bt, s.buffers);
      LOOM_CHECK(st.is_ok(), out_of_memory, "{}: cannot place the {:.2f} MiB shard of member {} on {}: {}",
                 file_->path(), (double)s.bytes / (1 << 20), r, s.device->name(), st.message());
      for (auto& b : s.buffers) b->set_usage(BufferUsage::weights);
      std::vector<uint8_t> bytes;
      for (const Slice& sl : slices) {
        gather_slice(sl, bytes);
        // Laid out for the kernels as the whole tensor would be (the CPU groups rows when all
        // of them fit in groups), so each row meets the kernel it meets on one device.
        const bool whole_groups = sl.src->ne[1] % kTpRowGroup == 0;
        bt.upload_weight(sl.dst, bytes.data(), p.repack && whole_groups);
      }
    }
    tp_shards_.push_back(std::move(sh));
  }
}

}  // namespace loom
