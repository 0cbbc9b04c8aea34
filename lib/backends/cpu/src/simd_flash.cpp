// Tiled flash attention (see simd_flash.h). A work unit is (batch, kv head, block of query
// positions); its R rows are (position, head of the GQA group) pairs sharing every K/V row.
// Prompts (units of more than kMaxDotCols rows): the K and V rows of a chunk of kv heads are
// first converted to f32 panels by all threads together (each key once, not once per unit),
// then the units of those heads run, keys in tiles of kKeyTile:
//   S = (scale q) K^T          f32 register tiles: K panels [16 keys][D] x q packed once per unit
//   S = softcap(S) + slope * mask;  per row: m' = max(m, max S), P = exp(S - m'),
//       l = l e^(m - m') + sum P,   O = O e^(m - m')
//   O += P V                   register tiles over V panels [16 dims][key] x P packed [key][nr]
// and finally out = O / l (zeros for a row that saw no visible key). Tiles every row of the
// unit masks out entirely (causal prompts) are skipped.
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
// Bytes of converted K/V panels per phase: heads are packed in chunks of at most this much
// (at least one head), so the scratch stays bounded for long contexts.
constexpr size_t kPackBudget = size_t(8) << 20;

size_t align64(size_t x) { return (x + 63) / 64 * 64; }

// q {D, n_q, h, nb}, k {D, n_kv, h_kv, nb}, v {Dv, n_kv, h_kv, nb} -> dst {Dv, h, n_q, nb}
struct Shape {
  int64_t D, Dv, n_q, n_head, n_kv, group, qb, R;
  bool stream;  // decode: K and V read in place (no panels)
  // prompt panels of one kv head, as the f32 tiles read them: K in blocks of kGemmKc dims, each
  // [key / 16][kc][16]; V per tile of kKeyTile keys, each [dim / 16][key][16]
  int64_t k_groups, v_tiles, dv16;
  size_t head_floats;   // K then V panels of one head (a multiple of 16 floats)
  int64_t chunk_heads;  // kv heads (of all batches) packed per phase
};
Shape shape_of(const Tensor* dst) {
  const Tensor* q = dst->src[0];
  const Tensor* k = dst->src[1];
  const Tensor* v = dst->src[2];
  Shape s{};
  s.D = q->ne[0];
  s.Dv = v->ne[0];
  s.n_q = q->ne[1];
  s.n_head = q->ne[2];
  s.n_kv = k->ne[1];
  s.group = q->ne[2] / k->ne[2];
  s.qb = std::clamp<int64_t>(kRowsTarget / s.group, 1, s.n_q);  // positions per unit
  s.R = s.qb * s.group;
  const WeightKernels* kk = weight_kernels(k->type);
  const WeightKernels* vk = weight_kernels(v->type);
  s.stream = s.R <= kMaxDotCols && kk->act == ActType::f32 && kk->rows_dot && vk->rows_axpy;
  s.k_groups = ceil_div(s.n_kv, kPanelRows);
  s.v_tiles = ceil_div(s.n_kv, kKeyTile);
  s.dv16 = ceil_div(s.Dv, kPanelRows) * kPanelRows;
  s.head_floats = (size_t)(s.k_groups * kPanelRows * s.D + s.v_tiles * s.dv16 * kKeyTile);
  const int64_t heads = k->ne[2] * q->ne[3];
  s.chunk_heads =
      s.stream ? 0 : std::clamp<int64_t>((int64_t)(kPackBudget / (sizeof(float) * s.head_floats)), 1, heads);
  return s;
}

