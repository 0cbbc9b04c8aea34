#version 450
// The activations (b) of MUL_MAT / MUL_MAT_ID rounded as the CPU's kernels round them
// (loom::cpu::matmul_activations), written as contiguous f32 columns the mat-mul reads instead of
// b: block 256 - int8 blocks, d = amax / 127, q = x * (127 / amax) rounded to nearest even,
// stored as d * q; block 32 - the same but q = x * (1 / d) and d rounded to fp16 (GGUF's Q8_0);
// block 1 - bf16, nearest even; block 0 - unrounded (f32 copy of F16/BF16 b).
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

// a * b - c for a * b close to c (within a factor 2), from Dekker's exact product: Vulkan rounds
// * and + correctly (every operation here is precise: nothing fused or reassociated), / it
// does not (2.5 ULP; lavapipe multiplies by the reciprocal).
float residual(float a, float b, float c) {
  precise const float p = a * b;
  precise const float sa = 4097.0 * a, ah = sa - (sa - a), al = a - ah;
  precise const float sb = 4097.0 * b, bh = sb - (sb - b), bl = b - bh;
  precise const float lo = ((ah * bh - p) + ah * bl + al * bh) + al * bl;
  precise const float r = (p - c) + lo;  // p - c exact (Sterbenz)
  return r;
}

// a / b rounded to nearest as IEEE division (the CPU's) for positive normal a, b: the quotient the
// device gives, or the neighbour whose product with b is nearer to a.
float div_rn(float a, float b) {
  const float q = a / b;
  float best = q, err = abs(residual(q, b, a));
  for (int s = -1; s <= 1; s += 2) {
    const float c = uintBitsToFloat(uint(int(floatBitsToUint(q)) + s));
    const float e = abs(residual(c, b, a));
    if (e < err) {
      best = c;
      err = e;
    }
  }
  return best;
}

// x >= 0 rounded to the nearest fp16 (ties to even) and widened again, as loom::f32_to_fp16
// (not packHalf2x16, whose rounding Vulkan leaves to the driver).
float fp16_round(float x) {
  const uint u = floatBitsToUint(x);
  if (u >= 0x7f800000u) return x;                             // inf / nan
  if (u >= 0x477ff000u) return uintBitsToFloat(0x7f800000u);  // past the largest half: inf
  if (u < 0x38800000u) {                                       // a half subnormal: units of 2^-24
    precise const float q = roundEven(x * 16777216.0);
    precise const float r = q * (1.0 / 16777216.0);
    return r;
  }
  return uintBitsToFloat((u + 0x0fffu + ((u >> 13) & 1u)) & 0xffffe000u);
}

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
  // the CPU's quantizer: IEEE divisions, one rounding of each product
  const float d = amax > 0.0 ? div_rn(amax, 127.0) : 0.0;
  const float id = amax > 0.0 ? (n == 32u ? div_rn(1.0, d) : div_rn(127.0, amax)) : 0.0;
  const float dq = n == 32u ? fp16_round(d) : d;
  for (uint j = 0u; j < n; ++j) {
    precise const float q = roundEven(load_b(src + j * p.b_nb0) * id);
    precise const float v = dq * q;
    STORE_F32(s, dst + j * 4u, v);
  }
}
