// Tiled flash attention (see simd_flash.h). A work unit is (batch, kv head, block of query
// positions); its R rows are (position, head of the GQA group) pairs sharing every K/V row.
// Keys go in tiles of kKeyTile:
//   S = (scale q) K^T          gemm_f32: the tile's K rows (any plain float type) x the q rows
//   S = softcap(S) + slope * mask;  per row: m' = max(m, max S), P = exp(S - m'),
//       l = l e^(m - m') + sum P,   O = O e^(m - m')
//   O += P V                   register tiles over V packed [key][16 dims] x P packed [key][nr]
// and finally out = O / l (zeros for a row that saw no visible key). Tiles every row of the
// unit masks out entirely (causal prompts) are skipped before their K/V rows are read.
// Decode (a unit of at most kMaxDotCols rows, plain float K and V) streams K and V instead of
// packing them: S by the row-dot kernels of K's type (the decode GEMV), O += P V by rows_axpy
// from the V rows; the K/V cache is read once, in place, as a memory-bound pass should.
#include "simd_flash.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu_rows.h"
#include "cpu_vec_dot.h"
#include "simd_gemm.h"
#include "simd_math.h"
#include "simd_units.h"

namespace loom::cpu {
namespace {

constexpr int64_t kKeyTile = 64;
// Query rows per unit: K/V tile packing is amortized over more rows (64 gave +10% over 32), and
// 96 is a whole number of 12-column tiles where 64 left a 4-column one (~3%, near the noise).
constexpr int64_t kRowsTarget = 96;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

size_t align64(size_t x) { return (x + 63) / 64 * 64; }

// q {D, n_q, h, nb}, k {D, n_kv, h_kv, nb}, v {Dv, n_kv, h_kv, nb} -> dst {Dv, h, n_q, nb}
struct Shape {
  int64_t D, Dv, n_q, n_head, n_kv, group, qb, R;
  DType k_type;
};
Shape shape_of(const Tensor* dst) {
  const Tensor* q = dst->src[0];
  const Tensor* k = dst->src[1];
  const Tensor* v = dst->src[2];
  Shape s{q->ne[0], v->ne[0], q->ne[1], q->ne[2], k->ne[1], q->ne[2] / k->ne[2], 0, 0, k->type};
  s.qb = std::clamp<int64_t>(kRowsTarget / s.group, 1, s.n_q);  // positions per unit
  s.R = s.qb * s.group;
  return s;
}

// Per-thread scratch, in bytes from the slice start.
struct Layout {
  size_t q, qpack, s, o, m, l, slope, mconv, vpanel, ppack, vrow, ptrs, gemm, total;
};
Layout layout_of(const Shape& f) {
  Layout L{};
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off += align64(bytes);
    return at;
  };
  const int64_t dv16 = (f.Dv + kPanelRows - 1) / kPanelRows * kPanelRows;
  L.q = take(sizeof(float) * (size_t)(f.R * f.D));
  const GemmKernels* gk = gemm_kernels(active_isa());
  L.qpack = gk ? take(gemm_f32_packed_bytes(*gk, f.k_type, f.D, f.R)) : 0;  // q as gemm_f32's packed b
  L.s = take(sizeof(float) * (size_t)(f.R * kKeyTile));
  L.o = take(sizeof(float) * (size_t)(f.R * f.Dv));
  L.m = take(sizeof(float) * (size_t)f.R);
  L.l = take(sizeof(float) * (size_t)f.R);
  L.slope = take(sizeof(float) * (size_t)f.R);
  L.mconv = take(sizeof(float) * (size_t)(f.R * kKeyTile));
  L.vpanel = take(sizeof(float) * (size_t)(dv16 * kKeyTile));
  L.ppack = take(sizeof(float) * (size_t)(kKeyTile * 16));
  L.vrow = take(sizeof(float) * (size_t)dv16);
  L.ptrs = take(sizeof(void*) * 5 * (size_t)f.R);
  L.gemm = take(gemm_scratch_bytes(0, f.D, kKeyTile));  // jobs: one tile of keys
  L.total = align64(off);
  return L;
}

// Asks for every cache line of the tile's K and V rows at once, whole row strides: a cache row
// holds every kv head's values of a token, which the other units read next (measured: asking
// for this head's bytes only was slower). In decode the K/V cache is cold (the weights streamed
// past since the last token) and a unit reads too few rows for the hardware prefetcher to get
// ahead, so the loads would wait on memory one stream at a time.
void prefetch_rows(const char* k, size_t ldk, int64_t rows, const char* v, size_t ldv) {
  for (int64_t j = 0; j < rows; ++j) {
    for (size_t b = 0; b < ldk; b += 64) __builtin_prefetch(k + j * ldk + b);
    for (size_t b = 0; b < ldv; b += 64) __builtin_prefetch(v + j * ldv + b);
  }
}

}  // namespace

