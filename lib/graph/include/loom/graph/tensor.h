// Tensor metadata: GGUF layout (ne[0] fastest, byte strides nb[]), the op that produces it and
// its sources, view aliasing, flags, and where its bytes live (data/buffer; set by allocators).
#pragma once

#include <bit>
#include <cstddef>
#include <cstdint>
#include <string>

#include "loom/core/dtype.h"
#include "loom/graph/op.h"

namespace loom {

class Buffer;

inline constexpr int kMaxDims = 4;
inline constexpr int kMaxSrc = 6;
inline constexpr int kMaxOpParams = 16;

enum TensorFlag : uint32_t {
  kFlagParam = 1u << 0,          // trainable parameter
  kFlagInput = 1u << 1,          // filled by the caller before compute
  kFlagOutput = 1u << 2,         // read by the caller after compute: never reused by the allocator
  kFlagLoss = 1u << 3,           // scalar to minimize
  kFlagRepacked = 1u << 4,       // CPU weight stored in a kernel layout (cpu_repack.h): MUL_MAT(_ID), GET_ROWS read it
  kFlagRefilled = 1u << 5,       // with kFlagInput: filled before every compute and not read after it, so the
                                 // allocator may reuse its bytes once its last reader has run
  kFlagRepackedPairs = 1u << 6,  // with kFlagRepacked: its groups in pairs (cpu_repack.h)
};

struct Tensor {
  DType type = DType::F32;
  int64_t ne[kMaxDims] = {1, 1, 1, 1};
  size_t nb[kMaxDims] = {0, 0, 0, 0};

  OpKind op = OpKind::NONE;
  int32_t op_params[kMaxOpParams] = {};
  Tensor* src[kMaxSrc] = {};

  Tensor* view_src = nullptr;  // the tensor whose memory this one aliases (root, never a view)
  size_t view_offs = 0;

  uint32_t flags = 0;
  void* data = nullptr;        // device address of element 0 (host pointer on host buffers)
  Buffer* buffer = nullptr;
  std::string name;
  int32_t id = -1;             // index in its Context

  int64_t nelements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t nrows() const { return ne[1] * ne[2] * ne[3]; }
  // Bytes spanned by the tensor's elements given its strides (natural size if contiguous).
  size_t nbytes() const;
  int n_dims() const;  // highest dim with ne > 1, at least 1
  bool is_contiguous() const;
  bool is_view() const { return view_src != nullptr; }
  bool has_flag(TensorFlag f) const { return (flags & f) != 0; }

  int32_t param_i32(int i) const { return op_params[i]; }
  float param_f32(int i) const { return std::bit_cast<float>(op_params[i]); }
  void set_param_i32(int i, int32_t v) { op_params[i] = v; }
  void set_param_f32(int i, float v) { op_params[i] = std::bit_cast<int32_t>(v); }
};

// Contiguous strides for a shape.
void set_contiguous_strides(Tensor& t);
bool same_shape(const Tensor& a, const Tensor& b);
// "f32 [4096, 32, 1, 1]"
std::string describe(const Tensor& t);

}  // namespace loom
