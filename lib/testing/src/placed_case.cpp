// PlacedCase: one buffer per case with guard bytes, seeded leaf values, NaN-filled nodes, and
// reads of any tensor (through its strides) from the host image.
#include "placed_case.h"

#include <cmath>
#include <cstring>
#include <numeric>
#include <random>

#include "loom/core/error.h"

namespace loom::testing::detail {

namespace {

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

uint8_t guard_byte(size_t offset) { return (uint8_t)(0xA5u ^ (uint8_t)(offset * 0x9Du)); }

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string label(const Tensor* t) {
  return t->name.empty() ? fmt::format("{}#{}", op_name(t->op), t->id) : fmt::format("'{}' ({})", t->name, op_name(t->op));
}

}  // namespace

PlacedCase::PlacedCase(const OpCase& c, uint64_t seed) : case_(c), seed_(seed), builder_(ctx_) {
  c.build(builder_);
  outputs_ = builder_.outputs();
  if (outputs_.empty()) {
    for (auto it = ctx_.tensors().rbegin(); it != ctx_.tensors().rend(); ++it)
      if (it->op != OpKind::NONE) {
        outputs_.push_back(&*it);
        break;
      }
  }
  LOOM_CHECK(!outputs_.empty(), internal, "[{}] the case builds no node", c.name());
  for (Tensor* t : outputs_) graph_.build_forward(t);
}

std::vector<Tensor*> PlacedCase::compute_nodes() const {
  std::vector<Tensor*> out;
  for (Tensor* n : graph_.nodes())
    if (!op_info(n->op).is_view) out.push_back(n);
  return out;
}

void PlacedCase::place(const BufferType& bt) {
  const size_t align = std::max<size_t>(bt.alignment(), 16);
  size_t cursor = 0;
  slots_.clear();
  for (Tensor& t : ctx_.tensors()) {
    if (t.view_src || t.data) continue;
    const size_t offset = align_up(cursor + kGuardBytes, align);
    const size_t size = bt.alloc_size(&t);
    slots_.push_back({&t, offset, size});
    cursor = offset + size;
  }
  const size_t total = align_up(cursor + kGuardBytes, align);
  Status st = bt.alloc(total, buffer_);
  if (!st) fail(st.kind(), "[{}] {}", case_.name(), st.message());
  for (const Slot& s : slots_) buffer_->init_tensor(s.t, s.offset).throw_if_error();
  for (Tensor& t : ctx_.tensors())
    if (t.view_src && t.view_src->data) {
      t.data = static_cast<char*>(t.view_src->data) + t.view_offs;
      t.buffer = t.view_src->buffer;
    }
  whole_ = Tensor{};
  whole_.type = DType::F32;
  whole_.ne[0] = (int64_t)(total / sizeof(float));
  set_contiguous_strides(whole_);
  whole_.data = buffer_->base();
  whole_.buffer = buffer_.get();
  image_.assign(total, 0);
  for (size_t i = 0; i < total; ++i) image_[i] = guard_byte(i);
  uint64_t ordinal = 0;
  for (const Slot& s : slots_) {
    if (s.t->op == OpKind::NONE) {
      fill_leaf(s.t, ordinal++);
    } else {
      std::memset(image_.data() + s.offset, 0xFF, s.size);  // NaN in every float type
    }
  }
}

void PlacedCase::fill_leaf(Tensor* t, uint64_t ordinal) {
  const LeafInit& init = builder_.init_of(t);
  std::mt19937_64 rng(fnv1a(case_.name()) ^ (seed_ * 0x9E3779B97F4A7C15ull) ^ (ordinal * 0xBF58476D1CE4E5B9ull));
  const int64_t n = t->nelements();
  uint8_t* dst = image_.data() + offset_of(t);
  if (t->type == DType::I32) {
    std::vector<int32_t> v((size_t)n);
    if (init.kind == LeafInit::Kind::distinct_ints) {
      const int64_t range = (int64_t)init.b, row = t->ne[0];
      std::vector<int32_t> pool((size_t)range);
      for (int64_t r = 0; r < n / row; ++r) {
        std::iota(pool.begin(), pool.end(), 0);
        for (int64_t i = 0; i < row; ++i) {  // partial Fisher-Yates
          std::uniform_int_distribution<int64_t> pick(i, range - 1);
          std::swap(pool[(size_t)i], pool[(size_t)pick(rng)]);
          v[(size_t)(r * row + i)] = pool[(size_t)i];
        }
      }
    } else if (init.kind == LeafInit::Kind::constant) {
      std::fill(v.begin(), v.end(), (int32_t)init.a);
    } else if (init.kind == LeafInit::Kind::values) {
      for (size_t i = 0; i < v.size(); ++i) v[i] = (int32_t)init.list[i % init.list.size()];
    } else {
      std::uniform_int_distribution<int64_t> d((int64_t)init.a, (int64_t)init.b - 1);
      for (int32_t& x : v) x = (int32_t)d(rng);
    }
    std::memcpy(dst, v.data(), v.size() * sizeof(int32_t));
    return;
  }
  std::vector<float> v((size_t)n);
  switch (init.kind) {
    case LeafInit::Kind::uniform: {
      std::uniform_real_distribution<double> d(init.a, init.b);
      for (float& x : v) x = (float)d(rng);
      break;
    }
    case LeafInit::Kind::row_probs: {
      std::uniform_real_distribution<double> d(0.0, 1.0);
      for (int64_t r = 0; r < n / t->ne[0]; ++r) {
        std::vector<double> p((size_t)t->ne[0]);
        double sum = 0;
        for (double& x : p) sum += (x = d(rng));
        for (int64_t i = 0; i < t->ne[0]; ++i) v[(size_t)(r * t->ne[0] + i)] = (float)(p[(size_t)i] / sum);
      }
      break;
    }
    case LeafInit::Kind::ints: {
      std::uniform_int_distribution<int64_t> d((int64_t)init.a, (int64_t)init.b - 1);
      for (float& x : v) x = (float)d(rng);
      break;
    }
    case LeafInit::Kind::constant: std::fill(v.begin(), v.end(), (float)init.a); break;
    case LeafInit::Kind::values:
      for (size_t i = 0; i < v.size(); ++i) v[i] = init.list[i % init.list.size()];
      break;
    default: {
      std::normal_distribution<double> d(init.a, init.b);
      for (float& x : v) x = (float)d(rng);
      break;
    }
  }
  const DTypeInfo& info = dtype_info(t->type);
  const int64_t row = t->ne[0];
  for (int64_t r = 0; r < n / row; ++r) info.from_float(v.data() + r * row, dst + (size_t)r * t->nb[1], row);
}

size_t PlacedCase::offset_of(const Tensor* t) const {
  return (size_t)(static_cast<const char*>(t->data) - static_cast<const char*>(buffer_->base()));
}

void PlacedCase::upload() { buffer_->set(&whole_, image_.data(), 0, image_.size()); }

void PlacedCase::download() { buffer_->get(&whole_, image_.data(), 0, image_.size()); }

void PlacedCase::download(const Tensor* t) {
  const size_t off = offset_of(t);
  buffer_->get(&whole_, image_.data() + off, off, t->nbytes());
}

std::string PlacedCase::check_guards() const {
  auto first_bad = [&](size_t lo, size_t hi) -> int64_t {
    for (size_t i = lo; i < hi; ++i)
      if (image_[i] != guard_byte(i)) return (int64_t)(i - lo);
    return -1;
  };
  for (size_t j = 0; j <= slots_.size(); ++j) {
    const size_t lo = j == 0 ? 0 : slots_[j - 1].offset + slots_[j - 1].size;
    const size_t hi = j == slots_.size() ? image_.size() : slots_[j].offset;
    const int64_t at = first_bad(lo, hi);
    if (at < 0) continue;
    if (j == 0) return fmt::format("guard bytes before {} changed", label(slots_[0].t));
    const Tensor* t = slots_[j - 1].t;
    return fmt::format("wrote past the end of {}: guard byte +{} changed", label(t), at);
  }
  return {};
}

std::vector<float> PlacedCase::read_f32(const Tensor* t) const {
  std::vector<float> out((size_t)t->nelements());
  const DTypeInfo& info = dtype_info(t->type);
  const uint8_t* base = image_.data() + offset_of(t);
  std::vector<float> row((size_t)t->ne[0]);
  size_t k = 0;
  for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < t->ne[1]; ++i1) {
        const uint8_t* p = base + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
        if (t->type == DType::I32) {
          for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) {
            int32_t v;
            std::memcpy(&v, p + i0 * t->nb[0], sizeof v);
            row[(size_t)i0] = (float)v;
          }
        } else if (info.block_size > 1 || t->nb[0] == info.type_size) {
          info.to_float(p, row.data(), t->ne[0]);
        } else {
          for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) info.to_float(p + i0 * t->nb[0], &row[(size_t)i0], 1);
        }
        for (float x : row) out[k++] = x;
      }
  return out;
}

