// Malformed GGUF input: every file is hand-encoded (not by loom's writer) and must be rejected
// with loom::Error of the right kind and a message naming the file and the problem.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <fstream>

#include "gguf_test_util.h"
#include "loom/gguf/gguf.h"

namespace loom {
namespace {

using test::expect_parse_error;
using test::Raw;

// A valid file: 2 keys, 2 f32 tensors of 8 elements (32 bytes each, so no data padding).
std::string valid_file() {
  Raw r;
  r.header(2, 2).kv_str("general.architecture", "llama").kv_u32("llama.block_count", 1);
  r.tensor("blk.0.attn_q.weight", {4, 2}, 0, 0).tensor("output.weight", {8}, 0, 32).pad(32);
  for (int i = 0; i < 16; ++i) r.put<float>((float)i);
  return r.b;
}

TEST(GgufBad, ValidBaseParses) {
  auto f = test::parse(valid_file());
  EXPECT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->find_tensor("output.weight")->offset, 32u);
  EXPECT_EQ(reinterpret_cast<const float*>(f->tensor_data(*f->find_tensor("output.weight")))[7], 15.0f);
}

TEST(GgufBad, TruncatedAtEveryCutPoint) {
  const std::string full = valid_file();
  for (size_t cut = 0; cut < full.size(); ++cut) {
    SCOPED_TRACE(cut);
    try {
      test::parse(full.substr(0, cut));
      ADD_FAILURE() << "a file cut at " << cut << " of " << full.size() << " bytes parsed";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::invalid_input) << e.what();
      const std::string msg = e.what();
      EXPECT_TRUE(msg.find("truncated") != std::string::npos || msg.find("past the end") != std::string::npos ||
                  msg.find("remain") != std::string::npos || msg.find("empty") != std::string::npos)
          << msg;
    }
  }
}

TEST(GgufBad, WrongMagic) {
  std::string b = valid_file();
  b[0] = 'G', b[1] = 'G', b[2] = 'M', b[3] = 'L';
  expect_parse_error(b, ErrorKind::invalid_input, "bad magic 'GGML'");
}

TEST(GgufBad, OldAndFutureVersions) {
  Raw v2;
  v2.b = "GGUF";
  v2.put<uint32_t>(2);
  expect_parse_error(v2.b, ErrorKind::unsupported, "GGUF version 2 is not supported");
  Raw v1;
  v1.header(0, 0, 1);
  expect_parse_error(v1.b, ErrorKind::unsupported, "GGUF version 1");
  Raw v4;
  v4.header(0, 0, 4);
  expect_parse_error(v4.b, ErrorKind::invalid_input, "unsupported GGUF version 4");
  Raw swapped;
  swapped.header(0, 0, 0x03000000);
  expect_parse_error(swapped.b, ErrorKind::unsupported, "big-endian");
}

TEST(GgufBad, AbsurdCounts) {
  Raw r;  // the foundation test's file: 2^62 - 1 tensors, nothing else
  r.b = "GGUF";
  r.put<uint32_t>(3).put<int64_t>(0x3fffffffffffffffll).put<int64_t>(0);
  expect_parse_error(r.b, ErrorKind::invalid_input, "claims 4611686018427387903 tensors");
  Raw t;
  t.header(int64_t(1) << 62, 0).zeros(4096);
  expect_parse_error(t.b, ErrorKind::invalid_input, "claims 4611686018427387904 tensors");
  Raw k;
  k.header(0, int64_t(1) << 40).zeros(4096);
  expect_parse_error(k.b, ErrorKind::invalid_input, "claims 1099511627776 metadata keys");
  Raw neg;
  neg.header(-1, 0);
  expect_parse_error(neg.b, ErrorKind::invalid_input, "negative tensor count");
}

TEST(GgufBad, StringLengthPastTheEnd) {
  Raw r;
  r.header(0, 1).put<uint64_t>(uint64_t(1) << 60).zeros(64);
  expect_parse_error(r.b, ErrorKind::invalid_input, "claims 1152921504606846976 bytes");
  Raw v;  // a string value whose length runs past the end
  v.header(0, 1).str("general.name").put<int32_t>(8).put<uint64_t>(1000).zeros(10);
  expect_parse_error(v.b, ErrorKind::invalid_input, "key 'general.name'");
}