// Per-thread scratch, in bytes from the slice start.
struct Layout {
  size_t q, qpack, s, o, m, l, slope, m_new, alpha, seen, mconv, ppack, rows, ptrs, total;
};
Layout layout_of(const Shape& f) {
  Layout L{};
  size_t off = 0;
  auto take = [&](size_t bytes) {
    const size_t at = off;
    off += align64(bytes);
    return at;
  };
  L.q = take(sizeof(float) * (size_t)(f.R * f.D));
  const GemmKernels* gk = gemm_kernels(active_isa());
  L.qpack = gk ? take(gemm_f32_packed_bytes(*gk, DType::F32, f.D, f.R)) : 0;  // q as the tiles' packed b
  L.s = take(sizeof(float) * (size_t)(f.R * kKeyTile));
  L.o = take(sizeof(float) * (size_t)(f.R * f.Dv));
  L.m = take(sizeof(float) * (size_t)f.R);
  L.l = take(sizeof(float) * (size_t)f.R);
  L.slope = take(sizeof(float) * (size_t)f.R);
  L.m_new = take(sizeof(float) * (size_t)f.R);
  L.alpha = take(sizeof(float) * (size_t)f.R);
  L.seen = take((size_t)f.R);
  L.mconv = take(sizeof(float) * (size_t)(f.R * kKeyTile));
  L.ppack = take(sizeof(float) * (size_t)(kKeyTile * 16));
  L.rows = take(sizeof(float) * (size_t)(kPanelRows * std::max(f.D, f.dv16)));  // rows being converted
  L.ptrs = take(sizeof(void*) * 5 * (size_t)f.R);
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

// Item `it` of packing one kv head into `panels` (Shape::head_floats): items below k_groups
// are groups of 16 keys of K, the rest tiles of kKeyTile keys of V. `rows`: kPanelRows x
// max(D, dv16) floats of scratch.
void pack_head_item(const GemmKernels& gk, const Shape& f, const WeightKernels* kk, const WeightKernels* vk,
                    const char* kbase, size_t ldk, const char* vbase, size_t ldv, int64_t it, float* panels,
                    float* rows) {
  if (it < f.k_groups) {
    const int64_t j0 = it * kPanelRows;
    const int nk = (int)std::min<int64_t>(kPanelRows, f.n_kv - j0);
    const float* src[kPanelRows];
    for (int s = 0; s < nk; ++s) {
      kk->to_f32(kbase + (j0 + s) * ldk, rows + s * f.D, f.D);
      src[s] = rows + s * f.D;
    }
    for (int64_t k0 = 0; k0 < f.D; k0 += kGemmKc) {
      const int64_t kc = std::min(kGemmKc, f.D - k0);
      float* dst = panels + f.k_groups * kPanelRows * k0 + it * kc * kPanelRows;
      if (nk < kPanelRows) std::fill(dst, dst + kc * kPanelRows, 0.0f);  // keys past n_kv: zeros
      const float* at[kPanelRows];
      for (int s = 0; s < nk; ++s) at[s] = src[s] + k0;
      gk.transpose16(at, nk, kc, dst, kPanelRows);
    }
    return;
  }
  const int64_t t = it - f.k_groups, j0 = t * kKeyTile, kt = std::min(kKeyTile, f.n_kv - j0);
  float* tile = panels + f.k_groups * kPanelRows * f.D + t * f.dv16 * kKeyTile;
  std::fill(rows + f.Dv, rows + f.dv16, 0.0f);  // dims past Dv: zeros
  for (int64_t j = 0; j < kt; ++j) {
    vk->to_f32(vbase + (j0 + j) * ldv, rows, f.Dv);
    for (int64_t g = 0; g < f.dv16 / kPanelRows; ++g)
      std::memcpy(tile + (g * kt + j) * kPanelRows, rows + g * kPanelRows, sizeof(float) * kPanelRows);
  }
}

}  // namespace

bool flash_tiled_supported(const Tensor* node) {
  const GemmKernels* gk = gemm_kernels(active_isa());
  return gk && gk->f32_mr >= kPanelRows && node->src[1]->ne[2] > 0 && node->src[0]->ne[2] % node->src[1]->ne[2] == 0;
}

