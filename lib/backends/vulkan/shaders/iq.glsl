// The i-quants' decoders (quants_iq.h's layouts): element i of a 256-value block at byte `blk` as
// (unit * (2 s + 1)) * v, rounded in the CPU's order. The codebooks are core's lists
// (lib/core/src/iq_codes), each point's coordinates as 2- or 3-bit level numbers.

#if defined(TYPE_IQ2_XXS) || defined(TYPE_IQ2_XS) || defined(TYPE_IQ2_S) || defined(TYPE_IQ3_XXS) || \
    defined(TYPE_IQ3_S) || defined(TYPE_IQ1_S) || defined(TYPE_IQ1_M)
#define TYPE_IQ
#endif

// Each type's codebook: its place in the device's codebook buffer (bound at 6 = kCodesBinding;
// vk_device.cpp's kIqCodes lists them in this order) and its length.
#if defined(TYPE_IQ2_XXS)
#define IQ_CODES_AT 0
#define IQ_CODES_N 256
#elif defined(TYPE_IQ2_XS)
#define IQ_CODES_AT 256
#define IQ_CODES_N 512
#elif defined(TYPE_IQ2_S)
#define IQ_CODES_AT 768
#define IQ_CODES_N 1024
#elif defined(TYPE_IQ3_XXS)
#define IQ_CODES_AT 1792
#define IQ_CODES_N 256
#elif defined(TYPE_IQ3_S)
#define IQ_CODES_AT 2048
#define IQ_CODES_N 512
#elif defined(TYPE_IQ1_S) || defined(TYPE_IQ1_M)
#define IQ_CODES_AT 2560
#define IQ_CODES_N 2048
#endif

// The decoders read the codebook from shared memory, which each workgroup fills first from the
// buffer (IQ_LOAD_CODES at the top of main). Constant arrays in the shader cost lavapipe ~60x more
// to index at run time and minutes to compile (quadratic in their length).
#ifdef TYPE_IQ
layout(std430, binding = 6) readonly buffer IqCodes { uint iq_codes[]; };
shared int s_iq_codes[IQ_CODES_N];
#define IQ_LOAD_CODES()                                                                         \
  for (uint i_ = gl_LocalInvocationIndex; i_ < uint(IQ_CODES_N);                               \
       i_ += gl_WorkGroupSize.x * gl_WorkGroupSize.y * gl_WorkGroupSize.z)                      \
    s_iq_codes[i_] = int(iq_codes[IQ_CODES_AT + i_]);                                           \
  barrier();
#else
#define IQ_LOAD_CODES()
#endif

// Coordinate c of point `code`: IQ2's magnitudes 8, 25, 43; IQ3_XXS's 4, 12, ..., 52, 62; IQ3_S's
// 1, 3, ..., 15; IQ1's -1, 0, 1.
const int k_iq2_levels[3] = int[3](8, 25, 43);
const int k_iq3xxs_levels[8] = int[8](4, 12, 20, 28, 36, 44, 52, 62);
int iq2_level(uint code, uint c) { return k_iq2_levels[(code >> (2u * c)) & 3u]; }
int iq3xxs_level(uint code, uint c) { return k_iq3xxs_levels[(code >> (3u * c)) & 7u]; }
int iq3s_level(uint code, uint c) { return int((code >> (3u * c)) & 7u) * 2 + 1; }
int iq1_level(uint code, uint c) { return int((code >> (2u * c)) & 3u) - 1; }
// Bit j of 7 stored sign bits with the eighth making the count even.
bool iq_neg7(uint s7, uint j) { return j < 7u ? ((s7 >> j) & 1u) != 0u : (bitCount(s7) & 1) != 0; }
float iq_value(float unit, uint s, int v) { return (unit * float(2u * s + 1u)) * float(v); }

// IQ2_XXS: d | per 32: 4 index bytes, then a u32 of 4 x 7 sign bits and the 4-bit scale
#define DEFINE_IQ2_XXS(buf)                                                                     \
  float dequant_iq2_xxs_##buf(uint blk, uint i) {                                               \
    const uint ib = i >> 5, l = (i >> 3) & 3u, j = i & 7u, base = blk + 2u + 8u * ib;           \
    const uint aux = U16(buf, base + 4u) | (U16(buf, base + 6u) << 16);                         \
    const int m = iq2_level(uint(s_iq_codes[U8(buf, base + l)]), j);                            \
    return iq_value(F16(buf, blk) * 0.125, aux >> 28, iq_neg7((aux >> (7u * l)) & 127u, j) ? -m : m); \
  }
// IQ2_XS: d | per 8 a u16 of 9-bit index and 7 sign bits | a 4-bit scale per 16
#define DEFINE_IQ2_XS(buf)                                                                      \
  float dequant_iq2_xs_##buf(uint blk, uint i) {                                                \
    const uint q = U16(buf, blk + 2u + 2u * (i >> 3));                                          \
    const int m = iq2_level(uint(s_iq_codes[q & 511u]), i & 7u);                                \
    const uint s = (U8(buf, blk + 66u + (i >> 5)) >> (4u * ((i >> 4) & 1u))) & 15u;             \
    return iq_value(F16(buf, blk) * 0.125, s, iq_neg7(q >> 9, i & 7u) ? -m : m);                \
  }
