// Blocked matrix products of the CPU backend for prompt-sized batches (many columns of b):
// rows of a are decoded once per block into a packed panel the register tiles stream through,
// and each tile keeps mr x nr results in registers across a block of K. Two flavours:
//   f32 - any weight type decoded to f32 (weights x f32 columns, FMA tiles);
//   q8  - weights repacked as bytes, times int8 columns (BlockQ8A) with integer dot-product
//         tiles (AVX-512 VNNI): every quantized type; per-block mins (Q4_K, Q4_1, Q5_1, Q5_K),
//         16-value sub-blocks (Q6_K, Q3_K) and both (Q2_K) through tile variants of their own.
// The per-level tiles live in simd_gemm_<level>.cpp; readable scalar tiles (the references the
// tests compare them with) and the driver live in simd_gemm.cpp.
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu_features.h"
#include "cpu_vec_dot.h"

namespace loom::cpu {

// Rows per interleaved group of a packed panel.
inline constexpr int kPanelRows = 16;
// Elements of K per f32 panel block (a multiple of every block size).
inline constexpr int64_t kGemmKc = 256;
// Bytes of one q8 panel group block: 16 f32 row scales, then 8 quads x 16 rows x 4 bytes.
inline constexpr size_t kQ8GroupBlockBytes = 16 * sizeof(float) + 32 * 16;
// The same with 16 f32 row mins after the scales (Q4_K: x = dw * u - mw).
inline constexpr size_t kQ8MinGroupBlockBytes = kQ8GroupBlockBytes + 16 * sizeof(float);
// Q6_K's: per half (16 values) of the block 16 f32 row scales, then per half 16 int32 row
// offsets, then the quads as signed bytes.
inline constexpr size_t kQ8HalfGroupBlockBytes = 4 * 16 * sizeof(float) + 32 * 16;
// Q2_K's: the same with per half 16 f32 row mins after the offsets.
inline constexpr size_t kQ8HalfMinGroupBlockBytes = kQ8HalfGroupBlockBytes + 2 * 16 * sizeof(float);

// f32 tile: for rows i < mr and columns j < nc,
//   c[j][i] = (accumulate ? c[j][i] : 0) + sum_{k < kc} P(i, k) * b[k * ldb + j]
// with P(i, k) = p[(i / 16) * kc * 16 + k * 16 + i % 16] (groups of 16 rows, k-major) and b a
// packed block of columns, k-major (ldb >= nc).
using GemmF32TileFn = void (*)(int64_t kc, const float* p, const float* b, int ldb, int nc, float* const* c, int mr,
                               bool accumulate);
// bf16 tile: the f32 tile's shapes over kc pairs, each 32-bit element of p and b holding two
// bf16 values (element 2k in the low half), and
//   c[j][i] = (accumulate ? c[j][i] : 0) + sum_{k < kc} sum_{t < 2} P(i, k)_t * b[k * ldb + j]_t.
// q8 tile over nblk blocks of 32: for rows i < mr and columns j < nc,
//   c[j][i] = sum_blk dw(i, blk) * x.d * (sum_{e < 32} u(i, blk, e) * x.qs[e] - (x.sum << shift)),  x = b[j][blk]
// with the panel p as groups of 16 rows, each nblk blocks of kQ8GroupBlockBytes: dw[16] floats,
// then byte (q * 16 + i % 16) * 4 + t holding u for element e = 4q + t. shift 7: Q8_0 (u = q + 128),
// shift 3: Q4_0, whose u <= 15 (the AVX2 tile adds their products up in int16).
// The mins variant (shift unused): blocks of kQ8MinGroupBlockBytes holding dw[16], mw[16], then
// the bytes as above (u <= 31), and
//   c[j][i] = sum_blk x.d * (dw(i, blk) * sum_{e < 32} u(i, blk, e) * x.qs[e] - mw(i, blk) * x.sum).
// The halves variant (Q6_K, shift unused): blocks of kQ8HalfGroupBlockBytes holding dw[2][16],
// off[2][16] (int32), then the bytes as signed w in [-32, 31] (the activations are the unsigned
// side, + 128):
//   c[j][i] = sum_blk x.d * sum_{h < 2} dw(h, i, blk) *
//             (off(h, i, blk) + sum_{e in half h} w(i, blk, e) * (x.qs[e] + 128)),
// the packer storing off = -128 * sum of the half's w, so that the + 128 cancels.
// The halves-with-mins variant (Q2_K, shift unused): blocks of kQ8HalfMinGroupBlockBytes holding
// dw[2][16], off[2][16], mw[2][16], then the bytes (w in [0, 3]), and the halves' value less
// x.d * mw(h, i, blk) * (sum of x.qs over half h) per half.
using GemmQ8TileFn = void (*)(int64_t nblk, const uint8_t* p, const BlockQ8A* const* b, int nc, float* const* c, int mr,
                              int shift);
// A repacked group block at src (cpu_repack.h: 8 rows x 32 values of Q8_0 / Q4_0, x 256 of Q4_K /
// Q6_K) -> rows 8h .. 8h + 7 of its 1 or 8 consecutive panel blocks at pb (Q4_K: the mins
// variant, Q6_K: the halves variant above).
using PackR8Fn = void (*)(const uint8_t* src, uint8_t* pb, int h);

// Transpose of nsrc <= 16 runs of n floats: dst[i * ldd + s] = src[s][i] for i < n, s < nsrc
// (packs both panels: 16 weight rows -> k-major groups, and nr columns of b -> k-major blocks).
using Transpose16Fn = void (*)(const float* const* src, int nsrc, int64_t n, float* dst, int ldd);

struct GemmKernels {
  int f32_mr, f32_nr;  // f32 tile: rows (a multiple of 16) and columns
  GemmF32TileFn f32_tile;
  int q8_mr, q8_nr;
  GemmQ8TileFn q8_tile;   // nullptr where the level has no int8 tile
  GemmQ8TileFn q8m_tile;  // with row mins (same rows and columns as q8_tile)
  GemmQ8TileFn q8h_tile;  // with 16-value halves (same rows and columns)
  Transpose16Fn transpose16;
  GemmF32TileFn bf16_tile = nullptr;  // f32_mr x f32_nr over bf16 pairs, where the CPU has AVX-512 BF16
  RowFromF32Fn to_bf16 = nullptr;     // n floats -> bf16 (the level's BF16 row writer), with bf16_tile
  PackR8Fn pack_q8_0_r8 = nullptr;    // nullptr: the readable packers
  PackR8Fn pack_q4_0_r8 = nullptr;
  PackR8Fn pack_q4k_r8 = nullptr;
  PackR8Fn pack_q6k_r8 = nullptr;
  GemmQ8TileFn q8hm_tile = nullptr;  // halves with mins (same rows and columns as q8_tile)
};

// Tiles of a level (nullptr for scalar: the dot kernels serve every width there).
const GemmKernels* gemm_kernels(Isa isa);
const GemmKernels* gemm_kernels_avx2();
const GemmKernels* gemm_kernels_avx512();
// The readable references of the tiles (any mr <= 32, nc <= 16).
void gemm_f32_tile_ref(int64_t kc, const float* p, const float* b, int ldb, int nc, float* const* c, int mr,
                       bool accumulate);
void gemm_bf16_tile_ref(int64_t kc, const float* p, const float* b, int ldb, int nc, float* const* c, int mr,
                        bool accumulate);
void gemm_q8_tile_ref(int64_t nblk, const uint8_t* p, const BlockQ8A* const* b, int nc, float* const* c, int mr,
                      int shift);
void gemm_q8m_tile_ref(int64_t nblk, const uint8_t* p, const BlockQ8A* const* b, int nc, float* const* c, int mr,
                       int shift);
void gemm_q8h_tile_ref(int64_t nblk, const uint8_t* p, const BlockQ8A* const* b, int nc, float* const* c, int mr,
                       int shift);
void gemm_q8hm_tile_ref(int64_t nblk, const uint8_t* p, const BlockQ8A* const* b, int nc, float* const* c, int mr,
                        int shift);
void transpose16_ref(const float* const* src, int nsrc, int64_t n, float* dst, int ldd);
void pack_q8_0_r8_ref(const uint8_t* src, uint8_t* pb, int h);
void pack_q4_0_r8_ref(const uint8_t* src, uint8_t* pb, int h);
void pack_q4k_r8_ref(const uint8_t* src, uint8_t* pb, int h);
void pack_q6k_r8_ref(const uint8_t* src, uint8_t* pb, int h);
// The newer types' packers (simd_gemm_pack.cpp: Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4, IQ4_XS, Q5_K,
// Q3_K, Q2_K), readable and 8-row AVX2 (every level with int8 tiles has AVX2); nullptr for other types.
PackR8Fn pack_r8_ref_more(DType t);
PackR8Fn pack_r8_avx2_more(DType t);

// One weight matrix times a set of columns: dst rows [r0, r1) of every column.
struct GemmJob {
  const WeightKernels* wk;  // a's type
  const char* a;            // row r at a + r * lda (unit stride within a row)
  size_t lda;
  int64_t K;
  int64_t r0, r1;
  int64_t n;             // columns
  const void* const* b;  // column j: K floats (f32) or K / 32 BlockQ8A (q8)
  float* const* d;       // column j of dst: element r at d[j][r]
  // f32 only: b already packed by gemm_f32_pack_b (shared by every job over the same columns),
  // or nullptr: the driver packs each block of columns itself, once per panel.
  const float* bpack;
  bool repacked = false;  // a's rows in groups of 8 (cpu_repack.h; r0, r1 multiples of 8)
  bool pairs = false;     // and those in pairs (r0 a multiple of 16)
};

// Whether the q8 flavour serves weights of `type` with these tiles.
bool gemm_q8_supported(const GemmKernels* gk, DType type);
// Bytes of one q8 panel group block for weights of `type` (0: the f32 flavour).
size_t gemm_q8_block_bytes(DType type);
// Rows of a per panel (the work unit of the driver) for K; q8_block from gemm_q8_block_bytes,
// 0 for the f32 flavour.
int64_t gemm_panel_rows(size_t q8_block, int64_t K);
// Per-thread scratch of the driver for K and jobs of up to max_rows rows.
size_t gemm_scratch_bytes(size_t q8_block, int64_t K, int64_t max_rows);
// Whether gemm_f32 multiplies weights of `type` as bf16 pairs (the columns rounded to bf16, as
// llama.cpp does for BF16 weights): BF16 with an even K on a level with a bf16 tile.
bool gemm_bf16_pairs(const GemmKernels& gk, DType type, int64_t K);
void gemm_f32(const GemmKernels& gk, const GemmJob& job, void* scratch);
// Packed b for gemm_f32 over weights of `type`: per block of kGemmKc panel elements (floats, or
// bf16 pairs), per group of f32_nr columns, the k-major [kc][f32_nr] block gemm_f32 would
// make. Items are (K block, column group) pairs, so threads can share the packing; column j is
// cols + j * col_stride floats.
int64_t gemm_f32_pack_items(const GemmKernels& gk, DType type, int64_t K, int64_t n);
size_t gemm_f32_packed_bytes(const GemmKernels& gk, DType type, int64_t K, int64_t n);
void gemm_f32_pack_b(const GemmKernels& gk, DType type, int64_t K, int64_t n, const float* cols, size_t col_stride,
                     float* out, int64_t item0, int64_t item1);
// Where gemm_f32_pack_b put K block kb of column group g: floats from `out` (for callers that run
// the f32 tile themselves over panels of their own).
size_t gemm_f32_packed_offset(const GemmKernels& gk, int64_t n, int64_t kb, int64_t g);
void gemm_q8(const GemmKernels& gk, const GemmJob& job, void* scratch);

}  // namespace loom::cpu
