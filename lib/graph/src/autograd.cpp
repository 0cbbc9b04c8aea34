// Reverse-mode autograd: walks the forward graph backwards and applies one gradient rule per op
// (a table indexed by OpKind). Rules build ordinary ops, so the backward graph runs, is planned
// and is allocated like any other. Gradients of a tensor used several times are summed; every
// stored gradient is a contiguous F32 tensor of its tensor's shape.
#include "loom/graph/autograd.h"

#include <array>
#include <cmath>
#include <limits>
#include <unordered_set>

#include <fmt/format.h>

#include "loom/core/error.h"
#include "loom/graph/ops.h"

namespace loom {

namespace {

using namespace ops;

struct Backprop {
  Context& c;
  Gradients& out;
  std::unordered_set<const Tensor*> needs;  // tensors on a path from a parameter
  std::unordered_map<int64_t, Tensor*> identities;

  bool wants(const Tensor* t) const { return t && needs.count(t) != 0; }

  // Adds g (t's element count; any layout) to t's gradient.
  void add(Tensor* t, Tensor* g) {
    if (!wants(t)) return;
    LOOM_ASSERT(g->nelements() == t->nelements(), "gradient {} for {}", describe(*g), describe(*t));
    if (!g->is_contiguous() || g->type != DType::F32) g = cont_f32(g);
    if (!same_shape(*g, *t)) g = reshape4(g, t->ne);
    auto [it, fresh] = out.grad.emplace(t, g);
    if (!fresh) it->second = ops::add(c, it->second, g);
  }

