#version 450
// Element-wise ops, one invocation per element of the result (a's shape): binary ops with b
// broadcast over a, SWIGLU, SILU_BACK (a the gradient, b x), REPEAT (b tiled over the result, a not
// read), and the unary/scalar ops. Sources F32/F16/BF16 through strides;
// the result is F32. The op code matches vk_ops.h's EwOp.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(std430, binding = 0) readonly buffer A { uint a[]; };
layout(std430, binding = 1) readonly buffer B { uint b[]; };
layout(std430, binding = 2) writeonly buffer D { uint d[]; };

layout(push_constant) uniform PC {
  uint a_off, b_off, d_off, op;
  uint ne0, ne1, ne2, ne3;
  uint a_nb0, a_nb1, a_nb2, a_nb3;
  uint b_ne0, b_ne1, b_ne2, b_ne3;
  uint b_nb0, b_nb1, b_nb2, b_nb3;
  uint d_nb0, d_nb1, d_nb2, d_nb3;
  uint types;  // a type | b type << 4 (0 f32, 1 f16, 2 bf16)
  float p0, p1;
} p;

float load_a(uint byte) {
  const uint t = p.types & 15u;
  return t == 0u ? F32(a, byte) : t == 1u ? F16(a, byte) : BF16(a, byte);
}
float load_b(uint byte) {
  const uint t = p.types >> 4;
  return t == 0u ? F32(b, byte) : t == 1u ? F16(b, byte) : BF16(b, byte);
}

float silu(float x) { return x / (1.0 + exp(-x)); }

void main() {
  const uint idx = gl_GlobalInvocationID.x + gl_GlobalInvocationID.y * gl_NumWorkGroups.x * gl_WorkGroupSize.x;
  const uint n = p.ne0 * p.ne1 * p.ne2 * p.ne3;
  if (idx >= n) return;
  const uint i0 = idx % p.ne0, i1 = (idx / p.ne0) % p.ne1, i2 = (idx / (p.ne0 * p.ne1)) % p.ne2,
             i3 = idx / (p.ne0 * p.ne1 * p.ne2);
  const bool tile = p.op == 16u;
  const float x = tile ? 0.0 : load_a(p.a_off + i0 * p.a_nb0 + i1 * p.a_nb1 + i2 * p.a_nb2 + i3 * p.a_nb3);
  float y = 0.0;
  if (p.op < 5u || p.op == 15u || tile) {
    const float v = load_b(p.b_off + (i0 % p.b_ne0) * p.b_nb0 + (i1 % p.b_ne1) * p.b_nb1 + (i2 % p.b_ne2) * p.b_nb2 +
                           (i3 % p.b_ne3) * p.b_nb3);
    switch (p.op) {
      case 0u: y = x + v; break;
      case 1u: y = x - v; break;
      case 2u: y = x * v; break;
      case 3u: y = x / v; break;
      case 4u: y = silu(x) * v; break;  // SWIGLU
      case 16u: y = v; break;           // REPEAT
      case 15u: {                       // SILU_BACK: grad * s * (1 + x (1 - s)), s = sigmoid(x)
        const float s = 1.0 / (1.0 + exp(-v));
        y = x * s * (1.0 + v * (1.0 - s));
        break;
      }
    }
  } else {
    switch (p.op) {
      case 5u: y = x * p.p0 + p.p1; break;  // SCALE
      case 6u: y = clamp(x, p.p0, p.p1); break;
      case 7u: y = silu(x); break;
      case 8u: {  // GELU, tanh approximation
        const float t = 0.7978845608028654 * (x + 0.044715 * x * x * x);
        y = 0.5 * x * (1.0 + tanh(clamp(t, -15.0, 15.0)));
        break;
      }
      case 9u: y = 1.0 / (1.0 + exp(-x)); break;
      case 10u: y = max(x, 0.0) + log(1.0 + exp(-abs(x))); break;  // SOFTPLUS
      case 11u: y = exp(x); break;
      case 12u: y = log(x); break;
      case 13u: y = x * x; break;
      case 14u: y = sqrt(x); break;
    }
  }
  STORE_F32(d, p.d_off + i0 * p.d_nb0 + i1 * p.d_nb1 + i2 * p.d_nb2 + i3 * p.d_nb3, y);
}
