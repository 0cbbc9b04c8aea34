// Weight decoding for MUL_MAT / MUL_MAT_ID / GET_ROWS: TYPE_* (one -D per shader variant) picks
// BLOCK_SIZE (elements), BLOCK_BYTES and DEQUANT(buf, blk, i), element i of the block at byte
// `blk` as f32. Layouts are lib/core/include/loom/core/quants.h's, read byte by byte (U8) or by
// 16-bit halves (U16/F16) out of uint words, so no 8/16-bit storage feature is needed.
// A shader includes common.glsl first and writes DEFINE_DEQUANT(buf) once per weight buffer.

// Element i of 32 as a 4-bit level: i < 16 in the low nibble of byte qs + i, else the high
// nibble of byte qs + i - 16.
#define NIB4(buf, qs, i) ((U8(buf, (qs) + ((i) & 15u)) >> (((i) >> 4) * 4u)) & 15u)
// Bit 4 of element i (of 32) of the 5-bit types: bit i of the 4 bytes at qh.
#define HBIT5(buf, qh, i) (((U8(buf, (qh) + ((i) >> 3)) >> ((i) & 7u)) & 1u) << 4)

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
#elif defined(TYPE_Q8_0)  // d f16 | qs int8[32]
#define BLOCK_SIZE 32u
#define BLOCK_BYTES 34u
#define DEQUANT(buf, blk, i) (F16(buf, blk) * float(I8(buf, (blk) + 2u + (i))))
#elif defined(TYPE_Q4_0)  // d f16 | qs[16]: d (q - 8)
#define BLOCK_SIZE 32u
#define BLOCK_BYTES 18u
#define DEQUANT(buf, blk, i) (F16(buf, blk) * float(int(NIB4(buf, (blk) + 2u, i)) - 8))
#elif defined(TYPE_Q4_1)  // d f16 | m f16 | qs[16]: d q + m
#define BLOCK_SIZE 32u
#define BLOCK_BYTES 20u
#define DEQUANT(buf, blk, i) (float(NIB4(buf, (blk) + 4u, i)) * F16(buf, blk) + F16(buf, (blk) + 2u))
#elif defined(TYPE_Q5_0)  // d f16 | qh[4] | qs[16]: d (q - 16)
#define BLOCK_SIZE 32u
#define BLOCK_BYTES 22u
#define DEQUANT(buf, blk, i) \
  (float(int(NIB4(buf, (blk) + 6u, i) | HBIT5(buf, (blk) + 2u, i)) - 16) * F16(buf, blk))
#elif defined(TYPE_Q5_1)  // d f16 | m f16 | qh[4] | qs[16]: d q + m
#define BLOCK_SIZE 32u
#define BLOCK_BYTES 24u
#define DEQUANT(buf, blk, i) \
  (float(NIB4(buf, (blk) + 8u, i) | HBIT5(buf, (blk) + 4u, i)) * F16(buf, blk) + F16(buf, (blk) + 2u))
#elif defined(TYPE_IQ4_NL)  // d f16 | qs[16]: d grid[q]
#define BLOCK_SIZE 32u
#define BLOCK_BYTES 18u
#define DEQUANT(buf, blk, i) (F16(buf, blk) * float(k_iq4nl_grid[NIB4(buf, (blk) + 2u, i)]))
#elif defined(TYPE_MXFP4)  // e (E8M0) | qs[16]: 2^(e - 128) * (2 E2M1[q])
#define BLOCK_SIZE 32u
#define BLOCK_BYTES 17u
#define DEQUANT(buf, blk, i) (float(k_mxfp4_grid[NIB4(buf, (blk) + 1u, i)]) * e8m0_half(U8(buf, blk)))
#elif defined(TYPE_Q2_K)
#define BLOCK_SIZE 256u
#define BLOCK_BYTES 84u
#define DEQUANT(buf, blk, i) dequant_q2_k_##buf(blk, i)
#elif defined(TYPE_Q3_K)
#define BLOCK_SIZE 256u
#define BLOCK_BYTES 110u
#define DEQUANT(buf, blk, i) dequant_q3_k_##buf(blk, i)
#elif defined(TYPE_Q4_K)
#define BLOCK_SIZE 256u
#define BLOCK_BYTES 144u
#define DEQUANT(buf, blk, i) dequant_q4_k_##buf(blk, i)
#elif defined(TYPE_Q5_K)
#define BLOCK_SIZE 256u
#define BLOCK_BYTES 176u
#define DEQUANT(buf, blk, i) dequant_q5_k_##buf(blk, i)
#elif defined(TYPE_Q6_K)
#define BLOCK_SIZE 256u
#define BLOCK_BYTES 210u
#define DEQUANT(buf, blk, i) dequant_q6_k_##buf(blk, i)
#elif defined(TYPE_IQ4_XS)
#define BLOCK_SIZE 256u
#define BLOCK_BYTES 136u
#define DEQUANT(buf, blk, i) dequant_iq4_xs_##buf(blk, i)
#elif defined(TYPE_IQ2_XXS)
#define BLOCK_SIZE 256u
#define BLOCK_BYTES 66u
#define DEQUANT(buf, blk, i) dequant_iq2_xxs_##buf(blk, i)
#elif defined(TYPE_IQ2_XS)
#define BLOCK_SIZE 256u
#define BLOCK_BYTES 74u
#define DEQUANT(buf, blk, i) dequant_iq2_xs_##buf(blk, i)
#elif defined(TYPE_IQ2_S)
#define BLOCK_SIZE 256u
#define BLOCK_BYTES 82u
#define DEQUANT(buf, blk, i) dequant_iq2_s_##buf(blk, i)
#elif defined(TYPE_IQ3_XXS)
#define BLOCK_SIZE 256u
#define BLOCK_BYTES 98u
#define DEQUANT(buf, blk, i) dequant_iq3_xxs_##buf(blk, i)
#elif defined(TYPE_IQ3_S)
#define BLOCK_SIZE 256u
#define BLOCK_BYTES 110u
#define DEQUANT(buf, blk, i) dequant_iq3_s_##buf(blk, i)
#elif defined(TYPE_IQ1_S)
#define BLOCK_SIZE 256u
#define BLOCK_BYTES 50u
#define DEQUANT(buf, blk, i) dequant_iq1_s_##buf(blk, i)
#elif defined(TYPE_IQ1_M)
#define BLOCK_SIZE 256u
#define BLOCK_BYTES 56u
#define DEQUANT(buf, blk, i) dequant_iq1_m_##buf(blk, i)
#endif
#include "iq.glsl"

