// The op-case catalog shared by the GoogleTest suites and loom-bench-ops: each case builds a
// small graph (one op, or a fused pattern) in a Context, says how its leaves are filled, which
// tensors are compared, its NMSE limit, and in which modes (test, grad, perf) it runs.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <string>
#include <unordered_map>
#include <vector>

#include "loom/graph/context.h"

namespace loom::testing {

enum Mode : uint32_t { kModeTest = 1u << 0, kModeGrad = 1u << 1, kModePerf = 1u << 2 };

// How a leaf's values are drawn (seeded per case and leaf, identical on every device).
struct LeafInit {
  enum class Kind : uint8_t { normal, uniform, ints, distinct_ints, constant, values, row_probs };
  Kind kind = Kind::normal;
  double a = 0.0, b = 1.0;  // normal: mean, sigma; uniform and ints: [a, b) ; distinct_ints: [0, b) ; constant: a
  std::vector<float> list;  // values: element i = list[i % size]
  static LeafInit normal(double mean = 0.0, double sigma = 1.0) { return {Kind::normal, mean, sigma}; }
  static LeafInit uniform(double lo, double hi) { return {Kind::uniform, lo, hi}; }
  static LeafInit ints(int64_t lo, int64_t hi) { return {Kind::ints, (double)lo, (double)hi}; }
  // Each row of ne0 values holds distinct ints from [0, n) (needs ne0 <= n).
  static LeafInit distinct_ints(int64_t n) { return {Kind::distinct_ints, 0.0, (double)n}; }
  static LeafInit constant(double v) { return {Kind::constant, v, 0.0}; }
  static LeafInit values(std::vector<float> v) { return {Kind::values, 0.0, 0.0, std::move(v)}; }
  // Each row (ne0 values) uniform in [0, 1) then divided by its sum: a probability distribution.
  static LeafInit row_probs() { return {Kind::row_probs, 0.0, 1.0}; }
};

// Handed to a case's build function: makes leaves with their fill rules and names the outputs.
class CaseBuilder {
 public:
  explicit CaseBuilder(Context& ctx) : ctx_(ctx) {}
  Context& ctx() { return ctx_; }

  // A leaf input; quantized types are quantized from values drawn as F32.
  Tensor* input(DType type, std::initializer_list<int64_t> ne, LeafInit init = {});
  // An F32 leaf that grad mode differentiates (kFlagParam).
  Tensor* param(std::initializer_list<int64_t> ne, LeafInit init = {});
  // I32 leaf of ints in [lo, hi).
  Tensor* ids(std::initializer_list<int64_t> ne, int64_t lo, int64_t hi);
  // I32 leaf whose rows (ne0 values each) hold distinct ints in [0, n).
  Tensor* distinct_ids(std::initializer_list<int64_t> ne, int64_t n);
  // Compared in test mode, in order (default: the last node built). Leaves allowed (in-place ops).
  Tensor* output(Tensor* t);

  const std::vector<Tensor*>& outputs() const { return outputs_; }
  const LeafInit& init_of(const Tensor* t) const;

 private:
  Tensor* leaf(DType type, std::initializer_list<int64_t> ne, LeafInit init);
  Context& ctx_;
  std::vector<Tensor*> outputs_;
  std::unordered_map<const Tensor*, LeafInit> inits_;
};

// How test mode compares integer outputs.
enum class IntCompare : uint8_t {
  exact,
  // Each row of the first output (I32 ids) is compared as a set; float outputs that follow are
  // compared with their rows permuted the same way (top-k ids with their weights).
  row_sets,
};

struct OpCase {
  std::string op;      // printed op name: "MUL_MAT", or a fused pattern ("RMS_NORM_MUL", "TOPK_MOE")
  std::string params;  // "type_a=q4_0,type_b=f32,m=4096,n=1,k=4096"
  uint32_t modes = kModeTest;
  double max_nmse = 1e-7;
  double max_maa = 1e-4;    // grad mode: mean absolute asymmetry of numeric vs backward gradients
  float grad_eps = 0.1f;    // grad mode: central-difference step
  bool grad_precise = true; // grad mode: 4-point central difference (truncation error O(eps^4))
  IntCompare int_compare = IntCompare::exact;
  std::function<void(CaseBuilder&)> build;

  std::string name() const { return op + "(" + params + ")"; }
};

// Every case of the catalog (all modes); filter by OpCase::modes.
const std::vector<OpCase>& catalog();
// The cases of one mode.
std::vector<const OpCase*> cases_for(Mode mode);

// "f32", "[4,5,6,7]" ... for params strings.
std::string ne_str(std::initializer_list<int64_t> ne);
std::string ne_str(const int64_t ne[4]);

}  // namespace loom::testing
