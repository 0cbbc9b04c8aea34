// Tiled flash attention (see simd_flash.h). A work unit is (batch, kv head, block of query
// positions); its R rows are (position, head of the GQA group) pairs sharing every K/V row.
// Prompts (units of more than kMaxDotCols rows): the K and V rows of a chunk of kv heads are
// first converted to f32 panels by all threads together (each key once, not once per unit),
// then the units of those heads run, keys in tiles of kPromptKeyTile. The scores are held
// key-major, S[key][row], so that a unit's rows are the vector lanes of the softmax and S is
// already the packed b of the P V tiles:
//   S = K (scale q)^T          f32 register tiles: q packed once per unit [16 rows][D] x K^T
//                              panels [D][nr keys]
//   S = softcap(S) + slope * mask;  per row: m' = max(m, max S), P = exp(S - m'),
//       l = l e^(m - m') + sum P,   O = O e^(m - m')   (VecMath::softmax_step, 16 rows at a time)
//   O += P V                   register tiles over V panels [16 dims][key] x S
// and finally out = O / l (zeros for a row that saw no visible key). Tiles every row of the
// unit masks out entirely (causal prompts) are skipped, a tile's mask is added only where it
// holds something other than zeros (in a causal prompt, the diagonal's tiles).
// Decode (at most kMaxDotCols rows per kv head) streams K and V instead of packing them (a
// quantized cache's tile of rows is first converted to f32, in the thread's scratch): S by the
// row-dot kernels of K's type (the decode GEMV), O += P V by rows_axpy from the V rows, read
// once, in place. A decode unit runs every kv head over a chunk of the keys the mask leaves
// visible, tile by tile: S one key at a time with the heads inside, so that the cache rows (each
// holding every kv head of a key) come from memory in order, and P V one head at a time over the
// tile, whose rows the S pass has asked for into L2 (simd_heads.h); the chunks' softmax states
// (O, m, l) merge after.
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

constexpr int64_t kKeyTile = 64;  // decode
// Keys per prompt tile: a whole number of the tiles' columns (12 on AVX-512, 6 on AVX2) and of
// panel rows (16); more keys per tile spread the per-row softmax work over more products.
constexpr int64_t kPromptKeyTile = 96;
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
  int64_t kt;    // keys per tile
  int64_t nr;    // columns of the f32 tile
  int64_t ld;    // prompts: rows of S per key (R rounded up to 16)
  // prompt panels of one kv head, as the f32 tiles read them: K^T per group of nr keys, each
  // [D][nr]; V per tile of kt keys, each [dim / 16][key][16]
  int64_t k_groups, v_tiles, dv16;
  size_t head_floats;   // K then V panels of one head (a multiple of 16 floats)
  int64_t chunk_heads;  // kv heads (of all batches) packed per phase
  int64_t n_kvh;
  bool k_conv, v_conv;  // decode over a quantized cache: each tile's rows converted to f32 first
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
  s.n_kvh = k->ne[2];
  const WeightKernels* kk = weight_kernels(cache_row_reader(k->type) ? DType::F32 : k->type);
  const WeightKernels* vk = weight_kernels(cache_row_reader(v->type) ? DType::F32 : v->type);
  s.stream = s.cols <= kMaxDotCols && kk->heads_dot && vk->heads_axpy;
  s.k_conv = s.stream && cache_row_reader(k->type);
  s.v_conv = s.stream && cache_row_reader(v->type);
  s.R = s.stream ? s.cols * k->ne[2] : s.cols;
  s.kt = s.stream ? kKeyTile : kPromptKeyTile;
  const GemmKernels* gk = gemm_kernels(active_isa());
  s.nr = gk ? std::min(gk->f32_nr, 16) : 16;
  s.ld = ceil_div(s.R, kPanelRows) * kPanelRows;
  s.k_groups = ceil_div(s.n_kv, s.nr);
  s.v_tiles = ceil_div(s.n_kv, s.kt);
  s.dv16 = ceil_div(s.Dv, kPanelRows) * kPanelRows;
  s.head_floats = (size_t)(s.k_groups * s.nr * s.D + s.v_tiles * s.dv16 * s.kt);
  const int64_t heads = k->ne[2] * q->ne[3];
  s.chunk_heads =
      s.stream ? 0 : std::clamp<int64_t>((int64_t)(kPackBudget / (sizeof(float) * s.head_floats)), 1, heads);
  return s;
}

