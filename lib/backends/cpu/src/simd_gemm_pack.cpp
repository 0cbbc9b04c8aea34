// Panel packers of the int8 GEMM (simd_gemm.h) for the newer weight types: one repacked group block
// (cpu_repack.h: the GGUF fields, 8 rows interleaved) -> rows 8h .. 8h + 7 of its panel blocks, in
// the tile variant whose arithmetic the type's formula has:
//   plain (kQ8GroupBlockBytes, offset 128): IQ4_NL, MXFP4, IQ4_XS (table values), Q5_0 (q - 16),
//          stored as v + 128 with the block's row scale dw (IQ4_XS: d * (ls - 32) per 32 values);
//   mins (kQ8MinGroupBlockBytes): Q4_1, Q5_1 (x = d q + m: dw = d, mw = -m), Q5_K (dw = d sc,
//          mw = dmin m), the 4- or 5-bit q as they are;
//   halves (kQ8HalfGroupBlockBytes): Q3_K, w = q - 4 with d * (s - 32) per 16 values;
//   halves with mins (kQ8HalfMinGroupBlockBytes): Q2_K, w = q with d * sc and dmin * m per 16.
// The readable references first (each row's GGUF block, then the type's formula), then the
// 8-row packers, AVX2 (every level with int8 tiles has it): one 32-byte load is a quad of 8 rows.
#include <immintrin.h>

#include <cstring>

#include "cpu_repack.h"
#include "loom/core/fp16.h"
#include "simd_gemm.h"