  Tensor* reshape4(Tensor* t, const int64_t* ne) { return reshape(c, t, {ne[0], ne[1], ne[2], ne[3]}); }
  Tensor* cont_f32(Tensor* t) {
    if (t->type == DType::F32) return cont(c, t);
    return repeat(c, t, t);  // repeat to the same shape: a converting copy to F32
  }
  // A tensor of a's shape full of zeros (0 * a: a's values are finite whenever the loss is).
  Tensor* zeros_like(Tensor* a) { return scale(c, a, 0.0f, 0.0f); }
  // A tensor with this shape and no data, only to pass a shape to repeat / repeat_back.
  Tensor* shape_of(int64_t n0, int64_t n1 = 1, int64_t n2 = 1, int64_t n3 = 1) {
    return c.new_tensor(DType::F32, {n0, n1, n2, n3});
  }
  // g reduced to b's shape where b was broadcast (tiled) over it.
  Tensor* reduce_to(Tensor* g, const Tensor* b) {
    return same_shape(*g, *b) ? g : repeat_back(c, g, const_cast<Tensor*>(b));
  }
  // t {X, Y, b2, b3} from a matmul whose a {.., .., a2, a3} was broadcast over b's batches with
  // batch i mapping to i / (b / a): sum each group back onto a's batch dims.
  Tensor* reduce_matmul_batch(Tensor* t, int64_t a2, int64_t a3) {
    const int64_t X = t->ne[0], Y = t->ne[1], b2 = t->ne[2], b3 = t->ne[3];
    if (b3 != a3) {
      Tensor* r = reshape(c, t, {X * Y * b2, b3 / a3, a3});
      t = reshape(c, repeat_back(c, r, shape_of(X * Y * b2, 1, a3)), {X, Y, b2, a3});
    }
    if (b2 != a2) {
      Tensor* r = reshape(c, t, {X * Y, b2 / a2, a2, a3});
      t = reshape(c, repeat_back(c, r, shape_of(X * Y, 1, a2, a3)), {X, Y, a2, a3});
    }
    return t;
  }
  // Identity matrix {n, n} (a constant the caller uploads).
  Tensor* identity(int64_t n) {
    auto it = identities.find(n);
    if (it != identities.end()) return it->second;
    Tensor* t = c.new_tensor(DType::F32, {n, n}, fmt::format("grad_identity_{}", n));
    t->flags |= kFlagInput;
    GradConstant k{t, std::vector<float>((size_t)(n * n), 0.0f)};
    for (int64_t i = 0; i < n; ++i) k.values[(size_t)(i * n + i)] = 1.0f;
    out.constants.push_back(std::move(k));
    return identities[n] = t;
  }
  // ids I32 (any shape, S elements) -> F32 {S, rows}: row s one-hot at ids[s], laid out so
  // that result[s, r] = (ids[s] == r).
  Tensor* one_hot_t(Tensor* ids, int64_t rows) {
    const int64_t S = ids->nelements();
    Tensor* flat = ids->is_contiguous() ? reshape(c, ids, {S}) : reshape(c, cont(c, ids), {S});
    Tensor* oh = get_rows(c, identity(rows), flat);  // {rows, S}
    return cont(c, transpose(c, oh));                // {S, rows}
  }
};

using Rule = void (*)(Backprop& b, Tensor* y, Tensor* g);

// ---- views and data movement ----------------------------------------------------------------

void grad_view(Backprop& b, Tensor* y, Tensor* g) {
  Tensor* a = y->src[0];
  if (!b.wants(a)) return;
  const size_t a_offs = a->view_src ? a->view_offs : 0;
  const size_t rel = y->view_offs - a_offs;
  if (rel == 0 && y->is_contiguous() && a->is_contiguous() && y->nelements() == a->nelements()) {
    b.add(a, g);  // a reshape spelled as a view
    return;
  }
  const DTypeInfo& info = dtype_info(a->type);
  LOOM_CHECK(a->is_contiguous() && info.block_size == 1 && info.is_float && y->view_offs >= a_offs, unsupported,
             "[autograd] VIEW '{}' of a non-contiguous or non-float tensor {} has no gradient rule", y->name,
             describe(*a));
  // Scatter g into zeros of a's shape at the view's place (strides rescaled to F32).
  const size_t ts = info.type_size;
  Tensor* z = b.zeros_like(a);
  auto f32 = [ts](size_t bytes) { return bytes / ts * sizeof(float); };
  Tensor* v = view_4d(b.c, z, y->ne[0], y->ne[1], y->ne[2], y->ne[3], f32(y->nb[1]), f32(y->nb[2]), f32(y->nb[3]),
                      f32(rel));
  v->nb[0] = f32(y->nb[0]);
  Tensor* written = cpy(b.c, g, v);
  // A view of all of z that depends on the copy (the offset wraps back to z's start).
  Tensor* full = view_4d(b.c, written, z->ne[0], z->ne[1], z->ne[2], z->ne[3], z->nb[1], z->nb[2], z->nb[3],
                         (size_t)0 - written->view_offs);
  b.add(a, full);
}

void grad_reshape(Backprop& b, Tensor* y, Tensor* g) { b.add(y->src[0], g); }

void grad_permute(Backprop& b, Tensor* y, Tensor* g) {
  int inv[4];
  for (int i = 0; i < 4; ++i) inv[y->param_i32(i)] = i;
  b.add(y->src[0], permute(b.c, g, inv[0], inv[1], inv[2], inv[3]));
}

void grad_cpy(Backprop& b, Tensor* y, Tensor* g) {
  b.add(y->src[0], g);  // element i of a went to element i of the destination
}

void grad_identity(Backprop& b, Tensor* y, Tensor* g) { b.add(y->src[0], g); }

void grad_concat(Backprop& b, Tensor* y, Tensor* g) {
  Tensor* a = y->src[0];
  Tensor* s = y->src[1];
  const int dim = y->param_i32(0);
  b.add(a, view_4d(b.c, g, a->ne[0], a->ne[1], a->ne[2], a->ne[3], g->nb[1], g->nb[2], g->nb[3], 0));
  b.add(s, view_4d(b.c, g, s->ne[0], s->ne[1], s->ne[2], s->ne[3], g->nb[1], g->nb[2], g->nb[3],
                   (size_t)a->ne[dim] * g->nb[dim]));
}

void grad_repeat(Backprop& b, Tensor* y, Tensor* g) { b.add(y->src[0], repeat_back(b.c, g, y->src[0])); }
void grad_repeat_back(Backprop& b, Tensor* y, Tensor* g) { b.add(y->src[0], repeat(b.c, g, y->src[0])); }

void grad_get_rows(Backprop& b, Tensor* y, Tensor* g) {
  Tensor* a = y->src[0];
  Tensor* ids = y->src[1];
  if (!b.wants(a)) return;
  const int64_t n0 = a->ne[0], rows = a->ne[1], n = ids->ne[0];
  if (a->ne[2] == 1 && a->ne[3] == 1 && ids->nelements() == n) {
    Tensor* flat = ids->is_contiguous() ? ids : cont(b.c, ids);
    b.add(a, get_rows_back(b.c, reshape(b.c, g, {n0, n}), flat, a));
    return;
  }
  // Batched rows: per batch j, grad_a[:, r, j] = sum_i g[:, i, j] * (ids[i, j] == r), a batched
  // matmul with one-hot rows.
  const int64_t a2 = a->ne[2], a3 = a->ne[3];
  Tensor* oh = reshape(b.c, b.one_hot_t(ids, rows), {n, a2, a3, rows});  // [i, j, k, r]
  Tensor* ohp = cont(b.c, permute(b.c, oh, 0, 2, 3, 1));                // {n, rows, a2, a3}
  Tensor* gt = cont(b.c, transpose(b.c, g));                             // {n, n0, a2, a3}
  b.add(a, mul_mat(b.c, gt, ohp));                                       // {n0, rows, a2, a3}
}

void grad_get_rows_back(Backprop& b, Tensor* y, Tensor* g) {
  b.add(y->src[0], get_rows(b.c, g, y->src[1]));
}

void grad_set_rows(Backprop& b, Tensor* y, Tensor* g) {
  Tensor* dst = y->src[0];
  Tensor* src = y->src[1];
  Tensor* ids = y->src[2];
  const bool plain = dst->ne[2] == 1 && dst->ne[3] == 1 && ids->nelements() == ids->ne[0];
  LOOM_CHECK(plain || !(b.wants(dst) || b.wants(src)), unsupported,
             "[autograd] SET_ROWS '{}': gradients only for 2-D destinations", y->name);
  if (b.wants(src)) b.add(src, get_rows(b.c, g, ids));
  if (b.wants(dst)) b.add(dst, set_rows(b.c, dup(b.c, g), b.zeros_like(src), ids));  // written rows get none
}

// ---- element-wise ---------------------------------------------------------------------------

void grad_add(Backprop& b, Tensor* y, Tensor* g) {
  b.add(y->src[0], g);
  if (b.wants(y->src[1])) b.add(y->src[1], b.reduce_to(g, y->src[1]));
}

void grad_sub(Backprop& b, Tensor* y, Tensor* g) {
  b.add(y->src[0], g);
  if (b.wants(y->src[1])) b.add(y->src[1], scale(b.c, b.reduce_to(g, y->src[1]), -1.0f));
}

void grad_mul(Backprop& b, Tensor* y, Tensor* g) {
  Tensor* x = y->src[0];
  Tensor* w = y->src[1];
  if (b.wants(x)) b.add(x, mul(b.c, g, w));
  if (b.wants(w)) b.add(w, b.reduce_to(mul(b.c, g, x), w));
}

void grad_div(Backprop& b, Tensor* y, Tensor* g) {
  Tensor* x = y->src[0];
  Tensor* w = y->src[1];
  Tensor* gx = div(b.c, g, w);
  if (b.wants(x)) b.add(x, gx);
  if (b.wants(w)) b.add(w, b.reduce_to(scale(b.c, mul(b.c, gx, y), -1.0f), w));  // -g x / w^2
}

void grad_add_id(Backprop& b, Tensor* y, Tensor* g) {
  Tensor* a = y->src[0];
  Tensor* bias = y->src[1];
  Tensor* ids = y->src[2];
  b.add(a, g);
  if (!b.wants(bias)) return;
  const int64_t n0 = g->ne[0], S = ids->nelements();
  Tensor* flat = ids->is_contiguous() ? reshape(b.c, ids, {S}) : reshape(b.c, cont(b.c, ids), {S});
  b.add(bias, get_rows_back(b.c, reshape(b.c, g, {n0, S}), flat, bias));
}

void grad_scale(Backprop& b, Tensor* y, Tensor* g) { b.add(y->src[0], scale(b.c, g, y->param_f32(0))); }
void grad_silu(Backprop& b, Tensor* y, Tensor* g) { b.add(y->src[0], silu_back(b.c, g, y->src[0])); }

// gelu(x) = 0.5 x (1 + t), t = tanh(u), u = c (x + k x^3):
// gelu' = 0.5 (1 + t) + 0.5 x (1 - t^2) c (1 + 3 k x^2); tanh(u) = 2 sigmoid(2u) - 1.
void grad_gelu(Backprop& b, Tensor* y, Tensor* g) {
  Context& c = b.c;
  Tensor* x = y->src[0];
  constexpr float kC = 0.7978845608028654f, kK = 0.044715f;
  Tensor* x2 = sqr(c, x);
  Tensor* u = scale(c, mul(c, x, scale(c, x2, kK, 1.0f)), kC);
  Tensor* t = scale(c, sigmoid(c, scale(c, u, 2.0f)), 2.0f, -1.0f);
  Tensor* du = scale(c, x2, 3.0f * kK * kC, kC);
  Tensor* term = mul(c, mul(c, scale(c, x, 0.5f), scale(c, sqr(c, t), -1.0f, 1.0f)), du);
  b.add(x, mul(c, g, add(c, scale(c, t, 0.5f, 0.5f), term)));
}

void grad_tanh(Backprop& b, Tensor* y, Tensor* g) {  // g (1 - y^2)
  b.add(y->src[0], mul(b.c, g, scale(b.c, sqr(b.c, y), -1.0f, 1.0f)));
}

void grad_sigmoid(Backprop& b, Tensor* y, Tensor* g) {
  b.add(y->src[0], mul(b.c, g, mul(b.c, y, scale(b.c, y, -1.0f, 1.0f))));
}
void grad_softplus(Backprop& b, Tensor* y, Tensor* g) { b.add(y->src[0], mul(b.c, g, sigmoid(b.c, y->src[0]))); }
void grad_exp(Backprop& b, Tensor* y, Tensor* g) { b.add(y->src[0], mul(b.c, g, y)); }
void grad_log(Backprop& b, Tensor* y, Tensor* g) { b.add(y->src[0], div(b.c, g, y->src[0])); }
void grad_sqr(Backprop& b, Tensor* y, Tensor* g) { b.add(y->src[0], mul(b.c, g, scale(b.c, y->src[0], 2.0f))); }
void grad_sqrt(Backprop& b, Tensor* y, Tensor* g) { b.add(y->src[0], div(b.c, scale(b.c, g, 0.5f), y)); }

// 1 where t < limit, 0 elsewhere: limit - t rounds to a positive float whenever t < limit (at
// least limit 2^-25 near it), which 2^100 lifts to 1 or more before the clamp.
Tensor* below(Context& c, Tensor* t, float limit) {
  LOOM_CHECK(limit >= 0x1p-70f, unsupported, "[autograd] a clamp limit of {} is too small for its gradient", limit);
  return clamp(c, scale(c, scale(c, t, -1.0f, limit), 0x1p100f), 0.0f, 1.0f);
}

// gpt-oss: out = x s (u + 1), x = min(a, L), s = sigmoid(alpha x), u = clamp(b, -L, L):
// d/da = [a < L] (s + alpha x s (1 - s)) (u + 1), d/db = [-L < b < L] x s.
void grad_swiglu_oai(Backprop& b, Tensor* y, Tensor* g) {
  Context& c = b.c;
  Tensor* a = y->src[0];
  Tensor* up = y->src[1];
  const float alpha = y->param_f32(0), limit = y->param_f32(1);
  Tensor* x = clamp(c, a, -std::numeric_limits<float>::max(), limit);
  Tensor* s = sigmoid(c, scale(c, x, alpha));
  if (b.wants(a)) {
    Tensor* ds = add(c, s, mul(c, scale(c, x, alpha), mul(c, s, scale(c, s, -1.0f, 1.0f))));
    Tensor* u1 = scale(c, clamp(c, up, -limit, limit), 1.0f, 1.0f);
    b.add(a, mul(c, mul(c, g, below(c, a, limit)), mul(c, ds, u1)));
  }
  if (b.wants(up)) {
    Tensor* inside = mul(c, below(c, up, limit), below(c, scale(c, up, -1.0f), limit));
    b.add(up, mul(c, mul(c, g, inside), mul(c, x, s)));
  }
}

void grad_swiglu(Backprop& b, Tensor* y, Tensor* g) {
  Tensor* gate = y->src[0];
  Tensor* up = y->src[1];
  if (b.wants(gate)) b.add(gate, silu_back(b.c, mul(b.c, g, up), gate));
  if (b.wants(up)) b.add(up, mul(b.c, g, silu(b.c, gate)));
}

// silu_back(d, x) = d s (1 + x (1 - s)), s = sigmoid(x): linear in d; its x-derivative is
// d silu''(x) = d s (1 - s) (2 + x (1 - 2 s)).
void grad_silu_back(Backprop& b, Tensor* y, Tensor* g) {
  Context& c = b.c;
  Tensor* d = y->src[0];
  Tensor* x = y->src[1];
  if (b.wants(d)) b.add(d, silu_back(c, g, x));
  if (b.wants(x)) {
    Tensor* sg = sigmoid(c, x);
    Tensor* curv = mul(c, mul(c, sg, scale(c, sg, -1.0f, 1.0f)), scale(c, mul(c, x, scale(c, sg, -2.0f, 1.0f)), 1.0f, 2.0f));
    b.add(x, mul(c, mul(c, g, d), curv));
  }
}

// ---- normalization and reductions ----------------------------------------------------------

// y = sum over the group of x: each member's x reaches every member's y, so its gradient is
// the group's sum of g (the identity on one device).
void grad_all_reduce(Backprop& b, Tensor* y, Tensor* g) {
  LOOM_CHECK(y->ne[0] == y->src[0]->ne[0], unsupported, "[backward] '{}': all_gather_rows has no gradient rule",
             y->name);
  b.add(y->src[0], all_reduce(b.c, g->is_contiguous() && g->type == DType::F32 ? g : b.cont_f32(g)));
}

void grad_rms_norm(Backprop& b, Tensor* y, Tensor* g) {
  b.add(y->src[0], rms_norm_back(b.c, g, y->src[0], y->param_f32(0)));
}

// y = (x - mean) / s, s = sqrt(var + eps): dx = (g - mean(g) - y mean(g y)) / s.
void grad_norm(Backprop& b, Tensor* y, Tensor* g) {
  Context& c = b.c;
  Tensor* x = y->src[0];
  Tensor* xc = sub(c, x, mean(c, x));
  Tensor* s = sqrt(c, scale(c, mean(c, sqr(c, xc)), 1.0f, y->param_f32(0)));
  Tensor* h = sub(c, sub(c, g, mean(c, g)), mul(c, y, mean(c, mul(c, g, y))));
  b.add(x, div(c, h, s));
}

// rms_norm_back is linear in its upstream gradient with a symmetric Jacobian.
void grad_rms_norm_back(Backprop& b, Tensor* y, Tensor* g) {
  LOOM_CHECK(!b.wants(y->src[1]), unsupported, "[autograd] RMS_NORM_BACK '{}': no second derivative in x", y->name);
  b.add(y->src[0], rms_norm_back(b.c, g, y->src[1], y->param_f32(0)));
}

void grad_sum(Backprop& b, Tensor* y, Tensor* g) { b.add(y->src[0], repeat(b.c, g, y->src[0])); }
void grad_mean(Backprop& b, Tensor* y, Tensor* g) {
  b.add(y->src[0], repeat(b.c, scale(b.c, g, 1.0f / (float)y->src[0]->ne[0]), y->src[0]));
}

// ---- matrix products ------------------------------------------------------------------------

// y {M, N, b2, b3} = a {K, M, a2, a3} x b {K, N, b2, b3}:
// grad_b = a^T g (a transposed once per step), grad_a[k, m] = sum_n b[k, n] g[m, n] (out_prod).
void grad_mul_mat(Backprop& b, Tensor* y, Tensor* g) {
  Tensor* a = y->src[0];
  Tensor* x = y->src[1];
  if (b.wants(x)) {
    Tensor* af = a->type == DType::F32 ? a : repeat(b.c, a, a);  // quantized or f16 -> f32
    b.add(x, mul_mat(b.c, cont(b.c, transpose(b.c, af)), g));
  }
  if (b.wants(a)) {  // contract over n with both operands transposed: the fast mul_mat path
    Tensor* xt = cont(b.c, transpose(b.c, x->type == DType::F32 ? x : b.cont_f32(x)));  // {N, K, ..}
    Tensor* gt = transpose(b.c, g);                                                      // {N, M, ..}
    b.add(a, b.reduce_matmul_batch(mul_mat(b.c, xt, gt), a->ne[2], a->ne[3]));
  }
}

// y {M, n_used, T}: y[:, i, t] = as[:, :, ids[i, t]] x b[:, i % bn, t].
void grad_mul_mat_id(Backprop& b, Tensor* y, Tensor* g) {
  Context& c = b.c;
  Tensor* as = y->src[0];
  Tensor* x = y->src[1];
  Tensor* ids = y->src[2];
  const int64_t K = as->ne[0], M = as->ne[1], E = as->ne[2];
  const int64_t n_used = ids->ne[0], T = ids->ne[1], S = n_used * T;
  if (b.wants(x)) {
    Tensor* af = as->type == DType::F32 ? as : repeat(c, as, as);
    Tensor* at = cont(c, permute(c, af, 1, 0, 2, 3));  // {M, K, E}
    Tensor* gx = mul_mat_id(c, at, g, ids);            // {K, n_used, T}
    b.add(x, b.reduce_to(gx, x));
  }
  if (b.wants(as)) {
    // grad_as[k, m, e] = sum_s x[k, s] g[m, s] (ids[s] == e): mask g per expert, one matmul.
    Tensor* xs = x->ne[1] == n_used ? x : repeat(c, x, b.shape_of(K, n_used, T));
    Tensor* xt = cont(c, transpose(c, reshape(c, xs->is_contiguous() ? xs : cont(c, xs), {K, S})));  // {S, K}
    Tensor* gt = cont(c, transpose(c, reshape(c, g, {M, S})));                                        // {S, M}
    Tensor* oh = reshape(c, b.one_hot_t(ids, E), {S, 1, E});
    Tensor* gm = mul(c, repeat(c, reshape(c, gt, {S, M, 1}), b.shape_of(S, M, E)), oh);  // {S, M, E}
    b.add(as, mul_mat(c, xt, gm));                                                        // {K, M, E}
  }
}

// y {M, N, b..} = a {M, K, a..} (x) b {N, K, b..}: grad_a = g b (contract n), grad_b = g^T a.
void grad_out_prod(Backprop& b, Tensor* y, Tensor* g) {
  Context& c = b.c;
  Tensor* a = y->src[0];
  Tensor* x = y->src[1];
  if (b.wants(a)) {
    Tensor* gt = cont(c, transpose(c, g));  // {N, M, ..}
    b.add(a, b.reduce_matmul_batch(mul_mat(c, gt, x->type == DType::F32 ? x : b.cont_f32(x)), a->ne[2], a->ne[3]));
  }
  if (b.wants(x)) {  // a broadcasts over g's batches as mul_mat's a does: a^T g, transposed
    Tensor* af = a->type == DType::F32 ? a : b.cont_f32(a);
    b.add(x, transpose(c, mul_mat(c, af, g)));  // {K, N, ..} -> {N, K, ..}
  }
}

// ---- attention and loss ---------------------------------------------------------------------

RopeParams rope_params_of(const Tensor* y) {
  RopeParams p;
  p.n_dims = y->param_i32(0);
  p.mode = y->param_i32(1);
  p.n_ctx_orig = y->param_i32(2);
  p.freq_base = y->param_f32(3);
  p.freq_scale = y->param_f32(4);
  p.attn_factor = y->param_f32(5);
  p.ext_factor = y->param_f32(6);
  p.beta_fast = y->param_f32(7);
  p.beta_slow = y->param_f32(8);
  return p;
}

void grad_rope(Backprop& b, Tensor* y, Tensor* g) {
  b.add(y->src[0], rope_back(b.c, g, y->src[1], y->src[2], rope_params_of(y)));
}

void grad_rope_back(Backprop& b, Tensor* y, Tensor* g) {
  b.add(y->src[0], rope(b.c, g, y->src[1], y->src[2], rope_params_of(y)));  // the transpose of a rotation
}

// out = s y (d - sum(d y)) per row: d-gradient soft_max_back(G, y) (symmetric in d);
// y-gradient s (G (d - sum(d y)) - d sum(G y)).
void grad_soft_max_back(Backprop& b, Tensor* y, Tensor* g) {
  Context& c = b.c;
  Tensor* d = y->src[0];
  Tensor* p = y->src[1];
  const float s = y->param_f32(0);
  if (b.wants(d)) b.add(d, soft_max_back(c, g, p, s, y->param_f32(1)));
  if (b.wants(p)) {
    Tensor* dy = sum_rows(c, mul(c, d, p));
    Tensor* gy = sum_rows(c, mul(c, g, p));
    b.add(p, scale(c, sub(c, mul(c, g, sub(c, d, dy)), mul(c, d, gy)), s));
  }
}

// With sinks y is the softmax over a row's logits and its head's sink, the sink's share left out:
// the logits' gradient is the same soft_max_back, and head h's sink gets
// -sum over its rows of (1 - sum(y)) sum(g y) (the sink's share times the row's g . y).
void grad_soft_max(Backprop& b, Tensor* y, Tensor* g) {
  Context& c = b.c;
  LOOM_CHECK(!b.wants(y->src[1]), unsupported, "[autograd] SOFT_MAX '{}': no gradient for the mask", y->name);
  if (b.wants(y->src[0])) b.add(y->src[0], soft_max_back(c, g, y, y->param_f32(0), y->param_f32(1)));
  Tensor* sinks = y->src[2];
  if (!b.wants(sinks)) return;
  Tensor* sink_share = scale(c, sum_rows(c, y), -1.0f, 1.0f);                    // {1, n1, heads, n3}
  Tensor* per_row = mul(c, scale(c, sum_rows(c, mul(c, g, y)), -1.0f), sink_share);
  b.add(sinks, repeat_back(c, per_row, b.shape_of(1, 1, y->ne[2], 1)));
}

void grad_cross_entropy(Backprop& b, Tensor* y, Tensor* g) {
  LOOM_CHECK(!b.wants(y->src[1]), unsupported, "[autograd] CROSS_ENTROPY_LOSS '{}': no gradient for the labels",
             y->name);
  b.add(y->src[0], cross_entropy_loss_back(b.c, g, y->src[0], y->src[1]));
}

// (softmax(l) - labels) * d / N is linear in the scalar d.
void grad_cross_entropy_back(Backprop& b, Tensor* y, Tensor* g) {
  LOOM_CHECK(!b.wants(y->src[1]) && !b.wants(y->src[2]), unsupported,
             "[autograd] CROSS_ENTROPY_LOSS_BACK '{}': no second derivative in the logits or labels", y->name);
  Context& c = b.c;
  Tensor* logits = y->src[1];
  Tensor* diff = sub(c, soft_max(c, logits, nullptr, 1.0f), y->src[2]);
  b.add(y->src[0], scale(c, sum(c, mul(c, g, diff)), 1.0f / (float)logits->nrows()));
}

// ---- the table ------------------------------------------------------------------------------

constexpr std::array<Rule, kOpCount> make_rules() {
  std::array<Rule, kOpCount> r{};
  auto set = [&r](OpKind op, Rule f) { r[static_cast<size_t>(op)] = f; };
  set(OpKind::VIEW, grad_view);
  set(OpKind::RESHAPE, grad_reshape);
  set(OpKind::PERMUTE, grad_permute);
  set(OpKind::TRANSPOSE, grad_permute);
  set(OpKind::CPY, grad_cpy);
  set(OpKind::DUP, grad_identity);
  set(OpKind::CONT, grad_identity);
  set(OpKind::CONCAT, grad_concat);
  set(OpKind::REPEAT, grad_repeat);
  set(OpKind::REPEAT_BACK, grad_repeat_back);
  set(OpKind::GET_ROWS, grad_get_rows);
  set(OpKind::GET_ROWS_BACK, grad_get_rows_back);
  set(OpKind::SET_ROWS, grad_set_rows);
  set(OpKind::ADD, grad_add);
  set(OpKind::SUB, grad_sub);
  set(OpKind::MUL, grad_mul);
  set(OpKind::DIV, grad_div);
  set(OpKind::ADD_ID, grad_add_id);
  set(OpKind::SCALE, grad_scale);
  set(OpKind::SILU, grad_silu);
  set(OpKind::GELU, grad_gelu);
  set(OpKind::TANH, grad_tanh);
  set(OpKind::SIGMOID, grad_sigmoid);
  set(OpKind::SOFTPLUS, grad_softplus);
  set(OpKind::EXP, grad_exp);
  set(OpKind::LOG, grad_log);
  set(OpKind::SQR, grad_sqr);
  set(OpKind::SQRT, grad_sqrt);
  set(OpKind::SWIGLU, grad_swiglu);
  set(OpKind::SWIGLU_OAI, grad_swiglu_oai);
  set(OpKind::SILU_BACK, grad_silu_back);
  set(OpKind::RMS_NORM_BACK, grad_rms_norm_back);
  set(OpKind::OUT_PROD, grad_out_prod);
  set(OpKind::ROPE_BACK, grad_rope_back);
  set(OpKind::SOFT_MAX_BACK, grad_soft_max_back);
  set(OpKind::CROSS_ENTROPY_LOSS_BACK, grad_cross_entropy_back);
  set(OpKind::ALL_REDUCE, grad_all_reduce);
  set(OpKind::RMS_NORM, grad_rms_norm);
  set(OpKind::NORM, grad_norm);
  set(OpKind::SUM, grad_sum);
  set(OpKind::SUM_ROWS, grad_sum);
  set(OpKind::MEAN, grad_mean);
  set(OpKind::MUL_MAT, grad_mul_mat);
  set(OpKind::MUL_MAT_ID, grad_mul_mat_id);
  set(OpKind::ROPE, grad_rope);
  set(OpKind::SOFT_MAX, grad_soft_max);
  set(OpKind::CROSS_ENTROPY_LOSS, grad_cross_entropy);
  return r;
}

constexpr std::array<Rule, kOpCount> kRules = make_rules();

}  // namespace

bool op_has_grad_rule(OpKind op) { return kRules[static_cast<size_t>(op)] != nullptr; }

Gradients build_backward(Context& ctx, const Graph& fwd, Tensor* loss) {
  LOOM_CHECK(loss && fwd.contains(loss), invalid_input, "[autograd] the loss is not in the forward graph");
  LOOM_CHECK(loss->nelements() == 1 && loss->type == DType::F32, invalid_input,
             "[autograd] the loss must be a scalar F32, got {}", describe(*loss));
  Gradients out;
  Backprop b{ctx, out, {}, {}};
  for (Tensor* t : fwd.leafs())
    if (t->has_flag(kFlagParam) && dtype_info(t->type).is_float) b.needs.insert(t);
  for (Tensor* n : fwd.nodes()) {
    if (!dtype_info(n->type).is_float) continue;  // ids and counts carry no gradient
    for (Tensor* s : n->src)
      if (s && b.needs.count(s)) {
        b.needs.insert(n);
        break;
      }
  }
  if (!b.wants(loss)) return out;
  out.grad[loss] = scale(ctx, loss, 0.0f, 1.0f);  // d loss / d loss = 1
  const auto& nodes = fwd.nodes();
  for (size_t i = nodes.size(); i-- > 0;) {
    Tensor* y = nodes[i];
    Tensor* g = out.of(y);
    if (!g) continue;
    bool any = false;
    for (Tensor* s : y->src) any = any || b.wants(s);
    if (!any) continue;
    const Rule rule = kRules[static_cast<size_t>(y->op)];
    LOOM_CHECK(rule, unsupported, "[autograd] no gradient rule for {} ('{}', {})", op_name(y->op), y->name,
               describe(*y));
    rule(b, y, g);
  }
  return out;
}

}  // namespace loom
