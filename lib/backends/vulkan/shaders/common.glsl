// Shared by every loom compute shader: byte-addressed loads and stores on storage buffers bound
// as uint arrays (every binding starts at a 4-byte-aligned offset; tensors sit anywhere inside),
// so one buffer declaration serves every element type.
#extension GL_EXT_control_flow_attributes : enable

#define U8(buf, byte) ((buf[(byte) >> 2] >> (((byte) & 3u) * 8u)) & 0xFFu)
#define I8(buf, byte) (int(U8(buf, byte) << 24) >> 24)
#define U16(buf, byte) ((buf[(byte) >> 2] >> (((byte) & 2u) * 8u)) & 0xFFFFu)
#define F32(buf, byte) uintBitsToFloat(buf[(byte) >> 2])
#define F16(buf, byte) unpackHalf2x16(U16(buf, byte)).x
#define BF16(buf, byte) uintBitsToFloat(U16(buf, byte) << 16)
#define I32(buf, byte) int(buf[(byte) >> 2])

// Stores of 16-bit values: two threads may write the two halves of one word, so both halves
// are updated with atomics on disjoint bits.
#define STORE_U16(buf, byte, v)                                 \
  {                                                             \
    const uint sh_ = ((byte) & 2u) * 8u;                        \
    atomicAnd(buf[(byte) >> 2], ~(0xFFFFu << sh_));             \
    atomicOr(buf[(byte) >> 2], ((v) & 0xFFFFu) << sh_);         \
  }
#define STORE_F32(buf, byte, v) buf[(byte) >> 2] = floatBitsToUint(v)

uint f32_to_bf16(float v) {
  uint u = floatBitsToUint(v);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (u >> 16) | 64u;  // NaN stays NaN
  return (u + 0x7FFFu + ((u >> 16) & 1u)) >> 16;                // round to nearest even
}
uint f32_to_f16(float v) { return packHalf2x16(vec2(v, 0.0)) & 0xFFFFu; }