namespace loom::cpu {

namespace {

enum class Form { plain, mins, halves, halves_mins };

// The form is the panel block's (gemm_q8_block_bytes, the one place that assigns it).
Form form_of(DType t) {
  switch (gemm_q8_block_bytes(t)) {
    case kQ8MinGroupBlockBytes:
      return Form::mins;
    case kQ8HalfGroupBlockBytes:
      return Form::halves;
    case kQ8HalfMinGroupBlockBytes:
      return Form::halves_mins;
    default:
      return Form::plain;
  }
}

// One row's 32 values of sub-block j as integers, and their scales: x = dw * v - mw (plain,
// mins), or per 16-value half h: x = dh[h] * v - mh[h] (halves, mh = 0 but for Q2_K).
struct SubBlock {
  int v[32];
  float dw = 0, mw = 0, dh[2] = {0, 0}, mh[2] = {0, 0};
};

int nibble(const uint8_t* qs, int e) { return e < 16 ? qs[e] & 15 : qs[e - 16] >> 4; }
int fifth(const uint8_t* qh, int e) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return (int)((h >> e) & 1);
}

SubBlock sub_block(DType t, const void* blk, int j) {
  SubBlock s;
  switch (t) {
    case DType::Q4_1: {
      const auto& b = *static_cast<const BlockQ4_1*>(blk);
      for (int e = 0; e < 32; ++e) s.v[e] = nibble(b.qs, e);
      s.dw = fp16_to_f32(b.d), s.mw = -fp16_to_f32(b.m);
      break;
    }
    case DType::Q5_0: {
      const auto& b = *static_cast<const BlockQ5_0*>(blk);
      for (int e = 0; e < 32; ++e) s.v[e] = (nibble(b.qs, e) | fifth(b.qh, e) << 4) - 16;
      s.dw = fp16_to_f32(b.d);
      break;
    }
    case DType::Q5_1: {
      const auto& b = *static_cast<const BlockQ5_1*>(blk);
      for (int e = 0; e < 32; ++e) s.v[e] = nibble(b.qs, e) | fifth(b.qh, e) << 4;
      s.dw = fp16_to_f32(b.d), s.mw = -fp16_to_f32(b.m);
      break;
    }
    case DType::IQ4_NL: {
      const auto& b = *static_cast<const BlockIQ4_NL*>(blk);
      for (int e = 0; e < 32; ++e) s.v[e] = kIq4nlValues[nibble(b.qs, e)];
      s.dw = fp16_to_f32(b.d);
      break;
    }
    case DType::MXFP4: {
      const auto& b = *static_cast<const BlockMXFP4*>(blk);
      for (int e = 0; e < 32; ++e) s.v[e] = kMxfp4Values[nibble(b.qs, e)];
      s.dw = e8m0_half_to_f32(b.e);
      break;
    }
    case DType::IQ4_XS: {
      const auto& b = *static_cast<const BlockIQ4_XS*>(blk);
      for (int e = 0; e < 32; ++e) s.v[e] = kIq4nlValues[nibble(b.qs + 16 * j, e)];
      s.dw = fp16_to_f32(b.d) * (float)(iq4_xs_scale(b, j) - 32);
      break;
    }
    case DType::Q5_K: {
      const auto& b = *static_cast<const BlockQ5_K*>(blk);
      for (int e = 0; e < 32; ++e) s.v[e] = ((b.qs[32 * (j / 2) + e] >> (4 * (j % 2))) & 15) | ((b.qh[e] >> j) & 1) << 4;
      const ScaleMin sm = q4_k_scale_min(b.scales, j);
      s.dw = fp16_to_f32(b.d) * (float)sm.sc, s.mw = fp16_to_f32(b.dmin) * (float)sm.m;
      break;
    }
    case DType::Q3_K: {
      const auto& b = *static_cast<const BlockQ3_K*>(blk);
      for (int e = 0; e < 32; ++e) {  // element 32j + e: half h = j / 4 of the block, quarter (j % 4)
        const int n = 32 * j + e, l = n % 128 % 32, k = n % 128 / 32;
        s.v[e] = (((b.qs[32 * (n / 128) + l] >> (2 * k)) & 3) | ((b.hmask[n % 32] >> (n / 32)) & 1) << 2) - 4;
      }
      for (int h = 0; h < 2; ++h) s.dh[h] = fp16_to_f32(b.d) * (float)(q3_k_scale(b.scales, 2 * j + h) - 32);
      break;
    }
    case DType::Q2_K: {
      const auto& b = *static_cast<const BlockQ2_K*>(blk);
      for (int e = 0; e < 32; ++e) {
        const int n = 32 * j + e;
        s.v[e] = (b.qs[32 * (n / 128) + n % 32] >> (2 * (n % 128 / 32))) & 3;
      }
      for (int h = 0; h < 2; ++h) {
        s.dh[h] = fp16_to_f32(b.d) * (float)(b.scales[2 * j + h] & 15);
        s.mh[h] = fp16_to_f32(b.dmin) * (float)(b.scales[2 * j + h] >> 4);
      }
      break;
    }
    default:
      break;
  }
  return s;
}

void pack_ref(DType t, const uint8_t* src, uint8_t* pb, int h) {
  const Form form = form_of(t);
  const size_t block = gemm_q8_block_bytes(t);
  const int per = dtype_info(t).block_size / 32;
  const size_t bytes_at = form == Form::plain ? 64 : form == Form::mins ? 128 : form == Form::halves ? 256 : 384;
  for (int i = 0; i < kRepackRows; ++i) {
    alignas(8) uint8_t blk[sizeof(BlockQ6_K)];
    unpack_blocks(t, src, i, 0, 1, blk);
    const int l = h * kRepackRows + i;  // the row's lane in the panel
    for (int j = 0; j < per; ++j) {
      uint8_t* p = pb + (size_t)j * block;
      auto* f = reinterpret_cast<float*>(p);
      const SubBlock s = sub_block(t, blk, j);
      for (int e = 0; e < 32; ++e)
        p[bytes_at + ((e / 4) * kPanelRows + l) * 4 + e % 4] = (uint8_t)(form == Form::plain ? s.v[e] + 128 : s.v[e]);
      if (form == Form::halves || form == Form::halves_mins) {
        for (int hv = 0; hv < 2; ++hv) {
          int32_t sum = 0;
          for (int e = 16 * hv; e < 16 * hv + 16; ++e) sum += s.v[e];
          f[hv * kPanelRows + l] = s.dh[hv];
          if (form == Form::halves_mins) f[64 + hv * kPanelRows + l] = s.mh[hv];
          const int32_t off = -128 * sum;
          std::memcpy(p + 32 * sizeof(float) + (size_t)(hv * kPanelRows + l) * 4, &off, 4);
        }
        continue;
      }
      f[l] = s.dw;
      if (form == Form::mins) f[kPanelRows + l] = s.mw;
    }
  }
}

template <DType T>
void pack_ref_of(const uint8_t* src, uint8_t* pb, int h) {
  pack_ref(T, src, pb, h);
}

}  // namespace