// Per-thread scratch, in bytes from the slice start.
struct Layout {
  size_t q, qpack, s, mt, o, m, l, slope, m_new, alpha, seen, mconv, rows, ptrs, kconv, vconv, total;
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
  // prompts: q as the tiles' panel, S and the mask key-major; decode: S per row
  L.qpack = take(f.stream ? 0 : sizeof(float) * (size_t)(f.ld * f.D));
  L.s = take(sizeof(float) * (size_t)(f.stream ? f.R * f.kt : f.kt * f.ld));
  L.mt = take(f.stream ? 0 : sizeof(float) * (size_t)(f.kt * f.ld));
  L.o = take(sizeof(float) * (size_t)(f.R * f.Dv));
  L.m = take(sizeof(float) * (size_t)f.R);
  L.l = take(sizeof(float) * (size_t)f.R);
  L.slope = take(sizeof(float) * (size_t)f.R);
  L.m_new = take(sizeof(float) * (size_t)f.R);
  L.alpha = take(sizeof(float) * (size_t)f.R);
  L.seen = take((size_t)f.R);
  L.mconv = take(sizeof(float) * (size_t)(f.R * f.kt));
  L.rows = take(sizeof(float) * (size_t)(kPanelRows * std::max(f.D, f.dv16)));  // rows being converted
  L.ptrs = take(sizeof(void*) * 5 * (size_t)f.R);
  L.kconv = take(f.k_conv ? sizeof(float) * (size_t)(f.kt * f.n_kvh * f.D) : 0);  // a tile's K rows as f32
  L.vconv = take(f.v_conv ? sizeof(float) * (size_t)(f.kt * f.n_kvh * f.Dv) : 0);
  L.total = align64(off);
  return L;
}

// Decode chunks of n_keys keys: enough units for every thread twice over (a thread the shared
// host slows leaves little to wait on), whole key tiles each. A range of a cache's keys never
// takes more chunks than the whole cache's count, which sizes the states' scratch.
int64_t decode_chunks(int64_t n_keys, int64_t blocks, int nth) {
  return std::clamp<int64_t>(ceil_div(2 * nth, blocks), 1, std::max<int64_t>(1, ceil_div(n_keys, kKeyTile)));
}
// The keys per chunk (at least one tile).
int64_t decode_chunk_keys(int64_t n_keys, int64_t blocks, int nth) {
  return std::max<int64_t>(1, ceil_div(ceil_div(n_keys, kKeyTile), decode_chunks(n_keys, blocks, nth))) * kKeyTile;
}
// Keys [begin, end) some query row's mask leaves visible (F32 / F16 masks; the whole cache
// otherwise); an empty range where no row sees any key.
struct KeyRange {
  int64_t begin, end;
};
KeyRange decode_visible_keys(const Tensor* q, const Tensor* mask, int64_t n_kv) {
  if (!mask || (mask->type != DType::F32 && mask->type != DType::F16)) return {0, n_kv};
  constexpr uint16_t kF16NegInf = 0xfc00;
  KeyRange r{n_kv, 0};
  for (int64_t ib = 0; ib < q->ne[3]; ++ib)
    for (int64_t m2 = 0; m2 < std::min(mask->ne[2], q->ne[2]); ++m2)
      for (int64_t iq = 0; iq < q->ne[1]; ++iq) {
        const char* row = row_ptr(mask, iq, m2, ib % mask->ne[3]);
        auto sees = [&](int64_t j) {
          if (mask->type == DType::F16) return reinterpret_cast<const uint16_t*>(row)[j] != kF16NegInf;
          return reinterpret_cast<const float*>(row)[j] != kNegInf;
        };
        int64_t a = 0;
        while (a < r.begin && !sees(a)) ++a;
        r.begin = std::min(r.begin, a);
        int64_t b = n_kv;
        while (b > r.end && !sees(b - 1)) --b;
        r.end = std::max(r.end, b);
      }
  return r.begin < r.end ? r : KeyRange{0, 0};
}

// Floats of one decode unit's softmax state: O (R x Dv), then m and l (R each).
size_t decode_state_floats(const Shape& f) { return (size_t)(f.R * (f.Dv + 2)); }

