// Repacked quantized weights (every block type): the CPU device may store a weight matrix's rows in
// interleaved groups of 8 ("r8") instead of GGUF's row after row, so that one 256-bit integer
// dot product serves 8 rows at once and decode streams one sequential run of bytes per group.
// Same bytes per group as the 8 rows it holds, so every size the planner and fit-params compute
// stays true.
//
// Group g (rows 8g .. 8g + 7) occupies the bytes of those rows; per block b it holds
//   Q8_0 / Q4_0 (32 values): [8 x fp16 scale d of rows 0..7][quads]
// where quad q, row i is the 4 bytes at (q * 8 + i) * 4:
//   Q8_0 (8 quads, 256 bytes): q + 128 as unsigned bytes of elements 4q .. 4q + 3;
//   Q4_0 (4 quads, 128 bytes): the block's bytes 4q .. 4q + 3 as stored (low nibbles: elements
//        4q .. 4q + 3, high nibbles: elements 16 + 4q .. 16 + 4q + 3).
//   Q4_K (256 values, 1152 bytes): [8 x fp16 d][8 x fp16 dmin], then the 6-bit (sc, m) of
//        sub-block j, row i as lo[j * 8 + i] = (sc & 15) | (m & 15) << 4 (64 bytes) and
//        hi[(j % 4) * 8 + i], bits 4 (j / 4) .. 4 (j / 4) + 3 = sc >> 4 | (m >> 4) << 2 (32
//        bytes) -- the same 96 bits per row as GGUF's scales[12], in an order vectors decode for
//        8 rows at once -- then 32 quads of the block's qs bytes as stored (quad q: bytes 4q ..
//        4q + 3 of row i at (q * 8 + i) * 4; low nibbles of quads 8c .. 8c + 7 are sub-block
//        2c, high nibbles sub-block 2c + 1).
//   Q6_K (256 values, 1680 bytes): [8 x fp16 d], the int8 scales of the 16-value sub-blocks
//        in pairs, row-minor (byte t * 16 + 2i + e: sub-block 2t + e of row i, 128 bytes), then
//        16 steps s = 8h + q (h < 2, q < 8) of three 32-byte quads (row i at i * 4): ql quad
//        16h + q, ql quad 16h + 8 + q, qh quad 8h + q -- the order the kernels read them, so
//        that the group streams front to back.
//   The newer types (Q5_K, Q3_K, IQ4_XS, Q2_K, Q4_1, Q5_0, Q5_1, IQ4_NL, MXFP4): the GGUF block's
//   fields (repack_fields) one after another, each as the 8 rows' copies interleaved `grain`
//   bytes at a time -- chunk c of row i at field + (c * 8 + i) * grain -- so one 32-byte load
//   holds a 4-byte word of every row (its scales decode lane-wise for 8 rows) and the quants
//   are quads as above. Q5_0 / Q5_1's qh word is stored bit-transposed (byte t, bit b: element
//   4b + t), so that quad q's fifth bits are one shift and mask away.
//   Q3_K keeps only d and the scales as fields; its 256 levels v = q | (hmask bit) << 2 (0..7)
//   follow as 24 words per row (word n of row i at kQ3kLevels + (n * 8 + i) * 4), byte b of a
//   word standing for element 16 g + 4 t + b of the quads below: the quads (g, t) of 16-value
//   groups g < 6 whole in bits 0-2 of word 4g + t, of groups 6-11 whole in bits 5-7 of word
//   4g + t - 24, and those of groups 12-15 (j = 4 (g - 12) + t) split: v & 3 in bits 3-4 of
//   word j, v >> 2 in bit 3 + j % 2 of word 16 + j / 2. So 48 of the 64 quads are one mask
//   away, in place (v, 32 v), and the others two masks and a shift (8 v): Q3_K's GGUF fields
//   took four operations per quad.
// Pairs (kFlagRepackedPairs; where the active level's two-group kernels take the type at this
// row length, simd_r8x2.h): groups 2p and 2p + 1 of each matrix interleave block by block -- block
// b of group 2p, then block b of group 2p + 1, each as above -- so that the 16 rows those kernels
// read at once stream as one run of bytes (two groups read side by side were two streams, slower
// from memory). A matrix's last group of an odd count stays on its own.
// A repacked tensor carries kFlagRepacked; MUL_MAT / MUL_MAT_ID read it as their weights, and
// GET_ROWS row by row (a tied token embedding is also the output matrix: unpack_tensor_row).
#pragma once

