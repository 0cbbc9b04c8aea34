#version 450
// OUT_PROD, F32: a {M, K, a2, a3}, b {N, K, b2, b3} -> d {M, N, b2, b3},
// d[m, n] = sum_k a[m, k] * b[n, k] (a broadcast over b's dims 2, 3). One invocation per element
// of d, looping over the shared dimension K in order.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { uint a[]; };
layout(std430, binding = 1) readonly buffer B { uint b[]; };
layout(std430, binding = 2) writeonly buffer D { uint d[]; };

layout(push_constant) uniform PC {
  uint a_off, b_off, d_off, K;
  uint M, N, b2, b3;
  uint a2, a3, pad0, pad1;
  uint a_nb0, a_nb1, a_nb2, a_nb3;
  uint b_nb0, b_nb1, b_nb2, b_nb3;
  uint d_nb0, d_nb1, d_nb2, d_nb3;
} p;

void main() {
  const uint idx = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  if (idx >= p.M * p.N * p.b2 * p.b3) return;
  const uint im = idx % p.M, in_ = (idx / p.M) % p.N, i2 = (idx / (p.M * p.N)) % p.b2, i3 = idx / (p.M * p.N * p.b2);
  const uint ab = p.a_off + im * p.a_nb0 + (i2 / (p.b2 / p.a2)) * p.a_nb2 + (i3 / (p.b3 / p.a3)) * p.a_nb3;
  const uint bb = p.b_off + in_ * p.b_nb0 + i2 * p.b_nb2 + i3 * p.b_nb3;
  float s = 0.0;
  for (uint k = 0u; k < p.K; ++k) s += F32(a, ab + k * p.a_nb1) * F32(b, bb + k * p.b_nb1);
  STORE_F32(d, p.d_off + im * p.d_nb0 + in_ * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3, s);
}