bool flash_tiled_supported(const Tensor* node) {
  const GemmKernels* gk = gemm_kernels(active_isa());
  return gk && gk->f32_mr >= kPanelRows && node->src[1]->ne[2] > 0 && node->src[0]->ne[2] % node->src[1]->ne[2] == 0;
}

size_t flash_tiled_work_size(const Tensor* node, int nth) { return layout_of(shape_of(node)).total * (size_t)nth + 64; }

void flash_attn_tiled(const KernelArgs& args, Tensor* dst) {
  const Tensor* q = dst->src[0];
  const Tensor* k = dst->src[1];
  const Tensor* v = dst->src[2];
  const Tensor* mask = dst->src[3];
  const float scale = dst->param_f32(0), max_bias = dst->param_f32(1), softcap = dst->param_f32(2);
  const Shape f = shape_of(dst);
  const Layout L = layout_of(f);
  const GemmKernels& gk = *gemm_kernels(active_isa());
  const VecMath& vm = vec_math();
  const WeightKernels* kk = weight_kernels(k->type);
  const WeightKernels* vk = weight_kernels(v->type);
  char* slice = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(args.wdata) + 63) / 64 * 64) + L.total * args.ith;
  auto* qs = reinterpret_cast<float*>(slice + L.q);
  auto* qpack = reinterpret_cast<float*>(slice + L.qpack);
  auto* S = reinterpret_cast<float*>(slice + L.s);
  auto* O = reinterpret_cast<float*>(slice + L.o);
  auto* M = reinterpret_cast<float*>(slice + L.m);
  auto* Lsum = reinterpret_cast<float*>(slice + L.l);
  auto* slope = reinterpret_cast<float*>(slice + L.slope);
  auto* vpanel = reinterpret_cast<float*>(slice + L.vpanel);
  auto* ppack = reinterpret_cast<float*>(slice + L.ppack);
  auto* vrow = reinterpret_cast<float*>(slice + L.vrow);
  auto** qptr = reinterpret_cast<const void**>(slice + L.ptrs);
  auto** sptr = reinterpret_cast<float**>(slice + L.ptrs + sizeof(void*) * (size_t)f.R);
  auto** optr = reinterpret_cast<float**>(slice + L.ptrs + 2 * sizeof(void*) * (size_t)f.R);
  const char** mrow = reinterpret_cast<const char**>(slice + L.ptrs + 3 * sizeof(void*) * (size_t)f.R);
  const float** mseg = reinterpret_cast<const float**>(slice + L.ptrs + 4 * sizeof(void*) * (size_t)f.R);
  auto* mconv = reinterpret_cast<float*>(slice + L.mconv);
  const WeightKernels* f32k = weight_kernels(DType::F32);
  const WeightKernels* mk = mask ? weight_kernels(mask->type) : nullptr;
  const int64_t dv_groups = (f.Dv + kPanelRows - 1) / kPanelRows;
  const int nr = std::min(gk.f32_nr, 16);
  const bool stream = f.R <= kMaxDotCols && kk->act == ActType::f32 && kk->rows_dot && vk->rows_axpy;

  const int64_t n_pb = (f.n_q + f.qb - 1) / f.qb;
  const int64_t n_kvh = k->ne[2];
  // units: (batch, kv head, position block), positions fastest; shared dynamically (causal
  // masks make later position blocks dearer)
  for_units(args, q->ne[3] * n_kvh * n_pb, [&](int64_t u) {
    const int64_t pb = u % n_pb, ikv = (u / n_pb) % n_kvh, ib = u / (n_pb * n_kvh);
    const int64_t p0 = pb * f.qb, np = std::min(f.qb, f.n_q - p0);
    const int64_t R = np * f.group;  // row r: position p0 + r / group, head ikv * group + r % group
    for (int64_t r = 0; r < R; ++r) {
      const int64_t iq = p0 + r / f.group, h = ikv * f.group + r % f.group;
      const float* src = reinterpret_cast<const float*>(row_ptr(q, iq, h, ib));
      float* qr = qs + r * f.D;
      for (int64_t d = 0; d < f.D; ++d) qr[d] = src[d] * scale;
      qptr[r] = qr;
      sptr[r] = S + r * kKeyTile;
      optr[r] = O + r * f.Dv;
      mrow[r] = mask ? row_ptr(mask, iq, h % mask->ne[2], ib % mask->ne[3]) : nullptr;
      slope[r] = alibi_slope(max_bias, f.n_head, h);
      M[r] = kNegInf;
      Lsum[r] = 0.0f;
    }
    std::fill(O, O + R * f.Dv, 0.0f);
    // q packed once for all the unit's key tiles
    if (!stream)
      gemm_f32_pack_b(gk, k->type, f.D, R, qs, (size_t)f.D, qpack, 0, gemm_f32_pack_items(gk, k->type, f.D, R));
    const char* kbase = row_ptr(k, 0, ikv, ib);
    const char* vbase = row_ptr(v, 0, ikv, ib);

    for (int64_t j0 = 0; j0 < f.n_kv; j0 += kKeyTile) {
      int64_t kt = std::min(kKeyTile, f.n_kv - j0);
      if (stream) prefetch_rows(kbase + j0 * k->nb[1], k->nb[1], kt, vbase + j0 * v->nb[1], v->nb[1]);
      // the tile's mask as f32 per row (rows of one mask row share it); the tile ends after the
      // last key some row can see (a causal prompt's diagonal tile: those keys' P would be 0)
      // and is skipped if no row sees any
      if (mask) {
        int32_t seen[kKeyTile] = {};  // key j visible to some row (a loop without exits: vectorized)
        for (int64_t r = 0; r < R; ++r) {
          if (r > 0 && mrow[r] == mrow[r - 1]) {
            mseg[r] = mseg[r - 1];
            continue;
          }
          if (mask->type == DType::F32) {
            mseg[r] = reinterpret_cast<const float*>(mrow[r]) + j0;
          } else {
            mk->to_f32(mrow[r] + j0 * mask->nb[0], mconv + r * kKeyTile, kt);
            mseg[r] = mconv + r * kKeyTile;
          }
          const float* m = mseg[r];
          for (int64_t j = 0; j < kt; ++j) seen[j] |= (int32_t)(m[j] != kNegInf);
        }
        while (kt > 0 && !seen[kt - 1]) --kt;
        if (kt == 0) continue;
      }
      // S = (scale q) K^T for this tile: rows r, keys j
      if (stream) {
        kk->rows_dot(f.D, kbase + j0 * k->nb[1], k->nb[1], kt, qptr, (int)R, sptr);
      } else {
        const GemmJob job{kk, kbase + j0 * k->nb[1], k->nb[1], f.D, 0, kt, R, qptr, sptr, qpack};
        gemm_f32(gk, job, slice + L.gemm);
      }
      // softcap, mask, online softmax: S becomes P
      for (int64_t r = 0; r < R; ++r) {
        float* s = S + r * kKeyTile;
        if (softcap != 0.0f)
          for (int64_t j = 0; j < kt; ++j) s[j] = softcap * std::tanh(s[j] / softcap);
        if (mask) f32k->axpy(kt, slope[r], mseg[r], s);
        const float mt = vm.max(s, kt);
        if (mt == kNegInf) {  // nothing visible in this tile for the row
          std::fill(s, s + kt, 0.0f);
          continue;
        }
        const float m_new = std::max(M[r], mt);
        const float alpha = M[r] == kNegInf ? 0.0f : std::exp(M[r] - m_new);
        Lsum[r] = Lsum[r] * alpha + vm.exp_shift_sum(s, m_new, s, kt);
        if (alpha != 1.0f) scale_f32(f.Dv, alpha, O + r * f.Dv);
        M[r] = m_new;
      }
      if (stream) {  // O += P V straight from the V rows
        vk->rows_axpy(f.Dv, kt, vbase + j0 * v->nb[1], v->nb[1], S, kKeyTile, (int)R, O, f.Dv);
        continue;
      }
      // V rows -> [dims / 16][key][16] (zero past Dv)
      std::fill(vrow, vrow + dv_groups * kPanelRows, 0.0f);
      for (int64_t j = 0; j < kt; ++j) {
        vk->to_f32(vbase + (j0 + j) * v->nb[1], vrow, f.Dv);
        for (int64_t g = 0; g < dv_groups; ++g)
          std::memcpy(vpanel + (g * kt + j) * kPanelRows, vrow + g * kPanelRows, sizeof(float) * kPanelRows);
      }
      // O += P V, columns of nr rows at a time
      for (int64_t r0 = 0; r0 < R; r0 += nr) {
        const int nc = (int)std::min<int64_t>(nr, R - r0);
        gk.transpose16(reinterpret_cast<const float* const*>(sptr + r0), nc, kt, ppack, nr);
        for (int64_t i0 = 0; i0 < f.Dv; i0 += gk.f32_mr) {
          float* cp[16];
          for (int c = 0; c < nc; ++c) cp[c] = optr[r0 + c] + i0;
          gk.f32_tile(kt, vpanel + (i0 / kPanelRows) * kt * kPanelRows, ppack, nr, nc, cp,
                      (int)std::min<int64_t>(gk.f32_mr, f.Dv - i0), true);
        }
      }
    }
    for (int64_t r = 0; r < R; ++r) {
      const int64_t iq = p0 + r / f.group, h = ikv * f.group + r % f.group;
      float* out = reinterpret_cast<float*>(row_ptr(dst, h, iq, ib));
      const float inv = Lsum[r] > 0.0f ? 1.0f / Lsum[r] : 0.0f;
      const float* o = O + r * f.Dv;
      for (int64_t d = 0; d < f.Dv; ++d) out[d] = o[d] * inv;
    }
  });
}

}  // namespace loom::cpu
