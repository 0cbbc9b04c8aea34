// CPU kernels of the attention family: ROPE, ROPE_BACK, SOFT_MAX, SOFT_MAX_BACK and
// FLASH_ATTN_EXT (one pass over the keys with an online softmax). All split rows (or query
// rows) over threads; K/V rows are read through the per-type row kernels of cpu_vec_dot.h.
// On SIMD levels flash attention takes the tiled kernel (simd_flash.h, vectorized exp); the
// loop here is its readable reference and the scalar level's kernel.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cpu_rows.h"
#include "cpu_vec_dot.h"
#include "kernels.h"
#include "loom/graph/ops.h"
#include "simd_flash.h"

namespace loom::cpu {

// ALiBi slope of head h of n_head (1 when max_bias == 0): heads below the largest power of two
// n2 <= n_head get m0^(h+1), the rest m1^(2(h - n2) + 1), m0 = 2^(-max_bias/n2), m1 = 2^(-max_bias/2/n2).
float alibi_slope(float max_bias, int64_t n_head, int64_t h) {
  if (max_bias <= 0.0f) return 1.0f;
  const int64_t n2 = (int64_t)1 << (int)std::floor(std::log2((double)n_head));
  const float m0 = std::pow(2.0f, -max_bias / (float)n2);
  const float m1 = std::pow(2.0f, -max_bias / 2.0f / (float)n2);
  return h < n2 ? std::pow(m0, (float)(h + 1)) : std::pow(m1, (float)(2 * (h - n2) + 1));
}

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

size_t align64(size_t x) { return (x + 63) / 64 * 64; }
// Per-thread slice of `per_thread` bytes in a 64-aligned scratch.
float* thread_slice(const KernelArgs& args, size_t per_thread) {
  const auto p = reinterpret_cast<uintptr_t>(args.wdata);
  char* base = reinterpret_cast<char*>((p + 63) / 64 * 64);
  return reinterpret_cast<float*>(base + align64(per_thread) * (size_t)args.ith);
}
size_t slices_bytes(size_t per_thread, int nth) { return align64(per_thread) * (size_t)nth + 64; }

bool unit_stride(const Tensor* t) { return t->nb[0] == dtype_info(t->type).type_size; }

float mask_value(DType type, const char* row, int64_t i) {
  return type == DType::F16 ? fp16_to_f32_fast(reinterpret_cast<const fp16_t*>(row)[i])
                            : reinterpret_cast<const float*>(row)[i];
}

// ---- ROPE / ROPE_BACK ------------------------------------------------------------------------

// The cos / sin table of one token's position, cached per thread: every ROPE node of a graph
// (q and k of each layer) rotates the same positions with the same parameters, so each thread
// computes a position's angles once per graph instead of once per node and row. Entries are
// keyed by the token's index in the node and checked against its position and the parameters.
struct RopeAngles {
  struct Key {
    int n_dims = 0;
    bool back = false;
    double base = 0, freq_scale = 0;
    float attn_factor = 0;
    float ext_factor = 0, beta_fast = 0, beta_slow = 0;  // YaRN
    int n_ctx_orig = 0;
    bool operator==(const Key&) const = default;
  };
  Key key;
  std::vector<float> ff;        // the freq_factors of key (empty: none)
  std::vector<double> theta;    // theta of pair i per unit position
  std::vector<int64_t> pos_at;  // per token index: the position its entry holds (or INT64_MIN)
  std::vector<float> cs;        // per token index: cos[half], then sin[half]
  float mscale = 1;             // cos and sin are multiplied by it (attn_factor, YaRN's magnitude)

