#version 450
// SET_ROWS: dst[:, ids[i, j % i1, k % i2], j, k] = src[:, i, j, k]; src F32, dst F32/F16/BF16.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer S { uint s[]; };
layout(std430, binding = 1) readonly buffer Ids { uint ids[]; };
layout(std430, binding = 2) buffer D { uint d[]; };

layout(push_constant) uniform PC {
  uint s_off, ids_off, d_off, d_type;
  uint ne0, ne1, ne2, ne3;  // src's shape
  uint s_nb0, s_nb1, s_nb2, s_nb3;
  uint ids_ne1, ids_ne2, ids_nb0, ids_nb1;
  uint ids_nb2, d_nb0, d_nb1, d_nb2;
  uint d_nb3;
} p;

void main() {
  const uint idx = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  if (idx >= p.ne0 * p.ne1 * p.ne2 * p.ne3) return;
  const uint i0 = idx % p.ne0, i1 = (idx / p.ne0) % p.ne1, i2 = (idx / (p.ne0 * p.ne1)) % p.ne2,
             i3 = idx / (p.ne0 * p.ne1 * p.ne2);
  const uint row =
      uint(I32(ids, p.ids_off + i1 * p.ids_nb0 + (i2 % p.ids_ne1) * p.ids_nb1 + (i3 % p.ids_ne2) * p.ids_nb2));
  const float v = F32(s, p.s_off + i0 * p.s_nb0 + i1 * p.s_nb1 + i2 * p.s_nb2 + i3 * p.s_nb3);
  const uint db = p.d_off + i0 * p.d_nb0 + row * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3;
  if (p.d_type == 0u) {
    STORE_F32(d, db, v);
  } else if (p.d_type == 1u) {
    STORE_U16(d, db, f32_to_f16(v));
  } else {
    STORE_U16(d, db, f32_to_bf16(v));
  }
}
