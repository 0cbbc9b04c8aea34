#version 450
// SOFT_MAX over dim 0 of (a * scale + slope_h * mask), one workgroup per row; mask F32 or F16
// (mask_type 0/1; 2: none) broadcast over dims 2 and 3; slope_h from ALiBi's max_bias.
#include "common.glsl"

layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer A { uint a[]; };
layout(std430, binding = 1) readonly buffer M { uint mk[]; };
layout(std430, binding = 2) buffer D { uint d[]; };

layout(push_constant) uniform PC {
  uint a_off, m_off, d_off, mask_type;
  uint ne0, ne1, ne2, ne3;
  uint a_nb0, a_nb1, a_nb2, a_nb3;
  uint m_ne2, m_ne3, m_nb1, m_nb2;
  uint m_nb3, d_nb1, d_nb2, d_nb3;
  float scale, max_bias;
} p;

shared float red[128];

float reduce(float v, bool is_max) {
  const uint t = gl_LocalInvocationID.x;
  red[t] = v;
  barrier();
  [[unroll]] for (uint s = 64u; s > 0u; s >>= 1) {
    if (t < s) red[t] = is_max ? max(red[t], red[t + s]) : red[t] + red[t + s];
    barrier();
  }
  const float r = red[0];
  barrier();
  return r;
}

float alibi_slope(uint h) {
  if (p.max_bias <= 0.0) return 1.0;
  const uint n2 = 1u << findMSB(p.ne2);
  const float m0 = pow(2.0, -p.max_bias / float(n2)), m1 = pow(2.0, -p.max_bias / 2.0 / float(n2));
  return h < n2 ? pow(m0, float(h + 1u)) : pow(m1, float(2u * (h - n2) + 1u));
}

void main() {
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= p.ne1 * p.ne2 * p.ne3) return;  // uniform per workgroup
  const uint i1 = row % p.ne1, i2 = (row / p.ne1) % p.ne2, i3 = row / (p.ne1 * p.ne2);
  const uint ab = p.a_off + i1 * p.a_nb1 + i2 * p.a_nb2 + i3 * p.a_nb3;
  const uint mb = p.m_off + i1 * p.m_nb1 + (i2 % p.m_ne2) * p.m_nb2 + (i3 % p.m_ne3) * p.m_nb3;
  const float slope = alibi_slope(i2);
  const uint t = gl_LocalInvocationID.x;
  float mx = -1.0 / 0.0;
  for (uint i = t; i < p.ne0; i += 128u) {
    float v = F32(a, ab + i * p.a_nb0) * p.scale;
    if (p.mask_type == 0u) v += slope * F32(mk, mb + i * 4u);
    if (p.mask_type == 1u) v += slope * F16(mk, mb + i * 2u);
    mx = max(mx, v);
  }
  mx = reduce(mx, true);
  float sum = 0.0;
  for (uint i = t; i < p.ne0; i += 128u) {
    float v = F32(a, ab + i * p.a_nb0) * p.scale;
    if (p.mask_type == 0u) v += slope * F32(mk, mb + i * 4u);
    if (p.mask_type == 1u) v += slope * F16(mk, mb + i * 2u);
    const float e = mx == -1.0 / 0.0 ? 0.0 : exp(v - mx);
    sum += e;
    STORE_F32(d, p.d_off + i * 4u + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3, e);
  }
  sum = reduce(sum, false);
  const float inv = sum > 0.0 ? 1.0 / sum : 0.0;
  // each invocation rescales the values it wrote itself, so no barrier on d is needed
  for (uint i = t; i < p.ne0; i += 128u) {
    const uint db = p.d_off + i * 4u + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3;
    STORE_F32(d, db, F32(d, db) * inv);
  }
}
