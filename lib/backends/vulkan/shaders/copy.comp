#version 450
// CPY / DUP / CONT: element i of the source (row-major over its shape, through its strides)
// goes to element i of the destination (its own shape and strides), converting between F32, F16
// and BF16 (types: src | dst << 4; 0 f32, 1 f16, 2 bf16, 3 i32 with i32 only to i32).
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer S { uint s[]; };
layout(std430, binding = 1) buffer D { uint d[]; };

layout(push_constant) uniform PC {
  uint s_off, d_off, types, pad;
  uint s_ne0, s_ne1, s_ne2, s_ne3;
  uint s_nb0, s_nb1, s_nb2, s_nb3;
  uint d_ne0, d_ne1, d_ne2, d_ne3;
  uint d_nb0, d_nb1, d_nb2, d_nb3;
} p;

void main() {
  const uint idx = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  const uint n = p.s_ne0 * p.s_ne1 * p.s_ne2 * p.s_ne3;
  if (idx >= n) return;
  uint r = idx;
  const uint s0 = r % p.s_ne0; r /= p.s_ne0;
  const uint s1 = r % p.s_ne1; r /= p.s_ne1;
  const uint s2 = r % p.s_ne2; r /= p.s_ne2;
  const uint sb = p.s_off + s0 * p.s_nb0 + s1 * p.s_nb1 + s2 * p.s_nb2 + r * p.s_nb3;
  r = idx;
  const uint d0 = r % p.d_ne0; r /= p.d_ne0;
  const uint d1 = r % p.d_ne1; r /= p.d_ne1;
  const uint d2 = r % p.d_ne2; r /= p.d_ne2;
  const uint db = p.d_off + d0 * p.d_nb0 + d1 * p.d_nb1 + d2 * p.d_nb2 + r * p.d_nb3;
  const uint st = p.types & 15u, dt = p.types >> 4;
  if (st == 3u) {
    d[db >> 2] = s[sb >> 2];
    return;
  }
  const float v = st == 0u ? F32(s, sb) : st == 1u ? F16(s, sb) : BF16(s, sb);
  if (dt == 0u) {
    STORE_F32(d, db, v);
  } else if (dt == 1u) {
    STORE_U16(d, db, f32_to_f16(v));
  } else {
    STORE_U16(d, db, f32_to_bf16(v));
  }
}
