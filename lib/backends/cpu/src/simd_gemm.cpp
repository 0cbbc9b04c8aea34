// Driver of the blocked matrix products (see simd_gemm.h): panel packing (decode a block of
// weight rows once, interleave 16 rows per group so a tile loads one vector per group and k;
// lay the columns of b out k-major so a tile broadcasts from one stream), the loops around the
// register tiles, and the readable scalar tiles the SIMD ones must match. f32:
//   for each panel of mc rows:            (the thread's work unit)
//     for each block of K (256):          pack rows x block -> panel (stays in L2)
//       for each group of nr columns:     pack columns x block -> bpack (stays in L1), unless
//                                          the caller packed all of b once (gemm_f32_pack_b)
//         for each tile of mr rows:       tile(panel rows, bpack) -> dst (+= after the first block)
// q8 (no K blocking; a panel holds whole rows): for each panel: pack; for each group; for each tile
// (Q4_K: 32-value sub-blocks as blocks, with their mins; Q6_K: 32-value blocks of two scales).
#include "simd_gemm.h"

#include <algorithm>
#include <cstring>

#include "cpu_repack.h"
#include "loom/core/quants.h"

namespace loom::cpu {
namespace {

constexpr int64_t kF32PanelRows = 512;        // 512 KB panels: half of a Zen 4 L2
constexpr size_t kQ8PanelBytes = 256 * 1024;  // target size of one q8 panel (L2)
constexpr int kMaxTileCols = 16;

template <class T>
T* align64(void* p) {
  return reinterpret_cast<T*>((reinterpret_cast<uintptr_t>(p) + 63) / 64 * 64);
}

// rows [m0, m0 + mrows) x elements [k0, k0 + kc) of a -> f32 panel (rows past mrows zero);
// pairs (gemm_bf16_pairs): the elements are the BF16 rows' pairs, which go in as they are.
// tmp: 16 * kc floats for decoded rows.
void pack_f32(const GemmKernels& gk, const GemmJob& job, bool pairs, int64_t m0, int64_t mrows, int64_t k0, int64_t kc,
              float* panel, float* tmp) {
  const WeightKernels& wk = *job.wk;
  static const float kZeros[kPanelRows] = {};
  const int64_t ngroups = (mrows + kPanelRows - 1) / kPanelRows;
  const float* rows[kPanelRows];
  for (int64_t g = 0; g < ngroups; ++g) {
    const int live = (int)std::min<int64_t>(kPanelRows, mrows - g * kPanelRows);
    for (int l = 0; l < kPanelRows; ++l) {
      if (l >= live) {  // zero rows: a stride-0 run of zeros
        rows[l] = nullptr;
        continue;
      }
      const char* row = job.a + (m0 + g * kPanelRows + l) * job.lda;
      if (wk.type == DType::F32 || pairs) {
        rows[l] = reinterpret_cast<const float*>(row) + k0;
      } else {
        wk.to_f32(row + (size_t)(k0 / wk.block) * wk.block_bytes, tmp + l * kc, kc);
        rows[l] = tmp + l * kc;
      }
    }
    float* pg = panel + g * kc * kPanelRows;
    gk.transpose16(rows, live, kc, pg, kPanelRows);
    if (live < kPanelRows)
      for (int64_t k = 0; k < kc; ++k)
        std::memcpy(pg + k * kPanelRows + live, kZeros, sizeof(float) * (kPanelRows - live));
  }
}

// rows [m0, m0 + mrows) of GGUF rows -> a q8 panel of `block`-byte group blocks, the 32 bytes of
// each row and block at `bytes_at`: fill(row, blk, pb, l, v) writes row l's fields of block
// blk into pb (zeros where row is nullptr: rows past mrows) and its 32 bytes into v.
template <class Fill>
void pack_rows(const GemmJob& job, int64_t m0, int64_t mrows, uint8_t* panel, size_t block, size_t bytes_at,
               Fill fill) {
  const int64_t nblk = job.K / 32;
  const int64_t ngroups = (mrows + kPanelRows - 1) / kPanelRows;
  for (int64_t g = 0; g < ngroups; ++g)
    for (int l = 0; l < kPanelRows; ++l) {
      const int64_t i = g * kPanelRows + l;
      const char* row = i < mrows ? job.a + (m0 + i) * job.lda : nullptr;
      for (int64_t blk = 0; blk < nblk; ++blk) {
        uint8_t* pb = panel + (size_t)(g * nblk + blk) * block;
        uint8_t v[32] = {};
        fill(row, blk, pb, l, v);
        for (int q = 0; q < 8; ++q) std::memcpy(pb + bytes_at + (q * kPanelRows + l) * 4, v + 4 * q, 4);
      }
    }
}

// Q8_0 / Q4_0: the row scales, then each row's 32 values as unsigned bytes (Q8_0: q + 128,
// Q4_0: the nibble).
void pack_q8(const GemmKernels&, const GemmJob& job, int64_t m0, int64_t mrows, uint8_t* panel) {
  const bool q4 = job.wk->type == DType::Q4_0;
  pack_rows(job, m0, mrows, panel, kQ8GroupBlockBytes, 16 * sizeof(float),
            [&](const char* row, int64_t blk, uint8_t* pb, int l, uint8_t* v) {
              auto* dw = reinterpret_cast<float*>(pb);
              dw[l] = 0.0f;
              if (row && q4) {
                const auto& w = reinterpret_cast<const BlockQ4_0*>(row)[blk];
                dw[l] = fp16_to_f32_fast(w.d);
                for (int e = 0; e < 16; ++e) {
                  v[e] = w.qs[e] & 15;
                  v[e + 16] = w.qs[e] >> 4;
                }
              } else if (row) {
                const auto& w = reinterpret_cast<const BlockQ8_0*>(row)[blk];
                dw[l] = fp16_to_f32_fast(w.d);
                for (int e = 0; e < 32; ++e) v[e] = (uint8_t)(w.qs[e] ^ 0x80);
              }
            });
}

// A panel from repacked rows (cpu_repack.h), a 16-row group being two 8-row groups side by side
// (a pair where the weight is in pairs): per group, repacked group block and half h,
// fill(src, pb, h) writes the half's rows of the panel blocks at pb (1 for Q8_0 / Q4_0, 8 for the
// K-quants' 256 values) from the group block at src. A lone last half leaves the other's rows
// zero.
template <class Fill>
void pack_repacked(const GemmJob& job, int64_t m0, int64_t mrows, uint8_t* panel, size_t block, Fill fill) {
  const int64_t nblk = job.K / 32, ngroups = (mrows + kPanelRows - 1) / kPanelRows;
  const int64_t per = dtype_info(job.wk->type).block_size / 32;  // panel blocks per group block
  const size_t gbb = repack_group_block_bytes(job.wk->type);
  static_assert(kPanelRows == 2 * kRepackRows);
  for (int64_t g = 0; g < ngroups; ++g) {
    const int halves = g * kPanelRows + kRepackRows < mrows ? 2 : 1;
    const auto* rows = reinterpret_cast<const uint8_t*>(job.a + (m0 + g * kPanelRows) * job.lda);
    const R8Group first = r8_group(0, halves, job.lda, gbb, job.pairs),
                  second = r8_group(1, 2, job.lda, gbb, job.pairs);
    for (int64_t gb = 0; gb < nblk / per; ++gb) {  // both halves per group block
      uint8_t* pb = panel + (size_t)(g * nblk + gb * per) * block;
      if (halves == 1) std::memset(pb, 0, (size_t)per * block);
      for (int h = 0; h < halves; ++h) {
        const R8Group& at = h ? second : first;
        fill(rows + at.at + (size_t)gb * at.stride, pb, h);
      }
    }
  }
}

// The level's group packer for `t`, or the readable one.
PackR8Fn r8_packer(const GemmKernels& gk, DType t) {
  PackR8Fn level = gk.pack_q8_0_r8, ref = pack_q8_0_r8_ref;
  if (t == DType::Q4_0) level = gk.pack_q4_0_r8, ref = pack_q4_0_r8_ref;
  if (t == DType::Q4_K) level = gk.pack_q4k_r8, ref = pack_q4k_r8_ref;
  if (t == DType::Q6_K) level = gk.pack_q6k_r8, ref = pack_q6k_r8_ref;
  if (PackR8Fn more = pack_r8_ref_more(t)) level = pack_r8_avx2_more(t), ref = more;  // simd_gemm_pack.cpp
  return level ? level : ref;
}

// Repacked rows.
void pack_r8(const GemmKernels& gk, const GemmJob& job, int64_t m0, int64_t mrows, uint8_t* panel) {
  pack_repacked(job, m0, mrows, panel, gemm_q8_block_bytes(job.wk->type), r8_packer(gk, job.wk->type));
}

// K-quant GGUF rows (--no-repack, --mmap): each 8 rows' super-block repacked into a group block
// on the stack first (cpu_repack.h), then the same packer: a prompt's panels ~25% faster than
// gathering each row's sub-blocks into the panel (Q8_0 / Q4_0 rows, plain bytes, gather faster).
void pack_gguf(const GemmKernels& gk, const GemmJob& job, int64_t m0, int64_t mrows, uint8_t* panel) {
  const DType t = job.wk->type;
  const PackR8Fn pack = r8_packer(gk, t);
  const size_t bb = dtype_info(t).type_size, block = gemm_q8_block_bytes(t);
  const int64_t nblk = job.K / 32, per = dtype_info(t).block_size / 32;
  const int64_t ngroups = (mrows + kPanelRows - 1) / kPanelRows;
  alignas(64) uint8_t group[kRepackRows * sizeof(BlockQ6_K)];
  const void* blocks[kRepackRows];
  for (int64_t g = 0; g < ngroups; ++g)
    for (int64_t gb = 0; gb < nblk / per; ++gb)
      for (int h = 0; h < 2; ++h) {
        for (int i = 0; i < kRepackRows; ++i) {
          const int64_t r = g * kPanelRows + h * kRepackRows + i;
          blocks[i] = r < mrows ? job.a + (m0 + r) * job.lda + (size_t)gb * bb : nullptr;
        }
        repack_group_block(t, blocks, group);
        pack(group, panel + (size_t)(g * nblk + gb * per) * block, h);
      }
}

}  // namespace

// ---- readable reference tiles ------------------------------------------------------------------

void gemm_f32_tile_ref(int64_t kc, const float* p, const float* b, int ldb, int nc, float* const* c, int mr,
                       bool accumulate) {
  for (int j = 0; j < nc; ++j)
    for (int i = 0; i < mr; ++i) {
      const float* pi = p + (i / kPanelRows) * kc * kPanelRows + i % kPanelRows;
      float s = accumulate ? c[j][i] : 0.0f;
      for (int64_t k = 0; k < kc; ++k) s += pi[k * kPanelRows] * b[k * ldb + j];
      c[j][i] = s;
    }
}

void gemm_bf16_tile_ref(int64_t kc, const float* p, const float* b, int ldb, int nc, float* const* c, int mr,
                        bool accumulate) {
  auto half = [](const float* pair, int t) {
    uint32_t u;
    std::memcpy(&u, pair, 4);
    return bf16_to_f32((bf16_t)(t ? u >> 16 : u & 0xffff));
  };
  for (int j = 0; j < nc; ++j)
    for (int i = 0; i < mr; ++i) {
      const float* pi = p + (i / kPanelRows) * kc * kPanelRows + i % kPanelRows;
      float s = accumulate ? c[j][i] : 0.0f;
      for (int64_t k = 0; k < kc; ++k)
        for (int t = 0; t < 2; ++t) s += half(pi + k * kPanelRows, t) * half(b + k * ldb + j, t);
      c[j][i] = s;
    }
}

namespace {
// Both q8 references: MINS reads the Q4_K panel (mins after the scales, no byte offset).
template <bool MINS>
void q8_tile_ref(int64_t nblk, const uint8_t* p, const BlockQ8A* const* b, int nc, float* const* c, int mr, int shift) {
  const size_t block = MINS ? kQ8MinGroupBlockBytes : kQ8GroupBlockBytes;
  for (int j = 0; j < nc; ++j)
    for (int i = 0; i < mr; ++i) {
      float s = 0.0f;
      for (int64_t blk = 0; blk < nblk; ++blk) {
        const uint8_t* pb = p + (size_t)((i / kPanelRows) * nblk + blk) * block;
        const float dw = reinterpret_cast<const float*>(pb)[i % kPanelRows];
        const uint8_t* u = pb + (MINS ? 32 : 16) * sizeof(float);
        const BlockQ8A& x = b[j][blk];
        int32_t dot = MINS ? 0 : -x.sum * (1 << shift);
        for (int e = 0; e < 32; ++e) dot += (int32_t)u[((e / 4) * kPanelRows + i % kPanelRows) * 4 + e % 4] * x.qs[e];
        if constexpr (MINS) {
          const float mw = reinterpret_cast<const float*>(pb)[kPanelRows + i % kPanelRows];
          s += x.d * (dw * (float)dot - mw * (float)x.sum);
        } else {
          s += dw * x.d * (float)dot;
        }
      }
      c[j][i] = s;
    }
}
}  // namespace

void gemm_q8_tile_ref(int64_t nblk, const uint8_t* p, const BlockQ8A* const* b, int nc, float* const* c, int mr,
                      int shift) {
  q8_tile_ref<false>(nblk, p, b, nc, c, mr, shift);
}

void gemm_q8m_tile_ref(int64_t nblk, const uint8_t* p, const BlockQ8A* const* b, int nc, float* const* c, int mr,
                       int shift) {
  q8_tile_ref<true>(nblk, p, b, nc, c, mr, shift);
}

namespace {
// Both halves references: MINS reads the Q2_K panel (row mins of each half after the offsets).
template <bool MINS>
void q8h_tile_ref(int64_t nblk, const uint8_t* p, const BlockQ8A* const* b, int nc, float* const* c, int mr) {
  const size_t block = MINS ? kQ8HalfMinGroupBlockBytes : kQ8HalfGroupBlockBytes;
  for (int j = 0; j < nc; ++j)
    for (int i = 0; i < mr; ++i) {
      const int l = i % kPanelRows;
      float s = 0.0f;
      for (int64_t blk = 0; blk < nblk; ++blk) {
        const uint8_t* pb = p + (size_t)((i / kPanelRows) * nblk + blk) * block;
        const auto* dw = reinterpret_cast<const float*>(pb);
        const auto* off = reinterpret_cast<const int32_t*>(pb + 32 * sizeof(float));
        const auto* mw = reinterpret_cast<const float*>(pb + 64 * sizeof(float));
        const auto* w = reinterpret_cast<const int8_t*>(pb + (MINS ? 96 : 64) * sizeof(float));
        const BlockQ8A& x = b[j][blk];
        for (int h = 0; h < 2; ++h) {
          int32_t dot = off[h * kPanelRows + l], xsum = 0;
          for (int e = 16 * h; e < 16 * h + 16; ++e) {
            dot += (int32_t)w[((e / 4) * kPanelRows + l) * 4 + e % 4] * (x.qs[e] + 128);
            xsum += x.qs[e];
          }
          float part = dw[h * kPanelRows + l] * (float)dot;
          if constexpr (MINS) part -= mw[h * kPanelRows + l] * (float)xsum;
          s += x.d * part;
        }
      }
      c[j][i] = s;
    }
}
}  // namespace

void gemm_q8h_tile_ref(int64_t nblk, const uint8_t* p, const BlockQ8A* const* b, int nc, float* const* c, int mr,
                       int /*shift*/) {
  q8h_tile_ref<false>(nblk, p, b, nc, c, mr);
}

void gemm_q8hm_tile_ref(int64_t nblk, const uint8_t* p, const BlockQ8A* const* b, int nc, float* const* c, int mr,
                        int /*shift*/) {
  q8h_tile_ref<true>(nblk, p, b, nc, c, mr);
}

// Q8_0 / Q4_0: the row scales, each quad's 32 bytes (8 rows) copied (Q4_0: split into low and
// high nibbles: quads 0-3 from the low, 4-7 from the high nibbles of the same bytes).
template <bool Q4>
void pack_q8_r8_ref(const uint8_t* src, uint8_t* pb, int h) {
  auto* dw = reinterpret_cast<float*>(pb) + h * kRepackRows;
  uint8_t* u = pb + 16 * sizeof(float) + h * 32;  // + q * 64: rows 8h .. 8h + 7 of quad q
  for (int i = 0; i < kRepackRows; ++i) {
    fp16_t d;
    std::memcpy(&d, src + i * sizeof(fp16_t), sizeof(d));
    dw[i] = fp16_to_f32(d);
  }
  const uint8_t* qs = src + kRepackRows * sizeof(fp16_t);
  for (int q = 0; q < 8; ++q)
    for (int k = 0; k < 32; ++k) {
      const uint8_t b = qs[32 * (Q4 ? q & 3 : q) + k];
      u[q * 64 + k] = !Q4 ? b : q < 4 ? b & 15 : b >> 4;
    }
}
void pack_q8_0_r8_ref(const uint8_t* src, uint8_t* pb, int h) { pack_q8_r8_ref<false>(src, pb, h); }
void pack_q4_0_r8_ref(const uint8_t* src, uint8_t* pb, int h) { pack_q8_r8_ref<true>(src, pb, h); }

// Q4_K: per sub-block j the rows' d * sc and dmin * m, then each quad's 32 bytes (8 rows) as
// low (j even) or high nibbles.
void pack_q4k_r8_ref(const uint8_t* src, uint8_t* pb, int h) {
  for (int j = 0; j < 8; ++j, pb += kQ8MinGroupBlockBytes) {
    float* dw = reinterpret_cast<float*>(pb) + h * kRepackRows;
    float* mw = dw + kPanelRows;
    uint8_t* u = pb + 32 * sizeof(float) + h * 32;  // + q * 64: rows 8h .. 8h + 7 of quad q
    for (int i = 0; i < kRepackRows; ++i) {
      fp16_t d[2];
      std::memcpy(&d[0], src + i * sizeof(fp16_t), sizeof(fp16_t));
      std::memcpy(&d[1], src + (kRepackRows + i) * sizeof(fp16_t), sizeof(fp16_t));
      const ScaleMin sm = repacked_q4k_scale_min(src, i, j);
      dw[i] = fp16_to_f32(d[0]) * (float)sm.sc;
      mw[i] = fp16_to_f32(d[1]) * (float)sm.m;
    }
    const uint8_t* qs = src + kQ4kRepackQuads + 32 * 8 * (j / 2);
    for (int q = 0; q < 8; ++q)
      for (int k = 0; k < 32; ++k) u[q * 64 + k] = j % 2 ? qs[32 * q + k] >> 4 : qs[32 * q + k] & 15;
  }
}

// Q6_K: per 32-value block j (element 32j + t: hh = j / 4, k = j % 4; low bits from ql quad
// 16hh + 8(k % 2) + t / 4, nibble k / 2; high bits from qh quad 8hh + t / 4, bits 2k) the rows'
// d * sc of its two 16-value halves, their offsets -128 * sum(w), then w = q - 32.
void pack_q6k_r8_ref(const uint8_t* src, uint8_t* pb, int h) {
  for (int j = 0; j < 8; ++j, pb += kQ8HalfGroupBlockBytes) {
    float* dw = reinterpret_cast<float*>(pb) + h * kRepackRows;
    int32_t* off = reinterpret_cast<int32_t*>(pb + 32 * sizeof(float)) + h * kRepackRows;
    uint8_t* u = pb + 64 * sizeof(float) + h * 32;
    const int hh = j / 4, k = j % 4;
    int32_t sums[2][kRepackRows] = {};
    for (int q = 0; q < 8; ++q) {
      const uint8_t* ql = src + q6k_repack_ql(16 * hh + 8 * (k % 2) + q, 0);
      const uint8_t* qh = src + q6k_repack_qh(8 * hh + q, 0);
      for (int b = 0; b < 32; ++b) {
        const int w = (((ql[b] >> (4 * (k / 2))) & 15) | (((qh[b] >> (2 * k)) & 3) << 4)) - 32;
        u[q * 64 + b] = (uint8_t)(int8_t)w;
        sums[q / 4][b / 4] += w;
      }
    }
    for (int i = 0; i < kRepackRows; ++i) {
      fp16_t d;
      std::memcpy(&d, src + i * sizeof(fp16_t), sizeof(d));
      for (int half = 0; half < 2; ++half) {  // sub-block 2j + half: scale pair j, element half
        dw[half * kPanelRows + i] = fp16_to_f32(d) * (float)(int8_t)src[q6k_repack_scale(2 * j + half, i)];
        off[half * kPanelRows + i] = -128 * sums[half][i];
      }
    }
  }
}

void transpose16_ref(const float* const* src, int nsrc, int64_t n, float* dst, int ldd) {
  for (int64_t i = 0; i < n; ++i)
    for (int s = 0; s < nsrc; ++s) dst[i * ldd + s] = src[s][i];
}

// ---- level selection --------------------------------------------------------------------------

const GemmKernels* gemm_kernels(Isa isa) {
  if ((int)isa > (int)detected_isa()) isa = detected_isa();
  switch (isa) {
    case Isa::avx512:
      return gemm_kernels_avx512();
    case Isa::avx2:
      return gemm_kernels_avx2();
    default:
      return nullptr;
  }
}

namespace {
// The tile of `type`'s panel form (its block size), or nullptr.
GemmQ8TileFn q8_tile_of(const GemmKernels& gk, DType type) {
  switch (gemm_q8_block_bytes(type)) {
    case kQ8GroupBlockBytes:
      return gk.q8_tile;
    case kQ8MinGroupBlockBytes:
      return gk.q8m_tile;
    case kQ8HalfGroupBlockBytes:
      return gk.q8h_tile;
    case kQ8HalfMinGroupBlockBytes:
      return gk.q8hm_tile;
    default:
      return nullptr;
  }
}
}  // namespace

bool gemm_q8_supported(const GemmKernels* gk, DType type) { return gk && q8_tile_of(*gk, type); }

size_t gemm_q8_block_bytes(DType type) {
  switch (type) {
    case DType::Q8_0:
    case DType::Q4_0:
    case DType::Q5_0:
    case DType::IQ4_NL:
    case DType::MXFP4:
    case DType::IQ4_XS:
      return kQ8GroupBlockBytes;
    case DType::Q4_K:
    case DType::Q4_1:
    case DType::Q5_1:
    case DType::Q5_K:
      return kQ8MinGroupBlockBytes;
    case DType::Q6_K:
    case DType::Q3_K:
      return kQ8HalfGroupBlockBytes;
    case DType::Q2_K:
      return kQ8HalfMinGroupBlockBytes;
    default:
      return 0;
  }
}

int64_t gemm_panel_rows(size_t q8_block, int64_t K) {
  if (!q8_block) return kF32PanelRows;
  const size_t group_bytes = (size_t)(K / 32) * q8_block;
  const int64_t groups = std::clamp<int64_t>((int64_t)(kQ8PanelBytes / std::max<size_t>(group_bytes, 1)), 2, 16);
  return groups / 2 * 2 * kPanelRows;  // whole 32-row tiles
}

namespace {
// Rows of one panel for a job of `rows` rows: the L2-sized panel, or the job rounded to tiles.
int64_t panel_rows_for(size_t q8_block, int64_t K, int64_t rows) {
  return std::min(gemm_panel_rows(q8_block, K), (rows + 31) / 32 * 32);
}
}  // namespace

size_t gemm_scratch_bytes(size_t q8_block, int64_t K, int64_t max_rows) {
  const int64_t mc = panel_rows_for(q8_block, K, max_rows);
  if (q8_block) return (size_t)(mc / kPanelRows) * (size_t)(K / 32) * q8_block + 64;
  return sizeof(float) * (size_t)((mc + kMaxTileCols + kPanelRows) * kGemmKc) + 3 * 64;
}

// ---- drivers ----------------------------------------------------------------------------------

namespace {
int f32_cols(const GemmKernels& gk) { return std::min(gk.f32_nr, kMaxTileCols); }
int64_t col_groups(const GemmKernels& gk, int64_t n) { return (n + f32_cols(gk) - 1) / f32_cols(gk); }
int64_t k_blocks(int64_t K) { return (K + kGemmKc - 1) / kGemmKc; }
// The packed block of K block kb and column group g (kGemmKc x nr floats each).
size_t packed_block(const GemmKernels& gk, int64_t n, int64_t kb, int64_t g) {
  return (size_t)(kb * col_groups(gk, n) + g) * (size_t)(kGemmKc * f32_cols(gk));
}

// Panel elements of a row of K values: K / 2 bf16 pairs, or K floats.
int64_t panel_k(bool pairs, int64_t K) { return pairs ? K / 2 : K; }
// Columns j < nc (f32, cols[j] from value 0) -> the k-major [kc][nr] block of panel elements
// [k0, k0 + kc): a transpose, after rounding the block's 2 kc values to bf16 pairs in tmp
// (kMaxTileCols * kGemmKc floats) when pairs.
void pack_cols(const GemmKernels& gk, bool pairs, const float* const* cols, int nc, int64_t k0, int64_t kc, float* tmp,
               float* out, int nr) {
  const float* src[kMaxTileCols];
  for (int j = 0; j < nc; ++j) {
    src[j] = cols[j] + (pairs ? 2 * k0 : k0);
    if (pairs) {
      gk.to_bf16(src[j], tmp + j * kGemmKc, 2 * kc);
      src[j] = tmp + j * kGemmKc;
    }
  }
  gk.transpose16(src, nc, kc, out, nr);
}
}  // namespace

bool gemm_bf16_pairs(const GemmKernels& gk, DType type, int64_t K) {
  return gk.bf16_tile && type == DType::BF16 && K % 2 == 0;
}

int64_t gemm_f32_pack_items(const GemmKernels& gk, DType type, int64_t K, int64_t n) {
  return k_blocks(panel_k(gemm_bf16_pairs(gk, type, K), K)) * col_groups(gk, n);
}

size_t gemm_f32_packed_bytes(const GemmKernels& gk, DType type, int64_t K, int64_t n) {
  return sizeof(float) * packed_block(gk, n, k_blocks(panel_k(gemm_bf16_pairs(gk, type, K), K)), 0);
}

void gemm_f32_pack_b(const GemmKernels& gk, DType type, int64_t K, int64_t n, const float* cols, size_t col_stride,
                     float* out, int64_t item0, int64_t item1) {
  const bool pairs = gemm_bf16_pairs(gk, type, K);
  const int64_t kp = panel_k(pairs, K);
  const int nr = f32_cols(gk);
  const int64_t groups = col_groups(gk, n);
  alignas(64) float tmp[kMaxTileCols * kGemmKc];  // bf16 columns (16 KiB)
  for (int64_t it = item0; it < item1; ++it) {
    const int64_t kb = it / groups, g = it % groups, k0 = kb * kGemmKc;
    const int nc = (int)std::min<int64_t>(nr, n - g * nr);
    const float* src[kMaxTileCols];
    for (int j = 0; j < nc; ++j) src[j] = cols + (size_t)(g * nr + j) * col_stride;
    pack_cols(gk, pairs, src, nc, k0, std::min(kGemmKc, kp - k0), tmp, out + packed_block(gk, n, kb, g), nr);
  }
}

size_t gemm_f32_packed_offset(const GemmKernels& gk, int64_t n, int64_t kb, int64_t g) {
  return packed_block(gk, n, kb, g);
}

// The f32 flavour; for BF16 weights on a level with a bf16 tile (gemm_bf16_pairs) the same loops
// run over K / 2 pairs: the rows go into the panel as they are, the columns are rounded to bf16
// pairs block by block.
void gemm_f32(const GemmKernels& gk, const GemmJob& job, void* scratch) {
  const bool pairs = gemm_bf16_pairs(gk, job.wk->type, job.K);
  const int64_t K = panel_k(pairs, job.K);
  const int64_t mc = panel_rows_for(0, job.K, job.r1 - job.r0);
  const int nr = f32_cols(gk);
  float* panel = align64<float>(scratch);
  float* bpack = align64<float>(panel + mc * kGemmKc);
  float* tmp = align64<float>(bpack + kMaxTileCols * kGemmKc);  // kPanelRows decoded rows, or bf16 columns
  float* cp[kMaxTileCols];
  for (int64_t m0 = job.r0; m0 < job.r1; m0 += mc) {
    const int64_t mrows = std::min(mc, job.r1 - m0);
    for (int64_t k0 = 0; k0 < K; k0 += kGemmKc) {
      const int64_t kc = std::min(kGemmKc, K - k0);
      pack_f32(gk, job, pairs, m0, mrows, k0, kc, panel, tmp);
      for (int64_t j0 = 0; j0 < job.n; j0 += nr) {
        const int nc = (int)std::min<int64_t>(nr, job.n - j0);
        const float* bp = bpack;
        if (job.bpack) {
          bp = job.bpack + packed_block(gk, job.n, k0 / kGemmKc, j0 / nr);
        } else {
          pack_cols(gk, pairs, reinterpret_cast<const float* const*>(job.b + j0), nc, k0, kc, tmp, bpack, nr);
        }
        for (int64_t i0 = 0; i0 < mrows; i0 += gk.f32_mr) {
          for (int j = 0; j < nc; ++j) cp[j] = job.d[j0 + j] + m0 + i0;
          (pairs ? gk.bf16_tile : gk.f32_tile)(kc, panel + (i0 / kPanelRows) * kc * kPanelRows, bp, nr, nc, cp,
                                               (int)std::min<int64_t>(gk.f32_mr, mrows - i0), k0 > 0);
        }
      }
    }
  }
}

void gemm_q8(const GemmKernels& gk, const GemmJob& job, void* scratch) {
  const int64_t nblk = job.K / 32;
  const DType type = job.wk->type;
  const size_t block = gemm_q8_block_bytes(type);
  const int64_t mc = panel_rows_for(block, job.K, job.r1 - job.r0);
  const int shift = type == DType::Q4_0 ? 3 : 7;  // offsets 8 and 128 of the unsigned bytes (mins: none)
  const GemmQ8TileFn tile = q8_tile_of(gk, type);
  void (*pack)(const GemmKernels&, const GemmJob&, int64_t, int64_t, uint8_t*) =
      job.repacked                                 ? pack_r8
      : type == DType::Q8_0 || type == DType::Q4_0 ? pack_q8
                                                   : pack_gguf;
  auto* panel = align64<uint8_t>(scratch);
  const int nr = std::min(gk.q8_nr, kMaxTileCols);
  const BlockQ8A* bp[kMaxTileCols];
  float* cp[kMaxTileCols];
  for (int64_t m0 = job.r0; m0 < job.r1; m0 += mc) {
    const int64_t mrows = std::min(mc, job.r1 - m0);
    pack(gk, job, m0, mrows, panel);
    for (int64_t j0 = 0; j0 < job.n; j0 += nr) {
      const int nc = (int)std::min<int64_t>(nr, job.n - j0);
      for (int j = 0; j < nc; ++j) bp[j] = static_cast<const BlockQ8A*>(job.b[j0 + j]);
      for (int64_t i0 = 0; i0 < mrows; i0 += gk.q8_mr) {
        for (int j = 0; j < nc; ++j) cp[j] = job.d[j0 + j] + m0 + i0;
        tile(nblk, panel + (size_t)(i0 / kPanelRows * nblk) * block, bp, nc, cp,
             (int)std::min<int64_t>(gk.q8_mr, mrows - i0), shift);
      }
    }
  }
}

}  // namespace loom::cpu
