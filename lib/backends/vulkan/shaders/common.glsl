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

// Dequantized element i (0 <= i < block size) of the block starting at byte `blk`; TYPE_* picks the format.
#if defined(TYPE_F32)
#define BLOCK_SIZE 1u
#define BLOCK_BYTES 4u
#define DEQUANT(buf, blk, i) F32(buf, blk)
#elif defined(TYPE_F16)
#define BLOCK_SIZE 1u
#define BLOCK_BYTES 2u
#define DEQUANT(buf, blk, i) F16(buf, blk)
#elif defined(TYPE_BF16)
#define BLOCK_SIZE 1u
#define BLOCK_BYTES 2u
#define DEQUANT(buf, blk, i) BF16(buf, blk)
#elif defined(TYPE_Q8_0)
#define BLOCK_SIZE 32u
#define BLOCK_BYTES 34u
#define DEQUANT(buf, blk, i) (F16(buf, blk) * float(I8(buf, (blk) + 2u + (i))))
#elif defined(TYPE_Q4_0)
#define BLOCK_SIZE 32u
#define BLOCK_BYTES 18u
#define DEQUANT(buf, blk, i) \
  (F16(buf, blk) * float(int((U8(buf, (blk) + 2u + ((i) & 15u)) >> (((i) >> 4) * 4u)) & 15u) - 8))
#elif defined(TYPE_Q4_K)
#define BLOCK_SIZE 256u
#define BLOCK_BYTES 144u
#define DEQUANT(buf, blk, i) dequant_q4_k_##buf(blk, i)
#elif defined(TYPE_Q6_K)
#define BLOCK_SIZE 256u
#define BLOCK_BYTES 210u
#define DEQUANT(buf, blk, i) dequant_q6_k_##buf(blk, i)
#endif

// Q4_K: 8 sub-blocks of 32 with 6-bit (scale, min) pairs packed in 12 bytes.
#define DEFINE_Q4_K(buf)                                                                        \
  float dequant_q4_k_##buf(uint blk, uint i) {                                                  \
    const uint c = i >> 6, hi = (i >> 5) & 1u, l = i & 31u, j = 2u * c + hi;                    \
    const uint sb = blk + 4u;                                                                   \
    uint sc, m;                                                                                 \
    if (j < 4u) {                                                                               \
      sc = U8(buf, sb + j) & 63u;                                                               \
      m = U8(buf, sb + j + 4u) & 63u;                                                           \
    } else {                                                                                    \
      sc = (U8(buf, sb + j + 4u) & 15u) | ((U8(buf, sb + j - 4u) >> 6) << 4);                   \
      m = (U8(buf, sb + j + 4u) >> 4) | ((U8(buf, sb + j) >> 6) << 4);                          \
    }                                                                                           \
    const uint q = (U8(buf, blk + 16u + 32u * c + l) >> (hi * 4u)) & 15u;                       \
    return F16(buf, blk) * float(sc) * float(q) - F16(buf, blk + 2u) * float(m);                \
  }

// Q6_K: 16 sub-blocks of 16, 6-bit q split into 4 low bits (ql) and 2 high bits (qh).
#define DEFINE_Q6_K(buf)                                                                        \
  float dequant_q6_k_##buf(uint blk, uint i) {                                                  \
    const uint h = i >> 7, r = i & 127u, k = r >> 5, l = r & 31u;                               \
    const uint qlb = U8(buf, blk + 64u * h + l + (k & 1u) * 32u);                               \
    const uint lo = (k >= 2u) ? (qlb >> 4) : (qlb & 15u);                                       \
    const uint hb = (U8(buf, blk + 128u + 32u * h + l) >> (2u * k)) & 3u;                       \
    const int q = int(lo | (hb << 4)) - 32;                                                     \
    const float sc = float(I8(buf, blk + 192u + 8u * h + (l >> 4) + 2u * k));                   \
    return F16(buf, blk + 208u) * sc * float(q);                                                \
  }