PackR8Fn pack_r8_ref_more(DType t) {
  switch (t) {
    case DType::Q4_1: return pack_ref_of<DType::Q4_1>;
    case DType::Q5_0: return pack_ref_of<DType::Q5_0>;
    case DType::Q5_1: return pack_ref_of<DType::Q5_1>;
    case DType::IQ4_NL: return pack_ref_of<DType::IQ4_NL>;
    case DType::MXFP4: return pack_ref_of<DType::MXFP4>;
    case DType::IQ4_XS: return pack_ref_of<DType::IQ4_XS>;
    case DType::Q5_K: return pack_ref_of<DType::Q5_K>;
    case DType::Q3_K: return pack_ref_of<DType::Q3_K>;
    case DType::Q2_K: return pack_ref_of<DType::Q2_K>;
    default: return nullptr;
  }
}

// ---- 8-row packers (AVX2) -----------------------------------------------------------------------

#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace {

inline __m256i load32(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
inline void store32(uint8_t* p, __m256i v) { _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v); }
inline __m256 load_d8(const uint8_t* p) {  // 8 rows' fp16 field
  return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}
// A 16-entry byte table in both lanes, for vpshufb.
inline __m256i table16(const int8_t (&t)[16], int add) {
  alignas(16) int8_t b[16];
  for (int k = 0; k < 16; ++k) b[k] = (int8_t)(t[k] + add);
  return _mm256_broadcastsi128_si256(_mm_load_si128(reinterpret_cast<const __m128i*>(b)));
}
// Row i's copy of a field of `bytes` bytes interleaved `grain` at a time (cpu_repack.h).
inline void row_field(const uint8_t* field, int bytes, int grain, int i, uint8_t* out) {
  for (int c = 0; c < bytes / grain; ++c) std::memcpy(out + c * grain, field + (c * kRepackRows + i) * grain, grain);
}

// The 8 quads (elements 4q .. 4q + 3) of one 32-value sub-block from its 4 nibble chunks at qs
// (32 bytes each: low nibbles quads 0-3, high 4-7), each quad through fn(q, nibbles).
template <class Fn>
inline void nibble_quads(const uint8_t* qs, Fn fn) {
  const __m256i low4 = _mm256_set1_epi8(15);
  for (int c = 0; c < 4; ++c) {
    const __m256i v = load32(qs + 32 * c);
    fn(c, _mm256_and_si256(v, low4));
    fn(c + 4, _mm256_and_si256(_mm256_srli_epi16(v, 4), low4));
  }
}

// Bit q of each byte of the bit-transposed qh words (Q5_0 / Q5_1: quad q's fifth bits) as 16.
inline __m256i fifth_bits(__m256i qh, int q) {
  return _mm256_slli_epi16(_mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(q)), _mm256_set1_epi8(1)), 4);
}