#include <cstddef>
#include <cstdint>

#include "cpu_vec_dot.h"
#include "loom/core/dtype.h"
#include "loom/core/quants.h"
#include "loom/graph/tensor.h"

namespace loom::cpu {

inline constexpr int kRepackRows = 8;

// One field of a GGUF block in a group block (see above): `at` its offset in the GGUF block.
struct RepackField {
  uint16_t at, bytes, grain;
  bool bit_transpose = false;  // a 4-byte qh word: byte t bit b = bit 4b + t of the GGUF word
};
// Fields in group-block order (what the kernels stream first comes first).
inline constexpr RepackField kQ4_1Fields[] = {{0, 2, 2}, {2, 2, 2}, {4, 16, 4}};              // d, m, qs
inline constexpr RepackField kQ5_0Fields[] = {{0, 2, 2}, {2, 4, 4, true}, {6, 16, 4}};        // d, qh, qs
inline constexpr RepackField kQ5_1Fields[] = {{0, 2, 2}, {2, 2, 2}, {4, 4, 4, true}, {8, 16, 4}};  // d, m, qh, qs
inline constexpr RepackField kIq4NlFields[] = {{0, 2, 2}, {2, 16, 4}};                        // d, qs
inline constexpr RepackField kMxfp4Fields[] = {{0, 1, 1}, {1, 16, 4}};                        // e, qs
inline constexpr RepackField kQ2KFields[] = {{80, 2, 2}, {82, 2, 2}, {0, 16, 4}, {16, 64, 4}};  // d, dmin, scales, qs
inline constexpr RepackField kQ3KFields[] = {{108, 2, 2}, {96, 12, 4}};  // d, scales, then the levels (above)
inline constexpr RepackField kQ5KFields[] = {{0, 2, 2}, {2, 2, 2}, {4, 12, 4}, {16, 32, 4}, {48, 128, 4}};
inline constexpr RepackField kIq4XsFields[] = {{0, 2, 2}, {2, 2, 2}, {4, 4, 4}, {8, 128, 4}};  // d, scales_h/_l, qs
// Offset of field k in a group block.
template <size_t N>
constexpr size_t r8_field(const RepackField (&fields)[N], size_t k) {
  size_t at = 0;
  for (size_t f = 0; f < k; ++f) at += (size_t)kRepackRows * fields[f].bytes;
  return at;
}
inline constexpr size_t kQ3kLevels = r8_field(kQ3KFields, 2);
// Q3_K's level quad (g, t): the word holding it (its low bits for groups 12-15), and the
// position of its levels in that word's bytes (bit 0, 5 or 3: the scale of v in place).
struct Q3kQuad {
  int word, shift;
};
constexpr Q3kQuad q3k_quad(int g, int t) {
  const int n = 4 * g + t;
  return g < 6 ? Q3kQuad{n, 0} : g < 12 ? Q3kQuad{n - 24, 5} : Q3kQuad{n - 48, 3};
}
// For groups 12-15: the word and bit of quad j's third bits.
constexpr Q3kQuad q3k_high_bits(int j) { return {16 + j / 2, 3 + j % 2}; }

// Whether `type` has a repacked layout (Q8_0, Q4_0, Q4_K, Q6_K and those of repack_fields).
bool repack_type(DType type);
// Whether the active level reads repacked `type`: its rows_dot_r8 (the GEMMs pack from either
// layout).
bool repacked_kernels(DType type);
// Bytes of one group block: 8 blocks' worth.
size_t repack_group_block_bytes(DType type);
// Where group g of a matrix's `groups` keeps its blocks: block b at `at + b * stride` bytes from
// the matrix's first row (lda: a GGUF row's bytes; gbb: repack_group_block_bytes).
struct R8Group {
  size_t at, stride;
};
inline R8Group r8_group(int64_t g, int64_t groups, size_t lda, size_t gbb, bool pairs) {
  if (!pairs || (g ^ 1) >= groups) return {(size_t)g * kRepackRows * lda, gbb};  // (an odd count's last)
  return {(size_t)(g & ~int64_t{1}) * kRepackRows * lda + (size_t)(g & 1) * gbb, 2 * gbb};
}
// The active level's kernel for repacked rows in pairs (a RowsDotFn whose a is the first row of a
// pair, nr a multiple of 8: a last group alone where nr % 16 == 8); nullptr where it has none.
RowsDotFn rows_dot_pairs(DType type);
// Whether a matrix of `type` with rows of K values is repacked in pairs: the active level has
// their kernel and the host takes two groups at once for such rows (wide_512).
bool repack_pairs(DType type, int64_t K);
// nrows (a multiple of 8) GGUF rows of K values at src (lda bytes apart, lda = row size) ->
// the repacked layout at dst (same size; dst != src); with `pairs`, in pairs within each matrix
// of matrix_rows rows (0: one matrix of nrows).
void repack_rows(DType type, const void* src, void* dst, int64_t nrows, int64_t K, bool pairs = false,
                 int64_t matrix_rows = 0);
// Block b of 8 GGUF rows -> one group block at dst: blocks[i] is row i's GGUF block (nullptr:
// a zero row).
void repack_group_block(DType type, const void* const* blocks, void* dst);
// The inverse: repacked groups -> GGUF rows.
void unpack_rows(DType type, const void* src, void* dst, int64_t nrows, int64_t K, bool pairs = false,
                 int64_t matrix_rows = 0);
// Q4_K group block offsets: the scales' low nibbles, their high bits, the quads.
inline constexpr size_t kQ4kRepackScaleLo = 32, kQ4kRepackScaleHi = 96, kQ4kRepackQuads = 128;
// Q4_K group block at p: row i's (sc, m) of sub-block j.
ScaleMin repacked_q4k_scale_min(const uint8_t* p, int i, int j);
// Q6_K group block offsets: the scales, the steps (96 bytes each).
inline constexpr size_t kQ6kRepackScales = 16, kQ6kRepackSteps = 144;
// Offset of the int8 scale of 16-value sub-block sb (< 16) of row i in a Q6_K group block (scale
// pair sb / 2 of the row starts at q6k_repack_scale(sb & ~1, i)).
inline constexpr size_t q6k_repack_scale(int sb, int i) {
  return kQ6kRepackScales + (size_t)(sb / 2) * 16 + (size_t)i * 2 + (size_t)(sb % 2);
}
// Offset of ql quad q (< 32) or qh quad q (< 16) of row i in a Q6_K group block.
inline constexpr size_t q6k_repack_ql(int q, int i) {
  return kQ6kRepackSteps + (size_t)(8 * (q / 16) + q % 8) * 96 + (size_t)(q % 16 / 8) * 32 + (size_t)i * 4;
}
inline constexpr size_t q6k_repack_qh(int q, int i) { return kQ6kRepackSteps + (size_t)q * 96 + 64 + (size_t)i * 4; }
// Row i (< 8) of the repacked group at `group`, blocks [b0, b0 + nb), as GGUF blocks at out.
void unpack_blocks(DType type, const uint8_t* group, int i, int64_t b0, int64_t nb, void* out);
// Row r of matrix i2 of a repacked tensor (kFlagRepacked, in pairs where kFlagRepackedPairs says)
// as its GGUF row at out (t.nb[1] bytes).
void unpack_tensor_row(const Tensor& t, int64_t r, int64_t i2, void* out);

// The readable reference of the repacked rows_dot (RowsDotFn with nr a multiple of 8 and a the
// first row of a group, or with `pairs` of a pair): each group unpacked, then the scalar GGUF-row
// kernel.
void rows_dot_r8_ref(DType type, int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                     float* const* out, bool pairs = false);

}  // namespace loom::cpu
