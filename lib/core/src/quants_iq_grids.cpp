// The i-quants' codebooks (quants_iq.h). They are part of the GGUF formats: a file's grid indices
// mean these points and no others. Each point is written as its coordinates' level numbers, 2 or
// 3 bits per coordinate from bit 0 (IQ2: levels 8, 25, 43; IQ3_XXS: 4, 12, ..., 52, 62; IQ3_S: 1, 3,
// ..., 15; IQ1: -1, 0, 1), and expanded at compile time to one byte per coordinate. The lists
// (iq_codes/*.inc) are shared with the Vulkan shaders, which expand them as they decode.
#include <array>
#include <cstddef>
#include <cstdint>

#include "loom/core/quants_iq.h"

namespace loom {
namespace {

constexpr uint16_t kIq2xxsCodes[256] = {
#include "iq_codes/iq2xxs.inc"
};
constexpr uint16_t kIq2xsCodes[512] = {
#include "iq_codes/iq2xs.inc"
};
constexpr uint16_t kIq2sCodes[1024] = {
#include "iq_codes/iq2s.inc"
};
constexpr uint16_t kIq3xxsCodes[256] = {
#include "iq_codes/iq3xxs.inc"
};
constexpr uint16_t kIq3sCodes[512] = {
#include "iq_codes/iq3s.inc"
};
constexpr uint16_t kIq1sCodes[2048] = {
#include "iq_codes/iq1s.inc"
};

template <class T, size_t N>
constexpr std::array<T, N> expand(const uint16_t (&codes)[N], int coords, int bits, const uint8_t* levels) {
  std::array<T, N> out{};
  for (size_t i = 0; i < N; ++i)
    for (int j = 0; j < coords; ++j) out[i] |= (T)levels[(codes[i] >> (bits * j)) & ((1 << bits) - 1)] << (8 * j);
  return out;
}
constexpr uint8_t kIq2Levels[3] = {8, 25, 43};
constexpr uint8_t kIq3xxsLevels[8] = {4, 12, 20, 28, 36, 44, 52, 62};
constexpr uint8_t kIq3sLevels[8] = {1, 3, 5, 7, 9, 11, 13, 15};
constexpr uint8_t kIq1Levels[3] = {0xff, 0, 1};  // int8 -1, 0, 1

}  // namespace

// Constant-initialized: ready before any other static initializer runs.
constinit const std::array<uint64_t, 256> kIq2xxsGrid = expand<uint64_t>(kIq2xxsCodes, 8, 2, kIq2Levels);
constinit const std::array<uint64_t, 512> kIq2xsGrid = expand<uint64_t>(kIq2xsCodes, 8, 2, kIq2Levels);
constinit const std::array<uint64_t, 1024> kIq2sGrid = expand<uint64_t>(kIq2sCodes, 8, 2, kIq2Levels);
constinit const std::array<uint32_t, 256> kIq3xxsGrid = expand<uint32_t>(kIq3xxsCodes, 4, 3, kIq3xxsLevels);
constinit const std::array<uint32_t, 512> kIq3sGrid = expand<uint32_t>(kIq3sCodes, 4, 3, kIq3sLevels);
constinit const std::array<uint64_t, 2048> kIq1sGrid = expand<uint64_t>(kIq1sCodes, 8, 2, kIq1Levels);

}  // namespace loom
