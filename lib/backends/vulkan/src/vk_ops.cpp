// The Vulkan op table: supports_op per op and type, and each op as one dispatch of its shader
// with push constants laid out exactly as the shader's PC block (shaders/*.comp).
#include "vk_ops.h"

#include <fmt/format.h>

#include <bit>
#include <iterator>

#include "loom/cpu/cpu.h"
#include "loom/graph/ops.h"

namespace loom::vulkan {

namespace {

bool is_float(DType t) { return t == DType::F32 || t == DType::F16 || t == DType::BF16; }
uint32_t float_code(DType t) { return t == DType::F32 ? 0u : t == DType::F16 ? 1u : t == DType::BF16 ? 2u : 3u; }
bool rows_contiguous(const Tensor* t) { return t->nb[0] == dtype_info(t->type).type_size; }

// The weight types with MUL_MAT / MUL_MAT_ID / GET_ROWS variants, in the order of the variants
// after mul_mat_f32 / get_rows_f32 (the Shader enum, CMakeLists.txt's type list).
constexpr DType k_typed_shader_types[] = {DType::F32,   DType::F16,     DType::BF16,   DType::Q8_0,   DType::Q4_0,
                                          DType::Q4_K,  DType::Q6_K,    DType::Q4_1,   DType::Q5_0,   DType::Q5_1,
                                          DType::Q2_K,  DType::Q3_K,    DType::Q5_K,   DType::IQ4_NL, DType::IQ4_XS,
                                          DType::MXFP4, DType::IQ2_XXS, DType::IQ2_XS, DType::IQ2_S,  DType::IQ3_XXS,
                                          DType::IQ3_S, DType::IQ1_S,   DType::IQ1_M};
static_assert((size_t)Shader::mul_mat_f32 + std::size(k_typed_shader_types) == (size_t)Shader::get_rows_f32);
static_assert((size_t)Shader::get_rows_f32 + std::size(k_typed_shader_types) == (size_t)Shader::count);

Shader typed(Shader base, DType t) {
  for (size_t i = 0; i < std::size(k_typed_shader_types); ++i)
    if (k_typed_shader_types[i] == t) return (Shader)((int)base + (int)i);
  LOOM_ASSERT(false, "no shader for {}", dtype_name(t));
  return base;
}
bool has_typed_shader(DType t) {
  for (DType s : k_typed_shader_types)
    if (s == t) return true;
  return false;  // the other types (I32, ...) have no weight shader
}

// Fits one binding (the device's maxStorageBufferRange, less the offset alignment).
bool fits(const VulkanDevice& dev, const Tensor* t) {
  return !t || t->nbytes() + dev.limits().minStorageBufferOffsetAlignment <= dev.limits().maxStorageBufferRange;
}

// MUL_MAT with a 2-D weight larger than one binding: rows per dispatch so that each dispatch's
// rows of the weight fit one binding (0: the weight fits whole, or cannot be split by rows).
int64_t mul_mat_chunk_rows(const VulkanDevice& dev, const Tensor* n) {
  const Tensor* a = n->src[0];
  if (fits(dev, a) || n->op != OpKind::MUL_MAT || a->ne[2] != 1 || a->ne[3] != 1 || !rows_contiguous(a)) return 0;
  const size_t room = dev.limits().maxStorageBufferRange - dev.limits().minStorageBufferOffsetAlignment;
  const int64_t rows = std::min<int64_t>((int64_t)(room / a->nb[1]), a->ne[1]);
  return rows > 0 && (a->ne[1] + rows - 1) / rows <= 4096 ? rows : 0;  // a bounded number of dispatches
}

struct Push {
  Dispatch& d;
  size_t n = 0;
  Push& u(uint64_t v) {
    LOOM_ASSERT(n < d.push.size() && v <= UINT32_MAX, "push constant {} = {}", n, v);
    d.push[n++] = (uint32_t)v;
    return *this;
  }
  Push& f(float v) { return u(std::bit_cast<uint32_t>(v)); }
  Push& nb(const Tensor* t, int from = 0) {
    for (int i = from; i < 4; ++i) u(t->nb[i]);
    return *this;
  }
  Push& ne(const Tensor* t) {
    for (int i = 0; i < 4; ++i) u((uint64_t)t->ne[i]);
    return *this;
  }
};

uint32_t bind(VulkanDevice& dev, Dispatch& d, int slot, const Tensor* t) {
  TensorLoc loc;
  LOOM_CHECK(dev.locate(t, loc), internal, "{}: tensor '{}' ({}) is not in memory the device can bind", dev.name(),
             t->name, describe(*t));
  uint32_t rel = 0;
  d.bindings[(size_t)slot] = dev.bind(*loc.alloc, loc.offset, t->nbytes(), rel);
  return rel;
}

// A 1-D grid of `n` invocations in workgroups of `wg`, folded into y past 65535 groups.
void grid_1d(Dispatch& d, uint64_t n, uint32_t wg) {
  const uint64_t groups = std::max<uint64_t>(1, (n + wg - 1) / wg);
  d.groups[0] = (uint32_t)std::min<uint64_t>(groups, 65535);
  d.groups[1] = (uint32_t)((groups + d.groups[0] - 1) / d.groups[0]);
}
void grid_rows(Dispatch& d, uint64_t rows) { grid_1d(d, rows, 1); }

int ew_code(OpKind op) {
  switch (op) {
    case OpKind::ADD: return 0;
    case OpKind::SUB: return 1;
    case OpKind::MUL: return 2;
    case OpKind::DIV: return 3;
    case OpKind::SWIGLU: return 4;
    case OpKind::SCALE: return 5;
    case OpKind::CLAMP: return 6;
    case OpKind::SILU: return 7;
    case OpKind::GELU: return 8;
    case OpKind::SIGMOID: return 9;
    case OpKind::SOFTPLUS: return 10;
    case OpKind::EXP: return 11;
    case OpKind::LOG: return 12;
    case OpKind::SQR: return 13;
    case OpKind::SQRT: return 14;
    case OpKind::SILU_BACK: return 15;
    case OpKind::REPEAT:
      return 16;
    default: return -1;
  }
}

void enc_elementwise(VulkanDevice& dev, const Tensor* n, Dispatch& d) {
  const int code = ew_code(n->op);
  const Tensor* a = n->src[0];
  const bool binary = code < 5 || code == 15 || code == 16;
  const bool scalar = !binary;  // p0, p1: SCALE's and CLAMP's parameters
  const Tensor* b = !binary ? nullptr : code == 16 ? a : n->src[1];  // REPEAT: a tiled over n as b
  Push p{d};
  p.u(bind(dev, d, 0, a)).u(b ? bind(dev, d, 1, b) : 0).u(bind(dev, d, 2, n)).u((uint64_t)code);
  p.ne(n).nb(a);
  if (b) p.ne(b).nb(b); else p.u(1).u(1).u(1).u(1).u(0).u(0).u(0).u(0);
  p.nb(n).u(float_code(a->type) | (b ? float_code(b->type) << 4 : 0));
  p.f(scalar ? n->param_f32(0) : 0.0f).f(scalar ? n->param_f32(1) : 0.0f);
  d.pipeline = dev.pipeline(Shader::elementwise);
  grid_1d(d, (uint64_t)n->nelements(), 256);
}

// OPT_STEP_ADAMW / OPT_STEP_SGD: the parameter (the node is a view of it) and AdamW's m, v
// are updated in place.
void enc_opt_step(VulkanDevice& dev, const Tensor* n, Dispatch& d) {
  const bool adamw = n->op == OpKind::OPT_STEP_ADAMW;
  const Tensor* hp = n->src[adamw ? 4 : 2];
  Push p{d};
  p.u(bind(dev, d, 0, n->src[0])).u(bind(dev, d, 1, n->src[1]));
  p.u(adamw ? bind(dev, d, 2, n->src[2]) : 0).u(adamw ? bind(dev, d, 3, n->src[3]) : 0);
  p.u(bind(dev, d, 4, hp)).u((uint64_t)n->src[0]->nelements()).u(adamw ? 0 : 1);
  d.pipeline = dev.pipeline(Shader::opt_step);
  grid_1d(d, (uint64_t)n->src[0]->nelements(), 256);
}

void enc_out_prod(VulkanDevice& dev, const Tensor* n, Dispatch& d) {
  const Tensor* a = n->src[0];
  const Tensor* b = n->src[1];
  Push p{d};
  p.u(bind(dev, d, 0, a)).u(bind(dev, d, 1, b)).u(bind(dev, d, 2, n)).u((uint64_t)a->ne[1]);
  p.u((uint64_t)n->ne[0]).u((uint64_t)n->ne[1]).u((uint64_t)n->ne[2]).u((uint64_t)n->ne[3]);
  p.u((uint64_t)a->ne[2]).u((uint64_t)a->ne[3]).u(0).u(0).nb(a).nb(b).nb(n);
  d.pipeline = dev.pipeline(Shader::out_prod);
  grid_1d(d, (uint64_t)n->nelements(), 256);
}

// SOFT_MAX_BACK (mode 0), RMS_NORM_BACK (1), CROSS_ENTROPY_LOSS_BACK (2): one workgroup per row;
// CROSS_ENTROPY_LOSS (3): one workgroup over every row.
void enc_train_rows(VulkanDevice& dev, const Tensor* n, Dispatch& d) {
  uint32_t mode = 0;
  const Tensor *a = n->src[0], *b = n->src[1], *c = nullptr;
  float p0 = 0.0f;
  switch (n->op) {
    case OpKind::SOFT_MAX_BACK: p0 = n->param_f32(0); break;
    case OpKind::RMS_NORM_BACK: mode = 1; p0 = n->param_f32(0); break;
    case OpKind::CROSS_ENTROPY_LOSS_BACK: mode = 2; c = n->src[0]; a = n->src[1]; b = n->src[2]; break;
    default: mode = 3; break;
  }
  Push p{d};
  p.u(bind(dev, d, 0, a)).u(bind(dev, d, 1, b)).u(c ? bind(dev, d, 2, c) : 0).u(bind(dev, d, 3, n));
  p.ne(a).nb(a).nb(b).nb(n, 1).u(mode).f(p0);
  d.pipeline = dev.pipeline(Shader::train_rows);
  grid_rows(d, mode == 3 ? 1 : (uint64_t)a->nrows());
}

void enc_copy(VulkanDevice& dev, const Tensor* n, Dispatch& d) {
  const Tensor* s = n->src[0];
  Push p{d};
  p.u(bind(dev, d, 0, s)).u(bind(dev, d, 1, n)).u(float_code(s->type) | float_code(n->type) << 4).u(0);
  p.ne(s).nb(s).ne(n).nb(n);
  d.pipeline = dev.pipeline(Shader::copy);
  grid_1d(d, (uint64_t)s->nelements(), 256);
}

void enc_get_rows(VulkanDevice& dev, const Tensor* n, Dispatch& d) {
  const Tensor* a = n->src[0];
  const Tensor* ids = n->src[1];
  Push p{d};
  p.u(bind(dev, d, 0, a)).u(bind(dev, d, 1, ids)).u(bind(dev, d, 2, n)).u(0);
  p.ne(n).nb(a).u(ids->nb[0]).u(ids->nb[1]).u(ids->nb[2]).u(0).nb(n);
  d.pipeline = dev.pipeline(typed(Shader::get_rows_f32, a->type));
  grid_1d(d, (uint64_t)n->nelements(), 256);
}

void enc_set_rows(VulkanDevice& dev, const Tensor* n, Dispatch& d) {
  const Tensor* src = n->src[1];
  const Tensor* ids = n->src[2];
  Push p{d};
  p.u(bind(dev, d, 0, src)).u(bind(dev, d, 1, ids)).u(bind(dev, d, 2, n)).u(float_code(n->type));
  p.ne(src).nb(src).u((uint64_t)ids->ne[1]).u((uint64_t)ids->ne[2]).u(ids->nb[0]).u(ids->nb[1]);
  p.u(ids->nb[2]).u(n->nb[0]).u(n->nb[1]).u(n->nb[2]).u(n->nb[3]);
  d.pipeline = dev.pipeline(Shader::set_rows);
  grid_1d(d, (uint64_t)src->nelements(), 256);
}

// RMS_NORM / NORM / SUM_ROWS / MEAN, and RMS_NORM+MUL when w is given.
void enc_norm(VulkanDevice& dev, const Tensor* x, const Tensor* w, const Tensor* out, uint32_t mode, float eps,
              Dispatch& d) {
  Push p{d};
  p.u(bind(dev, d, 0, x)).u(w ? bind(dev, d, 1, w) : 0).u(bind(dev, d, 2, out)).u(mode);
  p.ne(x).u(w ? 1 : 0).u(0).u(0).u(0).nb(x);
  if (w) p.ne(w).nb(w); else p.u(1).u(1).u(1).u(1).u(0).u(0).u(0).u(0);
  p.nb(out, 1).f(eps);
  d.pipeline = dev.pipeline(Shader::norm);
  grid_rows(d, (uint64_t)x->nrows());
}

void enc_soft_max(VulkanDevice& dev, const Tensor* n, Dispatch& d) {
  const Tensor* a = n->src[0];
  const Tensor* m = n->src[1];
  Push p{d};
  p.u(bind(dev, d, 0, a)).u(m ? bind(dev, d, 1, m) : 0).u(bind(dev, d, 2, n)).u(m ? float_code(m->type) : 2);
  p.ne(a).nb(a);
  p.u(m ? (uint64_t)m->ne[2] : 1).u(m ? (uint64_t)m->ne[3] : 1).u(m ? m->nb[1] : 0).u(m ? m->nb[2] : 0);
  p.u(m ? m->nb[3] : 0).nb(n, 1).f(n->param_f32(0)).f(n->param_f32(1));
  d.pipeline = dev.pipeline(Shader::soft_max);
  grid_rows(d, (uint64_t)a->nrows());
}

void enc_rope(VulkanDevice& dev, const Tensor* n, Dispatch& d) {
  const Tensor* a = n->src[0];
  const Tensor* pos = n->src[1];
  const Tensor* ff = n->src[2];
  Push p{d};
  p.u(bind(dev, d, 0, a)).u(bind(dev, d, 1, pos)).u(ff ? bind(dev, d, 2, ff) : 0).u(bind(dev, d, 3, n));
  p.ne(a).nb(a).nb(n, 1).u((uint64_t)n->param_i32(0));
  p.u(n->param_i32(1) == ops::kRopeNeox ? 1 : 0).u(ff ? 1 : 0).u(ff ? ff->nb[0] : 0).u(0);
  p.f(n->param_f32(3)).f(n->param_f32(4)).f(n->param_f32(5)).f(n->op == OpKind::ROPE_BACK ? -1.0f : 1.0f);
  d.pipeline = dev.pipeline(Shader::rope);
  grid_1d(d, (uint64_t)(a->ne[0] / 2) * (uint64_t)a->nrows(), 128);
}

// Binds bytes [from, from + bytes) of n's allocation (past its natural size: alloc_size's).
uint32_t bind_past(VulkanDevice& dev, Dispatch& d, int slot, const Tensor* n, size_t from, size_t bytes) {
  TensorLoc loc;
  LOOM_CHECK(dev.locate(n, loc) && loc.offset + from + bytes <= loc.alloc->size, internal,
             "{}: '{}' has no room for its scratch", dev.name(), n->name);
  uint32_t rel = 0;
  d.bindings[(size_t)slot] = dev.bind(*loc.alloc, loc.offset + from, bytes, rel);
  return rel;
}

// The activations of n rounded as the CPU rounds them (act_quant.comp), rounding `form` of s.
void enc_act_quant(VulkanDevice& dev, const Tensor* n, const ActScratch& s, int form, std::vector<Dispatch>& out) {
  const Tensor* b = n->src[1];
  const uint32_t block = form == 0 ? s.first : s.second;
  const uint64_t blocks = (uint64_t)b->nelements() / std::max(block, 1u);
  Dispatch d;
  Push p{d};
  p.u(bind(dev, d, 0, b)).u(bind_past(dev, d, 1, n, s.offset + (size_t)form * s.form_bytes, s.form_bytes));
  p.u((uint64_t)b->ne[0]).u((uint64_t)b->ne[1]).u((uint64_t)b->ne[2]).u(blocks).nb(b);
  p.u(float_code(b->type)).u(block);
  d.pipeline = dev.pipeline(Shader::act_quant);
  grid_1d(d, blocks, 64);
  out.push_back(d);
}

constexpr int64_t kMulMatCols = 8;  // mul_mat.comp's COLS

// rows >= 0: only a's rows [r0, r0 + rows) and the output's (a weight larger than one binding).
void enc_mul_mat(VulkanDevice& dev, const Tensor* n, Dispatch& d, int64_t r0 = 0, int64_t rows = -1) {
  const bool is_id = n->op == OpKind::MUL_MAT_ID;
  const Tensor* a = n->src[0];
  const Tensor* b = n->src[1];
  const Tensor* ids = is_id ? n->src[2] : nullptr;
  const ActScratch s = placed_act_scratch(n);
  uint32_t a_rel = 0, d_rel = 0;
  if (rows < 0) {
    rows = a->ne[1];
    a_rel = bind(dev, d, 0, a);
    d_rel = bind(dev, d, 3, n);
  } else {
    TensorLoc la, ld;
    LOOM_CHECK(dev.locate(a, la) && dev.locate(n, ld), internal, "{}: '{}' is not in memory the device can bind",
               dev.name(), n->name);
    d.bindings[0] = dev.bind(*la.alloc, la.offset + (size_t)r0 * a->nb[1], (size_t)rows * a->nb[1], a_rel);
    d.bindings[3] = dev.bind(*ld.alloc, ld.offset + (size_t)r0 * 4, n->nbytes() - (size_t)r0 * 4, d_rel);
  }
  Push p{d};
  const uint32_t b_rel = s.used() ? bind_past(dev, d, 1, n, s.offset, s.end() - s.offset) : bind(dev, d, 1, b);
  p.u(a_rel).u(b_rel).u(d_rel).u(ids ? bind(dev, d, 2, ids) : 0);
  p.u((uint64_t)a->ne[0]).u((uint64_t)rows).u((uint64_t)n->ne[1]);
  p.u((uint64_t)a->ne[2]).u((uint64_t)a->ne[3]).u((uint64_t)b->ne[2]).u((uint64_t)b->ne[3]);
  p.nb(a);
  if (s.used()) {  // the rounded columns: contiguous f32
    const uint64_t col = 4 * (uint64_t)b->ne[0];
    p.u(4).u(col).u(col * (uint64_t)b->ne[1]).u(col * (uint64_t)b->ne[1] * (uint64_t)b->ne[2]);
  } else {
    p.nb(b);
  }
  p.nb(n, 1).u(ids ? ids->nb[1] : 0).u(s.used() ? 0 : float_code(b->type)).u(is_id ? 1 : 0).u((uint64_t)b->ne[1]);
  p.u(b_rel + s.form_bytes).u(s.mix_from);
  d.barrier_before = s.used() && r0 == 0;
  d.pipeline = dev.pipeline(typed(Shader::mul_mat_f32, a->type));
  d.groups[0] = (uint32_t)((rows + 63) / 64);
  // MUL_MAT: kMulMatCols columns per workgroup (each weight decoded once for them); MUL_MAT_ID: one expert slot
  d.groups[1] = (uint32_t)(is_id ? n->ne[1] : (n->ne[1] + kMulMatCols - 1) / kMulMatCols);
  d.groups[2] = (uint32_t)(n->ne[2] * n->ne[3]);
}

// A weight larger than one binding (lavapipe binds 128 MiB): one dispatch per block of rows, each
// binding its rows of the weight and of the output (disjoint writes: no barrier between them).
void enc_mul_mat_chunked(VulkanDevice& dev, const Tensor* n, int64_t chunk, std::vector<Dispatch>& out) {
  const int64_t m = n->src[0]->ne[1];
  for (int64_t r0 = 0; r0 < m; r0 += chunk) {
    Dispatch d;
    enc_mul_mat(dev, n, d, r0, std::min(chunk, m - r0));
    out.push_back(d);
  }
}

void enc_flash_attn(VulkanDevice& dev, const Tensor* n, Dispatch& d) {
  const Tensor* q = n->src[0];
  const Tensor* k = n->src[1];
  const Tensor* v = n->src[2];
  const Tensor* m = n->src[3];
  Push p{d};
  p.u(bind(dev, d, 0, q)).u(bind(dev, d, 1, k)).u(bind(dev, d, 2, v)).u(m ? bind(dev, d, 3, m) : 0);
  p.u(bind(dev, d, 4, n)).u((uint64_t)q->ne[0]).u((uint64_t)v->ne[0]).u((uint64_t)q->ne[1]);
  p.u((uint64_t)k->ne[1]).u((uint64_t)q->ne[2]).u((uint64_t)k->ne[2]);
  p.u(float_code(k->type) | float_code(v->type) << 4 | (m ? float_code(m->type) : 2u) << 8);
  p.u(q->nb[1]).u(q->nb[2]).u(q->nb[3]).u(k->nb[1]).u(k->nb[2]).u(k->nb[3]).u(v->nb[1]).u(v->nb[2]).u(v->nb[3]);
  p.u(m ? m->nb[1] : 0).nb(n, 1).f(n->param_f32(0)).f(n->param_f32(1)).f(n->param_f32(2));
  d.pipeline = dev.pipeline(Shader::flash_attn);
  d.groups[0] = (uint32_t)q->ne[1];
  d.groups[1] = (uint32_t)q->ne[2];
  d.groups[2] = (uint32_t)q->ne[3];
}

void enc_argsort(VulkanDevice& dev, const Tensor* n, Dispatch& d) {
  const Tensor* a = n->src[0];
  const bool topk = n->op == OpKind::TOP_K;
  Push p{d};
  p.u(bind(dev, d, 0, a)).u(bind(dev, d, 1, n)).u((uint64_t)a->ne[0]).u((uint64_t)n->ne[0]);
  p.u((uint64_t)a->ne[1]).u((uint64_t)a->ne[2]).u(topk || n->param_i32(0) == 1 ? 1 : 0).u((uint64_t)a->nrows());
  p.nb(a).nb(n, 1);
  d.pipeline = dev.pipeline(Shader::argsort);
  grid_rows(d, (uint64_t)a->nrows());
}

void enc_topk_moe(VulkanDevice& dev, const FusedGroup& g, Dispatch& d) {
  const Tensor* logits = g.inputs[0];
  const Tensor* bias = g.inputs[1];
  Push p{d};
  p.u(bind(dev, d, 0, logits)).u(bias ? bind(dev, d, 1, bias) : 0).u(bind(dev, d, 2, g.outputs[0]));
  p.u(bind(dev, d, 3, g.outputs[1])).u((uint64_t)g.n_expert).u((uint64_t)g.k).u(logits->nb[1]);
  p.u((g.gating == MoeGating::sigmoid ? 1u : 0u) | (bias ? 2u : 0u) | (g.normalize ? 4u : 0u) | (g.has_scale ? 8u : 0u));
  p.f(g.gate_scale).f(g.scale).f(g.scale_bias).f(0.0f);
  d.pipeline = dev.pipeline(Shader::topk_moe);
  d.groups[0] = (uint32_t)g.n_tokens;
}

bool is_compute(const Tensor* n) { return n->op != OpKind::NONE && !op_info(n->op).is_view; }

uint32_t act_code(cpu::ActRounding r) {
  switch (r) {
    case cpu::ActRounding::bf16: return 1;
    case cpu::ActRounding::q8_32: return 32;
    case cpu::ActRounding::q8_256: return 256;
    default: return 0;
  }
}

}  // namespace

ActScratch act_scratch(const Tensor* n) {
  ActScratch s;
  if (n->op != OpKind::MUL_MAT && n->op != OpKind::MUL_MAT_ID) return s;
  const Tensor* a = n->src[0];
  const Tensor* b = n->src[1];
  if (!a || !b || !is_float(b->type) || !rows_contiguous(a)) return s;  // strided a: the CPU multiplies in f32
  const cpu::MatmulActivations m = cpu::matmul_activations(a->type, a->ne[0]);
  // MUL_MAT: the columns of one matrix; MUL_MAT_ID: each expert's, the CPU's choice per expert.
  const int64_t cols = n->op == OpKind::MUL_MAT ? b->ne[1] : n->ne[1] * n->ne[2];
  if (n->op == OpKind::MUL_MAT_ID && cols >= m.large_from && m.small != m.large) {  // experts differ by their columns
    s.first = act_code(m.small);
    s.second = act_code(m.large);
    s.mix_from = (uint32_t)m.large_from;
  } else {
    s.first = act_code(cols < m.large_from ? m.small : m.large);
    if (s.first == 0) return s;  // b read as it is
  }
  s.offset = (n->nbytes() + 255) / 256 * 256;
  s.form_bytes = 4 * (size_t)b->nelements();
  return s;
}

ActScratch placed_act_scratch(const Tensor* n) {
  if (n->buffer) {
    const auto* bt = dynamic_cast<const VulkanBufferType*>(&n->buffer->type());
    if (!bt || bt->host()) return {};
  }
  return act_scratch(n);
}

bool op_supported(const VulkanDevice& dev, const Tensor* n) {
  for (int i = 0; i < kMaxSrc; ++i)
    if (!fits(dev, n->src[i]) && !(i == 0 && mul_mat_chunk_rows(dev, n) > 0)) return false;
  if (!fits(dev, n)) return false;
  if (const ActScratch s = act_scratch(n); s.used()) {  // bound in one range after n's bytes, offsets in 32 bits
    if (n->view_src || s.end() - s.offset + dev.limits().minStorageBufferOffsetAlignment > dev.limits().maxStorageBufferRange)
      return false;
  }
  const Tensor* a = n->src[0];
  const Tensor* b = n->src[1];
  switch (n->op) {
    case OpKind::ADD:
    case OpKind::SUB:
    case OpKind::MUL:
    case OpKind::DIV:
    case OpKind::SWIGLU:
      return n->type == DType::F32 && is_float(a->type) && is_float(b->type);
    case OpKind::SCALE:
    case OpKind::CLAMP:
    case OpKind::SILU:
    case OpKind::GELU:
    case OpKind::SIGMOID:
    case OpKind::SOFTPLUS:
    case OpKind::EXP:
    case OpKind::LOG:
    case OpKind::SQR:
    case OpKind::SQRT:
      return n->type == DType::F32 && is_float(a->type);
    case OpKind::SILU_BACK:
      return n->type == DType::F32 && is_float(a->type) && is_float(b->type) && same_shape(*a, *b) &&
             same_shape(*n, *a);
    case OpKind::REPEAT:
      return n->type == DType::F32 && is_float(a->type);
    case OpKind::OPT_STEP_ADAMW:
    case OpKind::OPT_STEP_SGD: {
      const int nsrc = n->op == OpKind::OPT_STEP_ADAMW ? 5 : 3;
      for (int i = 0; i < nsrc; ++i)
        if (!n->src[i] || n->src[i]->type != DType::F32 || !n->src[i]->is_contiguous()) return false;
      return true;
    }
    case OpKind::SOFT_MAX_BACK:
    case OpKind::RMS_NORM_BACK:
      return a->type == DType::F32 && b && b->type == DType::F32 && same_shape(*a, *b) && same_shape(*n, *a) &&
             n->type == DType::F32 && n->nb[0] == 4;
    case OpKind::CROSS_ENTROPY_LOSS_BACK: {
      const Tensor* labels = n->src[2];
      return a->type == DType::F32 && b->type == DType::F32 && labels && labels->type == DType::F32 &&
             same_shape(*b, *labels) && same_shape(*n, *b) && n->type == DType::F32 && n->nb[0] == 4;
    }
    case OpKind::CROSS_ENTROPY_LOSS:
      return a->type == DType::F32 && b && b->type == DType::F32 && same_shape(*a, *b) && n->type == DType::F32;
    case OpKind::OUT_PROD:
      return a->type == DType::F32 && b->type == DType::F32 && n->type == DType::F32 && n->nb[0] == 4 &&
             a->ne[2] > 0 && a->ne[3] > 0 && b->ne[2] % a->ne[2] == 0 && b->ne[3] % a->ne[3] == 0;
    case OpKind::CPY:
    case OpKind::DUP:
    case OpKind::CONT:
      return (is_float(a->type) && is_float(n->type)) || (a->type == DType::I32 && n->type == DType::I32);
    case OpKind::GET_ROWS:
      return has_typed_shader(a->type) && (dtype_info(a->type).block_size == 1 || rows_contiguous(a)) &&
             n->type == DType::F32;
    case OpKind::SET_ROWS:
      return is_float(n->type) && n->src[1]->type == DType::F32;
    case OpKind::RMS_NORM:
    case OpKind::NORM:
    case OpKind::SUM_ROWS:
    case OpKind::MEAN:
      return a->type == DType::F32 && n->type == DType::F32 && n->nb[0] == 4;
    case OpKind::SOFT_MAX:
      return a->type == DType::F32 && n->nb[0] == 4 && !n->src[2] &&  // no attention sinks yet
             (!b || (is_float(b->type) && b->type != DType::BF16 && rows_contiguous(b)));
    case OpKind::ROPE:
    case OpKind::ROPE_BACK: {
      const int mode = n->param_i32(1);
      return a->type == DType::F32 && n->nb[0] == 4 && (mode == ops::kRopeNormal || mode == ops::kRopeNeox) &&
             n->param_f32(6) == 0.0f &&  // no YaRN ramp yet
             a->ne[0] % 2 == 0 && n->param_i32(0) % 2 == 0 && n->param_i32(0) <= a->ne[0] &&
             (!n->src[2] || n->src[2]->type == DType::F32);
    }
    case OpKind::MUL_MAT:
    case OpKind::MUL_MAT_ID:
      return has_typed_shader(a->type) && is_float(b->type) && n->nb[0] == 4 &&
             (dtype_info(a->type).block_size == 1 || rows_contiguous(a)) && a->ne[1] <= 65535 * 64 &&
             n->ne[1] <= 65535 && n->ne[2] * n->ne[3] <= 65535;
    case OpKind::FLASH_ATTN_EXT: {
      const Tensor* k = n->src[1];
      const Tensor* v = n->src[2];
      const Tensor* m = n->src[3];
      return a->type == DType::F32 && rows_contiguous(a) && is_float(k->type) && is_float(v->type) &&
             rows_contiguous(k) && rows_contiguous(v) && a->ne[0] <= 256 && v->ne[0] <= 256 && n->nb[0] == 4 &&
             (!m || ((m->type == DType::F32 || m->type == DType::F16) && rows_contiguous(m))) && !n->src[4] &&
             a->ne[1] <= 65535 && a->ne[2] <= 65535 && a->ne[3] <= 65535;
    }
    case OpKind::ARGSORT:
    case OpKind::TOP_K:
      return a->type == DType::F32 && a->ne[0] <= 4096 && n->is_contiguous();
    default: return false;
  }
}

bool fusion_supported(const VulkanDevice& dev, const FusedGroup& g) {
  if (g.kind == FusionKind::rms_norm_mul) {
    const Tensor* x = g.inputs[0];
    const Tensor* w = g.inputs[1];
    return x->type == DType::F32 && w->type == DType::F32 && g.outputs[0]->type == DType::F32 &&
           g.outputs[0]->nb[0] == 4 && fits(dev, x) && fits(dev, w) && fits(dev, g.outputs[0]);
  }
  const Tensor* logits = g.inputs[0];
  const Tensor* bias = g.inputs[1];
  const Range lr = range_of(logits);
  return logits->type == DType::F32 && rows_contiguous(logits) && g.n_expert <= 2048 && g.k <= 256 &&
         g.outputs[0]->type == DType::F32 && g.outputs[0]->is_contiguous() && g.outputs[1]->is_contiguous() &&
         (!bias || (bias->type == DType::F32 && bias->is_contiguous() && bias->nelements() == g.n_expert)) &&
         !overlaps(range_of(g.outputs[0]), lr) && !overlaps(range_of(g.outputs[1]), lr);
}

Range range_of(const Tensor* t) {
  if (!t->data) {  // no memory yet (plan-only): the root tensor stands for its bytes
    const Tensor* root = t->view_src ? t->view_src : t;
    return {(uintptr_t)root, (uintptr_t)root + 1};
  }
  const uintptr_t b = (uintptr_t)t->data;
  return {b, b + std::max<size_t>(t->nbytes(), 1)};
}

bool conflicts(const Unit& a, const Unit& b) {
  for (const Range& w : a.writes) {
    for (const Range& r : b.reads)
      if (overlaps(w, r)) return true;
    for (const Range& r : b.writes)
      if (overlaps(w, r)) return true;
  }
  for (const Range& w : b.writes)
    for (const Range& r : a.reads)
      if (overlaps(w, r)) return true;
  return false;
}

std::vector<Unit> make_units(const VulkanDevice* dev, std::span<Tensor* const> nodes,
                             const std::vector<FusedGroup>& groups) {
  std::vector<Unit> units;
  size_t gi = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    while (gi < groups.size() && groups[gi].first < i) ++gi;
    const bool fused = gi < groups.size() && groups[gi].first == i && (!dev || fusion_supported(*dev, groups[gi]));
    const Tensor* n = nodes[i];
    if (!fused && !is_compute(n)) continue;
    Unit u;
    u.first = i;
    u.last = fused ? groups[gi].last : i;
    if (fused) u.group = &groups[gi];
    else u.node = n;
    // every node of a group's span (views inside travel with it; a device may run it unfused)
    for (size_t j = u.first; j <= u.last; ++j) {
      for (const Tensor* s : nodes[j]->src)
        if (s) u.reads.push_back(range_of(s));
      u.writes.push_back(range_of(nodes[j]));
      if (const ActScratch s = placed_act_scratch(nodes[j]); s.used() && nodes[j]->data)  // its rounded activations
        u.writes.push_back({(uintptr_t)nodes[j]->data + s.offset, (uintptr_t)nodes[j]->data + s.end()});
      if (nodes[j]->op == OpKind::OPT_STEP_ADAMW)  // AdamW's moments, updated in place
        for (int k : {2, 3}) u.writes.push_back(range_of(nodes[j]->src[k]));
    }
    const size_t last = u.last;
    units.push_back(std::move(u));
    i = last;
  }
  return units;
}