#if defined(TYPE_IQ4_NL) || defined(TYPE_IQ4_XS)
const int k_iq4nl_grid[16] = int[16](-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113);
#endif
#if defined(TYPE_MXFP4)
const int k_mxfp4_grid[16] = int[16](0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
// 2^(e - 128), exact (e = 0, 1 are subnormal).
float e8m0_half(uint e) { return uintBitsToFloat(e < 2u ? (0x00200000u << e) : ((e - 1u) << 23)); }
#endif

// Q2_K: scales[16] | qs[64] | d f16 | dmin f16; 16 sub-blocks of 16, x = d (sc & 15) q - dmin (sc >> 4),
// q = bits 2k of qs[32h + l] (h = i / 128, k = (i % 128) / 32, l = i % 32).
#define DEFINE_Q2_K(buf)                                                                        \
  float dequant_q2_k_##buf(uint blk, uint i) {                                                  \
    const uint h = i >> 7, k = (i & 127u) >> 5, l = i & 31u;                                    \
    const uint q = (U8(buf, blk + 16u + 32u * h + l) >> (2u * k)) & 3u;                         \
    const uint sc = U8(buf, blk + (i >> 4));                                                    \
    return F16(buf, blk + 80u) * float(sc & 15u) * float(q) - F16(buf, blk + 82u) * float(sc >> 4); \
  }

// Q3_K: hmask[32] | qs[64] | scales[12] | d f16; x = d (s - 32)(q - 4), q = 2 low bits as Q2_K's
// | bit (i / 32) of hmask[i % 32] << 2; sub-block j = i / 16's 6-bit s: low 4 bits in nibble j / 8
// of scales[j % 8], high 2 at bit 2 (j / 4) of scales[8 + j % 4].
#define DEFINE_Q3_K(buf)                                                                        \
  float dequant_q3_k_##buf(uint blk, uint i) {                                                  \
    const uint h = i >> 7, k = (i & 127u) >> 5, l = i & 31u, j = i >> 4;                        \
    const uint lo2 = (U8(buf, blk + 32u + 32u * h + l) >> (2u * k)) & 3u;                       \
    const uint q = lo2 | (((U8(buf, blk + l) >> (i >> 5)) & 1u) << 2);                          \
    const uint s = ((U8(buf, blk + 96u + (j & 7u)) >> (4u * (j >> 3))) & 15u) |                 \
                   (((U8(buf, blk + 104u + (j & 3u)) >> (2u * (j >> 2))) & 3u) << 4);           \
    return F16(buf, blk + 108u) * float(int(s) - 32) * float(int(q) - 4);                       \
  }

// Q4_K / Q5_K: eight 6-bit (scale, min) pairs, one per sub-block j of 32, packed in the 12 bytes
// at sb (q4_k_scale_min in quants.h).
#define DEFINE_SCALE_MIN_K(buf)                                                                 \
  uvec2 scale_min_k_##buf(uint sb, uint j) {                                                    \
    if (j < 4u) return uvec2(U8(buf, sb + j) & 63u, U8(buf, sb + j + 4u) & 63u);                \
    return uvec2((U8(buf, sb + j + 4u) & 15u) | ((U8(buf, sb + j - 4u) >> 6) << 4),             \
                 (U8(buf, sb + j + 4u) >> 4) | ((U8(buf, sb + j) >> 6) << 4));                  \
  }

