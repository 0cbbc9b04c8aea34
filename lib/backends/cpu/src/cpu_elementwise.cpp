// CPU kernels of the element-wise family: binary ADD SUB MUL DIV (b broadcast over a), ADD_ID,
// unary SCALE CLAMP SILU GELU TANH SIGMOID SOFTPLUS EXP LOG SQR SQRT, and the pairs SWIGLU
// SWIGLU_OAI SILU_BACK.
// Inputs may be F32, F16 or BF16 and strided views; the result is contiguous F32. Each op is a
// functor run by one of three drivers: a flat loop when everything is contiguous F32, else row
// by row with inputs converted to f32 scratch. The result may alias src[0] (in place), or src[1]
// of a binary op of equal shapes: every loop reads element i before writing element i. SILU and SWIGLU over contiguous F32 take the
// vectorized exp loops of simd_math.h on SIMD levels (the functors stay the reference).
#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu_features.h"
#include "cpu_rows.h"
#include "kernels.h"
#include "simd_math.h"

namespace loom::cpu {

namespace {

// ---- functors ------------------------------------------------------------------------------------

struct Add {
  float operator()(float x, float y) const { return x + y; }
};
struct Sub {
  float operator()(float x, float y) const { return x - y; }
};
struct Mul {
  float operator()(float x, float y) const { return x * y; }
};
struct Div {
  float operator()(float x, float y) const { return x / y; }
};

struct Scale {
  float s, bias;
  float operator()(float x) const { return x * s + bias; }
};
struct Clamp {
  float lo, hi;
  float operator()(float x) const { return std::min(std::max(x, lo), hi); }
};
struct Silu {
  float operator()(float x) const { return x / (1.0f + std::exp(-x)); }
};
struct Gelu {  // tanh approximation
  float operator()(float x) const {
    constexpr float kSqrt2OverPi = 0.79788456080286535588f;
    return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + 0.044715f * x * x)));
  }
};
struct Tanh {
  float operator()(float x) const { return std::tanh(x); }
};
struct Sigmoid {
  float operator()(float x) const { return 1.0f / (1.0f + std::exp(-x)); }
};
struct Softplus {  // max(x, 0) + log1p(exp(-|x|)): exact for large |x|, no overflow
  float operator()(float x) const { return std::max(x, 0.0f) + std::log1p(std::exp(-std::fabs(x))); }
};
struct Exp {
  float operator()(float x) const { return std::exp(x); }
};
struct Log {
  float operator()(float x) const { return std::log(x); }
};
struct Sqr {
  float operator()(float x) const { return x * x; }
};
struct Sqrt {
  float operator()(float x) const { return std::sqrt(x); }
};

struct Swiglu {  // (a, b) -> silu(a) * b
  float operator()(float a, float b) const { return a / (1.0f + std::exp(-a)) * b; }
};
struct SwigluOai {  // gpt-oss: the gate clamped above, the up clamped both ways and shifted by one
  float alpha, limit;
  float operator()(float a, float b) const {
    const float x = std::min(a, limit), y = std::min(std::max(b, -limit), limit);
    return x / (1.0f + std::exp(-alpha * x)) * (y + 1.0f);
  }
};
struct SiluBack {  // (grad, x) -> grad * s * (1 + x (1 - s)), s = sigmoid(x)
  float operator()(float g, float x) const {
    const float s = 1.0f / (1.0f + std::exp(-x));
    return g * s * (1.0f + x * (1.0f - s));
  }
};

// ---- drivers ---------------------------------------------------------------------------------------

// y = f(x), x float of dst's shape. Scratch per thread: ne0 floats.
template <typename F>
void unary(const KernelArgs& args, Tensor* dst, F f) {
  const Tensor* a = dst->src[0];
  float* out = static_cast<float*>(dst->data);
  if (is_f32_contiguous(a)) {  // flat fast path
    const float* x = static_cast<const float*>(a->data);
    int64_t e0, e1;
    split_flat(dst->nelements(), args, e0, e1);
    for (int64_t i = e0; i < e1; ++i) out[i] = f(x[i]);
    return;
  }
  const int64_t ne0 = dst->ne[0];
  float* tmp = thread_scratch(args, (size_t)ne0 * sizeof(float));
  int64_t r0, r1;
  split_rows(dst->nrows(), args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    unravel_row(r, dst->ne, i1, i2, i3);
    const float* x = row_as_f32(a, i1, i2, i3, tmp);
    float* y = out + r * ne0;
    for (int64_t i = 0; i < ne0; ++i) y[i] = f(x[i]);
  }
}

