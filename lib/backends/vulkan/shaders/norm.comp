#version 450
// RMS_NORM, NORM, SUM_ROWS and MEAN over dim 0, one workgroup per row; with has_mul the RMS_NORM+MUL fusion
// multiplies by w (broadcast over the result) before the single store.
#include "common.glsl"

layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) readonly buffer W { uint w[]; };
layout(std430, binding = 2) writeonly buffer D { uint d[]; };

layout(push_constant) uniform PC {
  uint x_off, w_off, d_off, mode;  // 0 rms_norm, 1 norm, 2 sum_rows, 3 mean
  uint ne0, ne1, ne2, ne3;
  uint has_mul, pad0, pad1, pad2;
  uint x_nb0, x_nb1, x_nb2, x_nb3;
  uint w_ne0, w_ne1, w_ne2, w_ne3;
  uint w_nb0, w_nb1, w_nb2, w_nb3;
  uint d_nb1, d_nb2, d_nb3;
  float eps;
} p;

shared float red[128];

float reduce_sum(float v) {
  const uint t = gl_LocalInvocationID.x;
  red[t] = v;
  barrier();
  [[unroll]] for (uint s = 64u; s > 0u; s >>= 1) {
    if (t < s) red[t] += red[t + s];
    barrier();
  }
  const float r = red[0];
  barrier();
  return r;
}

void main() {
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= p.ne1 * p.ne2 * p.ne3) return;  // uniform per workgroup
  const uint i1 = row % p.ne1, i2 = (row / p.ne1) % p.ne2, i3 = row / (p.ne1 * p.ne2);
  const uint xb = p.x_off + i1 * p.x_nb1 + i2 * p.x_nb2 + i3 * p.x_nb3;
  const uint t = gl_LocalInvocationID.x;
  if (p.mode >= 2u) {  // SUM_ROWS (2) / MEAN (3): one value per row
    float s = 0.0;
    for (uint i = t; i < p.ne0; i += 128u) s += F32(x, xb + i * p.x_nb0);
    s = reduce_sum(s);
    if (t == 0u) STORE_F32(d, p.d_off + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3, p.mode == 3u ? s / float(p.ne0) : s);
    return;
  }
  float mean = 0.0;
  if (p.mode == 1u) {
    float s = 0.0;
    for (uint i = t; i < p.ne0; i += 128u) s += F32(x, xb + i * p.x_nb0);
    mean = reduce_sum(s) / float(p.ne0);
  }
  float sq = 0.0;
  for (uint i = t; i < p.ne0; i += 128u) {
    const float v = F32(x, xb + i * p.x_nb0) - mean;
    sq += v * v;
  }
  const float inv = 1.0 / sqrt(reduce_sum(sq) / float(p.ne0) + p.eps);
  const uint db = p.d_off + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3;
  const uint wb = p.w_off + (i1 % p.w_ne1) * p.w_nb1 + (i2 % p.w_ne2) * p.w_nb2 + (i3 % p.w_ne3) * p.w_nb3;
  for (uint i = t; i < p.ne0; i += 128u) {
    float v = (F32(x, xb + i * p.x_nb0) - mean) * inv;
    if (p.has_mul != 0u) v *= F32(w, wb + (i % p.w_ne0) * p.w_nb0);
    STORE_F32(d, db + i * 4u, v);
  }
}
