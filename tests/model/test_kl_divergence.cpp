// The --kl-divergence-base file: its rows (llama-perplexity's uint16 log-probabilities) and the
// header checks that keep a truncated, foreign or hostile file from being read.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/model/kl_divergence.h"

namespace {

namespace fs = std::filesystem;

float f32_at(const std::vector<uint16_t>& row, size_t at) {
  float v;
  std::memcpy(&v, row.data() + at, sizeof v);
  return v;
}

TEST(KlDivergenceFile, RowsHoldLogProbabilitiesInSixteenBits) {
  const std::vector<float> logits = {2.0f, -1.0f, 0.5f, -30.0f, 2.0f};
  std::vector<uint16_t> row(loom::LogitsFileHeader{4, 5, 1}.row_values());
  ASSERT_EQ(row.size(), 10u);  // 2 floats, then 5 values rounded up to 6
  const double nll = loom::encode_log_probs(logits, 2, row);
  double sum = 0;
  for (float x : logits) sum += std::exp((double)x - 2.0);
  const double lse = 2.0 + std::log(sum);
  EXPECT_NEAR(nll, lse - 0.5, 1e-5);
  const float scale = f32_at(row, 0), offset = f32_at(row, 2);
  EXPECT_FLOAT_EQ(scale, 16.0f / 65535.0f);       // the range is cut 16 below the largest logit
  EXPECT_NEAR(offset, (2.0 - 16.0) - lse, 1e-5);  // the smallest stored log-probability
  for (size_t i = 0; i < logits.size(); ++i) {
    const double stored = scale * row[4 + i] + offset;
    if (logits[i] < 2.0f - 16.0f) {
      EXPECT_EQ(row[4 + i], 0) << i;  // below the cut: the offset itself
    } else {
      EXPECT_NEAR(stored, logits[i] - lse, scale) << i;
    }
  }
  EXPECT_EQ(row[9], 0);  // the padding
  // all equal: no scale, every step 0
  std::vector<uint16_t> flat(loom::LogitsFileHeader{4, 3, 1}.row_values());
  loom::encode_log_probs(std::vector<float>{1.0f, 1.0f, 1.0f}, 0, flat);
  EXPECT_EQ(f32_at(flat, 0), 0.0f);
  EXPECT_NEAR(f32_at(flat, 2), -std::log(3.0), 1e-6);
}

class KlHeader : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = (fs::temp_directory_path() / ("loom-kld-" + std::to_string(getpid()) + ".bin")).string();
  }
  void TearDown() override { fs::remove(path_); }
  // A whole file of n_chunk chunks of n_ctx tokens over n_vocab, then `extra` bytes more (or fewer).
  void write(uint32_t n_ctx, int32_t n_vocab, int32_t n_chunk, int extra = 0, int32_t token = 1,
             const char* magic = "_logits_") {
    std::string bytes(magic, 8);
    bytes.append(reinterpret_cast<const char*>(&n_ctx), 4);
    bytes.append(reinterpret_cast<const char*>(&n_vocab), 4);
    bytes.append(reinterpret_cast<const char*>(&n_chunk), 4);
    const loom::LogitsFileHeader h{n_ctx, n_vocab, n_chunk};
    for (int64_t i = 0; i < h.n_ctx * h.n_chunk; ++i) bytes.append(reinterpret_cast<const char*>(&token), 4);
    bytes.append((size_t)(h.n_chunk * h.n_scored() * h.row_values() * 2), '\0');
    if (extra > 0) bytes.append((size_t)extra, '\0');
    if (extra < 0) bytes.resize(bytes.size() - (size_t)-extra);
    std::ofstream(path_, std::ios::binary) << bytes;
  }
  std::string error() {
    try {
      std::vector<int32_t> tokens;
      loom::read_logits_header(path_, &tokens);
    } catch (const loom::Error& e) {
      EXPECT_EQ(e.kind(), loom::ErrorKind::invalid_input) << e.what();
      return e.what();
    }
    return "";
  }
  std::string path_;
};

TEST_F(KlHeader, AWholeFileIsRead) {
  write(8, 5, 2, 0, 4);
  std::vector<int32_t> tokens;
  const loom::LogitsFileHeader h = loom::read_logits_header(path_, &tokens);
  EXPECT_EQ(h.n_ctx, 8);
  EXPECT_EQ(h.n_vocab, 5);
  EXPECT_EQ(h.n_chunk, 2);
  EXPECT_EQ(h.n_scored(), 3);  // positions 4, 5, 6 (7 has no next token)
  EXPECT_EQ(tokens, std::vector<int32_t>(16, 4));
}

TEST_F(KlHeader, TruncatedLongForeignAndHostileFilesAreRefused) {
  write(8, 5, 2, -1);
  EXPECT_NE(error().find("truncated or not whole"), std::string::npos);
  write(8, 5, 2, 1);
  EXPECT_NE(error().find("truncated or not whole"), std::string::npos);
  write(8, 5, 2, 0, 1, "GGUF\3\0\0\0");
  EXPECT_NE(error().find("is not a logits file"), std::string::npos);
  write(8, 5, 2, 0, 5);  // a token outside the vocabulary
  EXPECT_NE(error().find("outside the vocabulary"), std::string::npos);
  write(8, 5, 2, 0, -1);
  EXPECT_NE(error().find("outside the vocabulary"), std::string::npos);
  write(2, 5, 1);  // no position to score
  EXPECT_NE(error().find("is not valid"), std::string::npos);
  std::ofstream(path_, std::ios::binary) << "_logits_\x01";
  EXPECT_NE(error().find("too short"), std::string::npos);
  // sizes whose products pass 2^64: refused by the length check, nothing allocated
  std::string huge = "_logits_";
  const uint32_t n_ctx = 1u << 24;
  const int32_t n_vocab = 1 << 28, n_chunk = 0x7fffffff;
  huge.append(reinterpret_cast<const char*>(&n_ctx), 4);
  huge.append(reinterpret_cast<const char*>(&n_vocab), 4);
  huge.append(reinterpret_cast<const char*>(&n_chunk), 4);
  huge.append(64, '\0');
  std::ofstream(path_, std::ios::binary | std::ios::trunc) << huge;
  EXPECT_NE(error().find("truncated or not whole"), std::string::npos);
}

}  // namespace
