// GGUF writer/reader round trips (every value type, arrays, tensors, alignment), byte-exact
// output against a hand-encoded file, header-only sparse files, and the peer vocab files.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>

#include "gguf_test_util.h"
#include "loom/gguf/gguf.h"

namespace loom {
namespace {

using gguf::Value;
using gguf::ValueType;
using test::Raw;

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(GgufWriter, ByteExactAgainstHandEncoding) {
  test::ScratchDir dir("gguf");
  gguf::Writer w;
  w.set("a", Value::u32(7));
  const float data[2] = {1.0f, 2.0f};
  const int64_t ne[1] = {2};
  w.add_tensor("t", DType::F32, 1, ne, data);
  w.write(dir.file("x.gguf"));

  // Spec layout: header, kv, tensor info, pad to 32, data, pad to 32.
  Raw r;
  r.header(1, 1).kv_u32("a", 7).tensor("t", {2}, 0, 0).pad(32);
  r.put<float>(1.0f).put<float>(2.0f).pad(32);
  ASSERT_EQ(r.b.size(), 128u);
  EXPECT_EQ(read_all(dir.file("x.gguf")), r.b);
  EXPECT_EQ(w.file_size(), 128u);
  EXPECT_EQ(w.header_size(), 96u);
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.gguf.tmp")));
}

TEST(GgufWriter, PadsHeaderEvenWithoutTensors) {
  // llama.cpp's writer pads the header to the alignment unconditionally.
  test::ScratchDir dir("gguf");
  gguf::Writer w;
  w.set("k", Value::string("v"));
  w.write(dir.file("x.gguf"));
  Raw r;
  r.header(0, 1).kv_str("k", "v").pad(32);
  EXPECT_EQ(read_all(dir.file("x.gguf")), r.b);
  auto f = gguf::File::open(dir.file("x.gguf"));
  EXPECT_EQ(f->get_string("k"), "v");
  EXPECT_EQ(f->tensors().size(), 0u);
}

TEST(GgufRoundTrip, EveryValueTypeAndArray) {
  test::ScratchDir dir("gguf");
  std::vector<std::pair<std::string, Value>> kv = {
      {"u8", Value::integer(ValueType::U8, 255)},
      {"i8", Value::integer(ValueType::I8, -128)},
      {"u16", Value::integer(ValueType::U16, 65535)},
      {"i16", Value::integer(ValueType::I16, -32768)},
      {"u32", Value::u32(0xffffffffu)},
      {"i32", Value::i32(std::numeric_limits<int32_t>::min())},
      {"f32", Value::f32(1e-5f)},
      {"bool.t", Value::boolean(true)},
      {"bool.f", Value::boolean(false)},
      {"str", Value::string(std::string("h\xc3\xa9llo\0world", 12))},
      {"str.empty", Value::string("")},
      {"u64", Value::u64(0xfedcba9876543210ull)},
      {"i64", Value::integer(ValueType::I64, std::numeric_limits<int64_t>::min())},
      {"f64", Value::floating(ValueType::F64, 3.141592653589793)},
      {"arr.u8", Value::int_array(ValueType::U8, {0, 1, 255})},
      {"arr.i8", Value::int_array(ValueType::I8, {-128, 127})},
      {"arr.u16", Value::int_array(ValueType::U16, {65535})},
      {"arr.i16", Value::int_array(ValueType::I16, {-2, 2})},
      {"arr.u32", Value::int_array(ValueType::U32, {4000000000})},
      {"arr.i32", Value::i32_array({-1, 0, 1})},
      {"arr.u64", Value::int_array(ValueType::U64, {-1})},
      {"arr.i64", Value::int_array(ValueType::I64, {std::numeric_limits<int64_t>::max()})},
      {"arr.f32", Value::f32_array({0.5, -2.25})},
      {"arr.f64", Value::float_array(ValueType::F64, {1e300, -1e-300})},
      {"arr.bool", Value::int_array(ValueType::BOOL, {1, 0, 1})},
      {"arr.str", Value::string_array({"a", "", "\xe2\x96\x81the"})},
      {"arr.empty", Value::string_array({})},
  };
  gguf::Writer w;
  for (const auto& [k, v] : kv) w.set(k, v);
  w.set("u8", Value::integer(ValueType::U8, 255));  // replacing keeps the position and count
  w.write(dir.file("all.gguf"));

  auto f = gguf::File::open(dir.file("all.gguf"));
  EXPECT_EQ(f->version(), 3u);
  ASSERT_EQ(f->metadata().size(), kv.size());
  for (size_t i = 0; i < kv.size(); ++i) {
    EXPECT_EQ(f->metadata()[i].first, kv[i].first);
    EXPECT_TRUE(f->metadata()[i].second == kv[i].second) << kv[i].first;
  }
  // Typed getters and their type checks.
  EXPECT_EQ(f->get_int("u32"), 0xffffffffll);
  EXPECT_EQ((uint64_t)f->get_int("u64"), 0xfedcba9876543210ull);
  EXPECT_FLOAT_EQ((float)f->get_float("f32"), 1e-5f);
  EXPECT_DOUBLE_EQ(f->get_float("u16"), 65535.0);  // integers are accepted as floats
  EXPECT_TRUE(f->get_bool("bool.t"));
  EXPECT_FALSE(f->get_bool("bool.f"));
  EXPECT_EQ(f->get_string("str").size(), 12u);
  EXPECT_FALSE(f->find_int("nope").has_value());
  EXPECT_THROW(f->get_int("str"), Error);
  EXPECT_THROW(f->get_string("missing"), Error);
  EXPECT_EQ(f->find("arr.str")->array_size(), 3u);
  EXPECT_EQ(gguf::format_value_type(*f->find("arr.str")), "arr[str,3]");
}

TEST(GgufRoundTrip, TensorsOffsetsAndData) {
  test::ScratchDir dir("gguf");
  gguf::Writer w;
  std::vector<float> a(3 * 5);
  for (size_t i = 0; i < a.size(); ++i) a[i] = (float)i - 7.5f;
  std::vector<uint8_t> q8(2 * 34);  // two q8_0 blocks: ne {64}
  for (size_t i = 0; i < q8.size(); ++i) q8[i] = (uint8_t)(i * 7);
  std::vector<int32_t> ids = {5, -6, 7};
  const int64_t ne_a[2] = {3, 5}, ne_q[1] = {64}, ne_i[1] = {3}, ne_e[3] = {2, 3, 4};
  w.add_tensor("a", DType::F32, 2, ne_a, a.data());
  w.add_tensor("q", DType::Q8_0, 1, ne_q, q8.data());
  w.add_tensor("i", DType::I32, 1, ne_i, ids.data());
  w.add_tensor("e", DType::F16, 3, ne_e, [](uint8_t* dst, size_t n) {
    for (size_t k = 0; k < n; ++k) dst[k] = (uint8_t)(255 - k);
  });
  int64_t calls = 0;
  const int64_t ne_big[2] = {1024, 8192};  // 32 MiB f32: streamed in more than one chunk
  w.add_tensor_rows("big", DType::F32, 2, ne_big, [&](uint8_t* dst, int64_t row0, int64_t n_rows) {
    ++calls;
    float* p = reinterpret_cast<float*>(dst);
    for (int64_t r = 0; r < n_rows; ++r) p[r * 1024] = (float)(row0 + r);
  });
  w.write(dir.file("t.gguf"));
  EXPECT_GE(calls, 2);

  auto f = gguf::File::open(dir.file("t.gguf"));
  ASSERT_EQ(f->tensors().size(), 5u);
  EXPECT_EQ(f->data_offset() % 32, 0u);
  const gguf::TensorInfo* ta = f->find_tensor("a");
  const gguf::TensorInfo* tq = f->find_tensor("q");
  const gguf::TensorInfo* ti = f->find_tensor("i");
  const gguf::TensorInfo* te = f->find_tensor("e");
  const gguf::TensorInfo* tb = f->find_tensor("big");
  ASSERT_TRUE(ta && tq && ti && te && tb);
  EXPECT_EQ(ta->n_dims, 2);
  EXPECT_EQ(ta->ne[0], 3);
  EXPECT_EQ(ta->ne[1], 5);
  EXPECT_EQ(ta->nbytes, 60u);
  EXPECT_EQ(ta->offset, 0u);
  EXPECT_EQ(tq->offset, 64u);  // 60 padded to 64
  EXPECT_EQ(tq->nbytes, 68u);
  EXPECT_EQ(ti->offset, 64u + 96u);
  EXPECT_EQ(te->n_dims, 3);
  EXPECT_EQ(te->ne[2], 4);
  EXPECT_EQ(te->nbytes, 48u);
  EXPECT_EQ(tb->offset, 64u + 96u + 32u + 64u);
  EXPECT_EQ(std::memcmp(f->tensor_data(*ta), a.data(), 60), 0);
  EXPECT_EQ(std::memcmp(f->tensor_data(*tq), q8.data(), q8.size()), 0);
  EXPECT_EQ(std::memcmp(f->tensor_data(*ti), ids.data(), 12), 0);
  EXPECT_EQ(f->tensor_data(*te)[47], 255 - 47);
  const float* big = reinterpret_cast<const float*>(f->tensor_data(*tb));
  EXPECT_EQ(big[8191 * 1024], 8191.0f);
  EXPECT_EQ(big[8191 * 1024 + 1], 0.0f);
  EXPECT_EQ(f->file_size(), f->data_offset() + f->data_size());
  EXPECT_EQ(f->tensor_bytes_total(), 60u + 68u + 12u + 48u + 32u * 1024 * 1024);
}

TEST(GgufRoundTrip, CustomAlignment) {
  test::ScratchDir dir("gguf");
  gguf::Writer w;
  w.set("general.alignment", Value::u32(256));
  const int64_t ne[1] = {10};
  std::vector<float> x(10, 3.0f);
  w.add_tensor("x", DType::F32, 1, ne, x.data());
  w.add_tensor("y", DType::F32, 1, ne, x.data());
  w.write(dir.file("a.gguf"));
  auto f = gguf::File::open(dir.file("a.gguf"));
  EXPECT_EQ(f->alignment(), 256u);
  EXPECT_EQ(f->data_offset() % 256, 0u);
  EXPECT_EQ(f->find_tensor("y")->offset, 256u);
  EXPECT_EQ(f->file_size() % 256, 0u);

  gguf::Writer bad;
  bad.set("general.alignment", Value::u32(48));
  EXPECT_THROW(bad.write(dir.file("b.gguf")), Error);
  EXPECT_FALSE(std::filesystem::exists(dir.file("b.gguf.tmp")));
}

TEST(GgufWriter, HeaderOnlyIsSparseAndReadable) {
  test::ScratchDir dir("gguf");
  gguf::Writer w;
  w.set("general.architecture", Value::string("llama"));
  const int64_t ne[2] = {8192, 32768};  // 1 GiB of f32 each
  bool called = false;
  w.add_tensor_rows("w", DType::F32, 2, ne, [&](uint8_t*, int64_t, int64_t) { called = true; });
  w.add_tensor_rows("v", DType::F32, 2, ne, [&](uint8_t*, int64_t, int64_t) { called = true; });
  const std::string path = dir.file("h.gguf");
  w.write(path, /*header_only=*/true);
  EXPECT_FALSE(called);
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ((size_t)st.st_size, w.file_size());
  EXPECT_GT((size_t)st.st_size, 2ull << 30);
  EXPECT_LT((size_t)st.st_blocks * 512, 1u << 20);
  auto f = gguf::File::open(path);
  EXPECT_EQ(f->tensors().size(), 2u);
  EXPECT_EQ(f->find_tensor("v")->offset, 8192ull * 32768 * 4);
}

TEST(GgufWriter, RejectsBadTensorsAndUnwritablePaths) {
  gguf::Writer w;
  const int64_t ne_bad[1] = {100};
  EXPECT_THROW(w.add_tensor("q", DType::Q4_K, 1, ne_bad, nullptr), Error);
  const int64_t ne[1] = {4};
  std::vector<float> x(4);
  w.add_tensor("x", DType::F32, 1, ne, x.data());
  EXPECT_THROW(w.add_tensor("x", DType::F32, 1, ne, x.data()), Error);
  EXPECT_THROW(w.add_tensor(std::string(64, 'n'), DType::F32, 1, ne, x.data()), Error);
  EXPECT_THROW(w.add_tensor("five", DType::F32, 5, ne, x.data()), Error);
  try {
    w.write("/nonexistent-dir/x.gguf");
    ADD_FAILURE() << "wrote into a missing directory";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x.gguf"), std::string::npos);
  }
}

TEST(GgufWriter, FillErrorLeavesNoFile) {
  test::ScratchDir dir("gguf");
  gguf::Writer w;
  const int64_t ne[1] = {4};
  w.add_tensor("x", DType::F32, 1, ne, [](uint8_t*, size_t) { fail(ErrorKind::internal, "boom"); });
  EXPECT_THROW(w.write(dir.file("x.gguf")), Error);
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.gguf")));
  EXPECT_FALSE(std::filesystem::exists(dir.file("x.gguf.tmp")));
}

TEST(GgufFormat, ValueText) {
  EXPECT_EQ(gguf::format_value(Value::f32(1e-5f)), "1e-05");
  EXPECT_EQ(gguf::format_value(Value::string("a\"b\n")), "\"a\\\"b\\n\"");
  EXPECT_EQ(gguf::format_value(Value::u64(~0ull)), "18446744073709551615");
  EXPECT_EQ(gguf::format_value(Value::i32_array({1, 2, 3, 4}), 2), "[1, 2, ... 2 more]");
  EXPECT_EQ(gguf::format_value(Value::boolean(true)), "true");
}

// Peer files written by llama.cpp's converter: all must parse, and re-encoding their metadata
// with loom's writer must reproduce them byte for byte.
TEST(GgufPeer, VocabFilesParseAndReencodeIdentically) {
  const std::filesystem::path vocab_dir = std::filesystem::path(LOOM_SHARED_DIR) / "data" / "vocab";
  if (!std::filesystem::is_directory(vocab_dir)) GTEST_SKIP() << "no peer vocab files at " << vocab_dir;
  test::ScratchDir dir("gguf");
  int n_files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(vocab_dir)) {
    if (entry.path().extension() != ".gguf") continue;
    ++n_files;
    SCOPED_TRACE(entry.path().string());
    auto f = gguf::File::open(entry.path().string());
    const gguf::Value* tokens = f->find("tokenizer.ggml.tokens");
    ASSERT_NE(tokens, nullptr);
    EXPECT_EQ(tokens->array_type, ValueType::STRING);
    EXPECT_GT(tokens->array_size(), 1000u);
    EXPECT_TRUE(f->find_string("tokenizer.ggml.model").has_value());
    EXPECT_TRUE(f->find_string("general.architecture").has_value());

    gguf::Writer w;
    for (const auto& [k, v] : f->metadata()) w.set(k, v);
    ASSERT_TRUE(f->tensors().empty());
    const std::string out = dir.file("re.gguf");
    w.write(out);
    const std::string orig = read_all(entry.path().string()), again = read_all(out);
    // The original may or may not carry the trailing header padding; everything before must match.
    ASSERT_GE(again.size(), orig.size());
    EXPECT_EQ(again.substr(0, orig.size()), orig);
    EXPECT_LT(again.size() - orig.size(), 32u);
  }
  EXPECT_GT(n_files, 0);
}

}  // namespace
}  // namespace loom
