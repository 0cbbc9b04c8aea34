// A deliberately broken device for showing that test mode catches bad kernels: it runs
// everything on an inner host-memory device (the CPU) and then corrupts the result of every node
// of one op in one of three ways. loom-bench-ops offers three of them (BROKEN_VALUE, BROKEN_OOB,
// BROKEN_NAN, breaking MUL_MAT) when built with -DLOOM_BROKEN_KERNELS=ON.
#pragma once

#include <string>

#include "loom/backend/device.h"

namespace loom::testing {

enum class Breakage : uint8_t {
  wrong_value,     // every element y becomes -y - 1 (ints: +1)
  write_past_end,  // 4 bytes written right after the node's allocation (into the guard bytes)
  nan,             // element 0 becomes NaN
};
const char* breakage_name(Breakage b);  // "wrong_value", "write_past_end", "nan"

class BrokenDevice final : public Device {
 public:
  // inner must use host-accessible buffers; it must outlive this device.
  BrokenDevice(std::string name, Device& inner, Breakage how, OpKind op);

  const std::string& name() const override { return name_; }
  DeviceKind kind() const override { return inner_.kind(); }
  MemoryInfo memory() const override { return inner_.memory(); }
  DeviceCaps caps() const override { return {}; }
  bool supports_op(const Tensor* node) const override { return inner_.supports_op(node); }
  bool supports_buffer_type(const BufferType& bt) const override { return inner_.supports_buffer_type(bt); }
  const BufferType& buffer_type() const override { return inner_.buffer_type(); }
  std::unique_ptr<Stream> create_stream() override;

  Breakage breakage() const { return how_; }
  OpKind target() const { return op_; }

 private:
  std::string name_;
  Device& inner_;
  Breakage how_;
  OpKind op_;
};

}  // namespace loom::testing
