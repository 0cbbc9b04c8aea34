// Test and support modes: a case on a device against the CPU reference (one thread, one node at
// a time, so nothing is fused), with guard-byte, NaN/inf and NMSE checks on every listed output.
#include <algorithm>
#include <cmath>
#include <numeric>

#include "loom/core/error.h"
#include "loom/backend/registry.h"
#include "loom/testing/runner.h"
#include "placed_case.h"

namespace loom::testing {

using detail::PlacedCase;

const char* case_status_name(CaseStatus s) {
  switch (s) {
    case CaseStatus::ok: return "OK";
    case CaseStatus::fail: return "FAIL";
    case CaseStatus::not_supported: return "not supported";
    case CaseStatus::skipped: return "skipped";
  }
  return "?";
}

double op_flops(const Tensor* n) {
  const Tensor* a = n->src[0];
  switch (n->op) {
    case OpKind::MUL_MAT:
    case OpKind::MUL_MAT_ID: return 2.0 * (double)n->nelements() * (double)a->ne[0];
    case OpKind::OUT_PROD: return 2.0 * (double)n->nelements() * (double)a->ne[1];
    case OpKind::FLASH_ATTN_EXT: {
      const Tensor* q = n->src[0];
      const Tensor* k = n->src[1];
      const Tensor* v = n->src[2];
      return 2.0 * (double)(q->ne[1] * q->ne[2] * q->ne[3]) * (double)k->ne[1] * (double)(q->ne[0] + v->ne[0]);
    }
    default: return 0.0;
  }
}

namespace detail {

CaseResult make_result(const OpCase& c, const char* mode, const Device& device) {
  CaseResult r;
  r.op = c.op;
  r.params = c.params;
  r.mode = mode;
  r.backend = device.name();
  return r;
}

// The first computing node the device cannot run, or nullptr.
const Tensor* unsupported_node(const PlacedCase& pc, const Device& device) {
  for (const Tensor* n : pc.compute_nodes())
    if (!device.supports_op(n)) return n;
  return nullptr;
}

}  // namespace detail

namespace {

using detail::make_result;
using detail::unsupported_node;

std::string tag(const Tensor* t) { return fmt::format("[{}]", op_name(t->op)); }

void mark_fail(CaseResult& r, std::string message) {
  if (r.status != CaseStatus::fail) {
    r.status = CaseStatus::fail;
    r.message = std::move(message);
  }
}

// Per row of k ids: the permutation that sorts the row ascending.
std::vector<int64_t> row_sort_perm(const std::vector<int32_t>& ids, int64_t k) {
  std::vector<int64_t> perm(ids.size());
  for (size_t r0 = 0; r0 < ids.size(); r0 += (size_t)k) {
    std::iota(perm.begin() + (int64_t)r0, perm.begin() + (int64_t)r0 + k, (int64_t)r0);
    std::sort(perm.begin() + (int64_t)r0, perm.begin() + (int64_t)r0 + k,
              [&](int64_t x, int64_t y) { return ids[(size_t)x] < ids[(size_t)y]; });
  }
  return perm;
}

template <typename T>
std::vector<T> permuted(const std::vector<T>& v, const std::vector<int64_t>& perm) {
  std::vector<T> out(v.size());
  for (size_t i = 0; i < v.size() && i < perm.size(); ++i) out[i] = v[(size_t)perm[i]];
  return out;
}

void compare_outputs(const OpCase& c, const PlacedCase& dev, const PlacedCase& ref, const std::string& dev_name,
                     CaseResult& r) {
  std::vector<int64_t> perm_d, perm_r;  // IntCompare::row_sets
  for (size_t i = 0; i < dev.outputs().size(); ++i) {
    const Tensor* td = dev.outputs()[i];
    const Tensor* tr = ref.outputs()[i];
    if (td->type == DType::I32) {
      std::vector<int32_t> a = dev.read_i32(td), b = ref.read_i32(tr);
      if (c.int_compare == IntCompare::row_sets && i == 0) {
        perm_d = row_sort_perm(a, td->ne[0]);
        perm_r = row_sort_perm(b, tr->ne[0]);
        a = permuted(a, perm_d);
        b = permuted(b, perm_r);
      }
      int64_t bad = 0, first = -1;
      for (size_t j = 0; j < a.size(); ++j)
        if (a[j] != b[j]) {
          if (first < 0) first = (int64_t)j;
          ++bad;
        }
      if (bad)
        mark_fail(r, fmt::format("{} {} of {} values differ (first at {}: {}={} CPU={})", tag(td), bad, a.size(), first,
                            dev_name, a[(size_t)first], b[(size_t)first]));
      continue;
    }
    std::vector<float> a = dev.read_f32(td), b = ref.read_f32(tr);
    if (!perm_d.empty() && a.size() == perm_d.size()) {
      a = permuted(a, perm_d);
      b = permuted(b, perm_r);
    }
    for (size_t j = 0; j < a.size(); ++j)
      if (!std::isfinite(a[j]) || !std::isfinite(b[j])) {
        mark_fail(r, fmt::format("{} {} at index {} ({}={} CPU={})", tag(td), std::isnan(a[j]) || std::isnan(b[j]) ? "NaN" : "inf",
                            j, dev_name, a[j], b[j]));
        break;
      }
    const double e = detail::nmse(a, b);
    r.nmse = std::max(r.nmse, e);
    if (!(e <= c.max_nmse)) mark_fail(r, fmt::format("{} NMSE = {:.9f} > {:.9f}", tag(td), e, c.max_nmse));
  }
}

}  // namespace

CaseResult run_support(const OpCase& c, Device& device) {
  CaseResult r = make_result(c, "support", device);
  PlacedCase pc(c, 0);
  if (const Tensor* n = unsupported_node(pc, device)) {
    r.status = CaseStatus::not_supported;
    r.message = fmt::format("no kernel for {} ({})", op_name(n->op), describe(*n));
  }
  return r;
}

CaseResult run_test(const OpCase& c, Device& device, const RunOptions& opt) {
  CaseResult r = make_result(c, "test", device);
  r.max_nmse = c.max_nmse;
  try {
    PlacedCase dev(c, opt.seed);
    if (const Tensor* n = unsupported_node(dev, device)) {
      r.status = CaseStatus::not_supported;
      r.message = fmt::format("{} has no kernel for {} ({})", device.name(), op_name(n->op), describe(*n));
      return r;
    }
    dev.place(device.buffer_type());
    dev.upload();
    {
      std::unique_ptr<Stream> stream = device.create_stream();
      const std::vector<Tensor*>& nodes = dev.graph().nodes();
      Status st = stream->compute(dev.graph(), std::span<Tensor* const>(nodes.data(), nodes.size()));
      if (st) stream->synchronize();
      if (!st) {
        mark_fail(r, fmt::format("compute failed: {}", st.message()));
        return r;
      }
    }
    dev.download();
    if (std::string g = dev.check_guards(); !g.empty()) mark_fail(r, g);

    // the reference: the host device (the CPU), one thread, one node at a time (no fusion)
    std::unique_ptr<Device> ref_device = registry().host_device({.n_threads = 1});
    PlacedCase ref(c, opt.seed);
    ref.place(ref_device->buffer_type());
    ref.upload();
    std::unique_ptr<Stream> ref_stream = ref_device->create_stream();
    for (Tensor* n : ref.graph().nodes())
      ref_stream->compute(ref.graph(), std::span<Tensor* const>(&n, 1)).throw_if_error();
    ref.download();
    if (std::string g = ref.check_guards(); !g.empty()) mark_fail(r, "CPU reference " + g);
    compare_outputs(c, dev, ref, device.name(), r);
  } catch (const Error& e) {
    mark_fail(r, e.what());
  }
  return r;
}

}  // namespace loom::testing
