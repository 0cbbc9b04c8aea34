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
// Decode (at most kMaxDotCols rows per kv head, plain float K and V) streams K and V instead of
// packing them: S by the row-dot kernels of K's type (the decode GEMV), O += P V by rows_axpy
// from the V rows, read once, in place. A decode unit runs every kv head over a chunk of the
// keys, a few keys at a time with the heads inside, so that the cache rows (each holding every
// kv head of a key) stream past in order, which the hardware prefetcher follows (one head over
// all keys, a 128-byte slice of every 512-byte row, ran at half the bandwidth); the chunks'
// softmax states (O, m, l) merge after.
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
  int64_t D, Dv, n_q, n_head, n_kv, group, qb;
  int64_t cols;  // rows of a unit per kv head (qb positions x group)
  int64_t R;     // rows of a unit: cols, or cols x every kv head in decode
  bool stream;   // decode: K and V read in place (no panels), all kv heads per unit
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
  s.cols = s.qb * s.group;
  const WeightKernels* kk = weight_kernels(k->type);
  const WeightKernels* vk = weight_kernels(v->type);
  s.stream = s.cols <= kMaxDotCols && kk->heads_dot && vk->heads_axpy;
  s.R = s.stream ? s.cols * k->ne[2] : s.cols;
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

// Decode chunks of the keys: enough units for every thread twice over (a thread the shared host
// slows leaves little to wait on), whole key tiles each. Returns the keys per chunk.
int64_t decode_chunk_keys(const Shape& f, int64_t blocks, int nth) {
  const int64_t tiles = ceil_div(f.n_kv, kKeyTile);
  const int64_t want = std::clamp<int64_t>(ceil_div(2 * nth, blocks), 1, tiles);
  return ceil_div(tiles, want) * kKeyTile;
}
// Floats of one decode unit's softmax state: O (R x Dv), then m and l (R each).
size_t decode_state_floats(const Shape& f) { return (size_t)(f.R * (f.Dv + 2)); }

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
  size_t shared = sizeof(float) * f.head_floats * (size_t)f.chunk_heads;  // prompts: K/V panels
  if (f.stream) {                                                         // decode: the chunks' softmax states
    const int64_t blocks = node->src[0]->ne[3] * ceil_div(f.n_q, f.qb);
    const int64_t chunks = ceil_div(f.n_kv, decode_chunk_keys(f, blocks, nth));
    shared = sizeof(float) * decode_state_floats(f) * (size_t)(blocks * chunks);
  }
  return layout_of(f).total * (size_t)nth + shared + 128;
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
  // Unit: the rows of position block pb of batch ib for kv heads [e0, e0 + ne) against keys
  // [ja, jb); `panels`: the head's K/V panels (prompts, ne = 1) or nullptr (decode); `state`: where
  // a decode chunk leaves its softmax state (nullptr: the rows' outputs are written).
  auto unit = [&](int64_t ib, int64_t e0, int64_t ne, int64_t pb, int64_t ja, int64_t jb, const float* panels,
                  float* state) {
    const int64_t p0 = pb * f.qb, np = std::min(f.qb, f.n_q - p0);
    const int64_t C = np * f.group;  // rows per kv head
    const int64_t R = C * ne;        // row r: kv head e0 + r / C, position p0 + r % C / group, head of it r % group
    for (int64_t r = 0; r < R; ++r) {
      const int64_t iq = p0 + r % C / f.group, h = (e0 + r / C) * f.group + r % f.group;
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
    const char* kbase = row_ptr(k, 0, e0, ib);
    const char* vbase = row_ptr(v, 0, e0, ib);
    const size_t krow = std::min((size_t)ne * k->nb[2], k->nb[1]), vrow = std::min((size_t)ne * v->nb[2], v->nb[1]);

    for (int64_t j0 = ja; j0 < jb; j0 += kKeyTile) {
      const int64_t kt_full = std::min(kKeyTile, jb - j0);
      int64_t kt = kt_full;
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
          if (j0 + kKeyTile < jb) {
            prefetch_bytes(mrow[r] + (j0 + kKeyTile) * mask->nb[0], kKeyTile * mask->nb[0]);
          }
        }
        while (kt > 0 && !seen[kt - 1]) --kt;
        if (kt == 0) continue;
      }
      // S = (scale q) K^T for this tile: rows r, keys j
      if (f.stream) {  // in key order, every kv head of a few keys at a time; the tile's V rows asked for
        const PrefetchRows vrows{vbase + j0 * v->nb[1], v->nb[1], kt, vrow};
        kk->heads_dot(f.D, kbase + j0 * k->nb[1], k->nb[1], k->nb[2], kt, (int)ne,
                      reinterpret_cast<const float* const*>(qptr), (int)C, sptr, vrows);
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
      if (f.stream) {  // O += P V straight from the V rows, in the same order; the next tile's K rows asked for
        const int64_t jn = j0 + kKeyTile;
        const PrefetchRows krows{jn < jb ? kbase + jn * k->nb[1] : nullptr, k->nb[1], std::min(kt, jb - jn), krow};
        vk->heads_axpy(f.Dv, kt, vbase + j0 * v->nb[1], v->nb[1], v->nb[2], (int)ne, S, kKeyTile, (int)C, O, f.Dv,
                       krows);
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
    if (state) {  // a decode chunk: O, m and l as they are
      std::copy(O, O + R * f.Dv, state);
      std::copy(M, M + R, state + f.R * f.Dv);
      std::copy(Lsum, Lsum + R, state + f.R * (f.Dv + 1));
      return;
    }
    for (int64_t r = 0; r < R; ++r) {
      const int64_t iq = p0 + r % C / f.group, h = (e0 + r / C) * f.group + r % f.group;
      float* out = reinterpret_cast<float*>(row_ptr(dst, h, iq, ib));
      const float inv = Lsum[r] > 0.0f ? 1.0f / Lsum[r] : 0.0f;
      const float* o = O + r * f.Dv;
      for (int64_t d = 0; d < f.Dv; ++d) out[d] = o[d] * inv;
    }
  };

  if (f.stream) {
    // units: (batch, position block, chunk of keys), chunks fastest, every kv head in each
    const int64_t blocks = q->ne[3] * n_pb;
    const int64_t ck = decode_chunk_keys(f, blocks, args.nth), nch = ceil_div(f.n_kv, ck);
    if (nch == 1) {
      for_units(args, blocks, [&](int64_t b) { unit(b / n_pb, 0, n_kvh, b % n_pb, 0, f.n_kv, nullptr, nullptr); });
      return;
    }
    auto* states = reinterpret_cast<float*>(base + L.total * args.nth);
    const size_t sf = decode_state_floats(f);
    for_units(args, blocks * nch, [&](int64_t u) {
      const int64_t b = u / nch, c0 = u % nch * ck;
      unit(b / n_pb, 0, n_kvh, b % n_pb, c0, std::min(f.n_kv, c0 + ck), nullptr, states + (size_t)u * sf);
    });
    args.barrier();
    // the chunks' states merged per row: m = max m_c, l = sum l_c e^(m_c - m), out = sum O_c e^(m_c - m) / l
    for_units(args, blocks, [&](int64_t b) {
      const int64_t ib = b / n_pb, p0 = b % n_pb * f.qb, C = std::min(f.qb, f.n_q - p0) * f.group;
      const float* st = states + (size_t)b * nch * sf;
      for (int64_t r = 0; r < C * n_kvh; ++r) {
        float m = kNegInf;
        for (int64_t c = 0; c < nch; ++c) m = std::max(m, st[c * sf + f.R * f.Dv + r]);
        float l = 0.0f;
        float* out = reinterpret_cast<float*>(row_ptr(dst, r / C * f.group + r % f.group, p0 + r % C / f.group, ib));
        std::fill(out, out + f.Dv, 0.0f);
        if (m == kNegInf) continue;  // no visible key: zeros, as the reference
        for (int64_t c = 0; c < nch; ++c) {
          const float* sc = st + c * sf;
          const float w = std::exp(sc[f.R * f.Dv + r] - m);  // 0 for a chunk that saw no key
          l += w * sc[f.R * (f.Dv + 1) + r];
          f32k->axpy(f.Dv, w, sc + r * f.Dv, out);
        }
        scale_f32(f.Dv, 1.0f / l, out);
      }
    });
    return;
  }
  const int64_t heads = q->ne[3] * n_kvh;
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
    for_units(args, nh * n_pb, [&](int64_t u) {
      const int64_t hh = h0 + u % nh;
      unit(hh / n_kvh, hh % n_kvh, 1, n_pb - 1 - u / nh, 0, f.n_kv, packed + (size_t)(u % nh) * f.head_floats, nullptr);
    });
    args.barrier();
  }
}

}  // namespace loom::cpu