std::vector<int32_t> PlacedCase::read_i32(const Tensor* t) const {
  std::vector<int32_t> out;
  out.reserve((size_t)t->nelements());
  const uint8_t* base = image_.data() + offset_of(t);
  for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < t->ne[1]; ++i1)
        for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) {
          int32_t v;
          std::memcpy(&v, base + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3], sizeof v);
          out.push_back(v);
        }
  return out;
}

float PlacedCase::read_scalar(const Tensor* t) const {
  float v = 0.0f;
  t->buffer->get(t, &v, 0, sizeof v);
  return v;
}

void PlacedCase::write_f32(Tensor* t, int64_t i, float v) {
  std::memcpy(image_.data() + offset_of(t) + (size_t)i * sizeof(float), &v, sizeof v);
  buffer_->set(t, &v, (size_t)i * sizeof(float), sizeof v);
}

void PlacedCase::write_leaf_f32(Tensor* t, const std::vector<float>& v) {
  std::memcpy(image_.data() + offset_of(t), v.data(), v.size() * sizeof(float));
  buffer_->set(t, v.data(), 0, v.size() * sizeof(float));
}

double PlacedCase::traffic_bytes() const {
  double bytes = 0;
  for (const Tensor* l : graph_.leafs()) bytes += (double)l->nbytes();
  for (const Tensor* o : outputs_) bytes += (double)o->nbytes();
  return bytes;
}

double nmse(const std::vector<float>& got, const std::vector<float>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) continue;
    const double d = (double)got[i] - (double)want[i];
    num += d * d;
    den += (double)want[i] * want[i];
  }
  return den == 0 ? num : num / den;
}

}  // namespace loom::testing::detail
