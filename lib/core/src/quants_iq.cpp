// Reference rows of the i-quants (quants_iq.h). Dequantizing goes through iq_unpack, so it reads a
// block exactly as the CPU kernels do; x = (unit * sc) * v rounds as llama.cpp's dequantizers do.
//
// Quantizing has no importance matrix: per group of 8 (IQ3: 4) values the signs are the values'
// own (where a type stores only 7 of 8 sign bits, the smallest value of an odd-count group gets the
// wrong one, as llama.cpp does), the magnitudes are rounded to the type's levels, and the 4 grid
// points nearest that rounded point are tried against the values themselves. Each scale's span
// tries a few scales around its largest value and keeps the one of least squared error; the
// block's unit is then set so the largest of them is the top scale code.
#include "loom/core/quants_iq.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "loom/core/error.h"
#include "quants_fit.h"

namespace loom {
namespace {

template <class Block>
void dequantize_iq(const void* src, float* dst, int64_t n) {
  LOOM_ASSERT(n % 256 == 0, "i-quant row of {} elements", n);
  const auto* blocks = static_cast<const Block*>(src);
  IqInts q;
  for (int64_t b = 0; b < n / 256; ++b) {
    iq_unpack(blocks[b], q);
    float* y = dst + 256 * b;
    for (int e = 0; e < 256; ++e) y[e] = (q.unit * (float)q.sc[e / 16]) * (float)q.v[e];
  }
}

// ---- the nearest grid points of a rounded point -------------------------------------------------

// A codebook seen as points with `coords` coordinates, each one of `n_levels` values: for every
// point of the full lattice (n_levels^coords), the kCand grid points nearest to it.
constexpr int kCand = 4;
struct Codebook {
  int coords = 0;
  int n_levels = 0;
  std::vector<int> level;                  // the levels' values, ascending
  std::vector<float> mid;                  // the midpoints between neighbouring levels
  std::vector<std::array<int8_t, 8>> pts;  // grid points (values)
  std::vector<std::array<float, 8>> fpts;  // the same as floats
  std::vector<std::array<uint16_t, kCand>> near;

  template <class Grid>
  Codebook(const Grid& grid, int c, std::vector<int> lv) : coords(c), n_levels((int)lv.size()), level(std::move(lv)) {
    for (size_t k = 1; k < level.size(); ++k) mid.push_back(0.5f * (float)(level[k - 1] + level[k]));
    pts.resize(grid.size());
    fpts.resize(grid.size());
    for (size_t i = 0; i < grid.size(); ++i)
      for (int j = 0; j < coords; ++j) {
        pts[i][(size_t)j] = (int8_t)(uint8_t)(grid[i] >> (8 * j));
        fpts[i][(size_t)j] = (float)pts[i][(size_t)j];
      }
    int lattice = 1;
    for (int j = 0; j < coords; ++j) lattice *= n_levels;
    near.resize((size_t)lattice);
    std::vector<std::pair<int, int>> dist(pts.size());
    for (int p = 0; p < lattice; ++p) {
      int code = p, v[8];
      for (int j = 0; j < coords; ++j, code /= n_levels) v[j] = level[(size_t)(code % n_levels)];
      for (size_t i = 0; i < pts.size(); ++i) {
        int d2 = 0;
        for (int j = 0; j < coords; ++j) d2 += (v[j] - pts[i][(size_t)j]) * (v[j] - pts[i][(size_t)j]);
        dist[i] = {d2, (int)i};
      }
      std::partial_sort(dist.begin(), dist.begin() + kCand, dist.end());
      for (int k = 0; k < kCand; ++k) near[(size_t)p][(size_t)k] = (uint16_t)dist[(size_t)k].second;
    }
  }

