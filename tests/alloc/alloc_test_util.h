// Test helpers for the allocators: a configurable host BufferType (alignment, max_size,
// alloc_size expansion, allocation count), a tiny strided reference interpreter for the ops the
// random graphs use (independent of the CPU kernels, safe in place like an element-wise kernel),
// and a seeded random DAG builder over add/mul/scale/silu/mul_mat/views/reshape/concat/cont.
#pragma once

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "loom/alloc/alloc.h"
#include "loom/cpu/cpu.h"
#include "loom/graph/context.h"
#include "loom/graph/ops.h"

namespace loom::test {

// Which tensors a TestBufferType reports larger than their natural size.
enum class Expand { none, leaves, all };

class TestBufferType final : public BufferType {
 public:
  explicit TestBufferType(size_t alignment = 64, size_t max_size = SIZE_MAX, Expand expand = Expand::none,
                          size_t extra = 32)
      : alignment_(alignment), max_size_(max_size), expand_(expand), extra_(extra) {}
  const char* name() const override { return "TEST"; }
  size_t alignment() const override { return alignment_; }
  size_t max_size() const override { return max_size_; }
  bool is_host() const override { return true; }
  Status alloc(size_t size, std::unique_ptr<Buffer>& out) const override {
    ++n_allocs;
    if (size > max_size_) return Status::error(ErrorKind::out_of_memory, "TEST: above max_size");
    const size_t bytes = (size + alignment_) / alignment_ * alignment_;
    out = std::make_unique<TestBuffer>(*this, std::aligned_alloc(alignment_, bytes), size);
    return Status::ok();
  }
  size_t alloc_size(const Tensor* t) const override {
    const bool grow = expand_ == Expand::all || (expand_ == Expand::leaves && t->op == OpKind::NONE);
    return t->nbytes() + (grow ? extra_ : 0);
  }
  Device& device() const override { return device_; }

  mutable int n_allocs = 0;

 private:
  class TestBuffer final : public Buffer {
   public:
    TestBuffer(const BufferType& type, void* base, size_t size) : Buffer(type, base, size) {}
    ~TestBuffer() override { std::free(base_); }
    void set(Tensor* t, const void* src, size_t offset, size_t n) override {
      std::memcpy(static_cast<char*>(t->data) + offset, src, n);
    }
    void get(const Tensor* t, void* dst, size_t offset, size_t n) const override {
      std::memcpy(dst, static_cast<const char*>(t->data) + offset, n);
    }
    void clear(uint8_t value) override { std::memset(base_, value, size_); }
  };
  size_t alignment_, max_size_;
  Expand expand_;
  size_t extra_;
  mutable cpu::CpuDevice device_{1};
};

// ---- reference interpreter (F32 only) ----------------------------------------------------------
inline float* at(const Tensor* t, int64_t i0, int64_t i1, int64_t i2, int64_t i3) {
  return reinterpret_cast<float*>(static_cast<char*>(t->data) + i0 * t->nb[0] + i1 * t->nb[1] + i2 * t->nb[2] +
                                  i3 * t->nb[3]);
}

// Computes node n reading its sources through their strides; element-wise ops read an element
// and then write the same element, so they are correct in place (dst over src[0], same layout).
inline void interpret_node(Tensor* n) {
  const Tensor* a = n->src[0];
  const Tensor* b = n->src[1];
  for (int64_t i3 = 0; i3 < n->ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < n->ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < n->ne[1]; ++i1)
        for (int64_t i0 = 0; i0 < n->ne[0]; ++i0) {
          float v = 0.0f;
          switch (n->op) {
            case OpKind::ADD:
            case OpKind::MUL: {
              const float x = *at(a, i0, i1, i2, i3);
              const float y = *at(b, i0 % b->ne[0], i1 % b->ne[1], i2 % b->ne[2], i3 % b->ne[3]);
              v = n->op == OpKind::ADD ? x + y : x * y;
              break;
            }
            case OpKind::SCALE: v = *at(a, i0, i1, i2, i3) * n->param_f32(0) + n->param_f32(1); break;
            case OpKind::SILU: {
              const float x = *at(a, i0, i1, i2, i3);
              v = x / (1.0f + std::exp(-x));
              break;
            }
            case OpKind::CONT: v = *at(a, i0, i1, i2, i3); break;
            case OpKind::CONCAT: {
              const int d = n->param_i32(0);
              int64_t i[4] = {i0, i1, i2, i3};
              if (i[d] < a->ne[d]) {
                v = *at(a, i[0], i[1], i[2], i[3]);
              } else {
                i[d] -= a->ne[d];
                v = *at(b, i[0], i[1], i[2], i[3]);
              }
              break;
            }
            case OpKind::MUL_MAT: {  // n[m, k, i2, i3] = sum_j a[j, m, ...] * b[j, k, i2, i3]
              const int64_t a2 = i2 / (b->ne[2] / a->ne[2]), a3 = i3 / (b->ne[3] / a->ne[3]);
              for (int64_t j = 0; j < a->ne[0]; ++j) v += *at(a, j, i0, a2, a3) * *at(b, j, i1, i2, i3);
              break;
            }
            default: std::abort();
          }
          *at(n, i0, i1, i2, i3) = v;
        }
}

inline void interpret(const Graph& g) {
  for (Tensor* n : g.nodes())
    if (!op_info(n->op).is_view) interpret_node(n);
}

// Logical-order bits of a float tensor (views through strides), for bit-exact comparisons.
inline std::vector<uint32_t> bits(const Tensor* t) {
  std::vector<uint32_t> out;
  for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
    for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
      for (int64_t i1 = 0; i1 < t->ne[1]; ++i1)
        for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) {
          uint32_t u;
          std::memcpy(&u, at(t, i0, i1, i2, i3), 4);
          out.push_back(u);
        }
  return out;
}

