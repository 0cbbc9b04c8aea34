// Grad mode: loss = sum(out * R) (R fixed random, so every output element matters; a scalar
// output is the loss itself), gradients of every F32 parameter from build_backward, compared with
// central finite differences (4-point stencil, step eps; loss summed in double on the host) by
// mean absolute asymmetry.
#include <cmath>

#include "loom/core/error.h"
#include "loom/graph/autograd.h"
#include "loom/graph/ops.h"
#include "loom/testing/runner.h"
#include "placed_case.h"

namespace loom::testing {

namespace {

constexpr int64_t kMaxGradElements = 4096;  // finite differences cost 4 forward runs per element

// mean over i of |a - b| / (|a| + |b|), pairs that are both ~0 counting as equal.
double mean_abs_asymmetry(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double den = std::fabs((double)a[i]) + std::fabs((double)b[i]);
    if (den > 1e-6) sum += std::fabs((double)a[i] - (double)b[i]) / den;
  }
  return a.empty() ? 0.0 : sum / (double)a.size();
}

void run_nodes(Stream& stream, const Graph& g) {
  Status st = stream.compute(g, std::span<Tensor* const>(g.nodes().data(), g.nodes().size()));
  if (st) stream.synchronize();
  st.throw_if_error();
}

}  // namespace

CaseResult run_grad(const OpCase& c, Device& device, const RunOptions& opt) {
  CaseResult r = detail::make_result(c, "grad", device);
  r.max_maa = c.max_maa;
  try {
    detail::PlacedCase pc(c, opt.seed);
    Context& ctx = pc.ctx();
    Tensor* out = pc.outputs()[0];
    std::vector<Tensor*> params;
    int64_t n_grad = 0;
    for (Tensor* l : pc.graph().leafs())
      if (l->has_flag(kFlagParam)) {
        params.push_back(l);
        n_grad += l->nelements();
      }
    auto skip = [&](CaseStatus s, std::string why) {
      r.status = s;
      r.message = std::move(why);
      return r;
    };
    if (out->type != DType::F32) return skip(CaseStatus::not_supported, "the output is not F32");
    if (params.empty()) return skip(CaseStatus::not_supported, "no F32 parameter");
    if (n_grad > kMaxGradElements) return skip(CaseStatus::skipped, fmt::format("{} parameters (> {})", n_grad, kMaxGradElements));
    for (const Tensor* n : pc.compute_nodes())
      if (!op_has_grad_rule(n->op)) return skip(CaseStatus::not_supported, fmt::format("no gradient rule for {}", op_name(n->op)));

    Tensor* loss = out;
    Tensor* r_leaf = nullptr;
    if (out->nelements() != 1) {
      r_leaf = pc.builder().input(DType::F32, {out->ne[0], out->ne[1], out->ne[2], out->ne[3]});
      loss = ops::sum(ctx, ops::mul(ctx, out, r_leaf));
    }
    loss->flags |= kFlagLoss | kFlagOutput;
    Gradients grads;
    {
      Graph gf;
      gf.build_forward(loss);
      grads = build_backward(ctx, gf, loss);
    }
    Graph gb;
    gb.build_forward(loss);
    for (Tensor* p : params)
      if (Tensor* g = grads.of(p)) gb.build_forward(g);
    if (const Tensor* n = detail::unsupported_node(pc, device)) return skip(CaseStatus::not_supported, fmt::format("{} has no kernel for {}", device.name(), op_name(n->op)));
    for (const Tensor* n : gb.nodes())
      if (!device.supports_op(n)) return skip(CaseStatus::not_supported, fmt::format("{} has no kernel for {} ({})", device.name(), op_name(n->op), describe(*n)));

    pc.place(device.buffer_type());
    pc.upload();
    for (GradConstant& k : grads.constants) pc.write_leaf_f32(k.tensor, k.values);
    std::unique_ptr<Stream> stream = device.create_stream();
    run_nodes(*stream, gb);
    pc.download();
    const std::vector<float> weights = r_leaf ? pc.read_f32(r_leaf) : std::vector<float>{};
    Graph g_out;
    g_out.build_forward(out);

    const float eps = c.grad_eps;
    for (Tensor* p : params) {
      const int64_t n = p->nelements();
      std::vector<float> ga = grads.of(p) ? pc.read_f32(grads.of(p)) : std::vector<float>((size_t)n, 0.0f);
      for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(ga[(size_t)i])) {
          r.status = CaseStatus::fail;
          r.message = fmt::format("[{}] backward gradient of '{}' is {} at {}", op_name(out->op), p->name, ga[(size_t)i], i);
          return r;
        }
      const std::vector<float> x0 = pc.read_f32(p);
      std::vector<float> gn((size_t)n);
      // The loss for finite differences is summed in double on the host from out's values:
      // elements the step does not touch are bit-identical in every run and cancel exactly.
      auto f_at = [&](int64_t i, float x) {
        pc.write_f32(p, i, x);
        run_nodes(*stream, g_out);
        if (weights.empty()) return (double)pc.read_scalar(out);
        pc.download(out);
        const std::vector<float> y = pc.read_f32(out);
        double f = 0;
        for (size_t j = 0; j < y.size(); ++j) f += (double)y[j] * weights[j];
        return f;
      };
      for (int64_t i = 0; i < n; ++i) {
        const float x = x0[(size_t)i];
        const double fu = f_at(i, x + eps), fd = f_at(i, x - eps);
        if (c.grad_precise) {
          const double fuh = f_at(i, x + 0.5f * eps), fdh = f_at(i, x - 0.5f * eps);
          gn[(size_t)i] = (float)((8.0 * fuh + fd - 8.0 * fdh - fu) / (6.0 * eps));
        } else {
          gn[(size_t)i] = (float)((fu - fd) / (2.0 * eps));
        }
        pc.write_f32(p, i, x);
      }
      const double maa = mean_abs_asymmetry(gn, ga);
      r.maa = std::max(r.maa, maa);
      if (!(maa <= c.max_maa)) {
        r.status = CaseStatus::fail;
        r.message = fmt::format("[{}] MAA = {:.9f} > {:.9f} for '{}'", op_name(out->op), maa, c.max_maa, p->name);
        return r;
      }
    }
  } catch (const Error& e) {
    r.status = e.kind() == ErrorKind::unsupported ? CaseStatus::not_supported : CaseStatus::fail;
    r.message = e.what();
  }
  return r;
}

}  // namespace loom::testing