TEST(GgufBad, ArrayCountPastTheEnd) {
  Raw r;
  r.header(0, 1).str("tokenizer.ggml.tokens").put<int32_t>(9).put<int32_t>(8).put<uint64_t>(uint64_t(1) << 61);
  r.zeros(64);
  expect_parse_error(r.b, ErrorKind::invalid_input, "array of 2305843009213693952 str elements");
  Raw n;
  n.header(0, 1).str("nested").put<int32_t>(9).put<int32_t>(9).put<uint64_t>(1).zeros(32);
  expect_parse_error(n.b, ErrorKind::invalid_input, "nested arrays");
}

TEST(GgufBad, DuplicateKeys) {
  Raw r;
  r.header(0, 2).kv_u32("llama.block_count", 1).kv_u32("llama.block_count", 2);
  expect_parse_error(r.b, ErrorKind::invalid_input, "duplicate key 'llama.block_count'");
}

TEST(GgufBad, EmptyKey) {
  Raw r;
  r.header(0, 1).kv_u32("", 1);
  expect_parse_error(r.b, ErrorKind::invalid_input, "metadata key 0 is empty");
}

TEST(GgufBad, DuplicateTensorNames) {
  Raw r;
  r.header(2, 0).tensor("w", {8}, 0, 0).tensor("w", {8}, 0, 32).pad(32).zeros(64);
  expect_parse_error(r.b, ErrorKind::invalid_input, "duplicate tensor name 'w'");
}

TEST(GgufBad, UnknownValueType) {
  Raw r;
  r.header(0, 1).str("k").put<int32_t>(13).put<uint32_t>(0);
  expect_parse_error(r.b, ErrorKind::invalid_input, "key 'k': unknown value type 13");
  Raw a;
  a.header(0, 1).str("k").put<int32_t>(9).put<int32_t>(-1).put<uint64_t>(0);
  expect_parse_error(a.b, ErrorKind::invalid_input, "unknown value type -1");
}

TEST(GgufBad, UnknownOrUnsupportedTensorType) {
  Raw r;
  r.header(1, 0).tensor("w", {32}, 200, 0).pad(32).zeros(256);
  expect_parse_error(r.b, ErrorKind::invalid_input, "tensor 'w' has unknown tensor type id 200");
  Raw tq1;  // a real ggml type loom does not implement
  tq1.header(1, 0).tensor("w", {256}, 34, 0).pad(32).zeros(256);
  expect_parse_error(tq1.b, ErrorKind::unsupported, "type tq1_0 (id 34)");
  Raw gap;  // id 4 was removed from ggml
  gap.header(1, 0).tensor("w", {32}, 4, 0).pad(32).zeros(256);
  expect_parse_error(gap.b, ErrorKind::invalid_input, "unknown tensor type id 4");
}

TEST(GgufBad, TooManyDimensions) {
  Raw r;
  r.header(1, 0).tensor("w", {1, 1, 1, 1, 8}, 0, 0).pad(32).zeros(32);
  expect_parse_error(r.b, ErrorKind::invalid_input, "tensor 'w' has 5 dimensions (at most 4)");
}

TEST(GgufBad, NegativeDimension) {
  Raw r;
  r.header(1, 0).tensor("w", {8, -2}, 0, 0).pad(32).zeros(64);
  expect_parse_error(r.b, ErrorKind::invalid_input, "dimension 1 is negative (-2)");
}

TEST(GgufBad, TensorNameTooLong) {
  Raw r;
  r.header(1, 0).tensor(std::string(64, 'x'), {8}, 0, 0).pad(32).zeros(32);
  expect_parse_error(r.b, ErrorKind::invalid_input, "tensor name is 64 bytes long (must be < 64)");
  Raw ok;  // 63 bytes is the limit
  ok.header(1, 0).tensor(std::string(63, 'x'), {8}, 0, 0).pad(32).zeros(32);
  EXPECT_NO_THROW(test::parse(ok.b));
}

TEST(GgufBad, OffsetsOutOfOrder) {
  Raw r;
  r.header(2, 0).tensor("blk.0.attn_q.weight", {8}, 0, 4096).tensor("b", {8}, 0, 0).pad(32).zeros(8192);
  expect_parse_error(r.b, ErrorKind::invalid_input, "tensor 'blk.0.attn_q.weight': offset 4096 out of order (expected 0)");
  Raw gap;  // a gap between tensors is also out of order
  gap.header(2, 0).tensor("a", {8}, 0, 0).tensor("b", {8}, 0, 64).pad(32).zeros(128);
  expect_parse_error(gap.b, ErrorKind::invalid_input, "tensor 'b': offset 64 out of order (expected 32)");
}