  static float ff_at(const Tensor* t, int i) {
    return *reinterpret_cast<const float*>(static_cast<const char*>(t->data) + i * t->nb[0]);
  }
  // Sets the parameters (of `node`, read into k) and frequency factors (or null), clearing the
  // entries when they change.
  void use(const Key& k, const Tensor* f, const Tensor* node) {
    const int half = k.n_dims / 2;
    bool same = k == key && !theta.empty() && ff.size() == (f ? (size_t)half : 0);
    for (int i = 0; same && f && i < half; ++i) same = ff[(size_t)i] == ff_at(f, i);
    if (same) return;
    key = k;
    ff.clear();
    for (int i = 0; f && i < half; ++i) ff.push_back(ff_at(f, i));
    theta.assign((size_t)half, 0.0);
    // YaRN: pair i mixes the interpolated angle (freq_scale e) with the extrapolated one (e) by
    // its ramp; the ramp's ends are the pairs that turn beta_fast / beta_slow times over n_ctx_orig.
    const ops::RopeRamp ramp = ops::rope_ramp(node);
    const double lo = ramp.lo, hi = ramp.hi;
    mscale = ramp.mscale;
    for (int i = 0; i < half; ++i) {
      double e = std::pow(k.base, -2.0 * i / k.n_dims);
      if (f) e /= (double)ff[(size_t)i];
      double mult = k.freq_scale;
      if (k.ext_factor != 0.0f) {
        const double y = (i - lo) / std::max(0.001, hi - lo);
        const double ramp = (1.0 - std::min(1.0, std::max(0.0, y))) * k.ext_factor;
        mult = k.freq_scale * (1.0 - ramp) + ramp;
      }
      theta[(size_t)i] = e * mult;
    }
    pos_at.clear();
    cs.clear();
  }
  // cos[half], then sin[half] of token index t at position p.
  const float* at(int64_t t, int64_t p) {
    const size_t half = theta.size();
    if ((size_t)t >= pos_at.size()) {
      pos_at.resize((size_t)t + 1, std::numeric_limits<int64_t>::min());
      cs.resize(pos_at.size() * 2 * half);
    }
    float* e = cs.data() + (size_t)t * 2 * half;
    if (pos_at[(size_t)t] != p) {
      for (size_t i = 0; i < half; ++i) {
        const double a = (double)p * theta[i];
        e[i] = (float)std::cos(a) * mscale;
        e[half + i] = (float)(key.back ? -std::sin(a) : std::sin(a)) * mscale;
      }
      pos_at[(size_t)t] = p;
    }
    return e;
  }
};

// a F32 {head_dim, n_head, T, ne3}, pos I32 {T}, freq_factors F32 {n_dims/2} or null -> dst like a.
// Pair i rotates by theta = pos * freq_scale * base^(-2i/n_dims) / ff[i] (by -theta for back);
// pairs are (2i, 2i+1) normal or (i, i + n_dims/2) neox; dims >= n_dims are copied.
void rope(const KernelArgs& args, Tensor* dst, bool back) {
  const Tensor* a = dst->src[0];
  const Tensor* pos = dst->src[1];
  const Tensor* ff = dst->src[2];
  RopeAngles::Key key;
  key.n_dims = dst->param_i32(0);
  key.back = back;
  key.base = dst->param_f32(3);
  key.freq_scale = dst->param_f32(4);
  key.attn_factor = dst->param_f32(5);
  key.ext_factor = dst->param_f32(6);
  key.beta_fast = dst->param_f32(7);
  key.beta_slow = dst->param_f32(8);
  key.n_ctx_orig = dst->param_i32(2);
  const int half = key.n_dims / 2;
  thread_local RopeAngles angles;
  angles.use(key, ff, dst);
  const bool neox = dst->param_i32(1) == ops::kRopeNeox;
  const int64_t hd = a->ne[0];
  const int n_dims = key.n_dims;

  int64_t r0, r1;
  split_rows(a->nrows(), args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    unravel_row(r, a->ne, i1, i2, i3);
    const int64_t p = *reinterpret_cast<const int32_t*>(static_cast<const char*>(pos->data) + i2 * pos->nb[0]);
    const float* cs = angles.at(i2, p);
    const float* sn = cs + half;
    const char* src = row_ptr(a, i1, i2, i3);
    const size_t nb0 = a->nb[0];
    float* y = reinterpret_cast<float*>(row_ptr(dst, i1, i2, i3));
    constexpr int kMaxFast = 256;
    if (nb0 == sizeof(float) && half <= kMaxFast) {  // contiguous rows: loops the compiler vectorizes
      const auto* x = reinterpret_cast<const float*>(src);
      float t[2 * kMaxFast];  // y may alias x (in place): rotate from a copy
      std::memcpy(t, x, sizeof(float) * (size_t)n_dims);
      if (neox) {
        for (int i = 0; i < half; ++i) y[i] = t[i] * cs[i] - t[i + half] * sn[i];
        for (int i = 0; i < half; ++i) y[i + half] = t[i] * sn[i] + t[i + half] * cs[i];
      } else {
        for (int i = 0; i < half; ++i) {
          y[2 * i] = t[2 * i] * cs[i] - t[2 * i + 1] * sn[i];
          y[2 * i + 1] = t[2 * i] * sn[i] + t[2 * i + 1] * cs[i];
        }
      }
      if (y != x) std::memmove(y + n_dims, x + n_dims, sizeof(float) * (size_t)(hd - n_dims));
      continue;
    }
    auto x = [&](int64_t i) { return *reinterpret_cast<const float*>(src + i * nb0); };
    const int64_t stride = neox ? 1 : 2, off = neox ? half : 1;
    for (int i = 0; i < half; ++i) {
      const int64_t j = i * stride;
      const float x0 = x(j), x1 = x(j + off);
      y[j] = x0 * cs[i] - x1 * sn[i];
      y[j + off] = x0 * sn[i] + x1 * cs[i];
    }
    for (int64_t i = n_dims; i < hd; ++i) y[i] = x(i);
  }
}

// ---- SOFT_MAX / SOFT_MAX_BACK ----------------------------------------------------------------

// a F32 {n_kv, n_q, h, b}, mask F32/F16 {n_kv, >= n_q, m2, m3} or null -> dst like a:
// softmax over dim 0 of (a * scale + slope_h * mask), sinks F32 {h} (or null) in the max and the
// sum only. A row that is all -inf gives zeros.
void soft_max(const KernelArgs& args, Tensor* dst) {
  const Tensor* a = dst->src[0];
  const Tensor* mask = dst->src[1];
  const Tensor* sinks = dst->src[2];
  const float scale = dst->param_f32(0), max_bias = dst->param_f32(1);
  const int64_t n = a->ne[0];
  int64_t r0, r1;
  split_rows(a->nrows(), args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    unravel_row(r, a->ne, i1, i2, i3);
    const float* x = reinterpret_cast<const float*>(row_ptr(a, i1, i2, i3));  // may alias y (in place)
    float* y = reinterpret_cast<float*>(row_ptr(dst, i1, i2, i3));
    float mx = kNegInf;
    if (mask) {
      const float slope = alibi_slope(max_bias, a->ne[2], i2);
      const char* mrow = row_ptr(mask, i1, i2 % mask->ne[2], i3 % mask->ne[3]);
      for (int64_t i = 0; i < n; ++i) {
        y[i] = x[i] * scale + slope * mask_value(mask->type, mrow, i);
        mx = std::max(mx, y[i]);
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        y[i] = x[i] * scale;
        mx = std::max(mx, y[i]);
      }
    }
    const float sink = sinks ? static_cast<const float*>(sinks->data)[i2] : kNegInf;
    mx = std::max(mx, sink);
    if (mx == kNegInf) {  // nothing visible: zeros, not NaN
      std::fill(y, y + n, 0.0f);
      continue;
    }
    // std::exp on every level: the fused topk-moe router (cpu_fused.cpp) reproduces this softmax
    // bit for bit. Flash attention, the large softmax, uses the vectorized exp.
    double sum = sinks ? std::exp(sink - mx) : 0.0;
    for (int64_t i = 0; i < n; ++i) {
      y[i] = std::exp(y[i] - mx);
      sum += y[i];
    }
    scale_f32(n, (float)(1.0 / sum), y);
  }
}

// grad, y (the soft_max output) {n, ...} -> dst = scale * y * (grad - sum(grad * y)) per row.
void soft_max_back(const KernelArgs& args, Tensor* dst) {
  const Tensor* g = dst->src[0];
  const Tensor* yt = dst->src[1];
  const float scale = dst->param_f32(0);
  const int64_t n = g->ne[0];
  int64_t r0, r1;
  split_rows(g->nrows(), args.ith, args.nth, r0, r1);
  for (int64_t r = r0; r < r1; ++r) {
    int64_t i1, i2, i3;
    unravel_row(r, g->ne, i1, i2, i3);
    const float* gr = reinterpret_cast<const float*>(row_ptr(g, i1, i2, i3));
    const float* yr = reinterpret_cast<const float*>(row_ptr(yt, i1, i2, i3));
    float* d = reinterpret_cast<float*>(row_ptr(dst, i1, i2, i3));
    const float dot = (float)dot_f32(gr, yr, n);
    for (int64_t i = 0; i < n; ++i) d[i] = scale * yr[i] * (gr[i] - dot);
  }
}

// ---- FLASH_ATTN_EXT --------------------------------------------------------------------------

// q F32 {D, n_q, h, nb}, k {D, n_kv, h_kv, nb}, v {Dv, n_kv, h_kv, nb} F32/F16/BF16 or quantized
// (each K/V row converted to f32 first), mask F32/F16 {n_kv, >= n_q, m2, m3} or null -> dst F32
// {Dv, h, n_q, nb}.
// Per query row: s_j = q.k_j * scale (softcap c: c * tanh(s / c)) + slope * mask_j; one pass over
// j keeps the running max M, the sum S of exp(s_j - M) and acc = sum exp(s_j - M) v_j,
// rescaling both when M grows; a sink adds exp(sink - M) to S; out = acc / S (zeros when every
// key is masked and there is no sink).
void flash_attn_ext(const KernelArgs& args, Tensor* dst) {
  const Tensor* q = dst->src[0];
  const Tensor* k = dst->src[1];
  const Tensor* v = dst->src[2];
  const Tensor* mask = dst->src[3];
  const Tensor* sinks = dst->src[4];
  const float scale = dst->param_f32(0), max_bias = dst->param_f32(1), softcap = dst->param_f32(2);
  const int64_t D = q->ne[0], n_q = q->ne[1], n_head = q->ne[2], n_kv = k->ne[1], Dv = v->ne[0];
  const int64_t group = n_head / k->ne[2];  // query heads per kv head (GQA)
  // quantized caches: rows converted into kbuf / vbuf and used through the f32 kernels
  const RowToF32Fn kconv = cache_row_reader(k->type), vconv = cache_row_reader(v->type);
  const WeightKernels* kk = weight_kernels(kconv ? DType::F32 : k->type);
  const WeightKernels* vk = weight_kernels(vconv ? DType::F32 : v->type);
  float* acc = thread_slice(args, sizeof(float) * (size_t)(2 * Dv + D));
  float* kbuf = acc + Dv;
  float* vbuf = kbuf + D;

  int64_t u0, u1;  // units: (batch, head, query), query fastest so a head's K/V stay in cache
  split_rows(n_q * n_head * q->ne[3], args.ith, args.nth, u0, u1);
  for (int64_t u = u0; u < u1; ++u) {
    const int64_t iq = u % n_q, ih = (u / n_q) % n_head, ib = u / (n_q * n_head);
    const int64_t ikv = ih / group;
    const float* qrow = reinterpret_cast<const float*>(row_ptr(q, iq, ih, ib));
    const float slope = alibi_slope(max_bias, n_head, ih);
    const char* mrow = mask ? row_ptr(mask, iq, ih % mask->ne[2], ib % mask->ne[3]) : nullptr;
    const char* kbase = row_ptr(k, 0, ikv, ib);
    const char* vbase = row_ptr(v, 0, ikv, ib);

    float M = kNegInf, S = 0.0f;
    std::fill(acc, acc + Dv, 0.0f);
    for (int64_t j = 0; j < n_kv; ++j) {
      float mv = 0.0f;
      if (mrow) {
        mv = mask_value(mask->type, mrow, j);
        if (mv == kNegInf) continue;
        mv *= slope;
      }
      float s;
      const char* krow = kbase + j * k->nb[1];
      if (kconv) krow = reinterpret_cast<const char*>(convert_row(kconv, krow, kbuf, D));
      kk->dot(D, krow, &qrow, 1, &s);
      s *= scale;
      if (softcap != 0.0f) s = softcap * std::tanh(s / softcap);
      s += mv;
      float w = 1.0f;
      if (s > M) {
        if (S > 0.0f) {  // before the first visible key acc and S are zero
          const float rescale = std::exp(M - s);
          S *= rescale;
          scale_f32(Dv, rescale, acc);
        }
        M = s;
      } else {
        w = std::exp(s - M);
      }
      const char* vrow = vbase + j * v->nb[1];
      if (vconv) vrow = reinterpret_cast<const char*>(convert_row(vconv, vrow, vbuf, Dv));
      vk->axpy(Dv, w, vrow, acc);
      S += w;
    }
    if (sinks) {  // one more logit in the sum, with no value row
      const float sink = static_cast<const float*>(sinks->data)[ih];
      if (sink > M) {
        const float rescale = S > 0.0f ? std::exp(M - sink) : 0.0f;
        S *= rescale;
        scale_f32(Dv, rescale, acc);
        M = sink;
      }
      S += std::exp(sink - M);
    }
    float* out = reinterpret_cast<float*>(row_ptr(dst, ih, iq, ib));
    const float inv = S > 0.0f ? 1.0f / S : 0.0f;
    for (int64_t i = 0; i < Dv; ++i) out[i] = acc[i] * inv;
  }
}

bool f32_unit(const Tensor* t) { return t->type == DType::F32 && t->nb[0] == sizeof(float); }

}  // namespace

