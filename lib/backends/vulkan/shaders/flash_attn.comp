#version 450
// FLASH_ATTN_EXT: one workgroup per (query row, head, sequence); keys in tiles of 64, one per
// invocation for the score, then an online softmax: each invocation keeps up to 4 output dims
// (Dv <= 256), rescaled when the running maximum grows. K/V F32/F16/BF16 (kv_types), mask F16/F32.
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Q { uint q[]; };
layout(std430, binding = 1) readonly buffer K { uint k[]; };
layout(std430, binding = 2) readonly buffer V { uint v[]; };
layout(std430, binding = 3) readonly buffer M { uint mk[]; };
layout(std430, binding = 4) writeonly buffer D { uint d[]; };

layout(push_constant) uniform PC {
  uint q_off, k_off, v_off, m_off;
  uint d_off, D, Dv, n_q;
  uint n_kv, n_head, n_head_kv, kv_types;  // k type | v type << 4; mask_type << 8 (0 f32, 1 f16, 2 none)
  uint q_nb1, q_nb2, q_nb3, k_nb1;
  uint k_nb2, k_nb3, v_nb1, v_nb2;
  uint v_nb3, m_nb1, d_nb1, d_nb2;
  uint d_nb3;
  float scale, max_bias, softcap;
} p;

shared float sc[64];
shared float qs[256];

float load_kv(uint t, bool is_k, uint byte) {
  if (t == 0u) return is_k ? F32(k, byte) : F32(v, byte);
  if (t == 1u) return is_k ? F16(k, byte) : F16(v, byte);
  return is_k ? BF16(k, byte) : BF16(v, byte);
}

float alibi_slope(uint h) {
  if (p.max_bias <= 0.0) return 1.0;
  const uint n2 = 1u << findMSB(p.n_head);
  const float m0 = pow(2.0, -p.max_bias / float(n2)), m1 = pow(2.0, -p.max_bias / 2.0 / float(n2));
  return h < n2 ? pow(m0, float(h + 1u)) : pow(m1, float(2u * (h - n2) + 1u));
}

void main() {
  const uint iq = gl_WorkGroupID.x, h = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
  const uint t = gl_LocalInvocationID.x;
  const uint hk = h / (p.n_head / p.n_head_kv);
  const uint kt = p.kv_types & 15u, vt = (p.kv_types >> 4) & 15u, mt = p.kv_types >> 8;
  const uint kes = kt == 0u ? 4u : 2u, ves = vt == 0u ? 4u : 2u;
  const uint qb = p.q_off + iq * p.q_nb1 + h * p.q_nb2 + b * p.q_nb3;
  for (uint i = t; i < p.D; i += 64u) qs[i] = F32(q, qb + i * 4u);
  const float slope = alibi_slope(h);
  float acc[4] = float[4](0.0, 0.0, 0.0, 0.0);
  float run_max = -1.0 / 0.0, run_sum = 0.0;
  barrier();
  for (uint j0 = 0u; j0 < p.n_kv; j0 += 64u) {
    const uint j = j0 + t;
    float s = -1.0 / 0.0;
    if (j < p.n_kv) {
      const uint kb = p.k_off + j * p.k_nb1 + hk * p.k_nb2 + b * p.k_nb3;
      float dot = 0.0;
      for (uint i = 0u; i < p.D; ++i) dot += qs[i] * load_kv(kt, true, kb + i * kes);
      s = dot * p.scale;
      if (p.softcap > 0.0) s = p.softcap * tanh(s / p.softcap);
      if (mt == 0u) s += slope * F32(mk, p.m_off + iq * p.m_nb1 + j * 4u);
      if (mt == 1u) s += slope * F16(mk, p.m_off + iq * p.m_nb1 + j * 2u);
    }
    sc[t] = s;
    barrier();
    float tile_max = -1.0 / 0.0;
    const uint n = min(64u, p.n_kv - j0);
    for (uint i = 0u; i < n; ++i) tile_max = max(tile_max, sc[i]);
    const float new_max = max(run_max, tile_max);
    if (new_max != -1.0 / 0.0) {
      const float corr = run_max == -1.0 / 0.0 ? 0.0 : exp(run_max - new_max);
      run_sum *= corr;
      [[unroll]] for (uint r = 0u; r < 4u; ++r) acc[r] *= corr;
      for (uint i = 0u; i < n; ++i) {
        const float w = sc[i] == -1.0 / 0.0 ? 0.0 : exp(sc[i] - new_max);
        run_sum += w;
        if (w == 0.0) continue;
        const uint vb = p.v_off + (j0 + i) * p.v_nb1 + hk * p.v_nb2 + b * p.v_nb3;
        [[unroll]] for (uint r = 0u; r < 4u; ++r) {
          const uint dd = t + 64u * r;
          if (dd < p.Dv) acc[r] += w * load_kv(vt, false, vb + dd * ves);
        }
      }
      run_max = new_max;
    }
    barrier();
  }
  const float inv = run_sum > 0.0 ? 1.0 / run_sum : 0.0;
  const uint db = p.d_off + h * p.d_nb1 + iq * p.d_nb2 + b * p.d_nb3;
  [[unroll]] for (uint r = 0u; r < 4u; ++r) {
    const uint dd = t + 64u * r;
    if (dd < p.Dv) STORE_F32(d, db + dd * 4u, acc[r] * inv);
  }
}
