#version 450
// ARGSORT and TOP_K by rank: the invocation for element i counts the elements that come before
// it (descending: larger, NaN last; ties by index, so the sort is stable) and writes i at that
// rank when it is below the result's length. One workgroup per row; rows of up to 4096 values.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { uint a[]; };
layout(std430, binding = 1) writeonly buffer D { uint d[]; };

layout(push_constant) uniform PC {
  uint a_off, d_off, n0, n_out;
  uint ne1, ne2, descending, nrows;
  uint a_nb0, a_nb1, a_nb2, a_nb3;
  uint d_nb1, d_nb2, d_nb3;
} p;

shared float row[4096];

bool before(float x, uint i, float y, uint j) {  // x at i sorts before y at j
  if (p.descending != 0u) {
    if (!isnan(x) && (isnan(y) || x > y)) return true;
    if (!isnan(y) && (isnan(x) || y > x)) return false;
  } else {
    if (!isnan(x) && (isnan(y) || x < y)) return true;
    if (!isnan(y) && (isnan(x) || y < x)) return false;
  }
  return i < j;
}

void main() {
  const uint r = gl_WorkGroupID.x + gl_WorkGroupID.y * gl_NumWorkGroups.x;
  if (r >= p.nrows) return;  // uniform per workgroup
  const uint i1 = r % p.ne1, i2 = (r / p.ne1) % p.ne2, i3 = r / (p.ne1 * p.ne2);
  const uint ab = p.a_off + i1 * p.a_nb1 + i2 * p.a_nb2 + i3 * p.a_nb3;
  for (uint i = gl_LocalInvocationID.x; i < p.n0; i += 256u) row[i] = F32(a, ab + i * p.a_nb0);
  barrier();
  const uint db = p.d_off + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3;
  for (uint i = gl_LocalInvocationID.x; i < p.n0; i += 256u) {
    const float x = row[i];
    uint rank = 0u;
    for (uint j = 0u; j < p.n0; ++j) rank += before(row[j], j, x, i) ? 1u : 0u;
    if (rank < p.n_out) d[(db >> 2) + rank] = i;
  }
}