TEST(GgufBad, DataPastEndOfFile) {
  Raw r;
  r.header(2, 0).tensor("a", {8}, 0, 0).tensor("b", {1024}, 0, 32).pad(32).zeros(32 + 100);
  expect_parse_error(r.b, ErrorKind::invalid_input, "tensor 'b': data at offset 32 + 4096 bytes extends past the end");
  Raw huge;  // a tensor claiming far more bytes than the file has
  huge.header(1, 0).tensor("w", {int64_t(1) << 40}, 0, 0).pad(32).zeros(32);
  expect_parse_error(huge.b, ErrorKind::invalid_input, "extends past the end of the file");
}

TEST(GgufBad, Alignment) {
  Raw r;
  r.header(0, 1).kv_u32("general.alignment", 48);
  expect_parse_error(r.b, ErrorKind::invalid_input, "general.alignment 48 is not a power of two");
  Raw z;
  z.header(0, 1).kv_u32("general.alignment", 0);
  expect_parse_error(z.b, ErrorKind::invalid_input, "general.alignment 0 is not a power of two");
  Raw t;
  t.header(0, 1).str("general.alignment").put<int32_t>(5).put<int32_t>(64);
  expect_parse_error(t.b, ErrorKind::invalid_input, "general.alignment must be of type u32, not i32");
  Raw ok;  // a valid custom alignment moves the data section
  ok.header(1, 1).kv_u32("general.alignment", 64).tensor("w", {8}, 0, 0).pad(64).zeros(32);
  auto f = test::parse(ok.b);
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(f->data_offset() % 64, 0u);
}

TEST(GgufBad, RowNotAMultipleOfBlockSize) {
  Raw r;
  r.header(1, 0).tensor("blk.0.ffn_down.weight", {100, 4}, 12, 0).pad(32).zeros(4096);
  expect_parse_error(r.b, ErrorKind::invalid_input, "ne[0] = 100 is not a multiple of the q4_K block size 256");
  Raw q8;
  q8.header(1, 0).tensor("w", {33}, 8, 0).pad(32).zeros(64);
  expect_parse_error(q8.b, ErrorKind::invalid_input, "not a multiple of the q8_0 block size 32");
}

TEST(GgufBad, ElementCountOverflow) {
  Raw r;
  r.header(1, 0).tensor("w", {int64_t(1) << 32, int64_t(1) << 32}, 0, 0).pad(32).zeros(32);
  expect_parse_error(r.b, ErrorKind::invalid_input, "element count of shape [4294967296, 4294967296, 1, 1] overflows");
  Raw bytes;  // fits in int64 elements but not in bytes
  bytes.header(1, 0).tensor("w", {int64_t(1) << 31, int64_t(1) << 31}, 0, 0).pad(32).zeros(32);
  expect_parse_error(bytes.b, ErrorKind::invalid_input, "overflows");
}

TEST(GgufBad, FilesystemErrors) {
  test::ScratchDir dir("gguf-bad");
  try {
    gguf::File::open(dir.path().string());
    ADD_FAILURE() << "opened a directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_EQ(exit_code_for(e.kind()), 3);
    EXPECT_NE(std::string(e.what()).find("is a directory"), std::string::npos);
  }
  try {
    gguf::File::open(dir.file("missing.gguf"));
    ADD_FAILURE() << "opened a missing file";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find("missing.gguf"), std::string::npos);
  }
  { std::ofstream(dir.file("empty.gguf")); }
  try {
    gguf::File::open(dir.file("empty.gguf"));
    ADD_FAILURE() << "opened an empty file";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_input);
    EXPECT_EQ(exit_code_for(e.kind()), 3);
  }
}

TEST(GgufBad, RandomByteFlipsNeverCrash) {
  // Deterministic mutation sweep: any outcome is fine except a crash or a non-loom exception.
  const std::string base = valid_file();
  uint64_t s = 12345;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string b = base;
    for (int k = 0; k < 3; ++k) {
      s = s * 6364136223846793005ull + 1442695040888963407ull;
      b[(s >> 33) % b.size()] = (char)(s >> 17);
    }
    try {
      test::parse(b);
    } catch (const Error&) {
    }
  }
}

}  // namespace
}  // namespace loom