// Q4_K: d f16 | dmin f16 | scales[12] | qs[128]; x = d sc q - dmin m, q the nibble (j odd: high)
// of qs[32 (j / 2) + l], j = i / 32, l = i % 32.
#define DEFINE_Q4_K(buf)                                                                        \
  float dequant_q4_k_##buf(uint blk, uint i) {                                                  \
    const uint j = i >> 5, l = i & 31u;                                                         \
    const uvec2 sm = scale_min_k_##buf(blk + 4u, j);                                            \
    const uint q = (U8(buf, blk + 16u + 32u * (j >> 1) + l) >> ((j & 1u) * 4u)) & 15u;          \
    return F16(buf, blk) * float(sm.x) * float(q) - F16(buf, blk + 2u) * float(sm.y);           \
  }

// Q5_K: d f16 | dmin f16 | scales[12] | qh[32] | qs[128]; as Q4_K with bit 4 of q at bit j of qh[l].
#define DEFINE_Q5_K(buf)                                                                        \
  float dequant_q5_k_##buf(uint blk, uint i) {                                                  \
    const uint j = i >> 5, l = i & 31u;                                                         \
    const uvec2 sm = scale_min_k_##buf(blk + 4u, j);                                            \
    const uint q = ((U8(buf, blk + 48u + 32u * (j >> 1) + l) >> ((j & 1u) * 4u)) & 15u) |       \
                   (((U8(buf, blk + 16u + l) >> j) & 1u) << 4);                                 \
    return F16(buf, blk) * float(sm.x) * float(q) - F16(buf, blk + 2u) * float(sm.y);           \
  }

// Q6_K: ql[128] | qh[64] | scales int8[16] | d f16; 16 sub-blocks of 16, 6-bit q split into 4
// low bits (ql) and 2 high bits (qh).
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

// IQ4_XS: d f16 | scales_h u16 | scales_l[4] | qs[128]; x = d (ls - 32) grid[q] per sub-block j
// of 32: ls's low 4 bits in nibble j % 2 of scales_l[j / 2], high 2 at bit 2j of scales_h; the
// levels as IQ4_NL's at qs + 16j.
#define DEFINE_IQ4_XS(buf)                                                                      \
  float dequant_iq4_xs_##buf(uint blk, uint i) {                                                \
    const uint j = i >> 5, l = i & 31u;                                                         \
    const uint ls = ((U8(buf, blk + 4u + (j >> 1)) >> (4u * (j & 1u))) & 15u) |                 \
                    (((U16(buf, blk + 2u) >> (2u * j)) & 3u) << 4);                             \
    const float dl = F16(buf, blk) * float(int(ls) - 32);                                      \
    return dl * float(k_iq4nl_grid[NIB4(buf, blk + 8u + 16u * j, l)]);                          \
  }

#if defined(TYPE_Q2_K)
#define DEFINE_DEQUANT(buf) DEFINE_Q2_K(buf)
#elif defined(TYPE_Q3_K)
#define DEFINE_DEQUANT(buf) DEFINE_Q3_K(buf)
#elif defined(TYPE_Q4_K)
#define DEFINE_DEQUANT(buf) DEFINE_SCALE_MIN_K(buf) DEFINE_Q4_K(buf)
#elif defined(TYPE_Q5_K)
#define DEFINE_DEQUANT(buf) DEFINE_SCALE_MIN_K(buf) DEFINE_Q5_K(buf)
#elif defined(TYPE_Q6_K)
#define DEFINE_DEQUANT(buf) DEFINE_Q6_K(buf)
#elif defined(TYPE_IQ4_XS)
#define DEFINE_DEQUANT(buf) DEFINE_IQ4_XS(buf)
#elif defined(TYPE_IQ2_XXS)
#define DEFINE_DEQUANT(buf) DEFINE_IQ2_XXS(buf)
#elif defined(TYPE_IQ2_XS)
#define DEFINE_DEQUANT(buf) DEFINE_IQ2_XS(buf)
#elif defined(TYPE_IQ2_S)
#define DEFINE_DEQUANT(buf) DEFINE_IQ2_S(buf)
#elif defined(TYPE_IQ3_XXS)
#define DEFINE_DEQUANT(buf) DEFINE_IQ3_XXS(buf)
#elif defined(TYPE_IQ3_S)
#define DEFINE_DEQUANT(buf) DEFINE_IQ3_S(buf)
#elif defined(TYPE_IQ1_S)
#define DEFINE_DEQUANT(buf) DEFINE_IQ1_S(buf)
#elif defined(TYPE_IQ1_M)
#define DEFINE_DEQUANT(buf) DEFINE_IQ1_M(buf)
#else
#define DEFINE_DEQUANT(buf)
#endif
