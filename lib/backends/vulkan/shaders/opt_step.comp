#version 450
// OPT_STEP_ADAMW (mode 0) and OPT_STEP_SGD (mode 1), one invocation per element of the parameter,
// updated in place (AdamW also its moments m, v). F32, contiguous. hp holds the hyper-parameters:
// AdamW {alpha, beta1, beta2, eps, wd, 1/(1-beta1^t), 1/(1-beta2^t)}, SGD {alpha, wd}. The
// arithmetic is the CPU kernel's, in its order and without contraction (precise), so the two agree
// bit for bit where sqrt and division are correctly rounded.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) buffer W { uint w[]; };
layout(std430, binding = 1) readonly buffer G { uint g[]; };
layout(std430, binding = 2) buffer M { uint m[]; };
layout(std430, binding = 3) buffer V { uint v[]; };
layout(std430, binding = 4) readonly buffer H { uint hp[]; };

layout(push_constant) uniform PC {
  uint w_off, g_off, m_off, v_off;
  uint hp_off, n, mode;
} p;

float hpv(uint i) { return F32(hp, p.hp_off + i * 4u); }

void main() {
  const uint idx = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  if (idx >= p.n) return;
  const uint wb = p.w_off + idx * 4u;
  const float gi = F32(g, p.g_off + idx * 4u);
  const float alpha = hpv(0u);
  if (p.mode == 1u) {  // SGD: w = w (1 - alpha wd) - alpha g
    precise const float keep = 1.0 - alpha * hpv(1u);
    precise const float r = F32(w, wb) * keep - alpha * gi;
    STORE_F32(w, wb, r);
    return;
  }
  const float beta1 = hpv(1u), beta2 = hpv(2u), eps = hpv(3u), wd = hpv(4u), beta1h = hpv(5u), beta2h = hpv(6u);
  precise const float keep = 1.0 - alpha * wd;
  const uint mb = p.m_off + idx * 4u, vb = p.v_off + idx * 4u;
  precise const float mi = F32(m, mb) * beta1 + gi * (1.0 - beta1);
  precise const float vi = F32(v, vb) * beta2 + gi * gi * (1.0 - beta2);
  STORE_F32(m, mb, mi);
  STORE_F32(v, vb, vi);
  precise const float r = F32(w, wb) * keep - alpha * (mi * beta1h) / (sqrt(vi * beta2h) + eps);
  STORE_F32(w, wb, r);
}
