// Test helpers for GGUF: a hand-rolled byte builder that encodes the format independently of
// loom's writer (so reader tests do not trust the code they test), and a scratch directory.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "loom/core/error.h"
#include "loom/gguf/gguf.h"

namespace loom::test {

// Little-endian byte string, built field by field as the GGUF spec lays them out.
struct Raw {
  std::string b;
  template <typename T>
  Raw& put(T v) {
    b.append(reinterpret_cast<const char*>(&v), sizeof(v));
    return *this;
  }
  Raw& str(std::string_view s) {
    put<uint64_t>(s.size());
    b.append(s);
    return *this;
  }
  Raw& pad(size_t a) {
    while (b.size() % a) b.push_back('\0');
    return *this;
  }
  Raw& header(int64_t n_tensors, int64_t n_kv, uint32_t version = 3) {
    b.append("GGUF");
    put<uint32_t>(version);
    put<int64_t>(n_tensors);
    put<int64_t>(n_kv);
    return *this;
  }
  Raw& kv_u32(std::string_view key, uint32_t v) {
    str(key);
    put<int32_t>(4);
    return put<uint32_t>(v);
  }
  Raw& kv_str(std::string_view key, std::string_view v) {
    str(key);
    put<int32_t>(8);
    return str(v);
  }
  Raw& tensor(std::string_view name, std::vector<int64_t> ne, int32_t type, uint64_t offset) {
    str(name);
    put<uint32_t>((uint32_t)ne.size());
    for (int64_t n : ne) put<int64_t>(n);
    put<int32_t>(type);
    return put<uint64_t>(offset);
  }
  Raw& zeros(size_t n) {
    b.append(n, '\0');
    return *this;
  }
};

inline std::unique_ptr<gguf::File> parse(const std::string& bytes) {
  return gguf::File::open_memory(bytes.data(), bytes.size(), "mem.gguf");
}

// Parsing must throw loom::Error of this kind whose message names the file and has `needle`.
inline void expect_parse_error(const std::string& bytes, ErrorKind kind, std::string_view needle) {
  try {
    parse(bytes);
    ADD_FAILURE() << "parsed without error; expected: " << needle;
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(e.kind(), kind) << msg;
    EXPECT_NE(msg.find("mem.gguf"), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg << "\nexpected to contain: " << needle;
  }
}

// A fresh directory under the temp dir, removed with its contents at scope exit.
class ScratchDir {
 public:
  explicit ScratchDir(std::string_view tag) {
    path_ = std::filesystem::temp_directory_path() /
            ("loom-" + std::string(tag) + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(std::string_view name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  static int& counter() {
    static int n = 0;
    return n;
  }
  std::filesystem::path path_;
};

}  // namespace loom::test