// IQ4_NL / MXFP4: the table values + 128 under the rows' scales.
template <DType T>
void pack_table32(const uint8_t* src, uint8_t* pb, int h) {
  float* dw = reinterpret_cast<float*>(pb) + h * kRepackRows;
  const uint8_t* qs;
  if constexpr (T == DType::MXFP4) {
    for (int i = 0; i < kRepackRows; ++i) dw[i] = e8m0_half_to_f32(src[i]);
    qs = src + r8_field(kMxfp4Fields, 1);
  } else {
    _mm256_storeu_ps(dw, load_d8(src));
    qs = src + r8_field(kIq4NlFields, 1);
  }
  const __m256i lut = table16(T == DType::MXFP4 ? kMxfp4Values : kIq4nlValues, 128);
  uint8_t* u = pb + 16 * sizeof(float) + h * 32;
  nibble_quads(qs, [&](int q, __m256i n) { store32(u + 64 * q, _mm256_shuffle_epi8(lut, n)); });
}

// Q5_0 (plain, q - 16 + 128) and Q5_1 (mins, q).
template <DType T>
void pack_q5_32(const uint8_t* src, uint8_t* pb, int h) {
  constexpr bool kMins = T == DType::Q5_1;
  float* dw = reinterpret_cast<float*>(pb) + h * kRepackRows;
  _mm256_storeu_ps(dw, load_d8(src));
  if constexpr (kMins) _mm256_storeu_ps(dw + kPanelRows, _mm256_sub_ps(_mm256_setzero_ps(), load_d8(src + 16)));
  const __m256i qh = load32(src + (kMins ? r8_field(kQ5_1Fields, 2) : r8_field(kQ5_0Fields, 1)));
  const uint8_t* qs = src + (kMins ? r8_field(kQ5_1Fields, 3) : r8_field(kQ5_0Fields, 2));
  const __m256i bias = _mm256_set1_epi8(kMins ? 0 : 112);
  uint8_t* u = pb + (kMins ? 32 : 16) * sizeof(float) + h * 32;
  nibble_quads(qs, [&](int q, __m256i n) {
    store32(u + 64 * q, _mm256_add_epi8(_mm256_or_si256(n, fifth_bits(qh, q)), bias));
  });
}

// Q4_1: mins, the nibbles.
void pack_q4_1(const uint8_t* src, uint8_t* pb, int h) {
  float* dw = reinterpret_cast<float*>(pb) + h * kRepackRows;
  _mm256_storeu_ps(dw, load_d8(src));
  _mm256_storeu_ps(dw + kPanelRows, _mm256_sub_ps(_mm256_setzero_ps(), load_d8(src + 16)));
  uint8_t* u = pb + 32 * sizeof(float) + h * 32;
  nibble_quads(src + r8_field(kQ4_1Fields, 2), [&](int q, __m256i n) { store32(u + 64 * q, n); });
}

// IQ4_XS: per sub-block the rows' d * (ls - 32), the table values + 128.
void pack_iq4_xs(const uint8_t* src, uint8_t* pb, int h) {
  const __m256 d = load_d8(src);
  alignas(32) float ls[8][kRepackRows];
  for (int i = 0; i < kRepackRows; ++i) {
    uint16_t sh;
    uint8_t sl[4];
    row_field(src + r8_field(kIq4XsFields, 1), 2, 2, i, reinterpret_cast<uint8_t*>(&sh));
    row_field(src + r8_field(kIq4XsFields, 2), 4, 4, i, sl);
    for (int j = 0; j < 8; ++j) ls[j][i] = (float)((((sl[j / 2] >> (4 * (j % 2))) & 15) | ((sh >> (2 * j)) & 3) << 4) - 32);
  }
  const __m256i lut = table16(kIq4nlValues, 128);
  const uint8_t* qs = src + r8_field(kIq4XsFields, 3);
  for (int j = 0; j < 8; ++j, pb += kQ8GroupBlockBytes) {
    _mm256_storeu_ps(reinterpret_cast<float*>(pb) + h * kRepackRows, _mm256_mul_ps(d, _mm256_load_ps(ls[j])));
    uint8_t* u = pb + 16 * sizeof(float) + h * 32;
    nibble_quads(qs + 128 * j, [&](int q, __m256i n) { store32(u + 64 * q, _mm256_shuffle_epi8(lut, n)); });
  }
}