// IQ2_S: d | index bytes[32] | sign bytes[32] | qh[8] (2 index bits per 8) | a 4-bit scale per 16
#define DEFINE_IQ2_S(buf)                                                                       \
  float dequant_iq2_s_##buf(uint blk, uint i) {                                                 \
    const uint ib = i >> 5, l = (i >> 3) & 3u, j = i & 7u;                                      \
    const uint idx = U8(buf, blk + 2u + 4u * ib + l) | (((U8(buf, blk + 66u + ib) >> (2u * l)) & 3u) << 8); \
    const int m = iq2_level(uint(s_iq_codes[idx]), j);                                          \
    const bool neg = ((U8(buf, blk + 34u + 4u * ib + l) >> j) & 1u) != 0u;                      \
    const uint s = (U8(buf, blk + 74u + ib) >> (4u * ((i >> 4) & 1u))) & 15u;                   \
    return iq_value(F16(buf, blk) * 0.125, s, neg ? -m : m);                                    \
  }
// IQ3_XXS: d | index bytes[64] (a point per 4) | per 32 a u32 of 4 x 7 sign bits and the scale
#define DEFINE_IQ3_XXS(buf)                                                                     \
  float dequant_iq3_xxs_##buf(uint blk, uint i) {                                               \
    const uint ib = i >> 5, l = (i >> 3) & 3u, base = blk + 66u + 4u * ib;                      \
    const uint aux = U16(buf, base) | (U16(buf, base + 2u) << 16);                              \
    const int m = iq3xxs_level(uint(s_iq_codes[U8(buf, blk + 2u + (i >> 2))]), i & 3u);         \
    return iq_value(F16(buf, blk) * 0.25, aux >> 28, iq_neg7((aux >> (7u * l)) & 127u, i & 7u) ? -m : m); \
  }
// IQ3_S: d | index bytes[64] | qh[8] (bit 8 of each index) | sign bytes[32] | a 4-bit scale per 32
#define DEFINE_IQ3_S(buf)                                                                       \
  float dequant_iq3_s_##buf(uint blk, uint i) {                                                 \
    const uint ib = i >> 5, k = (i & 31u) >> 2;                                                 \
    const uint idx = U8(buf, blk + 2u + (i >> 2)) | (((U8(buf, blk + 66u + ib) >> k) & 1u) << 8); \
    const int m = iq3s_level(uint(s_iq_codes[idx]), i & 3u);                                    \
    const bool neg = ((U8(buf, blk + 74u + (i >> 3)) >> (i & 7u)) & 1u) != 0u;                  \
    const uint s = (U8(buf, blk + 106u + (ib >> 1)) >> (4u * (ib & 1u))) & 15u;                 \
    return iq_value(F16(buf, blk), s, neg ? -m : m);                                            \
  }
// IQ1_S: d | index bytes[32] | per 32 a u16: 3 index bits per 8, the 3-bit scale, the shift's sign
#define DEFINE_IQ1_S(buf)                                                                       \
  float dequant_iq1_s_##buf(uint blk, uint i) {                                                 \
    const uint ib = i >> 5, l = (i >> 3) & 3u, h = U16(buf, blk + 34u + 2u * ib);               \
    const uint idx = U8(buf, blk + 2u + (i >> 3)) | (((h >> (3u * l)) & 7u) << 8);              \
    const int v = 8 * iq1_level(uint(s_iq_codes[idx]), i & 7u) + ((h & 0x8000u) != 0u ? -1 : 1); \
    return iq_value(F16(buf, blk) * 0.125, (h >> 12) & 7u, v);                                  \
  }
// IQ1_M: index bytes[32] | per 8 a nibble of 3 index bits and the shift's sign | 4 scale words:
// 3-bit scales per 16, d in their top nibbles
#define DEFINE_IQ1_M(buf)                                                                       \
  float dequant_iq1_m_##buf(uint blk, uint i) {                                                 \
    const uint ib = i >> 5, g = i >> 3;                                                         \
    const uint w0 = U16(buf, blk + 48u), w1 = U16(buf, blk + 50u), w2 = U16(buf, blk + 52u),    \
               w3 = U16(buf, blk + 54u);                                                        \
    const float d = unpackHalf2x16((w0 >> 12) | ((w1 >> 8) & 0xf0u) | ((w2 >> 4) & 0xf00u) | (w3 & 0xf000u)).x; \
    const uint w = U16(buf, blk + 48u + 2u * (ib >> 1)) >> (6u * (ib & 1u));                   \
    const uint hn = (U8(buf, blk + 32u + (g >> 1)) >> (4u * (g & 1u))) & 15u;                   \
    const uint idx = U8(buf, blk + g) | ((hn & 7u) << 8);                                       \
    const int v = 8 * iq1_level(uint(s_iq_codes[idx]), i & 7u) + ((hn & 8u) != 0u ? -1 : 1);    \
    return iq_value(d * 0.125, (w >> (3u * ((i >> 4) & 1u))) & 7u, v);                          \
  }
