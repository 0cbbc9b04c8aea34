// The GGUF reader against its file changing or the address space running short: a file
// truncated while its data is mapped ends the process with exit 3 (not SIGBUS), the metadata is
// read without mapping the data, a data mapping that does not fit is out_of_memory with the size,
// header-only files are recognized, and the checksum covers every byte but its own.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <vector>

#include "gguf_test_util.h"
#include "loom/core/error.h"
#include "loom/gguf/gguf.h"

namespace loom {
namespace {

// One f32 tensor of n floats (value i at index i); optionally a checksum key.
void write_model(const std::string& path, int64_t n, bool header_only = false, bool checksum = false) {
  gguf::Writer w;
  w.set("general.architecture", gguf::Value::string("test"));
  if (checksum) w.set_checksum_key("test.checksum");
  std::vector<float> data((size_t)n);
  for (int64_t i = 0; i < n; ++i) data[(size_t)i] = (float)i;
  const int64_t ne[1] = {n};
  w.add_tensor("t", DType::F32, 1, ne, data.data());
  w.write(path, header_only);
}

// Child process: maps the data, truncates the file, reads the mapping.
[[noreturn]] void read_after_truncate(const std::string& path) {
  auto f = gguf::File::open(path);
  const uint8_t* p = f->tensor_data(f->tensors()[0]);
  if (::truncate(path.c_str(), 0) != 0) std::abort();
  volatile uint8_t sink = 0;
  for (size_t i = 0; i < f->tensors()[0].nbytes; i += 4096) sink = sink + p[i];
  std::exit(0);
}

TEST(GgufFiles, TruncatedWhileMappedExitsThree) {
  test::ScratchDir dir("gguf-files");
  const std::string path = dir.file("m.gguf");
  write_model(path, 1 << 20);  // 4 MiB of data: pages well past the header
  EXPECT_EXIT(read_after_truncate(path), ::testing::ExitedWithCode(3), "shrank or was rewritten while in use");
}

TEST(GgufFiles, CheckSizeSeesATruncatedFile) {
  test::ScratchDir dir("gguf-files");
  const std::string path = dir.file("m.gguf");
  write_model(path, 1024);
  auto f = gguf::File::open(path);
  f->check_size();
  ASSERT_EQ(::truncate(path.c_str(), 100), 0);
  try {
    f->check_size();
    ADD_FAILURE() << "a truncated file passed";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::invalid_input);
    EXPECT_NE(std::string(e.what()).find("shrank"), std::string::npos) << e.what();
  }
}

// Child process: 1 GiB of address space, less than the file; the metadata still reads.
[[noreturn]] void open_and_map_under_limit(const std::string& path) {
  rlimit lim{};
  lim.rlim_cur = lim.rlim_max = 1u << 30;
  if (setrlimit(RLIMIT_AS, &lim) != 0) std::abort();
  auto f = gguf::File::open(path);
  if (f->tensors().size() != 1) std::exit(10);
  try {
    (void)f->tensor_data(f->tensors()[0]);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::exit(e.kind() == ErrorKind::out_of_memory ? 4 : 11);
  }
  std::exit(12);
}

TEST(GgufFiles, MetadataReadWithoutMappingAndMappingFailureIsOutOfMemory) {
  test::ScratchDir dir("gguf-files");
  const std::string path = dir.file("big.gguf");
  write_model(path, int64_t(1) << 29, /*header_only=*/true);  // 2 GiB, sparse
  EXPECT_EXIT(open_and_map_under_limit(path), ::testing::ExitedWithCode(4), "cannot map 21474[0-9]+ bytes");
}

TEST(GgufFiles, HeaderOnlyIsRecognized) {
  test::ScratchDir dir("gguf-files");
  write_model(dir.file("h.gguf"), 1 << 18, /*header_only=*/true);
  write_model(dir.file("d.gguf"), 1 << 18);
  EXPECT_TRUE(gguf::File::open(dir.file("h.gguf"))->data_is_hole());
  EXPECT_FALSE(gguf::File::open(dir.file("d.gguf"))->data_is_hole());
}

TEST(GgufFiles, ChecksumCoversEveryByteButItsOwn) {
  test::ScratchDir dir("gguf-files");
  const std::string path = dir.file("c.gguf");
  write_model(path, 5000, false, /*checksum=*/true);
  auto f = gguf::File::open(path);
  const uint64_t stored = (uint64_t)*f->find_int("test.checksum");
  EXPECT_NE(stored, 0u);
  EXPECT_EQ(f->checksum("test.checksum"), stored);
  std::ifstream in(path, std::ios::binary);
  const std::string bytes(std::istreambuf_iterator<char>(in), {});
  for (size_t at : {size_t(9), bytes.size() / 2, bytes.size() - 1}) {
    std::string bad = bytes;
    bad[at] ^= 1;
    try {
      auto g = gguf::File::open_memory(bad.data(), bad.size(), "bad");
      EXPECT_NE(g->checksum("test.checksum"), stored) << "byte " << at;
    } catch (const Error&) {
      // a flipped header byte may not parse at all: also caught
    }
  }
}

}  // namespace
}  // namespace loom