// Q5_K: per sub-block the rows' d * sc and dmin * m, the nibbles with their fifth bits.
void pack_q5_k(const uint8_t* src, uint8_t* pb, int h) {
  const __m256 d = load_d8(src), dmin = load_d8(src + 16);
  alignas(32) float sc[8][kRepackRows], m[8][kRepackRows];
  for (int i = 0; i < kRepackRows; ++i) {
    uint8_t scales[kKScaleSize];
    row_field(src + r8_field(kQ5KFields, 2), kKScaleSize, 4, i, scales);
    for (int j = 0; j < 8; ++j) {
      const ScaleMin s = q4_k_scale_min(scales, j);
      sc[j][i] = (float)s.sc, m[j][i] = (float)s.m;
    }
  }
  const uint8_t* qh = src + r8_field(kQ5KFields, 3);
  const uint8_t* qs = src + r8_field(kQ5KFields, 4);
  const __m256i low4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
  for (int j = 0; j < 8; ++j, pb += kQ8MinGroupBlockBytes) {
    float* dw = reinterpret_cast<float*>(pb) + h * kRepackRows;
    _mm256_storeu_ps(dw, _mm256_mul_ps(d, _mm256_load_ps(sc[j])));
    _mm256_storeu_ps(dw + kPanelRows, _mm256_mul_ps(dmin, _mm256_load_ps(m[j])));
    uint8_t* u = pb + 32 * sizeof(float) + h * 32;
    const __m128i shn = _mm_cvtsi32_si128(4 * (j % 2)), shh = _mm_cvtsi32_si128(j);
    for (int q = 0; q < 8; ++q) {
      const __m256i lo = _mm256_and_si256(_mm256_srl_epi16(load32(qs + 32 * (8 * (j / 2) + q)), shn), low4);
      const __m256i hi = _mm256_and_si256(_mm256_srl_epi16(load32(qh + 32 * q), shh), one);
      store32(u + 64 * q, _mm256_or_si256(lo, _mm256_slli_epi16(hi, 4)));
    }
  }
}

// Q3_K: per sub-block the rows' d * (s - 32) of both halves, their offsets -128 * sum(w), then
// w = v - 4 from the levels words (cpu_repack.h: q3k_quad, q3k_high_bits).
void pack_q3_k(const uint8_t* src, uint8_t* pb, int h) {
  const __m256 d = load_d8(src);
  alignas(32) float s[16][kRepackRows];
  for (int i = 0; i < kRepackRows; ++i) {
    uint8_t scales[12];
    row_field(src + r8_field(kQ3KFields, 1), 12, 4, i, scales);
    for (int g = 0; g < 16; ++g) s[g][i] = (float)(q3_k_scale(scales, g) - 32);
  }
  const uint8_t* words = src + kQ3kLevels;  // word n of the 8 rows at words + 32 n
  auto bits = [&](Q3kQuad at, int mask) {
    return _mm256_and_si256(_mm256_srl_epi16(load32(words + 32 * at.word), _mm_cvtsi32_si128(at.shift)),
                            _mm256_set1_epi8((char)mask));
  };
  const __m256i four = _mm256_set1_epi8(4), ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  for (int j = 0; j < 8; ++j, pb += kQ8HalfGroupBlockBytes) {
    float* dw = reinterpret_cast<float*>(pb) + h * kRepackRows;
    int32_t* off = reinterpret_cast<int32_t*>(pb + 32 * sizeof(float)) + h * kRepackRows;
    uint8_t* u = pb + 64 * sizeof(float) + h * 32;
    __m256i sums[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int q = 0; q < 8; ++q) {
      const int g = 2 * j + q / 4, t = q % 4;
      __m256i v = bits(q3k_quad(g, t), g < 12 ? 7 : 3);
      if (g >= 12) v = _mm256_or_si256(v, _mm256_slli_epi16(bits(q3k_high_bits(4 * (g - 12) + t), 1), 2));
      const __m256i w = _mm256_sub_epi8(v, four);
      store32(u + 64 * q, w);
      sums[q / 4] = _mm256_add_epi32(sums[q / 4], _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, w), ones16));
    }
    for (int hv = 0; hv < 2; ++hv) {
      _mm256_storeu_ps(dw + hv * kPanelRows, _mm256_mul_ps(d, _mm256_load_ps(s[2 * j + hv])));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(off + hv * kPanelRows),
                          _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sums[hv], 7)));
    }
  }
}

