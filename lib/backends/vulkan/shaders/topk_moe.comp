#version 450
// The topk-moe router fused (one workgroup per token): p = gate(logits * gate_scale) (softmax or
// sigmoid), ids = top_k(p + bias), w = p[ids], optionally renormalized, then w * scale + bias.
// Outputs: weights F32 {k, T} (binding 2) and ids I32 {k, T} (binding 3), both contiguous.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer L { uint lg[]; };
layout(std430, binding = 1) readonly buffer Bias { uint bias[]; };
layout(std430, binding = 2) writeonly buffer W { uint w[]; };
layout(std430, binding = 3) writeonly buffer Ids { uint ids[]; };

layout(push_constant) uniform PC {
  uint l_off, b_off, w_off, ids_off;
  uint E, k, l_nb1, flags;  // flags: 1 sigmoid, 2 bias, 4 normalize, 8 scale
  float gate_scale, scale, scale_bias, pad;
} p;

shared float prob[2048];
shared float sel[2048];
shared float red[256];
shared float top_w[256];

float reduce(float v, bool is_max) {
  const uint t = gl_LocalInvocationID.x;
  red[t] = v;
  barrier();
  [[unroll]] for (uint s = 128u; s > 0u; s >>= 1) {
    if (t < s) red[t] = is_max ? max(red[t], red[t + s]) : red[t] + red[t + s];
    barrier();
  }
  const float r = red[0];
  barrier();
  return r;
}

bool before(float x, uint i, float y, uint j) {  // descending, NaN last, ties by index
  if (!isnan(x) && (isnan(y) || x > y)) return true;
  if (!isnan(y) && (isnan(x) || y > x)) return false;
  return i < j;
}

void main() {
  const uint tok = gl_WorkGroupID.x, t = gl_LocalInvocationID.x;
  const bool sigmoid = (p.flags & 1u) != 0u;
  const uint lb = p.l_off + tok * p.l_nb1;
  float mx = -1.0 / 0.0;
  for (uint i = t; i < p.E; i += 256u) {
    const float x = F32(lg, lb + i * 4u);
    prob[i] = sigmoid ? 1.0 / (1.0 + exp(-x)) : x * p.gate_scale;
    mx = max(mx, prob[i]);
  }
  if (!sigmoid) {
    mx = reduce(mx, true);
    float s = 0.0;
    for (uint i = t; i < p.E; i += 256u) {
      prob[i] = mx == -1.0 / 0.0 ? 0.0 : exp(prob[i] - mx);
      s += prob[i];
    }
    s = reduce(s, false);
    const float inv = mx == -1.0 / 0.0 ? 0.0 : 1.0 / s;
    for (uint i = t; i < p.E; i += 256u) prob[i] *= inv;
  }
  for (uint i = t; i < p.E; i += 256u) sel[i] = prob[i] + ((p.flags & 2u) != 0u ? F32(bias, p.b_off + i * 4u) : 0.0);
  barrier();
  for (uint i = t; i < p.E; i += 256u) {
    uint rank = 0u;
    for (uint j = 0u; j < p.E; ++j) rank += before(sel[j], j, sel[i], i) ? 1u : 0u;
    if (rank < p.k) {
      ids[(p.ids_off >> 2) + tok * p.k + rank] = i;
      top_w[rank] = prob[i];
    }
  }
  barrier();
  if (t < p.k) {
    float v = top_w[t];
    if ((p.flags & 4u) != 0u) {
      float s2 = 0.0;
      for (uint r = 0u; r < p.k; ++r) s2 += top_w[r];
      v = v / s2;
    }
    if ((p.flags & 8u) != 0u) v = v * p.scale + p.scale_bias;
    STORE_F32(w, p.w_off + (tok * p.k + t) * 4u, v);
  }
}
