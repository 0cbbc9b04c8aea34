// Importance matrices: both of llama-imatrix's formats read to the same values, hostile files
// refused with one clear error, --include / --exclude filtering, and `loom-gguf quantize` with a
// matrix: less error where the matrix says it matters, llama-quantize's metadata, and an entry of
// the wrong size refused before any output exists.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/files.h"
#include "loom/core/quants.h"
#include "loom/gguf/gguf.h"
#include "loom/model/arch.h"
#include "loom/model/imatrix.h"
#include "loom/model/model_file.h"
#include "loom/model/quantize.h"

namespace loom {
namespace {

std::string temp_path(const std::string& tag) {
  return (std::filesystem::temp_directory_path() / ("loom-imatrix-" + std::to_string(getpid()) + "-" + tag)).string();
}

// The binary form as llama-imatrix wrote it: per entry the sums over `ncall` calls.
struct LegacyEntry {
  std::string name;
  int32_t ncall;
  std::vector<float> sums;
};
std::string legacy_bytes(const std::vector<LegacyEntry>& entries, int32_t chunks = -1,
                         const std::string& dataset = "") {
  std::string b;
  auto i32 = [&](int32_t v) { b.append(reinterpret_cast<const char*>(&v), 4); };
  i32((int32_t)entries.size());
  for (const LegacyEntry& e : entries) {
    i32((int32_t)e.name.size());
    b += e.name;
    i32(e.ncall);
    i32((int32_t)e.sums.size());
    b.append(reinterpret_cast<const char*>(e.sums.data()), e.sums.size() * 4);
  }
  if (chunks >= 0) {
    i32(chunks);
    i32((int32_t)dataset.size());
    b += dataset;
  }
  return b;
}

// The GGUF form: NAME.in_sum2 [ne0, n_mat] and NAME.counts [1, n_mat].
struct GgufEntry {
  std::string name;
  int64_t ne0;
  std::vector<float> sums;    // ne0 * n_mat
  std::vector<float> counts;  // n_mat
};
void write_gguf_imatrix(const std::string& path, const std::vector<GgufEntry>& entries, bool with_keys = true) {
  gguf::Writer w;
  w.set("general.type", gguf::Value::string("imatrix"));
  if (with_keys) {
    w.set("imatrix.datasets", gguf::Value::string_array({"wiki.train.raw"}));
    w.set("imatrix.chunk_count", gguf::Value::u32(100));
    w.set("imatrix.chunk_size", gguf::Value::u32(512));
  }
  for (const GgufEntry& e : entries) {
    const int64_t ns[4] = {e.ne0, (int64_t)e.counts.size(), 1, 1};
    const int64_t nc[4] = {1, (int64_t)e.counts.size(), 1, 1};
    w.add_tensor(e.name + ".in_sum2", DType::F32, 2, ns, e.sums.data());
    w.add_tensor(e.name + ".counts", DType::F32, 2, nc, e.counts.data());
  }
  w.write(path);
}

// The error kind and message of reading `path`.
std::pair<ErrorKind, std::string> read_error(const std::string& path) {
  try {
    read_importance_matrix(path);
  } catch (const Error& e) {
    return {e.kind(), e.what()};
  }
  return {ErrorKind::internal, "no error"};
}

TEST(ImportanceMatrix, LegacyFormatIsMeanSquares) {
  const std::string path = temp_path("legacy.dat");
  AtomicFile::write_file(path, legacy_bytes({{"blk.0.attn_q.weight", 4, {4.0f, 8.0f}}, {"output.weight", 0, {3.0f}}},
                                            42, "calibration.txt"));
  const ImportanceMatrix m = read_importance_matrix(path);
  ASSERT_EQ(m.entries.size(), 2u);
  EXPECT_EQ(m.entries.at("blk.0.attn_q.weight"), (std::vector<float>{1.0f, 2.0f}));  // divided by ncall
  EXPECT_EQ(m.entries.at("output.weight"), (std::vector<float>{3.0f}));              // ncall 0: as stored
  EXPECT_EQ(m.chunks, 42);
  EXPECT_EQ(m.datasets, (std::vector<std::string>{"calibration.txt"}));
  EXPECT_EQ(m.path, path);
  // the oldest files end after the entries
  AtomicFile::write_file(path, legacy_bytes({{"a.weight", 2, {2.0f}}}));
  EXPECT_EQ(read_importance_matrix(path).chunks, 0);
  std::filesystem::remove(path);
}

TEST(ImportanceMatrix, GgufFormatIsSumsOverCounts) {
  const std::string path = temp_path("im.gguf");
  // two experts: the first saw 4 tokens, the second none (weights 1 then, as llama-quantize reads it)
  write_gguf_imatrix(path, {{"blk.0.ffn_up_exps.weight", 2, {8.0f, 4.0f, 5.0f, 6.0f}, {4.0f, 0.0f}},
                            {"blk.0.attn_q.weight", 3, {3.0f, 6.0f, 9.0f}, {3.0f}}});
  const ImportanceMatrix m = read_importance_matrix(path);
  ASSERT_EQ(m.entries.size(), 2u);
  EXPECT_EQ(m.entries.at("blk.0.ffn_up_exps.weight"), (std::vector<float>{2.0f, 1.0f, 1.0f, 1.0f}));
  EXPECT_EQ(m.entries.at("blk.0.attn_q.weight"), (std::vector<float>{1.0f, 2.0f, 3.0f}));
  EXPECT_EQ(m.chunks, 100);
  EXPECT_EQ(m.datasets, (std::vector<std::string>{"wiki.train.raw"}));
  std::filesystem::remove(path);
}

TEST(ImportanceMatrix, HostileFilesEndInOneError) {
  const std::string path = temp_path("bad");
  const std::string good = legacy_bytes({{"a.weight", 1, {1.0f, 2.0f}}}, 5, "d");
  struct Case {
    std::string bytes, message;
  };
  std::string huge_count = good;
  const int32_t big = 1 << 30;
  std::memcpy(huge_count.data(), &big, 4);
  std::string huge_name = good;
  std::memcpy(huge_name.data() + 4, &big, 4);
  std::string huge_values = good;
  std::memcpy(huge_values.data() + 4 + 4 + 8 + 4, &big, 4);
  const float nan = std::nanf("");
  const Case cases[] = {
      {"", "truncated"},
      {std::string("\0\0\0\0", 4), "0 entries"},
      {huge_count, "entries in a file of"},
      {huge_name, "has a name of"},
      {huge_values, "claims 1073741824 values"},
      {good.substr(0, 28), "claims 2 values, 4 bytes are left"},
      {good.substr(0, good.size() - 3), "truncated at byte 36"},
      {good.substr(0, good.size() - 1), "dataset name of 1 bytes"},
      {good + "xyz", "3 unexpected bytes"},
      {legacy_bytes({{"a.weight", 1, {nan}}}), "value 0 is nan"},
      {legacy_bytes({{"a.weight", 1, {-1.0f}}}), "value 0 is -1"},
      {legacy_bytes({{"a.weight", 1, {1.0f}}, {"a.weight", 1, {1.0f}}}), "appears twice"},
  };
  for (const Case& c : cases) {
    AtomicFile::write_file(path, c.bytes);
    const auto [kind, message] = read_error(path);
    EXPECT_EQ(kind, ErrorKind::invalid_input) << message;
    EXPECT_NE(message.find(c.message), std::string::npos) << message << " / wanted: " << c.message;
  }
  write_gguf_imatrix(path, {{"a.weight", 2, {1.0f, 2.0f}, {1.0f}}}, false);
  EXPECT_NE(read_error(path).second.find("missing imatrix.datasets"), std::string::npos);
  write_gguf_imatrix(path, {{"a.weight", 2, {1.0f, 2.0f}, {-1.0f}}});
  EXPECT_NE(read_error(path).second.find("counts' value 0 is -1"), std::string::npos);
  // a sum without its counts, and one with counts for two matrices
  for (bool with_counts : {false, true}) {
    gguf::Writer w;
    w.set("imatrix.datasets", gguf::Value::string_array({"x"}));
    w.set("imatrix.chunk_count", gguf::Value::u32(1));
    w.set("imatrix.chunk_size", gguf::Value::u32(1));
    const float v[2] = {1.0f, 2.0f};
    const int64_t ne[4] = {2, 1, 1, 1}, nc[4] = {1, 2, 1, 1};
    w.add_tensor("a.weight.in_sum2", DType::F32, 2, ne, v);
    if (with_counts) w.add_tensor("a.weight.counts", DType::F32, 2, nc, v);
    w.write(path);
    EXPECT_NE(read_error(path).second.find(with_counts ? "is not f32 [n, m]" : "has no 'a.weight.counts'"),
              std::string::npos)
        << read_error(path).second;
  }
  write_gguf_imatrix(path, {});
  EXPECT_NE(read_error(path).second.find("no entries"), std::string::npos);
  AtomicFile::write_file(path, std::string("GGUF\x03\0\0\0garbage", 15));  // GGUF's magic, then nonsense
  const auto [kind, message] = read_error(path);
  EXPECT_EQ(kind, ErrorKind::invalid_input) << message;
  EXPECT_NE(message.find("importance matrix '"), std::string::npos) << message;
  EXPECT_NE(message.find("truncated"), std::string::npos) << message;
  std::filesystem::remove(path);
  EXPECT_EQ(read_error(path).first, ErrorKind::io);
}

TEST(ImportanceMatrix, IncludeAndExcludeBySubstring) {
  ImportanceMatrix m;
  for (const char* n : {"blk.0.attn_v.weight", "blk.0.ffn_down.weight", "blk.1.attn_v.weight", "output.weight"})
    m.entries[n] = {1.0f};
  ImportanceMatrix a = m;
  filter_importance_matrix(a, {"attn_v"}, {});
  EXPECT_EQ(a.entries.size(), 2u);
  ImportanceMatrix b = m;
  filter_importance_matrix(b, {}, {"blk.0.", "output"});
  ASSERT_EQ(b.entries.size(), 1u);
  EXPECT_EQ(b.entries.begin()->first, "blk.1.attn_v.weight");
}

// A tiny F32 llama and a matrix for every one of its weight matrices, with importance spread over
// the columns as real activations are (log-normal).
struct Fixture {
  std::string model = temp_path("f32.gguf");
  ImportanceMatrix matrix;
  Fixture() {
    NewModelOptions o;
    o.hparams = preset_hparams(Arch::llama, "tiny");
    o.type = DType::F32;
    o.seed = 3;
    o.output = model;
    make_random_model(o);
    const auto f = gguf::File::open(model);
    std::mt19937 rng(5);
    std::normal_distribution<float> dist(0.0f, 1.5f);
    for (const gguf::TensorInfo& t : f->tensors()) {
      if (t.n_dims < 2 || t.name == "token_embd.weight") continue;
      std::vector<float> v((size_t)(t.ne[0] * t.ne[2]));
      for (float& x : v) x = std::exp(dist(rng));
      matrix.entries[t.name] = std::move(v);
    }
    matrix.path = "calibration.imatrix";
    matrix.datasets = {"text.txt"};
    matrix.chunks = 7;
  }
  ~Fixture() { std::filesystem::remove(model); }
};

// Sum over the file's matrices of importance * (quantized - f32)^2.
double weighted_error(const std::string& quantized, const std::string& f32, const ImportanceMatrix& m) {
  const auto q = gguf::File::open(quantized), r = gguf::File::open(f32);
  double e = 0.0;
  for (const auto& [name, imp] : m.entries) {
    const gguf::TensorInfo* tq = q->find_tensor(name);
    const gguf::TensorInfo* tr = r->find_tensor(name);
    const int64_t ne0 = tr->ne[0], rows = tr->nelements() / ne0;
    std::vector<float> y((size_t)ne0);
    const size_t qrow = row_size(tq->type, ne0);
    const auto* x = reinterpret_cast<const float*>(r->tensor_data(*tr));
    for (int64_t row = 0; row < rows; ++row) {
      dtype_info(tq->type).to_float(q->tensor_data(*tq) + (size_t)row * qrow, y.data(), ne0);
      for (int64_t i = 0; i < ne0; ++i) {
        const double d = (double)y[(size_t)i] - x[row * ne0 + i];
        e += imp[(size_t)i] * d * d;
      }
    }
  }
  return e;
}

TEST(ImportanceMatrix, QuantizeWeightsTheErrorAndRecordsTheMatrix) {
  Fixture fx;
  QuantizeOptions o;
  o.input = fx.model;
  o.type = "Q4_K_M";
  o.n_threads = 2;
  o.log = nullptr;
  o.output = temp_path("plain.gguf");
  quantize_model(o);
  const std::string plain = o.output;
  o.output = temp_path("weighted.gguf");
  o.imatrix = &fx.matrix;
  quantize_model(o);
  const std::string weighted = o.output;

  const double e_plain = weighted_error(plain, fx.model, fx.matrix);
  const double e_weighted = weighted_error(weighted, fx.model, fx.matrix);
  std::printf("Q4_K_M weighted error with the matrix / without: %.3f\n", e_weighted / e_plain);
  EXPECT_LT(e_weighted, 0.85 * e_plain) << e_weighted << " vs " << e_plain;

  const auto f = gguf::File::open(weighted);
  EXPECT_EQ(f->get_string("quantize.imatrix.file"), "calibration.imatrix");
  EXPECT_EQ(f->get_string("quantize.imatrix.dataset"), "text.txt");
  EXPECT_EQ(f->get_int("quantize.imatrix.entries_count"), (int64_t)fx.matrix.entries.size());
  EXPECT_EQ(f->get_int("quantize.imatrix.chunks_count"), 7);
  EXPECT_FALSE(gguf::File::open(plain)->find("quantize.imatrix.file"));
  std::filesystem::remove(plain);
  std::filesystem::remove(weighted);
}

TEST(ImportanceMatrix, AnotherModelsMatrixIsRefusedBeforeAnyOutput) {
  Fixture fx;
  fx.matrix.entries.begin()->second.push_back(1.0f);
  QuantizeOptions o;
  o.input = fx.model;
  o.output = temp_path("never.gguf");
  o.type = "Q4_0";
  o.log = nullptr;
  o.imatrix = &fx.matrix;
  try {
    quantize_model(o);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_input);
    EXPECT_NE(std::string(e.what()).find("the tensor needs"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(std::filesystem::exists(o.output));
}

}  // namespace
}  // namespace loom
