#version 450
// The activations (b) of MUL_MAT / MUL_MAT_ID rounded as the CPU's kernels round them
// (loom::cpu::matmul_activations), written as contiguous f32 columns the mat-mul reads instead of
// b: block 32 / 256 - int8 blocks, d = amax / 127, q = x * (127 / amax) rounded to nearest even,
// stored as d * q; block 1 - bf16, nearest even; block 0 - unrounded (f32 copy of F16/BF16 b).
// One invocation per block of a column (per element for blocks 0 and 1).
#include "common.glsl"

layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer B { uint b[]; };
layout(std430, binding = 1) writeonly buffer S { uint s[]; };

layout(push_constant) uniform PC {
  uint b_off, s_off, K, ne1, ne2, nblocks;  // nblocks: blocks (elements) of every column together
  uint b_nb0, b_nb1, b_nb2, b_nb3;
  uint b_type, block;
} p;

float load_b(uint byte) {
  if (p.b_type == 0u) return F32(b, byte);
  if (p.b_type == 1u) return F16(b, byte);
  return BF16(b, byte);
}

void main() {
  const uint g = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * 64u;
  if (g >= p.nblocks) return;
  const uint n = max(p.block, 1u);
  const uint per_col = p.K / n;
  const uint col = g / per_col, k0 = (g % per_col) * n;
  const uint i1 = col % p.ne1, i2 = (col / p.ne1) % p.ne2, i3 = col / (p.ne1 * p.ne2);
  const uint src = p.b_off + i1 * p.b_nb1 + i2 * p.b_nb2 + i3 * p.b_nb3 + k0 * p.b_nb0;
  const uint dst = p.s_off + (col * p.K + k0) * 4u;
  if (p.block <= 1u) {
    const float x = load_b(src);
    STORE_F32(s, dst, p.block == 0u ? x : uintBitsToFloat(f32_to_bf16(x) << 16));
    return;
  }
  float amax = 0.0;
  for (uint j = 0u; j < n; ++j) amax = max(amax, abs(load_b(src + j * p.b_nb0)));
  // precise: the same IEEE operations as the CPU's quantizer, nothing fused or reassociated
  precise const float d = amax / 127.0;
  precise const float id = amax > 0.0 ? 127.0 / amax : 0.0;
  for (uint j = 0u; j < n; ++j) {
    precise const float q = roundEven(load_b(src + j * p.b_nb0) * id);
    precise const float v = d * q;
    STORE_F32(s, dst + j * 4u, v);
  }
}
