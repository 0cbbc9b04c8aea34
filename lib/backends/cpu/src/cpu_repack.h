// Repacked Q8_0 / Q4_0 weights: the CPU device may store a weight matrix's rows in interleaved
// groups of 8 ("r8") instead of GGUF's row after row, so that one 256-bit integer dot product
// serves 8 rows at once and decode streams one sequential run of bytes per group. Same bytes
// per group as the 8 rows it holds, so every size the planner and fit-params compute stays true.
//
// Group g (rows 8g .. 8g + 7) occupies the bytes of those rows; per 32-value block b it holds
//   [8 x fp16 scale d of rows 0..7][quads]
// where quad q, row i is the 4 bytes at (q * 8 + i) * 4:
//   Q8_0 (8 quads, 256 bytes): q + 128 as unsigned bytes of elements 4q .. 4q + 3;
//   Q4_0 (4 quads, 128 bytes): the block's bytes 4q .. 4q + 3 as stored (low nibbles: elements
//        4q .. 4q + 3, high nibbles: elements 16 + 4q .. 16 + 4q + 3).
// A repacked tensor carries kFlagRepacked; only MUL_MAT / MUL_MAT_ID (as their weights) read it.
#pragma once

#include <cstddef>
#include <cstdint>

#include "loom/core/dtype.h"

namespace loom::cpu {

inline constexpr int kRepackRows = 8;

// Whether `type` has a repacked layout (Q8_0, Q4_0).
bool repack_type(DType type);
// Whether the active level reads repacked `type`: its rows_dot_r8 (the GEMMs pack from either
// layout).
bool repacked_kernels(DType type);
// Bytes of one group block: 16 + 256 (Q8_0) or 16 + 128 (Q4_0).
size_t repack_group_block_bytes(DType type);
// nrows (a multiple of 8) GGUF rows of K values at src (lda bytes apart, lda = row size) ->
// the repacked layout at dst (same size; dst != src).
void repack_rows(DType type, const void* src, void* dst, int64_t nrows, int64_t K);
// The inverse: repacked groups -> GGUF rows.
void unpack_rows(DType type, const void* src, void* dst, int64_t nrows, int64_t K);
// Row i (< 8) of the repacked group at `group`, blocks [b0, b0 + nb), as GGUF blocks (34 / 18
// bytes each) at out.
void unpack_blocks(DType type, const uint8_t* group, int i, int64_t b0, int64_t nb, void* out);
// The same blocks decoded to 32 * nb floats (the f32 GEMM's panel packing).
void repacked_to_f32(DType type, const uint8_t* group, int i, int64_t b0, int64_t nb, float* out);

// The readable reference of the repacked rows_dot (RowsDotFn with nr a multiple of 8 and a the
// first row of a group): each group unpacked, then the scalar GGUF-row kernel.
void rows_dot_r8_ref(DType type, int64_t K, const void* a, size_t lda, int64_t nr, const void* const* b, int nc,
                     float* const* out);

}  // namespace loom::cpu