  // The grid point nearest to t[0, coords) among the candidates of t rounded to the levels; its
  // squared error in t's units (weighted by w[0, coords) when given).
  int nearest(const float* t, float* err, const float* w = nullptr) const {
    int code = 0, mul = 1;
    for (int j = 0; j < coords; ++j, mul *= n_levels) {
      int k = 0;  // the nearest level: how many midpoints lie below t (ties go down)
      for (float m : mid) k += t[j] > m;
      code += k * mul;
    }
    int best_i = 0;
    float best_e = INFINITY;
    for (uint16_t i : near[(size_t)code]) {
      const float* q = fpts[i].data();
      float e = 0.0f;
      for (int j = 0; j < coords; ++j) e += (w ? w[j] : 1.0f) * (t[j] - q[j]) * (t[j] - q[j]);
      if (e < best_e) best_e = e, best_i = i;
    }
    *err = best_e;
    return best_i;
  }
};

// Built on first use (the lattices take up to ~0.1 s; a static local's initialization is
// thread-safe).
const Codebook& codebook(DType t) {
  switch (t) {
    case DType::IQ2_XXS: {
      static const Codebook book(kIq2xxsGrid, 8, {8, 25, 43});
      return book;
    }
    case DType::IQ2_XS: {
      static const Codebook book(kIq2xsGrid, 8, {8, 25, 43});
      return book;
    }
    case DType::IQ2_S: {
      static const Codebook book(kIq2sGrid, 8, {8, 25, 43});
      return book;
    }
    case DType::IQ3_XXS: {
      static const Codebook book(kIq3xxsGrid, 4, {4, 12, 20, 28, 36, 44, 52, 62});
      return book;
    }
    case DType::IQ3_S: {
      static const Codebook book(kIq3sGrid, 4, {1, 3, 5, 7, 9, 11, 13, 15});
      return book;
    }
    default: {
      static const Codebook book(kIq1sGrid, 8, {-1, 0, 1});
      return book;
    }
  }
}

// ---- choosing points and scales -----------------------------------------------------------------

// What a quantized block says, before packing: per group of 8 values a grid index per `coords`
// (IQ3: two), signs (bit j: value j negative) or, for IQ1, the shift's sign; per 16 a scale code.
struct IqChoice {
  float unit = 0.0f;
  int s[16] = {};           // scale codes, per 16 values
  int idx[64] = {};         // grid indices, per `coords` values
  uint8_t sign[32] = {};    // per 8 values
  int8_t flipped[32] = {};  // per 8 values: the value whose stored sign is wrong (parity), or -1
  bool neg_shift[32] = {};  // IQ1: per 8 values
};

struct IqType {
  DType type;
  int span;          // values per scale: 16 or 32
  int max_s;         // largest scale code
  float unit_per_d;  // unit = d * unit_per_d
  bool parity;       // only 7 sign bits per 8 stored: the count of negatives is even
  bool iq1;          // grid points carry signs; values 8 g +- 1, the shift's sign per `shift_span`
  int shift_span;    // IQ1: values per shift sign (32 for IQ1_S, 8 for IQ1_M)
};

// Squared error of x[0, n) (n = span) quantized at scale u with the choices written to c from value
// offset e0 on; the grid points are chosen here. w[0, n): the values' importance weights, or
// nullptr (all 1).
float choose_span(const IqType& ty, const Codebook& cb, const float* x, int n, int e0, float u, IqChoice& c,
                  const float* w) {
  auto weight = [w](int j) { return w ? w[j] : 1.0f; };
  if (u <= 0.0f) {  // an all-zero span (or block): every point decodes to 0
    for (int g = 0; g < n / cb.coords; ++g) c.idx[e0 / cb.coords + g] = 0;
    float e = 0.0f;
    for (int j = 0; j < n; ++j) e += weight(j) * x[j] * x[j];
    return e;
  }
  float total = 0.0f;
  if (!ty.iq1) {
    for (int g = 0; g < n / cb.coords; ++g) {
      float t[8], err;
      for (int j = 0; j < cb.coords; ++j) t[j] = std::fabs(x[g * cb.coords + j]) / u;
      c.idx[e0 / cb.coords + g] = cb.nearest(t, &err, w ? w + g * cb.coords : nullptr);
      total += err * u * u;
    }
    // A sign the parity rule got wrong costs (|x| + q)^2 instead of (|x| - q)^2, i.e. 4 |x| q more.
    for (int g = e0 / 8; g < (e0 + n) / 8 && ty.parity; ++g) {
      if (c.flipped[g] < 0) continue;
      const int e = 8 * g + c.flipped[g];
      total += 4.0f * weight(e - e0) * std::fabs(x[e - e0]) * u *
               cb.fpts[(size_t)c.idx[e / cb.coords]][(size_t)(e % cb.coords)];
    }
    return total;
  }
  // IQ1: v = 8 g + shift; per shift span try both signs.
  for (int s0 = 0; s0 < n; s0 += ty.shift_span) {
    float best = INFINITY;
    int best_idx[4] = {};
    bool best_neg = false;
    for (int neg = 0; neg < 2; ++neg) {
      const float shift = neg ? -1.0f : 1.0f;
      float e_all = 0.0f;
      int idx[4];
      for (int g = 0; g < ty.shift_span / 8; ++g) {
        float t[8], err;
        for (int j = 0; j < 8; ++j) t[j] = (x[s0 + 8 * g + j] / u - shift) / 8.0f;
        idx[g] = cb.nearest(t, &err, w ? w + s0 + 8 * g : nullptr);
        e_all += err * 64.0f * u * u;
      }
      if (e_all < best) {
        best = e_all, best_neg = neg;
        std::copy(idx, idx + ty.shift_span / 8, best_idx);
      }
    }
    for (int g = 0; g < ty.shift_span / 8; ++g) {
      c.idx[(e0 + s0) / 8 + g] = best_idx[g];
      c.neg_shift[(e0 + s0) / 8 + g] = best_neg;
    }
    total += best;
  }
  return total;
}

// The largest coordinate a point can have, in v's units.
float top_level(const IqType& ty, const Codebook& cb) { return ty.iq1 ? 9.0f : (float)cb.level.back(); }

// w: the block's 256 importance weights, or nullptr.
void choose_block(const IqType& ty, const float* x, IqChoice& c, const float* w) {
  const Codebook& cb = codebook(ty.type);
  c = IqChoice{};
  for (int e = 0; e < 256; ++e)
    if (x[e] < 0.0f) c.sign[e / 8] |= (uint8_t)(1 << (e % 8));
  for (int g = 0; g < 32; ++g) {
    c.flipped[g] = -1;
    if (ty.parity && (std::popcount(c.sign[g]) & 1)) {
      int m = 8 * g;
      // the sign flipped is the one whose error costs least
      auto cost = [&](int e) { return (w ? w[e] : 1.0f) * std::fabs(x[e]); };
      for (int e = 8 * g; e < 8 * g + 8; ++e)
        if (cost(e) < cost(m)) m = e;
      c.sign[g] ^= (uint8_t)(1 << (m % 8));
      c.flipped[g] = (int8_t)(m % 8);
    }
  }
  // Best free scale of each span, then one unit for the block.
  const float top = top_level(ty, cb);
  float lower[8];  // the levels below the top (IQ1: v = 1 and 7 below 9)
  int n_lower = 0;
  if (ty.iq1) {
    lower[n_lower++] = 1.0f;
    lower[n_lower++] = 7.0f;
  } else {
    for (int lv : cb.level)
      if ((float)lv < top) lower[n_lower++] = (float)lv;
  }
  float best_u[16] = {};
  IqChoice scratch = c;
  for (int sp = 0; sp < 256 / ty.span; ++sp) {
    const float* xs = x + sp * ty.span;
    float amax = 0.0f;
    for (int j = 0; j < ty.span; ++j) amax = std::max(amax, std::fabs(xs[j]));
    // Scales that put the largest value near the top level, and near each lower one (values all
    // alike fit a low level best: IQ2's grids have (8, ..., 8) but no (43, ..., 43)).
    float us[9 + 3 * 8];
    int n_us = 0;
    for (int k = 0; k < 9; ++k) us[n_us++] = amax / top * (0.7f + 0.075f * (float)k);
    for (int k = 0; k < n_lower; ++k)
      for (float f : {0.9f, 1.0f, 1.1f}) us[n_us++] = amax / lower[k] * f;
    float best = INFINITY;
    for (int k = 0; k < n_us && amax > 0.0f; ++k) {
      const float u = us[k];
      const float e = choose_span(ty, cb, xs, ty.span, sp * ty.span, u, scratch, w ? w + sp * ty.span : nullptr);
      if (e < best) best = e, best_u[sp] = u;
    }
  }
  float umax = 0.0f;
  for (int sp = 0; sp < 256 / ty.span; ++sp) umax = std::max(umax, best_u[sp]);
  const fp16_t d16 = f32_to_fp16(umax / (float)(2 * ty.max_s + 1) / ty.unit_per_d);
  c.unit = fp16_to_f32(d16) * ty.unit_per_d;
  for (int sp = 0; sp < 256 / ty.span; ++sp) {
    int s = c.unit > 0.0f ? (int)std::lround((best_u[sp] / c.unit - 1.0f) / 2.0f) : 0;
    s = std::clamp(s, 0, ty.max_s);
    // The code's neighbours too: rounding the scale is not always the least error.
    float best = INFINITY;
    int best_s = s;
    for (int cand = std::max(0, s - 1); cand <= std::min(ty.max_s, s + 1); ++cand) {
      const float e = choose_span(ty, cb, x + sp * ty.span, ty.span, sp * ty.span, c.unit * (float)(2 * cand + 1),
                                  scratch, w ? w + sp * ty.span : nullptr);
      if (e < best) best = e, best_s = cand;
    }
    choose_span(ty, cb, x + sp * ty.span, ty.span, sp * ty.span, c.unit * (float)(2 * best_s + 1), c,
                w ? w + sp * ty.span : nullptr);
    for (int k = 0; k < ty.span / 16; ++k) c.s[sp * ty.span / 16 + k] = best_s;
  }
}

constexpr IqType kIq2xxs{DType::IQ2_XXS, 32, 15, 0.125f, true, false, 0};
constexpr IqType kIq2xs{DType::IQ2_XS, 16, 15, 0.125f, true, false, 0};
constexpr IqType kIq2s{DType::IQ2_S, 16, 15, 0.125f, false, false, 0};
constexpr IqType kIq3xxs{DType::IQ3_XXS, 32, 15, 0.25f, true, false, 0};
constexpr IqType kIq3s{DType::IQ3_S, 32, 15, 1.0f, false, false, 0};
constexpr IqType kIq1s{DType::IQ1_S, 32, 7, 0.125f, false, true, 32};
constexpr IqType kIq1m{DType::IQ1_M, 16, 7, 0.125f, false, true, 8};

// ---- packing ------------------------------------------------------------------------------------

void pack(const IqChoice& c, BlockIQ2_XXS& b) {
  b.d = f32_to_fp16(c.unit / 0.125f);
  for (int ib = 0; ib < 8; ++ib) {
    uint32_t idx = 0, aux = (uint32_t)c.s[2 * ib] << 28;
    for (int l = 0; l < 4; ++l) {
      idx |= (uint32_t)c.idx[4 * ib + l] << (8 * l);
      aux |= (uint32_t)(c.sign[4 * ib + l] & 127) << (7 * l);
    }
    std::memcpy(b.qs + 4 * ib, &idx, 4);
    std::memcpy(b.qs + 4 * ib + 2, &aux, 4);
  }
}
void pack(const IqChoice& c, BlockIQ2_XS& b) {
  b.d = f32_to_fp16(c.unit / 0.125f);
  for (int ib = 0; ib < 8; ++ib) {
    b.scales[ib] = (uint8_t)(c.s[2 * ib] | (c.s[2 * ib + 1] << 4));
    for (int l = 0; l < 4; ++l) b.qs[4 * ib + l] = (uint16_t)(c.idx[4 * ib + l] | ((c.sign[4 * ib + l] & 127) << 9));
  }
}
void pack(const IqChoice& c, BlockIQ2_S& b) {
  std::memset(&b, 0, sizeof(b));
  b.d = f32_to_fp16(c.unit / 0.125f);
  for (int ib = 0; ib < 8; ++ib) {
    b.scales[ib] = (uint8_t)(c.s[2 * ib] | (c.s[2 * ib + 1] << 4));
    for (int l = 0; l < 4; ++l) {
      const int idx = c.idx[4 * ib + l];
      b.qs[4 * ib + l] = (uint8_t)(idx & 255);
      b.qh[ib] |= (uint8_t)((idx >> 8) << (2 * l));
      b.qs[32 + 4 * ib + l] = c.sign[4 * ib + l];
    }
  }
}
void pack(const IqChoice& c, BlockIQ3_XXS& b) {
  b.d = f32_to_fp16(c.unit / 0.25f);
  for (int ib = 0; ib < 8; ++ib) {
    uint32_t aux = (uint32_t)c.s[2 * ib] << 28;
    for (int l = 0; l < 4; ++l) aux |= (uint32_t)(c.sign[4 * ib + l] & 127) << (7 * l);
    std::memcpy(b.qs + 64 + 4 * ib, &aux, 4);
    for (int k = 0; k < 8; ++k) b.qs[8 * ib + k] = (uint8_t)c.idx[8 * ib + k];
  }
}
void pack(const IqChoice& c, BlockIQ3_S& b) {
  std::memset(&b, 0, sizeof(b));
  b.d = f32_to_fp16(c.unit);
  for (int ib = 0; ib < 8; ++ib) {
    b.scales[ib / 2] |= (uint8_t)(c.s[2 * ib] << (4 * (ib % 2)));
    for (int k = 0; k < 8; ++k) {
      const int idx = c.idx[8 * ib + k];
      b.qs[8 * ib + k] = (uint8_t)(idx & 255);
      b.qh[ib] |= (uint8_t)((idx >> 8) << k);
    }
    for (int l = 0; l < 4; ++l) b.signs[4 * ib + l] = c.sign[4 * ib + l];
  }
}
void pack(const IqChoice& c, BlockIQ1_S& b) {
  b.d = f32_to_fp16(c.unit / 0.125f);
  for (int ib = 0; ib < 8; ++ib) {
    uint16_t h = (uint16_t)((c.s[2 * ib] << 12) | (c.neg_shift[4 * ib] ? 0x8000 : 0));
    for (int l = 0; l < 4; ++l) {
      b.qs[4 * ib + l] = (uint8_t)(c.idx[4 * ib + l] & 255);
      h |= (uint16_t)((c.idx[4 * ib + l] >> 8) << (3 * l));
    }
    b.qh[ib] = h;
  }
}
void pack(const IqChoice& c, BlockIQ1_M& b) {
  const uint16_t d = f32_to_fp16(c.unit / 0.125f);
  uint16_t sc[4] = {};
  for (int ib = 0; ib < 8; ++ib) {
    sc[ib / 2] |= (uint16_t)((c.s[2 * ib] | (c.s[2 * ib + 1] << 3)) << (6 * (ib % 2)));
    for (int l = 0; l < 4; ++l) {
      const int g = 4 * ib + l;
      b.qs[g] = (uint8_t)(c.idx[g] & 255);
      const int nib = ((c.idx[g] >> 8) & 7) | (c.neg_shift[g] ? 8 : 0);
      if (l % 2 == 0)
        b.qh[2 * ib + l / 2] = (uint8_t)nib;
      else
        b.qh[2 * ib + l / 2] |= (uint8_t)(nib << 4);
    }
  }
  for (int k = 0; k < 4; ++k) sc[k] |= (uint16_t)(((d >> (4 * k)) & 15) << 12);
  std::memcpy(b.scales, sc, 8);
}

template <class Block>
void quantize_iq(const IqType& ty, const float* src, void* dst, int64_t n, const float* imp) {
  LOOM_ASSERT(n % 256 == 0, "i-quant row of {} elements", n);
  auto* blocks = static_cast<Block*>(dst);
  IqChoice c;
  float w[256];
  for (int64_t b = 0; b < n / 256; ++b) {
    const bool weighted = detail::importance_weights(256, src + 256 * b, imp ? imp + 256 * b : nullptr, w);
    choose_block(ty, src + 256 * b, c, weighted ? w : nullptr);
    pack(c, blocks[b]);
    // The searches minimise the squared error, which shrinks a block: at 2 bits its decoded values
    // meet the originals at ~0.9 of their size, and a model feels that as every product scaled
    // down (on a trained 2-layer llama, KL divergence 0.166 -> 0.101 for IQ2_XXS once undone). So
    // the unit is scaled back until the decoded block's projection on the original (weighted by
    // the importance, where given) is its size.
    float y[256];
    dequantize_iq<Block>(&blocks[b], y, 256);
    const float* x = src + 256 * b;
    double xy = 0.0, xx = 0.0;
    const float* im = weighted ? imp + 256 * b : nullptr;  // with importance: the size the activations see
    for (int i = 0; i < 256; ++i) {
      const double a = im ? im[i] : 1.0;
      xy += a * x[i] * y[i], xx += a * x[i] * x[i];
    }
    if (xy > 0.0) {
      c.unit *= (float)(xx / xy);
      pack(c, blocks[b]);
    }
  }
}

}  // namespace

void dequantize_iq2_xxs_row(const void* src, float* dst, int64_t n) { dequantize_iq<BlockIQ2_XXS>(src, dst, n); }
void dequantize_iq2_xs_row(const void* src, float* dst, int64_t n) { dequantize_iq<BlockIQ2_XS>(src, dst, n); }
void dequantize_iq2_s_row(const void* src, float* dst, int64_t n) { dequantize_iq<BlockIQ2_S>(src, dst, n); }
void dequantize_iq3_xxs_row(const void* src, float* dst, int64_t n) { dequantize_iq<BlockIQ3_XXS>(src, dst, n); }
void dequantize_iq3_s_row(const void* src, float* dst, int64_t n) { dequantize_iq<BlockIQ3_S>(src, dst, n); }
void dequantize_iq1_s_row(const void* src, float* dst, int64_t n) { dequantize_iq<BlockIQ1_S>(src, dst, n); }
void dequantize_iq1_m_row(const void* src, float* dst, int64_t n) { dequantize_iq<BlockIQ1_M>(src, dst, n); }

void quantize_iq2_xxs_row(const float* src, void* dst, int64_t n) {
  quantize_iq<BlockIQ2_XXS>(kIq2xxs, src, dst, n, nullptr);
}
void quantize_iq2_xxs_row_imp(const float* src, void* dst, int64_t n, const float* imp) {
  quantize_iq<BlockIQ2_XXS>(kIq2xxs, src, dst, n, imp);
}
void quantize_iq2_xs_row(const float* src, void* dst, int64_t n) {
  quantize_iq<BlockIQ2_XS>(kIq2xs, src, dst, n, nullptr);
}
void quantize_iq2_xs_row_imp(const float* src, void* dst, int64_t n, const float* imp) {
  quantize_iq<BlockIQ2_XS>(kIq2xs, src, dst, n, imp);
}
void quantize_iq2_s_row(const float* src, void* dst, int64_t n) {
  quantize_iq<BlockIQ2_S>(kIq2s, src, dst, n, nullptr);
}
void quantize_iq2_s_row_imp(const float* src, void* dst, int64_t n, const float* imp) {
  quantize_iq<BlockIQ2_S>(kIq2s, src, dst, n, imp);
}
void quantize_iq3_xxs_row(const float* src, void* dst, int64_t n) {
  quantize_iq<BlockIQ3_XXS>(kIq3xxs, src, dst, n, nullptr);
}
void quantize_iq3_xxs_row_imp(const float* src, void* dst, int64_t n, const float* imp) {
  quantize_iq<BlockIQ3_XXS>(kIq3xxs, src, dst, n, imp);
}
void quantize_iq3_s_row(const float* src, void* dst, int64_t n) {
  quantize_iq<BlockIQ3_S>(kIq3s, src, dst, n, nullptr);
}
void quantize_iq3_s_row_imp(const float* src, void* dst, int64_t n, const float* imp) {
  quantize_iq<BlockIQ3_S>(kIq3s, src, dst, n, imp);
}
void quantize_iq1_s_row(const float* src, void* dst, int64_t n) {
  quantize_iq<BlockIQ1_S>(kIq1s, src, dst, n, nullptr);
}
void quantize_iq1_s_row_imp(const float* src, void* dst, int64_t n, const float* imp) {
  quantize_iq<BlockIQ1_S>(kIq1s, src, dst, n, imp);
}
void quantize_iq1_m_row(const float* src, void* dst, int64_t n) {
  quantize_iq<BlockIQ1_M>(kIq1m, src, dst, n, nullptr);
}
void quantize_iq1_m_row_imp(const float* src, void* dst, int64_t n, const float* imp) {
  quantize_iq<BlockIQ1_M>(kIq1m, src, dst, n, imp);
}

}  // namespace loom