// y = f(a, b) with b {m0, m1, m2, m3} broadcast over a {k0 m0, ..}: y[i] = f(a[i], b[i mod b.ne]).
// Also drives SWIGLU / SILU_BACK (same shapes). Scratch per thread: a.ne0 + b.ne0 floats.
template <typename F>
void binary(const KernelArgs& args, Tensor* dst, F f) {
  const Tensor* a = dst->src[0];
  const Tensor* b = dst->src[1];
  float* out = static_cast<float*>(dst->data);
  if (is_f32_contiguous(a) && is_f32_contiguous(b) && same_shape(*a, *b)) {  // flat fast path
    const float* x = static_cast<const float*>(a->data);
    const float* w = static_cast<const float*>(b->data);
    int64_t e0, e1;
    split_flat(dst->nelements(), args, e0, e1);
    for (int64_t i = e0; i < e1; ++i) out[i] = f(x[i], w[i]);
    return;
  }
  const int64_t ne0 = dst->ne[0], nb0 = b->ne[0];
  float* tmp_a = thread_scratch(args, (size_t)(ne0 + nb0) * sizeof(float));
  float* tmp_b = tmp_a + ne0;
  int64_t r0, r1;
  split_rows(dst->nrows(), args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    unravel_row(r, dst->ne, i1, i2, i3);
    const float* x = row_as_f32(a, i1, i2, i3, tmp_a);
    const float* w = row_as_f32(b, i1 % b->ne[1], i2 % b->ne[2], i3 % b->ne[3], tmp_b);
    float* y = out + r * ne0;
    if (nb0 == ne0) {
      for (int64_t i = 0; i < ne0; ++i) y[i] = f(x[i], w[i]);
    } else if (nb0 == 1) {
      const float w0 = w[0];
      for (int64_t i = 0; i < ne0; ++i) y[i] = f(x[i], w0);
    } else {
      for (int64_t t = 0; t < ne0; t += nb0)
        for (int64_t i = 0; i < nb0; ++i) y[t + i] = f(x[t + i], w[i]);
    }
  }
}

// a {n0, n_used, t}, b {n0, n_expert}, ids I32 {n_used, t}: y[:, i, j] = a[:, i, j] + b[:, ids[i, j]].
// An id outside [0, n_expert) yields a row of NaN. Scratch per thread: 2 n0 floats.
void add_id(const KernelArgs& args, Tensor* dst) {
  const Tensor* a = dst->src[0];
  const Tensor* b = dst->src[1];
  const Tensor* ids = dst->src[2];
  const int64_t ne0 = dst->ne[0];
  float* tmp_a = thread_scratch(args, (size_t)(2 * ne0) * sizeof(float));
  float* tmp_b = tmp_a + ne0;
  float* out = static_cast<float*>(dst->data);
  int64_t r0, r1;
  split_rows(dst->nrows(), args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    unravel_row(r, dst->ne, i1, i2, i3);
    const int64_t id = *reinterpret_cast<const int32_t*>(elem_ptr(ids, i1, i2));
    float* y = out + r * ne0;
    if (id < 0 || id >= b->ne[1]) {
      std::fill(y, y + ne0, std::numeric_limits<float>::quiet_NaN());
      continue;
    }
    const float* x = row_as_f32(a, i1, i2, i3, tmp_a);
    const float* w = row_as_f32(b, id, 0, 0, tmp_b);
    for (int64_t i = 0; i < ne0; ++i) y[i] = x[i] + w[i];
  }
}

bool float_readable(const Tensor* t) { return t && is_plain_float(t->type); }

