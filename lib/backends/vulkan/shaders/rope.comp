#version 450
// ROPE (and ROPE_BACK with sign -1): one invocation per rotated pair or copied element; pairs
// (2i, 2i+1) normal or (i, i + n_dims/2) neox; theta = pos * freq_scale * base^(-2i/n_dims) / ff[i].
#include "common.glsl"

layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer A { uint a[]; };
layout(std430, binding = 1) readonly buffer P { uint pos[]; };
layout(std430, binding = 2) readonly buffer F { uint ff[]; };
layout(std430, binding = 3) writeonly buffer D { uint d[]; };

layout(push_constant) uniform PC {
  uint a_off, pos_off, ff_off, d_off;
  uint ne0, ne1, ne2, ne3;
  uint a_nb0, a_nb1, a_nb2, a_nb3;
  uint d_nb1, d_nb2, d_nb3, n_dims;
  uint neox, has_ff, ff_nb0, pad;
  float base, freq_scale, attn_factor, sign;
} p;

void main() {
  // per row, ne0 / 2 invocations: pair i < n_dims / 2 rotates, the rest copy two elements
  const uint half_ne = p.ne0 / 2u;
  const uint idx = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  if (idx >= half_ne * p.ne1 * p.ne2 * p.ne3) return;
  const uint i = idx % half_ne, row = idx / half_ne;
  const uint i1 = row % p.ne1, i2 = (row / p.ne1) % p.ne2, i3 = row / (p.ne1 * p.ne2);
  const uint ab = p.a_off + i1 * p.a_nb1 + i2 * p.a_nb2 + i3 * p.a_nb3;
  const uint db = p.d_off + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3;
  const uint nh = p.n_dims / 2u;
  if (i >= nh) {  // dims past n_dims pass through (two per invocation)
    const uint e0 = p.n_dims + 2u * (i - nh);
    STORE_F32(d, db + e0 * 4u, F32(a, ab + e0 * p.a_nb0));
    STORE_F32(d, db + (e0 + 1u) * 4u, F32(a, ab + (e0 + 1u) * p.a_nb0));
    return;
  }
  float theta = p.freq_scale * pow(p.base, -2.0 * float(i) / float(p.n_dims));
  if (p.has_ff != 0u) theta /= F32(ff, p.ff_off + i * p.ff_nb0);
  const float angle = float(I32(pos, p.pos_off + i2 * 4u)) * theta;
  const float c = cos(angle) * p.attn_factor, s = p.sign * sin(angle) * p.attn_factor;
  const uint j0 = p.neox != 0u ? i : 2u * i, j1 = p.neox != 0u ? i + nh : 2u * i + 1u;
  const float x0 = F32(a, ab + j0 * p.a_nb0), x1 = F32(a, ab + j1 * p.a_nb0);
  STORE_F32(d, db + j0 * 4u, x0 * c - x1 * s);
  STORE_F32(d, db + j1 * 4u, x0 * s + x1 * c);
}
