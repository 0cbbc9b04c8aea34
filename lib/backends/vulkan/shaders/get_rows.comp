#version 450
// GET_ROWS: result[i0, i, j, k] = a[i0, ids[i, j, k], j, k] as F32; a's type is TYPE_*.
#include "common.glsl"
#include "dequant.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { uint a[]; };
layout(std430, binding = 1) readonly buffer Ids { uint ids[]; };
layout(std430, binding = 2) writeonly buffer D { uint d[]; };

layout(push_constant) uniform PC {
  uint a_off, ids_off, d_off, pad;
  uint ne0, ne1, ne2, ne3;  // the result's shape
  uint a_nb0, a_nb1, a_nb2, a_nb3;
  uint ids_nb0, ids_nb1, ids_nb2, pad2;
  uint d_nb0, d_nb1, d_nb2, d_nb3;
} p;

DEFINE_DEQUANT(a)

void main() {
  IQ_LOAD_CODES()  // (dequant.glsl: the i-quants' codebook into shared memory; nothing else)
  const uint idx = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  if (idx >= p.ne0 * p.ne1 * p.ne2 * p.ne3) return;
  const uint i0 = idx % p.ne0, i1 = (idx / p.ne0) % p.ne1, i2 = (idx / (p.ne0 * p.ne1)) % p.ne2,
             i3 = idx / (p.ne0 * p.ne1 * p.ne2);
  const uint row = uint(I32(ids, p.ids_off + i1 * p.ids_nb0 + i2 * p.ids_nb1 + i3 * p.ids_nb2));
  const uint rb = p.a_off + row * p.a_nb1 + i2 * p.a_nb2 + i3 * p.a_nb3;
  const uint blk = rb + (BLOCK_SIZE == 1u ? i0 * p.a_nb0 : (i0 / BLOCK_SIZE) * BLOCK_BYTES);
  STORE_F32(d, p.d_off + i0 * p.d_nb0 + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3, DEQUANT(a, blk, i0 % BLOCK_SIZE));
}
