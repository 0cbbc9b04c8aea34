// BrokenDevice: delegates to the inner device, then corrupts the target op's results.
#include "loom/testing/broken_device.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "loom/core/error.h"

namespace loom::testing {

const char* breakage_name(Breakage b) {
  switch (b) {
    case Breakage::wrong_value: return "wrong_value";
    case Breakage::write_past_end: return "write_past_end";
    case Breakage::nan: return "nan";
  }
  return "?";
}

namespace {

void corrupt(Tensor* n, Breakage how) {
  if (!n->data || n->nelements() == 0) return;
  char* base = static_cast<char*>(n->data);
  switch (how) {
    case Breakage::wrong_value:
      if (n->type == DType::F32 && n->is_contiguous()) {
        float* y = reinterpret_cast<float*>(base);
        for (int64_t i = 0; i < n->nelements(); ++i) y[i] = -y[i] - 1.0f;
      } else if (n->type == DType::I32 && n->is_contiguous()) {
        int32_t* y = reinterpret_cast<int32_t*>(base);
        for (int64_t i = 0; i < n->nelements(); ++i) y[i] += 1;
      } else {
        for (size_t i = 0; i < n->nbytes(); ++i) base[i] = (char)~base[i];
      }
      break;
    case Breakage::write_past_end: {
      const float one = 1.0f;
      std::memcpy(base + n->buffer->type().alloc_size(n), &one, sizeof one);
      break;
    }
    case Breakage::nan:
      if (n->type == DType::F32) {
        const float nan = std::numeric_limits<float>::quiet_NaN();
        std::memcpy(base, &nan, sizeof nan);
      } else {
        std::memset(base, 0xFF, dtype_info(n->type).type_size);
      }
      break;
  }
}

class BrokenStream final : public Stream {
 public:
  BrokenStream(std::unique_ptr<Stream> inner, Breakage how, OpKind op) : inner_(std::move(inner)), how_(how), op_(op) {}
  Status compute(const Graph& graph, std::span<Tensor* const> nodes) override {
    Status st = inner_->compute(graph, nodes);
    if (!st) return st;
    inner_->synchronize();
    for (Tensor* n : nodes)
      if (n->op == op_ && !n->is_view()) corrupt(n, how_);
    return st;
  }
  Status copy(const Tensor* src, Tensor* dst) override { return inner_->copy(src, dst); }
  void synchronize() override { inner_->synchronize(); }

 private:
  std::unique_ptr<Stream> inner_;
  Breakage how_;
  OpKind op_;
};

}  // namespace

BrokenDevice::BrokenDevice(std::string name, Device& inner, Breakage how, OpKind op)
    : name_(std::move(name)), inner_(inner), how_(how), op_(op) {
  LOOM_CHECK(inner.buffer_type().is_host(), usage, "[BrokenDevice] {} needs host-accessible buffers", inner.name());
}

std::unique_ptr<Stream> BrokenDevice::create_stream() {
  return std::make_unique<BrokenStream>(inner_.create_stream(), how_, op_);
}

}  // namespace loom::testing
