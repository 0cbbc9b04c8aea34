// Sequence state save/restore: the KV rows [0, n_past) of every layer as whole rows (all heads),
// whatever the split mode. Under -sm tensor each member reads and writes only its columns of a
// row (Buffer get/set with offsets); across processes the ranks' columns are all-gathered.
#include <cstring>

#include "loom/core/error.h"
#include "session_impl.h"

namespace loom {

namespace {

constexpr uint32_t kStateMagic = 0x564b4d4c;  // "LMKV"
constexpr uint32_t kStateVersion = 1;

struct StateHeader {
  uint32_t magic = kStateMagic;
  uint32_t version = kStateVersion;
  int64_t n_layer = 0;
  int64_t n_embd_kv = 0;
  int64_t n_past = 0;
  int32_t type_k = 0;
  int32_t type_v = 0;
};

// A holder of KV columns [col, col + width) of every row: a member's cache (the whole cache on
// one device: col 0, all columns).
struct Columns {
  const KvCache* kv;  // null: another rank's (only offsets are visited)
  int64_t col;
  int64_t width;
};

size_t state_bytes(const StateHeader& h) {
  const size_t row = row_size((DType)h.type_k, h.n_embd_kv) + row_size((DType)h.type_v, h.n_embd_kv);
  return sizeof(StateHeader) + (size_t)h.n_layer * (size_t)h.n_past * row;
}

// Calls f(tensor or null, byte offset in the tensor, byte offset in the state, bytes) for the
// holder's piece of every row: per layer, the K section then the V section.
template <typename F>
void for_each_piece(const StateHeader& h, const Columns& c, F f) {
  if (c.width == 0) return;  // a member without heads
  size_t section = sizeof(StateHeader);
  for (int64_t il = 0; il < h.n_layer; ++il)
    for (int which = 0; which < 2; ++which) {
      const DType type = (DType)(which ? h.type_v : h.type_k);
      Tensor* t = !c.kv ? nullptr : which ? c.kv->v[(size_t)il] : c.kv->k[(size_t)il];
      const size_t full = row_size(type, h.n_embd_kv), part = row_size(type, c.width), skip = row_size(type, c.col);
      for (int64_t r = 0; r < h.n_past; ++r)
        f(t, t ? (size_t)r * t->nb[1] : 0, section + (size_t)r * full + skip, part);
      section += (size_t)h.n_past * full;
    }
}

std::vector<Columns> local_columns(const Session::Impl& im) {
  std::vector<Columns> out;
  for (const auto& m : im.members) out.push_back({&m->kv(), m->setup().kv_col, m->setup().kv_width});
  return out;
}

}  // namespace

std::vector<uint8_t> Session::save_state() const {
  const Impl& im = *impl_;
  LOOM_CHECK(!im.plan_only, usage, "this session only plans (the model has no data)");
  const HParams& hp = model_.hparams();
  StateHeader h;
  h.n_layer = hp.n_layer;
  h.n_embd_kv = hp.n_embd_kv();
  h.n_past = n_past_;
  h.type_k = (int32_t)params_.type_k;
  h.type_v = (int32_t)params_.type_v;
  std::vector<uint8_t> out(state_bytes(h), 0);
  std::memcpy(out.data(), &h, sizeof(h));
  for (const Columns& c : local_columns(im))
    for_each_piece(
        h, c, [&](const Tensor* t, size_t src, size_t at, size_t n) { t->buffer->get(t, out.data() + at, src, n); });
  Communicator* remote = im.remote;
  if (!remote) return out;
  // Other ranks hold the other heads: gather every rank's copy (its columns filled) and take
  // from each the pieces of its columns.
  const size_t body = out.size() - sizeof(h), n_floats = (body + sizeof(float) - 1) / sizeof(float);
  std::vector<float> mine(n_floats, 0.0f), all(n_floats * (size_t)remote->size());
  std::memcpy(mine.data(), out.data() + sizeof(h), body);
  remote->all_gather(mine.data(), std::vector<size_t>((size_t)remote->size(), n_floats), all.data());
  const TpLayout& lay = model_.tp_layout();
  for (int r = 0; r < remote->size(); ++r) {
    const auto* theirs = reinterpret_cast<const uint8_t*>(all.data() + (size_t)r * n_floats) - sizeof(h);
    const tp::Range heads = lay.head_kv[(size_t)r];
    for_each_piece(h, {nullptr, heads.begin * hp.head_dim, heads.size() * hp.head_dim},
                   [&](const Tensor*, size_t, size_t at, size_t n) { std::memcpy(out.data() + at, theirs + at, n); });
  }
  return out;
}

void Session::load_state(std::span<const uint8_t> state) {
  const Impl& im = *impl_;
  LOOM_CHECK(!im.plan_only, usage, "this session only plans (the model has no data)");
  const HParams& hp = model_.hparams();
  StateHeader h;
  LOOM_CHECK(state.size() >= sizeof(h), invalid_input, "sequence state: {} bytes is too short", state.size());
  std::memcpy(&h, state.data(), sizeof(h));
  LOOM_CHECK(h.magic == kStateMagic && h.version == kStateVersion, invalid_input,
             "sequence state: not a loom KV state (or another version)");
  LOOM_CHECK(h.n_layer == hp.n_layer && h.n_embd_kv == hp.n_embd_kv(), invalid_input,
             "sequence state: made for {} layers of {} KV values, this model has {} of {}", h.n_layer, h.n_embd_kv,
             hp.n_layer, hp.n_embd_kv());
  LOOM_CHECK(h.type_k == (int32_t)params_.type_k && h.type_v == (int32_t)params_.type_v, invalid_input,
             "sequence state: KV cache types differ from this session's (-ctk/-ctv)");
  LOOM_CHECK(h.n_past >= 0 && h.n_past <= params_.n_ctx, invalid_input,
             "sequence state: {} tokens do not fit the context size {}", h.n_past, params_.n_ctx);
  LOOM_CHECK(state.size() == state_bytes(h), invalid_input, "sequence state: {} bytes, expected {}", state.size(),
             state_bytes(h));
  clear();
  for (const Columns& c : local_columns(im))
    for_each_piece(h, c,
                   [&](Tensor* t, size_t dst, size_t at, size_t n) { t->buffer->set(t, state.data() + at, dst, n); });
  n_past_ = h.n_past;
}

}  // namespace loom
