#version 450
// MUL_MAT and MUL_MAT_ID: one invocation per row m of a and up to COLS columns of b (MUL_MAT_ID:
// one expert slot), the K loop over a's blocks dequantized with TYPE_*'s DEQUANT once for all the
// columns (each column's sum keeps the same order); b is F32, F16 or BF16 (b_type), or
// act_quant.comp's rounded f32 columns. MUL_MAT_ID with mix_from > 0: b holds two roundings, the
// one at b2_off for the experts that mix_from or more columns use (the CPU's path per expert).
#include "common.glsl"
#include "dequant.glsl"

layout(local_size_x = 64) in;
#define COLS 8u  // vk_ops.cpp's kMulMatCols
layout(std430, binding = 0) readonly buffer A { uint a[]; };
layout(std430, binding = 1) readonly buffer B { uint b[]; };
layout(std430, binding = 2) readonly buffer Ids { uint ids[]; };
layout(std430, binding = 3) writeonly buffer D { uint d[]; };

layout(push_constant) uniform PC {
  uint a_off, b_off, d_off, ids_off;
  uint K, M, N, ne02, ne03, ne12, ne13;
  uint a_nb0, a_nb1, a_nb2, a_nb3;
  uint b_nb0, b_nb1, b_nb2, b_nb3;
  uint d_nb1, d_nb2, d_nb3;
  uint ids_nb1, b_type, is_id, bn;
  uint b2_off, mix_from;
} p;

shared uint s_count;

// Columns (expert slots of every token) that route to expert e; every invocation of the group calls it.
uint expert_columns(uint e) {
  if (gl_LocalInvocationIndex == 0u) s_count = 0u;
  barrier();
  uint c = 0u;
  for (uint i = gl_LocalInvocationIndex; i < p.N * p.ne12; i += 64u)
    c += uint(uint(I32(ids, p.ids_off + (i % p.N) * 4u + (i / p.N) * p.ids_nb1)) == e);
  atomicAdd(s_count, c);
  barrier();
  return s_count;
}

DEFINE_DEQUANT(a)

float load_b(uint byte) {
  if (p.b_type == 0u) return F32(b, byte);
  if (p.b_type == 1u) return F16(b, byte);
  return BF16(b, byte);
}

void main() {
  IQ_LOAD_CODES()  // (dequant.glsl: the i-quants' codebook into shared memory; nothing else)
  const uint m = gl_GlobalInvocationID.x;
  const uint z = gl_WorkGroupID.z;
  uint a_base, b_base, d_base, cols = 1u;
  if (p.is_id != 0u) {
    // y: the expert slot (0..n_used), z: the token
    const uint n = gl_WorkGroupID.y;
    const uint e = uint(I32(ids, p.ids_off + n * 4u + z * p.ids_nb1));
    const bool second = p.mix_from > 0u && expert_columns(e) >= p.mix_from;
    if (m >= p.M) return;
    a_base = p.a_off + e * p.a_nb2;
    b_base = (second ? p.b2_off : p.b_off) + (n % p.bn) * p.b_nb1 + z * p.b_nb2;
    d_base = p.d_off + m * 4u + n * p.d_nb1 + z * p.d_nb2;
  } else {
    // y: the block of COLS columns
    if (m >= p.M) return;
    const uint n = gl_WorkGroupID.y * COLS;
    cols = min(COLS, p.N - n);
    const uint i2 = z % p.ne12, i3 = z / p.ne12;
    a_base = p.a_off + (i2 / (p.ne12 / p.ne02)) * p.a_nb2 + (i3 / (p.ne13 / p.ne03)) * p.a_nb3;
    b_base = p.b_off + n * p.b_nb1 + i2 * p.b_nb2 + i3 * p.b_nb3;
    d_base = p.d_off + m * 4u + n * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3;
  }
  a_base += m * p.a_nb1;
  // Columns past `cols` read the last one again (uniform loads, no branch) and are not stored.
  uint b_col[COLS];
  [[unroll]] for (uint j = 0u; j < COLS; ++j) b_col[j] = b_base + min(j, cols - 1u) * p.b_nb1;
  float acc[COLS];
  [[unroll]] for (uint j = 0u; j < COLS; ++j) acc[j] = 0.0;
  const uint nblocks = p.K / BLOCK_SIZE;
  // One column (decode, MUL_MAT_ID) on its own: the COLS-wide loop would do the work COLS times.
#define K_LOOP(NC)                                                                                \
  for (uint blk = 0u; blk < nblocks; ++blk) {                                                     \
    const uint ab = a_base + blk * (BLOCK_SIZE == 1u ? p.a_nb0 : BLOCK_BYTES);                    \
    const uint k0 = blk * BLOCK_SIZE;                                                             \
    for (uint i = 0u; i < BLOCK_SIZE; ++i) {                                                      \
      const float w = DEQUANT(a, ab, i);                                                          \
      const uint kb = (k0 + i) * p.b_nb0;                                                         \
      [[unroll]] for (uint j = 0u; j < NC; ++j) acc[j] += w * load_b(b_col[j] + kb);              \
    }                                                                                             \
  }
  if (cols == 1u) {
    K_LOOP(1u)
  } else {
    K_LOOP(COLS)
  }
  [[unroll]] for (uint j = 0u; j < COLS; ++j)
    if (j < cols) STORE_F32(d, d_base + j * p.d_nb1, acc[j]);
}