void encode(VulkanDevice& dev, const Unit& u, std::vector<Dispatch>& out) {
  Dispatch d;
  if (u.group) {
    const FusedGroup& g = *u.group;
    if (g.kind == FusionKind::rms_norm_mul)
      enc_norm(dev, g.inputs[0], g.inputs[1], g.outputs[0], 0, g.eps, d);
    else
      enc_topk_moe(dev, g, d);
    out.push_back(d);
    return;
  }
  const Tensor* n = u.node;
  LOOM_CHECK(op_supported(dev, n), unsupported, "{}: no kernel for {} '{}' ({})", dev.name(), op_name(n->op), n->name,
             describe(*n));
  if (n->nelements() == 0) return;
  if (const ActScratch s = placed_act_scratch(n); s.used() && is_compute(n)) {
    enc_act_quant(dev, n, s, 0, out);
    if (s.mix_from) enc_act_quant(dev, n, s, 1, out);
  }
  if (const int64_t chunk = mul_mat_chunk_rows(dev, n); chunk > 0) return enc_mul_mat_chunked(dev, n, chunk, out);
  switch (n->op) {
    case OpKind::CPY:
    case OpKind::DUP:
    case OpKind::CONT: enc_copy(dev, n, d); break;
    case OpKind::GET_ROWS: enc_get_rows(dev, n, d); break;
    case OpKind::SET_ROWS: enc_set_rows(dev, n, d); break;
    case OpKind::RMS_NORM: enc_norm(dev, n->src[0], nullptr, n, 0, n->param_f32(0), d); break;
    case OpKind::NORM: enc_norm(dev, n->src[0], nullptr, n, 1, n->param_f32(0), d); break;
    case OpKind::SUM_ROWS: enc_norm(dev, n->src[0], nullptr, n, 2, 0.0f, d); break;
    case OpKind::MEAN: enc_norm(dev, n->src[0], nullptr, n, 3, 0.0f, d); break;
    case OpKind::SOFT_MAX: enc_soft_max(dev, n, d); break;
    case OpKind::ROPE:
    case OpKind::ROPE_BACK: enc_rope(dev, n, d); break;
    case OpKind::MUL_MAT:
    case OpKind::MUL_MAT_ID: enc_mul_mat(dev, n, d); break;
    case OpKind::FLASH_ATTN_EXT: enc_flash_attn(dev, n, d); break;
    case OpKind::ARGSORT:
    case OpKind::TOP_K: enc_argsort(dev, n, d); break;
    case OpKind::OPT_STEP_ADAMW:
    case OpKind::OPT_STEP_SGD: enc_opt_step(dev, n, d); break;
    case OpKind::OUT_PROD: enc_out_prod(dev, n, d); break;
    case OpKind::SOFT_MAX_BACK:
    case OpKind::RMS_NORM_BACK:
    case OpKind::CROSS_ENTROPY_LOSS:
    case OpKind::CROSS_ENTROPY_LOSS_BACK: enc_train_rows(dev, n, d); break;
    default: enc_elementwise(dev, n, d); break;
  }
  out.push_back(d);
}

}  // namespace loom::vulkan