// Item `it` of packing one kv head into `panels` (Shape::head_floats): items below k_groups
// are groups of nr keys of K, the rest tiles of kt keys of V. `rows`: kPanelRows x max(D, dv16)
// floats of scratch.
void pack_head_item(const GemmKernels& gk, const Shape& f, RowToF32Fn kread, RowToF32Fn vread, const char* kbase,
                    size_t ldk, const char* vbase, size_t ldv, int64_t it, float* panels, float* rows) {
  if (it < f.k_groups) {
    const int64_t j0 = it * f.nr;
    const int nk = (int)std::min(f.nr, f.n_kv - j0);
    const float* src[kPanelRows];
    for (int s = 0; s < nk; ++s) {
      kread(kbase + (j0 + s) * ldk, rows + s * f.D, f.D);
      src[s] = rows + s * f.D;
    }
    float* dst = panels + it * f.D * f.nr;
    if (nk < f.nr) std::fill(dst, dst + f.D * f.nr, 0.0f);  // keys past n_kv: zeros
    gk.transpose16(src, nk, f.D, dst, (int)f.nr);
    return;
  }
  const int64_t t = it - f.k_groups, j0 = t * f.kt, kt = std::min(f.kt, f.n_kv - j0);
  float* tile = panels + f.k_groups * f.nr * f.D + t * f.dv16 * f.kt;
  std::fill(rows + f.Dv, rows + f.dv16, 0.0f);  // dims past Dv: zeros
  for (int64_t j = 0; j < kt; ++j) {
    vread(vbase + (j0 + j) * ldv, rows, f.Dv);
    for (int64_t g = 0; g < f.dv16 / kPanelRows; ++g)
      std::memcpy(tile + (g * kt + j) * kPanelRows, rows + g * kPanelRows, sizeof(float) * kPanelRows);
  }
}

// Rows [j0, j0 + kt) of every kv head of a quantized K or V (row j, head h at base + j * ld + h * ldh)
// -> dst as f32, key-major with the heads side by side (row stride nh * n floats).
void convert_tile(RowToF32Fn read, const char* base, size_t ld, size_t ldh, int64_t j0, int64_t kt, int64_t nh,
                  int64_t n, float* dst) {
  for (int64_t j = 0; j < kt; ++j)
    for (int64_t h = 0; h < nh; ++h) read(base + (j0 + j) * ld + h * ldh, dst + (j * nh + h) * n, n);
}

// The row reader of a K/V type: its conversion when quantized, else the level's plain float one.
RowToF32Fn row_reader(DType type) {
  const RowToF32Fn conv = cache_row_reader(type);
  return conv ? conv : weight_kernels(type)->to_f32;
}

}  // namespace

RowToF32Fn cache_row_reader(DType type) {
  if (type == DType::F32 || type == DType::F16 || type == DType::BF16) return nullptr;
  const WeightKernels* wk = weight_kernels(type);
  return wk && wk->to_f32 ? wk->to_f32 : dtype_info(type).to_float;
}

bool cache_readable(const Tensor* t) {
  const DTypeInfo& info = dtype_info(t->type);
  if (info.is_float) return true;
  return info.is_quantized && info.to_float && t->nb[0] == info.type_size && t->ne[0] % info.block_size == 0;
}

bool flash_tiled_supported(const Tensor* node) {
  const GemmKernels* gk = gemm_kernels(active_isa());
  // attention sinks (gpt-oss) take the reference loop
  return gk && gk->f32_mr >= kPanelRows && !node->src[4] && node->src[1]->ne[2] > 0 &&
         node->src[0]->ne[2] % node->src[1]->ne[2] == 0;
}