bool supports_attention(const Tensor* node) {
  const Tensor* a = node->src[0];
  if (!a || node->type != DType::F32 || node->nb[0] != sizeof(float)) return false;
  switch (node->op) {
    case OpKind::ROPE:
    case OpKind::ROPE_BACK: {
      const int mode = node->param_i32(1);
      return a->type == DType::F32 && node->src[1] && node->src[1]->type == DType::I32 &&
             (mode == ops::kRopeNormal || mode == ops::kRopeNeox) &&
             (!node->src[2] || node->src[2]->type == DType::F32);
    }
    case OpKind::SOFT_MAX: {
      const Tensor* m = node->src[1];
      const Tensor* sinks = node->src[2];
      return f32_unit(a) && (!m || ((m->type == DType::F32 || m->type == DType::F16) && unit_stride(m))) &&
             (!sinks || f32_unit(sinks));
    }
    case OpKind::SOFT_MAX_BACK:
      return f32_unit(a) && node->src[1] && f32_unit(node->src[1]);
    case OpKind::FLASH_ATTN_EXT: {
      const Tensor* k = node->src[1];
      const Tensor* v = node->src[2];
      const Tensor* m = node->src[3];
      const Tensor* sinks = node->src[4];
      return f32_unit(a) && k && v && cache_readable(k) && cache_readable(v) && unit_stride(k) && unit_stride(v) &&
             (!m || ((m->type == DType::F32 || m->type == DType::F16) && unit_stride(m))) &&
             (!sinks || f32_unit(sinks));
    }
    default:
      return false;
  }
}

size_t work_size_attention(const Tensor* node, int nth) {
  switch (node->op) {
    case OpKind::FLASH_ATTN_EXT:
      return std::max(slices_bytes(sizeof(float) * (size_t)(2 * node->src[2]->ne[0] + node->src[0]->ne[0]), nth),
                      flash_tiled_supported(node) ? flash_tiled_work_size(node, nth) : 0);
    default:
      return 0;
  }
}

void compute_attention(const KernelArgs& args, Tensor* node) {
  switch (node->op) {
    case OpKind::ROPE:
      return rope(args, node, false);
    case OpKind::ROPE_BACK:
      return rope(args, node, true);
    case OpKind::SOFT_MAX:
      return soft_max(args, node);
    case OpKind::SOFT_MAX_BACK:
      return soft_max_back(args, node);
    case OpKind::FLASH_ATTN_EXT:
      return flash_tiled_supported(node) ? flash_attn_tiled(args, node) : flash_attn_ext(args, node);
    default:
      return;
  }
}

}  // namespace loom::cpu
