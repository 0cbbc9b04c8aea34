// Finding blocks that cannot decode to numbers: a NaN or infinite scale (f16 scales with an
// all-ones exponent, IQ1_M's assembled from its scale words, MXFP4's exponent 0xFF) or, for the plain float types, a
// non-finite value. What llama.cpp's ggml_validate_row_data rejects; loom checks files it converts with it.
#include <cstddef>
#include <cstring>

#include "loom/core/quants.h"
#include "loom/core/quants_iq.h"

namespace loom {
namespace {

bool f16_bad(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return (h & 0x7c00) == 0x7c00;
}
bool f32_bad(const uint8_t* p) {
  uint32_t u;
  std::memcpy(&u, p, 4);
  return (u & 0x7f800000u) == 0x7f800000u;
}
bool bf16_bad(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return (h & 0x7f80) == 0x7f80;
}

// f16 scale fields of a block: offsets of up to two.
struct ScaleFields {
  int n;
  size_t off[2];
};
ScaleFields scale_fields(DType t) {
  if (is_iq_grid_type(t) && t != DType::IQ1_M) return {1, {0}};  // d leads each of these blocks
  switch (t) {
    case DType::Q4_0: return {1, {offsetof(BlockQ4_0, d)}};
    case DType::Q8_0: return {1, {offsetof(BlockQ8_0, d)}};
    case DType::Q5_0: return {1, {offsetof(BlockQ5_0, d)}};
    case DType::IQ4_NL: return {1, {offsetof(BlockIQ4_NL, d)}};
    case DType::Q4_1: return {2, {offsetof(BlockQ4_1, d), offsetof(BlockQ4_1, m)}};
    case DType::Q5_1: return {2, {offsetof(BlockQ5_1, d), offsetof(BlockQ5_1, m)}};
    case DType::Q2_K: return {2, {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)}};
    case DType::Q4_K: return {2, {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)}};
    case DType::Q5_K: return {2, {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)}};
    case DType::Q3_K: return {1, {offsetof(BlockQ3_K, d)}};
    case DType::Q6_K: return {1, {offsetof(BlockQ6_K, d)}};
    case DType::IQ4_XS:
      return {1, {offsetof(BlockIQ4_XS, d)}};
    default: return {0, {}};
  }
}

}  // namespace

int64_t first_bad_block(DType type, const void* data, size_t nbytes) {
  const DTypeInfo& info = dtype_info(type);
  const auto* p = static_cast<const uint8_t*>(data);
  const int64_t n = (int64_t)(nbytes / info.type_size);
  const ScaleFields sf = scale_fields(type);
  for (int64_t i = 0; i < n; ++i) {
    const uint8_t* b = p + (size_t)i * info.type_size;
    bool bad = false;
    switch (type) {
      case DType::F32: bad = f32_bad(b); break;
      case DType::F16: bad = f16_bad(b); break;
      case DType::BF16: bad = bf16_bad(b); break;
      case DType::MXFP4: bad = b[0] == 0xff; break;  // E8M0's NaN
      case DType::IQ1_M: {                           // d is spread over the scale words
        BlockIQ1_M blk;
        std::memcpy(&blk, b, sizeof(blk));
        const fp16_t d = iq1_m_d(blk);
        bad = f16_bad(reinterpret_cast<const uint8_t*>(&d));
        break;
      }
      default:
        for (int k = 0; k < sf.n; ++k) bad = bad || f16_bad(b + sf.off[k]);
    }
    if (bad) return i;
  }
  return -1;
}

}  // namespace loom