size_t flash_tiled_work_size(const Tensor* node, int nth) {
  const Shape f = shape_of(node);
  size_t shared = sizeof(float) * f.head_floats * (size_t)f.chunk_heads;  // prompts: K/V panels
  if (f.stream) {                                                         // decode: the chunks' softmax states
    const int64_t blocks = node->src[0]->ne[3] * ceil_div(f.n_q, f.qb);
    shared = sizeof(float) * decode_state_floats(f) * (size_t)(blocks * decode_chunks(f.n_kv, blocks, nth));
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
  // decode over a quantized cache: each tile converted (kc / vc) and walked by the f32 kernels
  const WeightKernels* kk = weight_kernels(f.k_conv ? DType::F32 : k->type);
  const WeightKernels* vk = weight_kernels(f.v_conv ? DType::F32 : v->type);
  const RowToF32Fn kread = row_reader(k->type), vread = row_reader(v->type);
  char* base = reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(args.wdata) + 63) / 64 * 64);
  char* slice = base + L.total * args.ith;
  auto* packed = reinterpret_cast<float*>(base + L.total * args.nth);  // shared K/V panels of a chunk of heads
  auto* qs = reinterpret_cast<float*>(slice + L.q);
  auto* qpack = reinterpret_cast<float*>(slice + L.qpack);
  auto* S = reinterpret_cast<float*>(slice + L.s);
  auto* MT = reinterpret_cast<float*>(slice + L.mt);
  auto* O = reinterpret_cast<float*>(slice + L.o);
  auto* M = reinterpret_cast<float*>(slice + L.m);
  auto* Lsum = reinterpret_cast<float*>(slice + L.l);
  auto* slope = reinterpret_cast<float*>(slice + L.slope);
  auto* Mnew = reinterpret_cast<float*>(slice + L.m_new);
  auto* alpha = reinterpret_cast<float*>(slice + L.alpha);
  auto* sees = reinterpret_cast<bool*>(slice + L.seen);
  auto* rows = reinterpret_cast<float*>(slice + L.rows);
  auto** qptr = reinterpret_cast<const void**>(slice + L.ptrs);
  auto** sptr = reinterpret_cast<float**>(slice + L.ptrs + sizeof(void*) * (size_t)f.R);
  auto** optr = reinterpret_cast<float**>(slice + L.ptrs + 2 * sizeof(void*) * (size_t)f.R);
  const char** mrow = reinterpret_cast<const char**>(slice + L.ptrs + 3 * sizeof(void*) * (size_t)f.R);
  const float** mseg = reinterpret_cast<const float**>(slice + L.ptrs + 4 * sizeof(void*) * (size_t)f.R);
  auto* mconv = reinterpret_cast<float*>(slice + L.mconv);
  auto* kc = reinterpret_cast<float*>(slice + L.kconv);
  auto* vc = reinterpret_cast<float*>(slice + L.vconv);
  const WeightKernels* f32k = weight_kernels(DType::F32);
  const WeightKernels* mk = mask ? weight_kernels(mask->type) : nullptr;
  const int64_t n_pb = (f.n_q + f.qb - 1) / f.qb;
  const int64_t n_kvh = k->ne[2];

  // A unit's rows: row r of a unit with C rows per kv head is kv head e0 + r / C, position
  // p0 + r % C / group, head r % group of it.
  auto row_pos = [&](int64_t r, int64_t C, int64_t p0) { return p0 + r % C / f.group; };
  auto row_head = [&](int64_t r, int64_t C, int64_t e0) { return (e0 + r / C) * f.group + r % f.group; };
  // The unit's R rows: q scaled into qs, outputs O zeroed, the softmax state reset.
  auto start_rows = [&](int64_t ib, int64_t e0, int64_t R, int64_t C, int64_t p0, int64_t ld_s) {
    for (int64_t r = 0; r < R; ++r) {
      const int64_t iq = row_pos(r, C, p0), h = row_head(r, C, e0);
      const float* src = reinterpret_cast<const float*>(row_ptr(q, iq, h, ib));
      float* qr = qs + r * f.D;
      for (int64_t d = 0; d < f.D; ++d) qr[d] = src[d] * scale;
      qptr[r] = qr;
      sptr[r] = S + r * ld_s;
      optr[r] = O + r * f.Dv;
      mrow[r] = mask ? row_ptr(mask, iq, h % mask->ne[2], ib % mask->ne[3]) : nullptr;
      slope[r] = alibi_slope(max_bias, f.n_head, h);
      M[r] = kNegInf;
      Lsum[r] = 0.0f;
    }
    std::fill(O, O + R * f.Dv, 0.0f);
  };
  // The rows' outputs: out = O / l (zeros for a row that saw no visible key).
  auto finish_rows = [&](int64_t ib, int64_t e0, int64_t R, int64_t C, int64_t p0) {
    for (int64_t r = 0; r < R; ++r) {
      float* out = reinterpret_cast<float*>(row_ptr(dst, row_head(r, C, e0), row_pos(r, C, p0), ib));
      const float inv = Lsum[r] > 0.0f ? 1.0f / Lsum[r] : 0.0f;
      for (int64_t d = 0; d < f.Dv; ++d) out[d] = O[r * f.Dv + d] * inv;
    }
  };
  // The mask of keys [j0, j0 + kt) for the R rows, as f32 segments mseg[r]; returns how many keys
  // the tile keeps (it ends after the last key some row sees: a causal prompt's diagonal tile;
  // 0: no row sees any) and, in *zeros where asked (prompts), whether those keys' mask is all zeros.
  auto mask_tile = [&](int64_t R, int64_t j0, int64_t kt, int64_t jb, bool* zeros) {
    int32_t seen[kPromptKeyTile] = {}, nonzero[kPromptKeyTile] = {};  // loops without exits: vectorized
    for (int64_t r = 0; r < R; ++r) {
      if (r > 0 && mrow[r] == mrow[r - 1]) {
        mseg[r] = mseg[r - 1];
        continue;
      }
      if (mask->type == DType::F32) {
        mseg[r] = reinterpret_cast<const float*>(mrow[r]) + j0;
      } else {
        mk->to_f32(mrow[r] + j0 * mask->nb[0], mconv + r * f.kt, kt);
        mseg[r] = mconv + r * f.kt;
      }
      const float* m = mseg[r];
      for (int64_t j = 0; j < kt; ++j) seen[j] |= (int32_t)(m[j] != kNegInf);
      if (zeros)
        for (int64_t j = 0; j < kt; ++j) nonzero[j] |= (int32_t)(m[j] != 0.0f);
      // the row's next tile: a mask row is read a tile at a time, too little for the hardware
      // prefetcher to follow
      if (j0 + f.kt < jb) prefetch_bytes(mrow[r] + (j0 + f.kt) * mask->nb[0], f.kt * mask->nb[0]);
    }
    while (kt > 0 && !seen[kt - 1]) --kt;
    if (zeros) {
      int32_t any = 0;
      for (int64_t j = 0; j < kt; ++j) any |= nonzero[j];
      *zeros = any == 0;
    }
    return kt;
  };

  // Prompt unit: position block pb of batch ib, kv head ikv, against the head's K/V panels.
  auto prompt_unit = [&](int64_t ib, int64_t ikv, int64_t pb, const float* panels) {
    const int64_t p0 = pb * f.qb, R = std::min(f.qb, f.n_q - p0) * f.group;
    start_rows(ib, ikv, R, R, p0, 0);
    // q as the tiles' panel: per block of kGemmKc dims, groups of 16 rows, each [kc][16]
    for (int64_t k0 = 0; k0 < f.D; k0 += kGemmKc) {
      const int64_t kc = std::min(kGemmKc, f.D - k0);
      for (int64_t r0 = 0; r0 < R; r0 += kPanelRows) {
        const int n = (int)std::min<int64_t>(kPanelRows, R - r0);
        const float* at[kPanelRows];
        for (int i = 0; i < n; ++i) at[i] = qs + (r0 + i) * f.D + k0;
        float* p = qpack + k0 * f.ld + r0 * kc;
        if (n < kPanelRows) std::fill(p, p + kc * kPanelRows, 0.0f);
        gk.transpose16(at, n, kc, p, kPanelRows);
      }
    }
    for (int64_t j0 = 0; j0 < f.n_kv; j0 += f.kt) {
      const int64_t kt_full = std::min(f.kt, f.n_kv - j0);
      int64_t kt = kt_full;
      const float* mt = nullptr;  // the mask key-major, where it adds something
      if (mask) {
        bool zeros = true;
        kt = mask_tile(R, j0, kt_full, f.n_kv, &zeros);
        if (kt == 0) continue;
        if (!zeros) {
          for (int64_t r0 = 0; r0 < R; r0 += kPanelRows)
            gk.transpose16(mseg + r0, (int)std::min<int64_t>(kPanelRows, R - r0), kt, MT + r0, (int)f.ld);
          mt = MT;
        }
      }
      // S[j][r] = K_j . (scale q_r): 16-row groups of q (in L1) over the tile's K^T groups
      float* cp[16];
      for (int64_t k0 = 0; k0 < f.D; k0 += kGemmKc) {
        const int64_t kc = std::min(kGemmKc, f.D - k0);
        for (int64_t r0 = 0; r0 < R; r0 += gk.f32_mr) {
          const int mr = (int)std::min<int64_t>(gk.f32_mr, R - r0);
          for (int64_t c0 = 0; c0 < kt; c0 += f.nr) {
            const int nc = (int)std::min(f.nr, kt - c0);
            for (int c = 0; c < nc; ++c) cp[c] = S + (c0 + c) * f.ld + r0;
            const float* kp = panels + ((j0 + c0) / f.nr * f.D + k0) * f.nr;
            gk.f32_tile(kc, qpack + k0 * f.ld + r0 * kc, kp, (int)f.nr, nc, cp, mr, k0 > 0);
          }
        }
      }
      if (softcap != 0.0f)
        for (int64_t j = 0; j < kt; ++j)
          for (int64_t r = 0; r < R; ++r) S[j * f.ld + r] = softcap * std::tanh(S[j * f.ld + r] / softcap);
      vm.softmax_step(S, mt, slope, f.ld, kt, R, M, Lsum, alpha);
      for (int64_t r = 0; r < R; ++r)
        if (alpha[r] != 1.0f) scale_f32(f.Dv, alpha[r], O + r * f.Dv);
      // O += P V, nr rows at a time, over the tile's V panel ([dim / 16][kt_full][16]); a tile the
      // mask shortened reads each 16-dim group apart (the tile's groups are kt_full apart)
      const float* vp = panels + f.k_groups * f.nr * f.D + (j0 / f.kt) * f.dv16 * f.kt;
      const int64_t step = kt == kt_full ? gk.f32_mr : kPanelRows;
      for (int64_t r0 = 0; r0 < R; r0 += f.nr) {
        const int nc = (int)std::min(f.nr, R - r0);
        for (int64_t i0 = 0; i0 < f.Dv; i0 += step) {
          for (int c = 0; c < nc; ++c) cp[c] = optr[r0 + c] + i0;
          gk.f32_tile(kt, vp + (i0 / kPanelRows) * kt_full * kPanelRows, S + r0, (int)f.ld, nc, cp,
                      (int)std::min<int64_t>(step, f.Dv - i0), true);
        }
      }
    }
    finish_rows(ib, ikv, R, R, p0);
  };

  // Decode unit: the rows of position block pb of batch ib for kv heads [h0, h0 + nh) against
  // keys [ja, jb), S per row; `state`: where a chunk of the keys leaves its softmax state
  // (nullptr: the rows' outputs are written).
  auto decode_unit = [&](int64_t ib, int64_t pb, int64_t ja, int64_t jb, float* state, int64_t h0, int64_t nh) {
    const int64_t p0 = pb * f.qb, C = std::min(f.qb, f.n_q - p0) * f.group, R = C * nh;
    start_rows(ib, h0, R, C, p0, f.kt);
    const char* kbase = row_ptr(k, 0, h0, ib);
    const char* vbase = row_ptr(v, 0, h0, ib);
    const size_t krow = std::min((size_t)nh * k->nb[2], k->nb[1]), vrow = std::min((size_t)nh * v->nb[2], v->nb[1]);
    for (int64_t j0 = ja; j0 < jb; j0 += f.kt) {
      int64_t kt = std::min(f.kt, jb - j0);
      if (mask) {
        kt = mask_tile(R, j0, kt, jb, nullptr);
        if (kt == 0) continue;
      }
      // S = (scale q) K^T for this tile, in key order, every kv head of a few keys at a time; the
      // tile's V rows asked for
      const PrefetchRows vrows{vbase + j0 * v->nb[1], v->nb[1], kt, vrow};
      if (f.k_conv) {
        convert_tile(kread, kbase, k->nb[1], k->nb[2], j0, kt, nh, f.D, kc);
        kk->heads_dot(f.D, kc, sizeof(float) * nh * f.D, sizeof(float) * f.D, kt, (int)nh,
                      reinterpret_cast<const float* const*>(qptr), (int)C, sptr, vrows);
      } else {
        kk->heads_dot(f.D, kbase + j0 * k->nb[1], k->nb[1], k->nb[2], kt, (int)nh,
                      reinterpret_cast<const float* const*>(qptr), (int)C, sptr, vrows);
      }
      // softcap, mask, online softmax: S becomes P. First the rows' new maxima and the
      // exponents of their rescale factors e^(m - m'), which then go through exp together
      for (int64_t r = 0; r < R; ++r) {
        float* s = S + r * f.kt;
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
        float* s = S + r * f.kt;
        Lsum[r] = Lsum[r] * alpha[r] + vm.exp_shift_sum(s, Mnew[r], s, kt);
        if (alpha[r] != 1.0f) scale_f32(f.Dv, alpha[r], O + r * f.Dv);
        M[r] = Mnew[r];
      }
      // O += P V straight from the V rows, in the same order; the next tile's K rows asked for
      const int64_t jn = j0 + f.kt;
      const PrefetchRows krows{jn < jb ? kbase + jn * k->nb[1] : nullptr, k->nb[1], std::min(kt, jb - jn), krow};
      if (f.v_conv) {
        convert_tile(vread, vbase, v->nb[1], v->nb[2], j0, kt, nh, f.Dv, vc);
        vk->heads_axpy(f.Dv, kt, vc, sizeof(float) * nh * f.Dv, sizeof(float) * f.Dv, (int)nh, S, f.kt, (int)C, O, f.Dv,
                       krows);
      } else {
        vk->heads_axpy(f.Dv, kt, vbase + j0 * v->nb[1], v->nb[1], v->nb[2], (int)nh, S, f.kt, (int)C, O, f.Dv, krows);
      }
    }
    if (state) {  // a chunk of the keys: O, m and l as they are
      std::copy(O, O + R * f.Dv, state);
      std::copy(M, M + R, state + f.R * f.Dv);
      std::copy(Lsum, Lsum + R, state + f.R * (f.Dv + 1));
      return;
    }
    finish_rows(ib, h0, R, C, p0);
  };

  if (f.stream) {
    // units: (batch, position block, chunk of keys), chunks fastest, every kv head in each. Only
    // the keys some row sees are chunked: the cache's padding past the context and a sliding
    // window's older keys cost no units, and the window's keys spread over the threads.
    const KeyRange seen = decode_visible_keys(q, mask, f.n_kv);
    const int64_t blocks = q->ne[3] * n_pb, n_seen = seen.end - seen.begin;
    const int64_t ck = decode_chunk_keys(n_seen, blocks, args.nth), nch = std::max<int64_t>(1, ceil_div(n_seen, ck));
    if (nch == 1) {
      // keys of one tile (the first 64 tokens): fewer units than threads split by kv heads instead
      const int64_t hg = blocks >= args.nth ? 1 : std::min<int64_t>(n_kvh, ceil_div(args.nth, blocks)),
                    hn = ceil_div(n_kvh, hg);
      for_units(args, blocks * hg, [&](int64_t u) {
        const int64_t b = u / hg, h0 = u % hg * hn;
        if (h0 < n_kvh) decode_unit(b / n_pb, b % n_pb, seen.begin, seen.end, nullptr, h0, std::min(hn, n_kvh - h0));
      });
      return;
    }
    auto* states = reinterpret_cast<float*>(base + L.total * args.nth);
    const size_t sf = decode_state_floats(f);
    for_units(args, blocks * nch, [&](int64_t u) {
      const int64_t b = u / nch, c0 = seen.begin + u % nch * ck;
      decode_unit(b / n_pb, b % n_pb, c0, std::min(seen.end, c0 + ck), states + (size_t)u * sf, 0, n_kvh);
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
      pack_head_item(gk, f, kread, vread, row_ptr(k, 0, ikv, ib), k->nb[1], row_ptr(v, 0, ikv, ib), v->nb[1],
                     u % head_items, packed + (size_t)(u / head_items) * f.head_floats, rows);
    });
    args.barrier();
    // the chunk's heads of one position block one after the other (they read the same mask
    // rows), the dearest (last) position blocks of a causal prompt first
    for_units(args, nh * n_pb, [&](int64_t u) {
      const int64_t hh = h0 + u % nh;
      prompt_unit(hh / n_kvh, hh % n_kvh, n_pb - 1 - u / nh, packed + (size_t)(u % nh) * f.head_floats);
    });
    args.barrier();
  }
}

}  // namespace loom::cpu