// ---- random DAGs ---------------------------------------------------------------------------
struct RandomDag {
  Context ctx;
  std::vector<Tensor*> inputs;   // kFlagInput leaves
  std::vector<Tensor*> outputs;  // kFlagOutput tensors, in a seed-determined order
  Graph graph;
};

// Builds the same DAG for the same seed: n_ops random ops, every unread node built into the
// graph (most flagged output), a few intermediate nodes flagged output too.
inline std::unique_ptr<RandomDag> make_random_dag(uint32_t seed, int n_ops) {
  auto dag = std::make_unique<RandomDag>();
  Context& c = dag->ctx;
  std::mt19937 rng(seed);
  auto rnd = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
  std::vector<Tensor*> pool;
  std::vector<bool> read;
  auto input = [&](int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    Tensor* t = c.new_tensor(DType::F32, {n0, n1, n2, n3}, fmt::format("in{}", dag->inputs.size()));
    t->flags |= kFlagInput;
    dag->inputs.push_back(t);
    return t;
  };
  auto random_input = [&] { return input(rnd(1, 8), rnd(1, 5), rnd(1, 3), rnd(1, 2)); };
  auto pick = [&]() -> Tensor* {
    if (pool.empty()) pool.push_back(random_input()), read.push_back(false);
    const int n = (int)pool.size();
    return pool[(size_t)(rnd(0, 9) < 6 ? std::max(0, n - rnd(1, 3)) : rnd(0, n - 1))];
  };
  auto find = [&](auto ok) -> Tensor* {  // a random pooled tensor satisfying ok, or nullptr
    std::vector<Tensor*> cands;
    for (Tensor* t : pool)
      if (ok(t)) cands.push_back(t);
    return cands.empty() || rnd(0, 3) == 0 ? nullptr : cands[(size_t)rnd(0, (int)cands.size() - 1)];
  };
  for (int k = 0; k < 3; ++k) pool.push_back(random_input()), read.push_back(false);

  for (int k = 0; k < n_ops; ++k) {
    Tensor* a = pick();
    Tensor* t = nullptr;
    Tensor* b = nullptr;
    switch (rnd(0, 9)) {
      case 0:
      case 1: {  // add / mul, b broadcast over a
        b = find([&](Tensor* x) {
          for (int i = 0; i < 4; ++i)
            if (a->ne[i] % x->ne[i] != 0) return false;
          return true;
        });
        if (!b) b = input(a->ne[0], rnd(0, 1) ? a->ne[1] : 1, rnd(0, 1) ? a->ne[2] : 1, rnd(0, 1) ? a->ne[3] : 1);
        t = rnd(0, 1) ? ops::add(c, a, b) : ops::mul(c, a, b);
        break;
      }
      case 2: t = ops::scale(c, a, 0.5f + (float)rnd(0, 8) * 0.125f, (float)rnd(-2, 2) * 0.25f); break;
      case 3: t = ops::silu(c, a); break;
      case 4: {  // mul_mat: a is the left operand, b needs a's K and broadcastable batch dims
        b = find([&](Tensor* x) {
          return x->ne[0] == a->ne[0] && x->ne[2] % a->ne[2] == 0 && x->ne[3] % a->ne[3] == 0;
        });
        if (!b) b = input(a->ne[0], rnd(1, 4), a->ne[2], a->ne[3]);
        t = ops::mul_mat(c, a, b);
        break;
      }
      case 5: {  // 2-D window of a contiguous tensor
        if (!a->is_contiguous()) {
          t = ops::cont(c, a);
          break;
        }
        const int64_t rows = a->nrows();
        const int64_t n0 = rnd(1, (int)a->ne[0]), n1 = rnd(1, (int)rows);
        const int64_t c0 = rnd(0, (int)(a->ne[0] - n0)), r0 = rnd(0, (int)(rows - n1));
        t = ops::view_2d(c, a, n0, n1, a->nb[1], (size_t)r0 * a->nb[1] + (size_t)c0 * a->nb[0]);
        break;
      }
      case 6: t = ops::transpose(c, a); break;
      case 7:
        t = a->is_contiguous() ? ops::reshape(c, a, {a->ne[0] * a->ne[1], a->ne[2] * a->ne[3]}) : ops::cont(c, a);
        break;
      case 8: {  // concat along a random dim
        const int d = rnd(0, 3);
        if (a->ne[d] > 10) {
          t = ops::silu(c, a);
          break;
        }
        b = find([&](Tensor* x) {
          for (int i = 0; i < 4; ++i)
            if (i != d && x->ne[i] != a->ne[i]) return false;
          return x->ne[d] <= 6;
        });
        if (!b) {
          int64_t ne[4] = {a->ne[0], a->ne[1], a->ne[2], a->ne[3]};
          ne[d] = rnd(1, 3);
          b = input(ne[0], ne[1], ne[2], ne[3]);
        }
        t = ops::concat(c, a, b, d);
        break;
      }
      default: t = ops::cont(c, a); break;
    }
    t->name = fmt::format("n{}_{}", k, op_name(t->op));
    for (Tensor* s : t->src)
      for (size_t i = 0; i < pool.size(); ++i)
        if (s == pool[i]) read[i] = true;
    pool.push_back(t);
    read.push_back(false);
  }
  for (size_t i = 0; i < pool.size(); ++i) {
    Tensor* t = pool[i];
    if (t->op == OpKind::NONE) continue;
    if ((!read[i] && rnd(0, 4) != 0) || rnd(0, 9) == 0) {
      t->flags |= kFlagOutput;
      dag->outputs.push_back(t);
    }
    if (!read[i]) dag->graph.build_forward(t);
  }
  return dag;
}

// Seeded values for every input with memory (each input's values depend only on seed and its index).
inline void fill_inputs(const RandomDag& dag, uint32_t seed) {
  for (size_t k = 0; k < dag.inputs.size(); ++k) {
    Tensor* t = dag.inputs[k];
    if (!t->data) continue;
    std::mt19937 rng(seed * 7919u + (uint32_t)k);
    std::normal_distribution<float> d(0.0f, 1.0f);
    for (int64_t i = 0; i < t->nelements(); ++i) static_cast<float*>(t->data)[i] = d(rng);
  }
}

}  // namespace loom::test