size_t flash_tiled_work_size(const Tensor* node, int nth) {
  const Shape f = shape_of(node);
  return layout_of(f).total * (size_t)nth + sizeof(float) * f.head_floats * (size_t)f.chunk_heads + 128;
}

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
  char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(args.wdata) + 63) / 64 * 64);
  char* slice = base + L.total * args.ith;
  auto* packed = reinterpret_cast<float*>(base + L.total * args.nth);  // shared K/V panels of a chunk of heads
  auto* qs = reinterpret_cast<float*>(slice + L.q);
  auto* qpack = reinterpret_cast<float*>(slice + L.qpack);
  auto* S = reinterpret_cast<float*>(slice + L.s);
  auto* O = reinterpret_cast<float*>(slice + L.o);
  auto* M = reinterpret_cast<float*>(slice + L.m);
  auto* Lsum = reinterpret_cast<float*>(slice + L.l);
  auto* slope = reinterpret_cast<float*>(slice + L.slope);
  auto* Mnew = reinterpret_cast<float*>(slice + L.m_new);
  auto* alpha = reinterpret_cast<float*>(slice + L.alpha);
  auto* sees = reinterpret_cast<bool*>(slice + L.seen);
  auto* ppack = reinterpret_cast<float*>(slice + L.ppack);
  auto* rows = reinterpret_cast<float*>(slice + L.rows);
  auto** qptr = reinterpret_cast<const void**>(slice + L.ptrs);
  auto** sptr = reinterpret_cast<float**>(slice + L.ptrs + sizeof(void*) * (size_t)f.R);
  auto** optr = reinterpret_cast<float**>(slice + L.ptrs + 2 * sizeof(void*) * (size_t)f.R);
  const char** mrow = reinterpret_cast<const char**>(slice + L.ptrs + 3 * sizeof(void*) * (size_t)f.R);
  const float** mseg = reinterpret_cast<const float**>(slice + L.ptrs + 4 * sizeof(void*) * (size_t)f.R);
  auto* mconv = reinterpret_cast<float*>(slice + L.mconv);
  const WeightKernels* f32k = weight_kernels(DType::F32);
  const WeightKernels* mk = mask ? weight_kernels(mask->type) : nullptr;
  const int nr = std::min(gk.f32_nr, 16);
  const int64_t n_kb = ceil_div(f.D, kGemmKc);

  const int64_t n_pb = (f.n_q + f.qb - 1) / f.qb;
  const int64_t n_kvh = k->ne[2];
  // Unit (head hh = batch * n_kvh + kv head, position block pb); `panels`: the head's K/V panels
  // (prompts) or nullptr (decode).
  auto unit = [&](int64_t hh, int64_t pb, const float* panels) {
    const int64_t ikv = hh % n_kvh, ib = hh / n_kvh;
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
    // q packed once for all the unit's key tiles (its R columns; offsets by R below)
    if (!f.stream)
      gemm_f32_pack_b(gk, DType::F32, f.D, R, qs, (size_t)f.D, qpack, 0, gemm_f32_pack_items(gk, DType::F32, f.D, R));
    const char* kbase = row_ptr(k, 0, ikv, ib);
    const char* vbase = row_ptr(v, 0, ikv, ib);

    for (int64_t j0 = 0; j0 < f.n_kv; j0 += kKeyTile) {
      const int64_t kt_full = std::min(kKeyTile, f.n_kv - j0);
      int64_t kt = kt_full;
      if (f.stream) prefetch_rows(kbase + j0 * k->nb[1], k->nb[1], kt, vbase + j0 * v->nb[1], v->nb[1]);
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
          // the row's next tile: a mask row is read a tile at a time, too little for the
          // hardware prefetcher to follow
          if (j0 + kKeyTile < f.n_kv) {
            const char* next = mrow[r] + (j0 + kKeyTile) * mask->nb[0];
            for (size_t b = 0; b < kKeyTile * mask->nb[0]; b += 64) __builtin_prefetch(next + b);
          }
        }
        while (kt > 0 && !seen[kt - 1]) --kt;
        if (kt == 0) continue;
      }
      // S = (scale q) K^T for this tile: rows r, keys j
      if (f.stream) {
        kk->rows_dot(f.D, kbase + j0 * k->nb[1], k->nb[1], kt, qptr, (int)R, sptr);
      } else {
        // per column group of q (in L1) over the tile's K panels (in L1 after the first group)
        float* cp[16];
        for (int64_t g = 0; g * nr < R; ++g) {
          const int nc = (int)std::min<int64_t>(nr, R - g * nr);
          for (int64_t i0 = 0; i0 < kt; i0 += gk.f32_mr) {
            const int mr = (int)std::min<int64_t>(gk.f32_mr, kt - i0);
            for (int c = 0; c < nc; ++c) cp[c] = sptr[g * nr + c] + i0;
            for (int64_t kb = 0; kb < n_kb; ++kb) {
              const int64_t k0 = kb * kGemmKc, kc = std::min(kGemmKc, f.D - k0);
              const float* kp = panels + f.k_groups * kPanelRows * k0 + (j0 + i0) / kPanelRows * kc * kPanelRows;
              gk.f32_tile(kc, kp, qpack + gemm_f32_packed_offset(gk, R, kb, g), nr, nc, cp, mr, kb > 0);
            }
          }
        }
      }
      // softcap, mask, online softmax: S becomes P. First the rows' new maxima and the
      // exponents of their rescale factors e^(m - m'), which then go through exp together
      for (int64_t r = 0; r < R; ++r) {
        float* s = S + r * kKeyTile;
        if (softcap != 0.0f)
          for (int64_t j = 0; j < kt; ++j) s[j] = softcap * std::tanh(s[j] / softcap);
        if (mask) f32k->axpy(kt, slope[r], mseg[r], s);
        const float mt = vm.max(s, kt);
        sees[r] = mt != kNegInf;
        if (!sees[r]) {  // nothing visible in this tile for the row
          std::fill(s, s + kt, 0.0f);
          alpha[r] = 0.0f;
          continue;
        }
        Mnew[r] = std::max(M[r], mt);
        alpha[r] = M[r] == kNegInf ? kNegInf : M[r] - Mnew[r];  // e^-inf: no earlier keys to rescale
      }
      vm.exp_shift_sum(alpha, 0.0f, alpha, R);
      for (int64_t r = 0; r < R; ++r) {
        if (!sees[r]) continue;
        float* s = S + r * kKeyTile;
        Lsum[r] = Lsum[r] * alpha[r] + vm.exp_shift_sum(s, Mnew[r], s, kt);
        if (alpha[r] != 1.0f) scale_f32(f.Dv, alpha[r], O + r * f.Dv);
        M[r] = Mnew[r];
      }
      if (f.stream) {  // O += P V straight from the V rows
        vk->rows_axpy(f.Dv, kt, vbase + j0 * v->nb[1], v->nb[1], S, kKeyTile, (int)R, O, f.Dv);
        continue;
      }
      // O += P V, columns of nr rows at a time, over the tile's V panel ([dim / 16][kt_full][16]);
      // a tile the mask shortened reads each 16-dim group apart (the tile's groups are kt apart)
      const float* vp = panels + f.k_groups * kPanelRows * f.D + (j0 / kKeyTile) * f.dv16 * kKeyTile;
      const int64_t step = kt == kt_full ? gk.f32_mr : kPanelRows;
      for (int64_t r0 = 0; r0 < R; r0 += nr) {
        const int nc = (int)std::min<int64_t>(nr, R - r0);
        gk.transpose16(reinterpret_cast<const float* const*>(sptr + r0), nc, kt, ppack, nr);
        for (int64_t i0 = 0; i0 < f.Dv; i0 += step) {
          float* cp[16];
          for (int c = 0; c < nc; ++c) cp[c] = optr[r0 + c] + i0;
          gk.f32_tile(kt, vp + (i0 / kPanelRows) * kt_full * kPanelRows, ppack, nr, nc, cp,
                      (int)std::min<int64_t>(step, f.Dv - i0), true);
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
  };

  const int64_t heads = q->ne[3] * n_kvh;
  if (f.stream) {
    // units: (head, position block), positions fastest; shared dynamically
    for_units(args, heads * n_pb, [&](int64_t u) { unit(u / n_pb, u % n_pb, nullptr); });
    return;
  }
  // Prompts: per chunk of heads, the panels by all threads, then the chunk's units (claimed
  // dynamically)
  const int64_t head_items = f.k_groups + f.v_tiles;
  for (int64_t h0 = 0; h0 < heads; h0 += f.chunk_heads) {
    const int64_t nh = std::min(f.chunk_heads, heads - h0);
    for_units(args, nh * head_items, [&](int64_t u) {
      const int64_t hh = h0 + u / head_items, ikv = hh % n_kvh, ib = hh / n_kvh;
      pack_head_item(gk, f, kk, vk, row_ptr(k, 0, ikv, ib), k->nb[1], row_ptr(v, 0, ikv, ib), v->nb[1], u % head_items,
                     packed + (size_t)(u / head_items) * f.head_floats, rows);
    });
    args.barrier();
    // the chunk's heads of one position block one after the other (they read the same mask
    // rows), the dearest (last) position blocks of a causal prompt first
    for_units(args, nh * n_pb,
              [&](int64_t u) { unit(h0 + u % nh, n_pb - 1 - u / nh, packed + (size_t)(u % nh) * f.head_floats); });
    args.barrier();
  }
}

}  // namespace loom::cpu
