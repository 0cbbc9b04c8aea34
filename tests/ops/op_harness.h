// Shared test harness for op tests: build a tiny graph in a Context, fill inputs with seeded
// random values, run it on the CPU backend and compare against a double-precision reference
// written in the test (never the kernel itself).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "loom/core/quants.h"
#include "loom/cpu/cpu.h"
#include "loom/graph/context.h"
#include "loom/graph/graph.h"
#include "loom/graph/ops.h"

namespace loom::test {

struct OpRunner {
  Context ctx;
  cpu::CpuDevice device{2};
  std::unique_ptr<Buffer> buffer;
  std::mt19937 rng{42};

  Tensor* input(DType type, std::initializer_list<int64_t> ne, const char* name = "in") {
    Tensor* t = ctx.new_tensor(type, ne, name);
    t->flags |= kFlagInput;
    return t;
  }
  // Allocates every tensor and fills each input with N(0, sigma) (floats/quants) or ints in [0, imax).
  void alloc() { buffer = cpu::alloc_all(ctx, device.buffer_type()); }

  void fill_normal(Tensor* t, float sigma = 1.0f) {
    std::normal_distribution<float> d(0.0f, sigma);
    std::vector<float> v((size_t)t->nelements());
    for (float& x : v) x = d(rng);
    set_f32(t, v);
  }
  void fill_uniform(Tensor* t, float lo, float hi) {
    std::uniform_real_distribution<float> d(lo, hi);
    std::vector<float> v((size_t)t->nelements());
    for (float& x : v) x = d(rng);
    set_f32(t, v);
  }
  void fill_ints(Tensor* t, int32_t lo, int32_t hi_exclusive) {
    std::uniform_int_distribution<int32_t> d(lo, hi_exclusive - 1);
    std::vector<int32_t> v((size_t)t->nelements());
    for (auto& x : v) x = d(rng);
    set_i32(t, v);
  }
  // Writes values (logical element order, ne0 fastest) into a contiguous tensor of any type.
  void set_f32(Tensor* t, const std::vector<float>& v) {
    ASSERT_TRUE(t->is_contiguous());
    const DTypeInfo& info = dtype_info(t->type);
    const int64_t row = t->ne[0];
    for (int64_t r = 0; r < t->nrows(); ++r)
      info.from_float(v.data() + r * row, static_cast<char*>(t->data) + r * t->nb[1], row);
  }
  void set_i32(Tensor* t, const std::vector<int32_t>& v) {
    ASSERT_EQ(t->type, DType::I32);
    std::memcpy(t->data, v.data(), v.size() * 4);
  }
  // Reads any float/quant tensor (views included, through strides) as f32 in logical order.
  std::vector<float> get_f32(const Tensor* t) const {
    std::vector<float> out((size_t)t->nelements());
    const DTypeInfo& info = dtype_info(t->type);
    size_t k = 0;
    std::vector<float> row((size_t)t->ne[0]);
    for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
      for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
        for (int64_t i1 = 0; i1 < t->ne[1]; ++i1) {
          const char* base = static_cast<const char*>(t->data) + i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3];
          if (info.block_size > 1 || t->nb[0] == info.type_size) {
            info.to_float(base, row.data(), t->ne[0]);
          } else {
            for (int64_t i0 = 0; i0 < t->ne[0]; ++i0) info.to_float(base + i0 * t->nb[0], &row[(size_t)i0], 1);
          }
          for (float x : row) out[k++] = x;
        }
    return out;
  }
  std::vector<int32_t> get_i32(const Tensor* t) const {
    std::vector<int32_t> out;
    for (int64_t i3 = 0; i3 < t->ne[3]; ++i3)
      for (int64_t i2 = 0; i2 < t->ne[2]; ++i2)
        for (int64_t i1 = 0; i1 < t->ne[1]; ++i1)
          for (int64_t i0 = 0; i0 < t->ne[0]; ++i0)
            out.push_back(*reinterpret_cast<const int32_t*>(static_cast<const char*>(t->data) + i0 * t->nb[0] +
                                                            i1 * t->nb[1] + i2 * t->nb[2] + i3 * t->nb[3]));
    return out;
  }
  // Runs the graph of out with n_threads.
  void compute(Tensor* out, int n_threads = 2) {
    Graph g;
    g.build_forward(out);
    ThreadPool pool(n_threads);
    cpu::compute_graph(g, pool);
  }
};

// Normalized mean squared error, as test-backend-ops defines it: sum((a-b)^2) / sum(b^2).
inline double nmse(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return den == 0 ? num : num / den;
}

// Element (i0, i1, i2, i3) of a logical-order vector for shape ne.
inline size_t idx(const int64_t* ne, int64_t i0, int64_t i1 = 0, int64_t i2 = 0, int64_t i3 = 0) {
  return (size_t)(((i3 * ne[2] + i2) * ne[1] + i1) * ne[0] + i0);
}

// dst[m, n, i2, i3] = sum_k a[k, m, i2 / (b2 / a2), i3 / (b3 / a3)] * b[k, n, i2, i3]
inline std::vector<double> ref_mul_mat(const std::vector<float>& a, const int64_t* ane, const std::vector<float>& b,
                                       const int64_t* bne) {
  const int64_t K = ane[0], M = ane[1], N = bne[1];
  const int64_t dne[4] = {M, N, bne[2], bne[3]};
  std::vector<double> out((size_t)(M * N * bne[2] * bne[3]));
  for (int64_t i3 = 0; i3 < bne[3]; ++i3)
    for (int64_t i2 = 0; i2 < bne[2]; ++i2)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t m = 0; m < M; ++m) {
          double s = 0;
          for (int64_t k = 0; k < K; ++k)
            s += (double)a[idx(ane, k, m, i2 / (bne[2] / ane[2]), i3 / (bne[3] / ane[3]))] *
                 (double)b[idx(bne, k, n, i2, i3)];
          out[idx(dne, m, n, i2, i3)] = s;
        }
  return out;
}

}  // namespace loom::test
