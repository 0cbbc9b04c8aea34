// Private seam between the CPU device and its kernel families. Each family file
// (cpu_<family>.cpp) implements three functions for the ops it owns:
//   supports_<family>(node)        - type/shape combinations it computes
//   work_size_<family>(node, nth)  - scratch bytes it needs (shared by all threads)
//   compute_<family>(args, node)   - called on every thread; thread ith of nth does its share
// Kernels read src tensors through their strides (views are legal inputs) and write dst.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "loom/core/thread_pool.h"
#include "loom/graph/tensor.h"

namespace loom::cpu {

struct KernelArgs {
  int ith = 0;                 // this thread
  int nth = 1;                 // threads working on the node
  void* wdata = nullptr;       // scratch of work_size bytes, shared by all threads
  size_t wsize = 0;
  ThreadPool* pool = nullptr;  // for barrier() between phases of one node (nullptr: single thread)
  bool b_ready = false;        // MUL_MAT(_ID): an earlier node left b prepared in the scratch
  void barrier() const {
    if (pool) pool->barrier();
  }
};

inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Rows [first, last) of n that thread ith of nth handles.
inline void split_rows(int64_t n, int ith, int nth, int64_t& first, int64_t& last) {
  const int64_t per = (n + nth - 1) / nth;
  first = per * ith < n ? per * ith : n;
  last = first + per < n ? first + per : n;
}

#define LOOM_CPU_FAMILY(family)                               \
  bool supports_##family(const Tensor* node);                 \
  size_t work_size_##family(const Tensor* node, int nth);     \
  void compute_##family(const KernelArgs& args, Tensor* node);

LOOM_CPU_FAMILY(copy)         // CPY DUP CONT CONCAT REPEAT REPEAT_BACK GET_ROWS GET_ROWS_BACK SET_ROWS
LOOM_CPU_FAMILY(elementwise)  // ADD SUB MUL DIV ADD_ID SCALE CLAMP SILU GELU TANH SIGMOID SOFTPLUS EXP LOG SQR SQRT SWIGLU SWIGLU_OAI SILU_BACK
LOOM_CPU_FAMILY(norm)         // RMS_NORM NORM RMS_NORM_BACK
LOOM_CPU_FAMILY(reduce)       // SUM SUM_ROWS MEAN ARGMAX ARGSORT TOP_K COUNT_EQUAL
LOOM_CPU_FAMILY(matmul)       // MUL_MAT MUL_MAT_ID OUT_PROD
// Whether MUL_MAT or MUL_MAT_ID `node` finds its b converted / quantized in the shared scratch
// as `prev` (an earlier node of the same op and call over the same b) left it, provided only
// nodes without scratch ran in between (the caller's part): Q/K/V and gate/up (experts' too)
// then quantize their input once.
bool matmul_b_prepared_by(const Tensor* prev, const Tensor* node, int nth);
// Whether MUL_MAT `node` may run in one phase with `first`, a MUL_MAT over the same small b (one
// each thread prepares for itself): decode's q, k, v and gate, up. Their memory must not overlap
// (the caller's part). mul_mat_run computes such a run: one preparation of b, the row blocks of
// all claimed as one range, no barrier inside.
constexpr size_t kMaxProductRun = 8;
bool mul_mat_joins_run(const Tensor* first, const Tensor* node, int nth);
void mul_mat_run(const KernelArgs& args, std::span<Tensor* const> run);
// Whether ADD `add` of MUL_MAT `mm`'s result and another tensor of its shape (a residual) can be
// made by mul_mat_add: each thread adds the rows it made, in the product's phase (one barrier
// less per layer and product). Their memory must allow it (checked here).
bool mul_mat_add_fusable(const Tensor* mm, const Tensor* add, int nth);
void mul_mat_add(const KernelArgs& args, Tensor* mm, Tensor* add);
LOOM_CPU_FAMILY(attention)    // ROPE ROPE_BACK SOFT_MAX SOFT_MAX_BACK FLASH_ATTN_EXT
LOOM_CPU_FAMILY(train)        // CROSS_ENTROPY_LOSS CROSS_ENTROPY_LOSS_BACK OPT_STEP_ADAMW OPT_STEP_SGD

#undef LOOM_CPU_FAMILY

}  // namespace loom::cpu