// Q2_K: per sub-block the rows' d * sc and dmin * m of both halves, their offsets -128 * sum(q),
// then q itself: panel block j's quad q is bits 2 (j % 4) of qs chunk 8 (j / 4) + q.
void pack_q2_k(const uint8_t* src, uint8_t* pb, int h) {
  const __m256 d = load_d8(src), dmin = load_d8(src + 16);
  alignas(32) float sc[16][kRepackRows], m[16][kRepackRows];
  for (int i = 0; i < kRepackRows; ++i) {
    uint8_t scales[16];
    row_field(src + r8_field(kQ2KFields, 2), 16, 4, i, scales);
    for (int g = 0; g < 16; ++g) sc[g][i] = (float)(scales[g] & 15), m[g][i] = (float)(scales[g] >> 4);
  }
  const uint8_t* qs = src + r8_field(kQ2KFields, 3);
  const __m256i three = _mm256_set1_epi8(3), ones8 = _mm256_set1_epi8(1), ones16 = _mm256_set1_epi16(1);
  for (int j = 0; j < 8; ++j, pb += kQ8HalfMinGroupBlockBytes) {
    float* dw = reinterpret_cast<float*>(pb) + h * kRepackRows;
    int32_t* off = reinterpret_cast<int32_t*>(pb + 32 * sizeof(float)) + h * kRepackRows;
    uint8_t* u = pb + 96 * sizeof(float) + h * 32;
    const __m128i sh = _mm_cvtsi32_si128(2 * (j % 4));
    __m256i sums[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
    for (int q = 0; q < 8; ++q) {
      const __m256i w = _mm256_and_si256(_mm256_srl_epi16(load32(qs + 32 * (8 * (j / 4) + q)), sh), three);
      store32(u + 64 * q, w);
      sums[q / 4] = _mm256_add_epi32(sums[q / 4], _mm256_madd_epi16(_mm256_maddubs_epi16(w, ones8), ones16));
    }
    for (int hv = 0; hv < 2; ++hv) {
      _mm256_storeu_ps(dw + hv * kPanelRows, _mm256_mul_ps(d, _mm256_load_ps(sc[2 * j + hv])));
      _mm256_storeu_ps(dw + 64 + hv * kPanelRows, _mm256_mul_ps(dmin, _mm256_load_ps(m[2 * j + hv])));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(off + hv * kPanelRows),
                          _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(sums[hv], 7)));
    }
  }
}

}  // namespace

PackR8Fn pack_r8_avx2_more(DType t) {
  switch (t) {
    case DType::Q4_1: return pack_q4_1;
    case DType::Q5_0: return pack_q5_32<DType::Q5_0>;
    case DType::Q5_1: return pack_q5_32<DType::Q5_1>;
    case DType::IQ4_NL: return pack_table32<DType::IQ4_NL>;
    case DType::MXFP4: return pack_table32<DType::MXFP4>;
    case DType::IQ4_XS: return pack_iq4_xs;
    case DType::Q5_K: return pack_q5_k;
    case DType::Q3_K: return pack_q3_k;
    case DType::Q2_K: return pack_q2_k;
    default: return nullptr;
  }
}

#pragma GCC pop_options

}  // namespace loom::cpu
