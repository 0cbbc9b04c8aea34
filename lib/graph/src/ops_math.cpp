// Builders of element-wise, normalization, reduction, matrix, attention and training ops
// (see ops.h for each op's definition).
#include <algorithm>
#include <cmath>
#include <numbers>

#include "ops_build.h"

namespace loom::ops {

using detail::check_cache_type;
using detail::check_float;
using detail::check_type;
using detail::make;

namespace {

Tensor* binary(Context& c, OpKind op, Tensor* a, Tensor* b) {
  check_float(op_name(op), a, "a");
  check_float(op_name(op), b, "b");
  LOOM_CHECK(detail::can_broadcast(a, b), invalid_input, "[{}] {} does not broadcast to {}", op_name(op),
             describe(*b), describe(*a));
  return make(c, op, DType::F32, a->ne, {a, b});
}

Tensor* unary(Context& c, OpKind op, Tensor* a) {
  check_float(op_name(op), a, "a");
  return make(c, op, DType::F32, a->ne, {a});
}

Tensor* same_shape_pair(Context& c, OpKind op, Tensor* a, Tensor* b) {
  check_float(op_name(op), a, "a");
  check_float(op_name(op), b, "b");
  LOOM_CHECK(same_shape(*a, *b), invalid_input, "[{}] shapes differ: {} and {}", op_name(op), describe(*a),
             describe(*b));
  return make(c, op, DType::F32, a->ne, {a, b});
}

}  // namespace

Tensor* add(Context& c, Tensor* a, Tensor* b) { return binary(c, OpKind::ADD, a, b); }
Tensor* sub(Context& c, Tensor* a, Tensor* b) { return binary(c, OpKind::SUB, a, b); }
Tensor* mul(Context& c, Tensor* a, Tensor* b) { return binary(c, OpKind::MUL, a, b); }
Tensor* div(Context& c, Tensor* a, Tensor* b) { return binary(c, OpKind::DIV, a, b); }

Tensor* add_id(Context& c, Tensor* a, Tensor* b, Tensor* ids) {
  check_type("add_id", ids, DType::I32, "ids");
  LOOM_CHECK(b->ne[0] == a->ne[0] && ids->ne[0] == a->ne[1] && ids->ne[1] == a->ne[2], invalid_input,
             "[add_id] a {}, b {}, ids {}", describe(*a), describe(*b), describe(*ids));
  return make(c, OpKind::ADD_ID, DType::F32, a->ne, {a, b, ids});
}

Tensor* scale(Context& c, Tensor* a, float s, float bias) {
  Tensor* t = unary(c, OpKind::SCALE, a);
  t->set_param_f32(0, s);
  t->set_param_f32(1, bias);
  return t;
}

Tensor* clamp(Context& c, Tensor* a, float min, float max) {
  LOOM_CHECK(min <= max, invalid_input, "[clamp] min {} > max {}", min, max);
  Tensor* t = unary(c, OpKind::CLAMP, a);
  t->set_param_f32(0, min);
  t->set_param_f32(1, max);
  return t;
}

Tensor* silu(Context& c, Tensor* a) { return unary(c, OpKind::SILU, a); }
Tensor* gelu(Context& c, Tensor* a) { return unary(c, OpKind::GELU, a); }
Tensor* tanh(Context& c, Tensor* a) { return unary(c, OpKind::TANH, a); }
Tensor* sigmoid(Context& c, Tensor* a) { return unary(c, OpKind::SIGMOID, a); }
Tensor* softplus(Context& c, Tensor* a) { return unary(c, OpKind::SOFTPLUS, a); }
Tensor* exp(Context& c, Tensor* a) { return unary(c, OpKind::EXP, a); }
Tensor* log(Context& c, Tensor* a) { return unary(c, OpKind::LOG, a); }
Tensor* sqr(Context& c, Tensor* a) { return unary(c, OpKind::SQR, a); }
Tensor* sqrt(Context& c, Tensor* a) { return unary(c, OpKind::SQRT, a); }
Tensor* swiglu(Context& c, Tensor* a, Tensor* b) { return same_shape_pair(c, OpKind::SWIGLU, a, b); }
Tensor* swiglu_oai(Context& c, Tensor* a, Tensor* b, float alpha, float limit) {
  LOOM_CHECK(std::isfinite(alpha) && std::isfinite(limit) && limit > 0, invalid_input,
             "[swiglu_oai] alpha {} and limit {} must be finite, limit positive", alpha, limit);
  Tensor* t = same_shape_pair(c, OpKind::SWIGLU_OAI, a, b);
  t->set_param_f32(0, alpha);
  t->set_param_f32(1, limit);
  return t;
}
Tensor* silu_back(Context& c, Tensor* grad, Tensor* x) { return same_shape_pair(c, OpKind::SILU_BACK, grad, x); }

Tensor* rms_norm(Context& c, Tensor* a, float eps) {
  Tensor* t = unary(c, OpKind::RMS_NORM, a);
  t->set_param_f32(0, eps);
  return t;
}
Tensor* norm(Context& c, Tensor* a, float eps) {
  Tensor* t = unary(c, OpKind::NORM, a);
  t->set_param_f32(0, eps);
  return t;
}
Tensor* rms_norm_back(Context& c, Tensor* grad, Tensor* x, float eps) {
  Tensor* t = same_shape_pair(c, OpKind::RMS_NORM_BACK, grad, x);
  t->set_param_f32(0, eps);
  return t;
}

Tensor* sum(Context& c, Tensor* a) {
  check_float("sum", a, "a");
  const int64_t ne[4] = {1, 1, 1, 1};
  return make(c, OpKind::SUM, DType::F32, ne, {a});
}
Tensor* sum_rows(Context& c, Tensor* a) {
  check_float("sum_rows", a, "a");
  const int64_t ne[4] = {1, a->ne[1], a->ne[2], a->ne[3]};
  return make(c, OpKind::SUM_ROWS, DType::F32, ne, {a});
}
Tensor* mean(Context& c, Tensor* a) {
  check_float("mean", a, "a");
  const int64_t ne[4] = {1, a->ne[1], a->ne[2], a->ne[3]};
  return make(c, OpKind::MEAN, DType::F32, ne, {a});
}
Tensor* argmax(Context& c, Tensor* a) {
  check_type("argmax", a, DType::F32, "a");
  LOOM_CHECK(a->ne[2] == 1 && a->ne[3] == 1, invalid_input, "[argmax] a must be 2-D, got {}", describe(*a));
  const int64_t ne[4] = {a->ne[1], 1, 1, 1};
  return make(c, OpKind::ARGMAX, DType::I32, ne, {a});
}
Tensor* argsort(Context& c, Tensor* a, SortOrder order) {
  check_type("argsort", a, DType::F32, "a");
  Tensor* t = make(c, OpKind::ARGSORT, DType::I32, a->ne, {a});
  t->set_param_i32(0, (int32_t)order);
  return t;
}
Tensor* top_k(Context& c, Tensor* a, int64_t k) {
  check_type("top_k", a, DType::F32, "a");
  LOOM_CHECK(k >= 1 && k <= a->ne[0], invalid_input, "[top_k] k = {} for rows of {}", k, a->ne[0]);
  const int64_t ne[4] = {k, a->ne[1], a->ne[2], a->ne[3]};
  Tensor* t = make(c, OpKind::TOP_K, DType::I32, ne, {a});
  t->set_param_i32(0, (int32_t)k);
  return t;
}
Tensor* count_equal(Context& c, Tensor* a, Tensor* b) {
  check_type("count_equal", a, DType::I32, "a");
  check_type("count_equal", b, DType::I32, "b");
  LOOM_CHECK(same_shape(*a, *b), invalid_input, "[count_equal] shapes differ: {} and {}", describe(*a), describe(*b));
  const int64_t ne[4] = {1, 1, 1, 1};
  return make(c, OpKind::COUNT_EQUAL, DType::I32, ne, {a, b});
}

Tensor* mul_mat(Context& c, Tensor* a, Tensor* b) {
  check_float("mul_mat", b, "b");
  LOOM_CHECK(a->ne[0] == b->ne[0] && b->ne[2] % a->ne[2] == 0 && b->ne[3] % a->ne[3] == 0, invalid_input,
             "[mul_mat] a {} and b {} do not multiply", describe(*a), describe(*b));
  const int64_t ne[4] = {a->ne[1], b->ne[1], b->ne[2], b->ne[3]};
  return make(c, OpKind::MUL_MAT, DType::F32, ne, {a, b});
}

Tensor* mul_mat_id(Context& c, Tensor* as, Tensor* b, Tensor* ids) {
  check_float("mul_mat_id", b, "b");
  check_type("mul_mat_id", ids, DType::I32, "ids");
  LOOM_CHECK(as->ne[0] == b->ne[0] && as->ne[3] == 1 && (b->ne[1] == ids->ne[0] || b->ne[1] == 1) &&
                 b->ne[2] == ids->ne[1] && b->ne[3] == 1 && ids->ne[0] <= as->ne[2],
             invalid_input, "[mul_mat_id] experts {}, b {}, ids {} do not match", describe(*as), describe(*b),
             describe(*ids));
  const int64_t ne[4] = {as->ne[1], ids->ne[0], ids->ne[1], 1};
  return make(c, OpKind::MUL_MAT_ID, DType::F32, ne, {as, b, ids});
}

Tensor* out_prod(Context& c, Tensor* a, Tensor* b) {
  check_float("out_prod", b, "b");
  LOOM_CHECK(a->ne[1] == b->ne[1] && b->ne[2] % a->ne[2] == 0 && b->ne[3] % a->ne[3] == 0, invalid_input,
             "[out_prod] a {} and b {} do not match", describe(*a), describe(*b));
  const int64_t ne[4] = {a->ne[0], b->ne[0], b->ne[2], b->ne[3]};
  return make(c, OpKind::OUT_PROD, DType::F32, ne, {a, b});
}

namespace {
Tensor* rope_like(Context& c, OpKind op, Tensor* a, Tensor* pos, Tensor* ff, const RopeParams& p) {
  check_type(op_name(op), a, DType::F32, "a");
  check_type(op_name(op), pos, DType::I32, "positions");
  LOOM_CHECK(pos->ne[0] == a->ne[2] && pos->nelements() == a->ne[2], invalid_input,
             "[{}] {} positions for {} tokens", op_name(op), pos->nelements(), a->ne[2]);
  LOOM_CHECK(p.n_dims > 0 && p.n_dims % 2 == 0 && p.n_dims <= a->ne[0], invalid_input,
             "[{}] n_dims {} for head size {}", op_name(op), p.n_dims, a->ne[0]);
  LOOM_CHECK(p.mode == kRopeNormal || p.mode == kRopeNeox, invalid_input, "[{}] unknown mode {}", op_name(op), p.mode);
  LOOM_CHECK(p.freq_base > 0, invalid_input, "[{}] freq_base {} must be positive", op_name(op), p.freq_base);
  LOOM_CHECK(p.freq_scale > 0 && std::isfinite(p.ext_factor) && (p.ext_factor == 0 || p.n_ctx_orig > 0), invalid_input,
             "[{}] freq_scale {} / ext_factor {} / n_ctx_orig {} are not usable", op_name(op), p.freq_scale,
             p.ext_factor, p.n_ctx_orig);
  if (ff) {
    check_type(op_name(op), ff, DType::F32, "freq_factors");
    LOOM_CHECK(ff->nelements() >= p.n_dims / 2, invalid_input, "[{}] {} freq factors for {} dims", op_name(op),
               ff->nelements(), p.n_dims);
  }
  Tensor* t = make(c, op, DType::F32, a->ne, {a, pos, ff});
  t->set_param_i32(0, p.n_dims);
  t->set_param_i32(1, p.mode);
  t->set_param_i32(2, p.n_ctx_orig);
  t->set_param_f32(3, p.freq_base);
  t->set_param_f32(4, p.freq_scale);
  t->set_param_f32(5, p.attn_factor);
  t->set_param_f32(6, p.ext_factor);
  t->set_param_f32(7, p.beta_fast);
  t->set_param_f32(8, p.beta_slow);
  return t;
}
}  // namespace

RopeRamp rope_ramp(const Tensor* n) {
  RopeRamp r;
  r.mscale = n->param_f32(5);
  const float ext_factor = n->param_f32(6);
  if (ext_factor == 0.0f) return r;
  // the pairs that turn beta_fast / beta_slow times over n_ctx_orig
  const int n_dims = n->param_i32(0), n_ctx_orig = n->param_i32(2);
  const double base = n->param_f32(3), freq_scale = n->param_f32(4);
  auto corr = [&](double rotations) {
    return n_dims * std::log(n_ctx_orig / (rotations * 2.0 * std::numbers::pi)) / (2.0 * std::log(base));
  };
  r.lo = std::max(0.0, std::floor(corr(n->param_f32(7))));
  r.hi = std::min(n_dims - 1.0, std::ceil(corr(n->param_f32(8))));
  r.mscale *= (float)(1.0 + 0.1 * std::log(1.0 / freq_scale));
  return r;
}

Tensor* rope(Context& c, Tensor* a, Tensor* pos, Tensor* ff, const RopeParams& p) {
  return rope_like(c, OpKind::ROPE, a, pos, ff, p);
}
Tensor* rope_back(Context& c, Tensor* grad, Tensor* pos, Tensor* ff, const RopeParams& p) {
  return rope_like(c, OpKind::ROPE_BACK, grad, pos, ff, p);
}

namespace {
void check_sinks(const char* op, Tensor* sinks, int64_t n_head) {
  if (!sinks) return;
  check_type(op, sinks, DType::F32, "sinks");
  LOOM_CHECK(sinks->nelements() == n_head && sinks->is_contiguous(), invalid_input, "[{}] sinks {} for {} heads", op,
             describe(*sinks), n_head);
}
}  // namespace

Tensor* soft_max(Context& c, Tensor* a, Tensor* mask, float scale, float max_bias, Tensor* sinks) {
  check_type("soft_max", a, DType::F32, "a");
  check_sinks("soft_max", sinks, a->ne[2]);
  if (mask) {
    LOOM_CHECK((mask->type == DType::F32 || mask->type == DType::F16) && mask->ne[0] == a->ne[0] &&
                   mask->ne[1] >= a->ne[1] && a->ne[2] % mask->ne[2] == 0 && a->ne[3] % mask->ne[3] == 0,
               invalid_input, "[soft_max] mask {} for {}", describe(*mask), describe(*a));
  }
  Tensor* t = make(c, OpKind::SOFT_MAX, DType::F32, a->ne, {a, mask, sinks});
  t->set_param_f32(0, scale);
  t->set_param_f32(1, max_bias);
  return t;
}

Tensor* soft_max_back(Context& c, Tensor* grad, Tensor* y, float scale, float max_bias) {
  Tensor* t = same_shape_pair(c, OpKind::SOFT_MAX_BACK, grad, y);
  t->set_param_f32(0, scale);
  t->set_param_f32(1, max_bias);
  return t;
}

Tensor* flash_attn_ext(Context& c, Tensor* q, Tensor* k, Tensor* v, Tensor* mask, float scale, float max_bias,
                       float softcap, Tensor* sinks) {
  check_type("flash_attn_ext", q, DType::F32, "q");
  check_sinks("flash_attn_ext", sinks, q->ne[2]);
  check_cache_type("flash_attn_ext", k, "k");
  check_cache_type("flash_attn_ext", v, "v");
  LOOM_CHECK(q->ne[0] == k->ne[0] && k->ne[1] == v->ne[1] && k->ne[2] == v->ne[2] && k->ne[2] > 0 &&
                 q->ne[2] % k->ne[2] == 0 && q->ne[3] == k->ne[3] && q->ne[3] == v->ne[3],
             invalid_input, "[flash_attn_ext] q {}, k {}, v {} do not match", describe(*q), describe(*k),
             describe(*v));
  if (mask) {
    LOOM_CHECK((mask->type == DType::F32 || mask->type == DType::F16) && mask->ne[0] == k->ne[1] &&
                   mask->ne[1] >= q->ne[1],
               invalid_input, "[flash_attn_ext] mask {} for {} queries and {} keys", describe(*mask), q->ne[1],
               k->ne[1]);
  }
  const int64_t ne[4] = {v->ne[0], q->ne[2], q->ne[1], q->ne[3]};
  Tensor* t = make(c, OpKind::FLASH_ATTN_EXT, DType::F32, ne, {q, k, v, mask, sinks});
  t->set_param_f32(0, scale);
  t->set_param_f32(1, max_bias);
  t->set_param_f32(2, softcap);
  return t;
}

Tensor* cross_entropy_loss(Context& c, Tensor* logits, Tensor* labels) {
  check_type("cross_entropy_loss", logits, DType::F32, "logits");
  check_type("cross_entropy_loss", labels, DType::F32, "labels");
  LOOM_CHECK(same_shape(*logits, *labels), invalid_input, "[cross_entropy_loss] logits {} and labels {}",
             describe(*logits), describe(*labels));
  const int64_t ne[4] = {1, 1, 1, 1};
  return make(c, OpKind::CROSS_ENTROPY_LOSS, DType::F32, ne, {logits, labels});
}

Tensor* cross_entropy_loss_back(Context& c, Tensor* grad, Tensor* logits, Tensor* labels) {
  LOOM_CHECK(grad->nelements() == 1 && same_shape(*logits, *labels), invalid_input,
             "[cross_entropy_loss_back] grad {}, logits {}, labels {}", describe(*grad), describe(*logits),
             describe(*labels));
  return make(c, OpKind::CROSS_ENTROPY_LOSS_BACK, DType::F32, logits->ne, {grad, logits, labels});
}

namespace {
Tensor* opt_result(Context& c, OpKind op, Tensor* param, std::initializer_list<Tensor*> srcs) {
  Tensor* t = c.new_view(param, 4, param->ne, param->nb + 1, 0);
  t->op = op;
  int i = 0;
  for (Tensor* s : srcs) t->src[i++] = s;
  return t;
}
}  // namespace

Tensor* opt_step_adamw(Context& c, Tensor* param, Tensor* grad, Tensor* m, Tensor* v, Tensor* hp) {
  check_type("opt_step_adamw", param, DType::F32, "param");
  LOOM_CHECK(same_shape(*param, *grad) && same_shape(*param, *m) && same_shape(*param, *v) && hp->nelements() == 7,
             invalid_input, "[opt_step_adamw] param {}, grad {}, m {}, v {}, hp {}", describe(*param),
             describe(*grad), describe(*m), describe(*v), describe(*hp));
  return opt_result(c, OpKind::OPT_STEP_ADAMW, param, {param, grad, m, v, hp});
}

Tensor* opt_step_sgd(Context& c, Tensor* param, Tensor* grad, Tensor* hp) {
  check_type("opt_step_sgd", param, DType::F32, "param");
  LOOM_CHECK(same_shape(*param, *grad) && hp->nelements() == 2, invalid_input,
             "[opt_step_sgd] param {}, grad {}, hp {}", describe(*param), describe(*grad), describe(*hp));
  return opt_result(c, OpKind::OPT_STEP_SGD, param, {param, grad, hp});
}

}  // namespace loom::ops