// SILU / SWIGLU over contiguous F32 on a SIMD level: this thread's share of the flat arrays
// through the vectorized loops. False when the reference functor path must run.
bool silu_fast(const KernelArgs& args, Tensor* dst) {
  const Tensor* a = dst->src[0];
  const Tensor* b = dst->src[1];
  const bool pair = dst->op == OpKind::SWIGLU;
  if (active_isa() == Isa::scalar || !is_f32_contiguous(a) || (pair && !is_f32_contiguous(b))) return false;
  int64_t e0, e1;
  split_flat(dst->nelements(), args, e0, e1);
  float* y = static_cast<float*>(dst->data) + e0;
  const float* x = static_cast<const float*>(a->data) + e0;
  if (pair) {
    vec_math().swiglu(x, static_cast<const float*>(b->data) + e0, y, e1 - e0);
  } else {
    vec_math().silu(x, y, e1 - e0);
  }
  return true;
}

}  // namespace

bool supports_elementwise(const Tensor* node) {
  const Tensor* a = node->src[0];
  const Tensor* b = node->src[1];
  if (!is_f32_contiguous(node) || !float_readable(a)) return false;
  switch (node->op) {
    case OpKind::ADD:
    case OpKind::SUB:
    case OpKind::MUL:
    case OpKind::DIV: {
      if (!float_readable(b) || !same_shape(*node, *a)) return false;
      for (int i = 0; i < kMaxDims; ++i)
        if (b->ne[i] == 0 || a->ne[i] % b->ne[i] != 0) return false;
      return true;
    }
    case OpKind::SWIGLU:
    case OpKind::SWIGLU_OAI:
    case OpKind::SILU_BACK: return float_readable(b) && same_shape(*a, *b) && same_shape(*node, *a);
    case OpKind::ADD_ID: {
      const Tensor* ids = node->src[2];
      return float_readable(b) && ids && ids->type == DType::I32 && a->ne[3] == 1 && b->ne[0] == a->ne[0] &&
             b->ne[2] == 1 && b->ne[3] == 1 && ids->ne[0] == a->ne[1] && ids->ne[1] == a->ne[2] &&
             same_shape(*node, *a);
    }
    case OpKind::SCALE:
    case OpKind::CLAMP:
    case OpKind::SILU:
    case OpKind::GELU:
    case OpKind::TANH:
    case OpKind::SIGMOID:
    case OpKind::SOFTPLUS:
    case OpKind::EXP:
    case OpKind::LOG:
    case OpKind::SQR:
    case OpKind::SQRT: return same_shape(*node, *a);
    default: return false;
  }
}

size_t work_size_elementwise(const Tensor* node, int nth) {
  const Tensor* b = node->src[1];
  size_t floats = (size_t)node->ne[0];
  if (b && node->op != OpKind::ADD_ID) floats += (size_t)b->ne[0];
  if (node->op == OpKind::ADD_ID) floats *= 2;
  return scratch_bytes(floats * sizeof(float), nth);
}

void compute_elementwise(const KernelArgs& args, Tensor* node) {
  switch (node->op) {
    case OpKind::ADD: return binary(args, node, Add{});
    case OpKind::SUB: return binary(args, node, Sub{});
    case OpKind::MUL: return binary(args, node, Mul{});
    case OpKind::DIV: return binary(args, node, Div{});
    case OpKind::ADD_ID: return add_id(args, node);
    case OpKind::SCALE: return unary(args, node, Scale{node->param_f32(0), node->param_f32(1)});
    case OpKind::CLAMP: return unary(args, node, Clamp{node->param_f32(0), node->param_f32(1)});
    case OpKind::SILU: return silu_fast(args, node) ? void() : unary(args, node, Silu{});
    case OpKind::GELU: return unary(args, node, Gelu{});
    case OpKind::TANH: return unary(args, node, Tanh{});
    case OpKind::SIGMOID: return unary(args, node, Sigmoid{});
    case OpKind::SOFTPLUS: return unary(args, node, Softplus{});
    case OpKind::EXP: return unary(args, node, Exp{});
    case OpKind::LOG: return unary(args, node, Log{});
    case OpKind::SQR: return unary(args, node, Sqr{});
    case OpKind::SQRT: return unary(args, node, Sqrt{});
    case OpKind::SWIGLU: return silu_fast(args, node) ? void() : binary(args, node, Swiglu{});
    case OpKind::SWIGLU_OAI: return binary(args, node, SwigluOai{node->param_f32(0), node->param_f32(1)});
    case OpKind::SILU_BACK: return binary(args, node, SiluBack{});
    default: return;
  }
}

}  // namespace loom::cpu
