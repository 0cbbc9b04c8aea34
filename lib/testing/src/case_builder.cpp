// CaseBuilder (leaves with fill rules, outputs), the catalog assembled from its family files,
// and small helpers for parameter strings.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "catalog_families.h"
#include "loom/core/error.h"
#include "loom/testing/op_case.h"

namespace loom::testing {

Tensor* CaseBuilder::leaf(DType type, std::initializer_list<int64_t> ne, LeafInit init) {
  Tensor* t = ctx_.new_tensor(type, ne, fmt::format("in{}", inits_.size()));
  t->flags |= kFlagInput;
  inits_[t] = init;
  return t;
}

Tensor* CaseBuilder::input(DType type, std::initializer_list<int64_t> ne, LeafInit init) { return leaf(type, ne, init); }

Tensor* CaseBuilder::param(std::initializer_list<int64_t> ne, LeafInit init) {
  Tensor* t = leaf(DType::F32, ne, init);
  t->flags |= kFlagParam;
  return t;
}

Tensor* CaseBuilder::ids(std::initializer_list<int64_t> ne, int64_t lo, int64_t hi) {
  return leaf(DType::I32, ne, LeafInit::ints(lo, hi));
}

Tensor* CaseBuilder::distinct_ids(std::initializer_list<int64_t> ne, int64_t n) {
  LOOM_ASSERT(*ne.begin() <= n, "distinct_ids: rows of {} from {} values", *ne.begin(), n);
  return leaf(DType::I32, ne, LeafInit::distinct_ints(n));
}

Tensor* CaseBuilder::output(Tensor* t) {
  outputs_.push_back(t);
  return t;
}

const LeafInit& CaseBuilder::init_of(const Tensor* t) const {
  static const LeafInit kDefault{};
  auto it = inits_.find(t);
  return it == inits_.end() ? kDefault : it->second;
}

std::string ne_str(std::initializer_list<int64_t> ne) { return fmt::format("[{}]", fmt::join(ne, ",")); }

std::string ne_str(const int64_t ne[4]) { return fmt::format("[{},{},{},{}]", ne[0], ne[1], ne[2], ne[3]); }

const std::vector<OpCase>& catalog() {
  static const std::vector<OpCase> all = [] {
    std::vector<OpCase> out;
    detail::add_copy_cases(out);
    detail::add_elementwise_cases(out);
    detail::add_norm_reduce_cases(out);
    detail::add_matmul_cases(out);
    detail::add_attention_cases(out);
    detail::add_train_cases(out);
    detail::add_fusion_cases(out);
    return out;
  }();
  return all;
}

std::vector<const OpCase*> cases_for(Mode mode) {
  std::vector<const OpCase*> out;
  for (const OpCase& c : catalog())
    if (c.modes & mode) out.push_back(&c);
  return out;
}

}  // namespace loom::testing
