#version 450
// The row-wise training ops over dim 0, one workgroup of 128 per row, reductions in shared memory
// (no subgroup operations):
//   mode 0 SOFT_MAX_BACK            a grad, b y:       d = scale * y * (grad - sum(grad * y))
//   mode 1 RMS_NORM_BACK            a grad, b x:       d = r (grad - x r^2 mean(grad * x)), r = 1/sqrt(mean(x^2) + eps)
//   mode 2 CROSS_ENTROPY_LOSS_BACK  a logits, b labels, c grad {1}: d = (softmax(a) - b) * grad / rows
//   mode 3 CROSS_ENTROPY_LOSS       a logits, b labels: d {1} = mean over rows of -sum_i b_i log_softmax(a)_i
//                                   (one workgroup walks every row in order, so the sum is deterministic)
// F32 sources read through strides; the result F32 with unit stride.
#include "common.glsl"

layout(local_size_x = 128) in;
layout(std430, binding = 0) readonly buffer A { uint a[]; };
layout(std430, binding = 1) readonly buffer B { uint b[]; };
layout(std430, binding = 2) readonly buffer C { uint c[]; };
layout(std430, binding = 3) writeonly buffer D { uint d[]; };

layout(push_constant) uniform PC {
  uint a_off, b_off, c_off, d_off;
  uint ne0, ne1, ne2, ne3;
  uint a_nb0, a_nb1, a_nb2, a_nb3;
  uint b_nb0, b_nb1, b_nb2, b_nb3;
  uint d_nb1, d_nb2, d_nb3, mode;
  float p0;  // SOFT_MAX_BACK's scale, RMS_NORM_BACK's eps
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

float reduce_max(float v) {
  const uint t = gl_LocalInvocationID.x;
  red[t] = v;
  barrier();
  [[unroll]] for (uint s = 64u; s > 0u; s >>= 1) {
    if (t < s) red[t] = max(red[t], red[t + s]);
    barrier();
  }
  const float r = red[0];
  barrier();
  return r;
}

float A0(uint base, uint i) { return F32(a, base + i * p.a_nb0); }
float B0(uint base, uint i) { return F32(b, base + i * p.b_nb0); }

// log(sum(exp(x))) of a row of a.
float log_sum_exp(uint ab) {
  const uint t = gl_LocalInvocationID.x;
  float mx = -1.0 / 0.0;
  for (uint i = t; i < p.ne0; i += 128u) mx = max(mx, A0(ab, i));
  mx = reduce_max(mx);
  if (isinf(mx)) return mx;
  float s = 0.0;
  for (uint i = t; i < p.ne0; i += 128u) s += exp(A0(ab, i) - mx);
  return mx + log(reduce_sum(s));
}

void main() {
  const uint t = gl_LocalInvocationID.x;
  const uint rows = p.ne1 * p.ne2 * p.ne3;
  if (p.mode == 3u) {  // CROSS_ENTROPY_LOSS: one workgroup
    float total = 0.0;
    for (uint row = 0u; row < rows; ++row) {
      const uint i1 = row % p.ne1, i2 = (row / p.ne1) % p.ne2, i3 = row / (p.ne1 * p.ne2);
      const uint ab = p.a_off + i1 * p.a_nb1 + i2 * p.a_nb2 + i3 * p.a_nb3;
      const uint bb = p.b_off + i1 * p.b_nb1 + i2 * p.b_nb2 + i3 * p.b_nb3;
      const float lse = log_sum_exp(ab);
      float l = 0.0;
      for (uint i = t; i < p.ne0; i += 128u) {
        const float pi = B0(bb, i);
        if (pi != 0.0) l -= pi * (A0(ab, i) - lse);
      }
      total += reduce_sum(l);
    }
    if (t == 0u) STORE_F32(d, p.d_off, total / float(rows));
    return;
  }
  const uint row = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (row >= rows) return;  // uniform per workgroup
  const uint i1 = row % p.ne1, i2 = (row / p.ne1) % p.ne2, i3 = row / (p.ne1 * p.ne2);
  const uint ab = p.a_off + i1 * p.a_nb1 + i2 * p.a_nb2 + i3 * p.a_nb3;
  const uint bb = p.b_off + i1 * p.b_nb1 + i2 * p.b_nb2 + i3 * p.b_nb3;
  const uint db = p.d_off + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3;
  if (p.mode == 0u) {
    float s = 0.0;
    for (uint i = t; i < p.ne0; i += 128u) s += A0(ab, i) * B0(bb, i);
    const float dot = reduce_sum(s);
    for (uint i = t; i < p.ne0; i += 128u) STORE_F32(d, db + i * 4u, p.p0 * B0(bb, i) * (A0(ab, i) - dot));
  } else if (p.mode == 1u) {
    float sq = 0.0, gx = 0.0;
    for (uint i = t; i < p.ne0; i += 128u) {
      const float x = B0(bb, i);
      sq += x * x;
      gx += A0(ab, i) * x;
    }
    sq = reduce_sum(sq);
    gx = reduce_sum(gx);
    const float r = 1.0 / sqrt(sq / float(p.ne0) + p.p0);
    const float k = gx / float(p.ne0) * r * r;
    for (uint i = t; i < p.ne0; i += 128u) STORE_F32(d, db + i * 4u, r * (A0(ab, i) - B0(bb, i) * k));
  } else {
    const float g = F32(c, p.c_off) / float(rows);
    const float lse = log_sum_exp(ab);
    for (uint i = t; i < p.ne0; i += 128u) STORE_F32(d, db + i * 4u, (exp(A0(ab, i) - lse) - B0(bb, i)) * g);
  }
}
