// A case's graph placed in one device buffer with guard bytes around every tensor: a host image
// of the whole buffer is filled (guards with a pattern, leaves with their seeded values, nodes
// with NaN bytes), uploaded in one set(), read back in one get() and checked.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "loom/backend/device.h"
#include "loom/graph/graph.h"
#include "loom/testing/op_case.h"
#include "loom/testing/runner.h"

namespace loom::testing::detail {

inline constexpr size_t kGuardBytes = 64;

class PlacedCase {
 public:
  // Builds the case's graph (not yet placed).
  PlacedCase(const OpCase& c, uint64_t seed);
  PlacedCase(const PlacedCase&) = delete;
  PlacedCase& operator=(const PlacedCase&) = delete;

  Context& ctx() { return ctx_; }
  CaseBuilder& builder() { return builder_; }
  Graph& graph() { return graph_; }
  const std::vector<Tensor*>& outputs() const { return outputs_; }
  // Computing nodes of the graph (views and leaves excluded), in order.
  std::vector<Tensor*> compute_nodes() const;

  // Places every tensor of the context in one buffer of bt (guards between tensors) and fills
  // the host image; throws Error(out_of_memory) when the device cannot hold it.
  void place(const BufferType& bt);
  void upload();    // image -> device
  void download();  // device -> image
  void download(const Tensor* t);  // only the bytes t spans
  // "" when every guard byte is intact, else which tensor's neighbourhood was written.
  std::string check_guards() const;

  // Values of t (through its strides) from the image: floats (any float or quantized type).
  std::vector<float> read_f32(const Tensor* t) const;
  std::vector<int32_t> read_i32(const Tensor* t) const;
  // F32 element 0 of t read straight from the device (no image round trip).
  float read_scalar(const Tensor* t) const;
  // Overwrites F32 element i of a contiguous leaf in the image and on the device.
  void write_f32(Tensor* t, int64_t i, float v);
  void write_leaf_f32(Tensor* t, const std::vector<float>& v);  // whole contiguous F32 leaf

  // Bytes of the leaves the graph reads plus bytes of its outputs (one run's essential traffic).
  double traffic_bytes() const;

 private:
  struct Slot {
    Tensor* t;
    size_t offset;
    size_t size;
  };
  void fill_leaf(Tensor* t, uint64_t ordinal);
  size_t offset_of(const Tensor* t) const;

  const OpCase& case_;
  uint64_t seed_;
  Context ctx_;
  CaseBuilder builder_;
  Graph graph_;
  std::vector<Tensor*> outputs_;
  std::unique_ptr<Buffer> buffer_;
  Tensor whole_;  // spans the whole buffer, for one set()/get()
  std::vector<uint8_t> image_;
  std::vector<Slot> slots_;  // by offset
};

// A result carrying the case's name, the mode and the device name.
CaseResult make_result(const OpCase& c, const char* mode, const Device& device);
// The first computing node of the case the device cannot run, or nullptr.
const Tensor* unsupported_node(const PlacedCase& pc, const Device& device);

// Normalized mean squared error sum((a-b)^2) / sum(b^2) over the pairs where both are finite.
double nmse(const std::vector<float>& got, const std::vector<float>& want);

}  // namespace loom::testing::detail
