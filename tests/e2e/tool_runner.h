// Runs a loom tool from build/bin as a user would and captures exit code, stdout and stderr.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace loom::test {

// A file's bytes (empty when it cannot be read).
inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// s as one single-quoted shell word.
inline std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

struct ToolResult {
  int rc = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// A fresh scratch folder for the running test, unique per process (ctest -j2 runs test
// processes side by side) and per test.
inline std::filesystem::path scratch_dir(const std::string& prefix) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / (prefix + "-" + std::to_string(getpid()) + "-" +
                                                    ::testing::UnitTest::GetInstance()->current_test_info()->name());
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// Removes a scratch folder, also one a test made read-only.
inline void remove_scratch(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::permissions(dir, std::filesystem::perms::owner_all, ec);
  std::filesystem::remove_all(dir, ec);
}

// Runs a shell command line with stdout and stderr captured through files in dir.
inline ToolResult run_command(const std::string& cmd, const std::filesystem::path& dir) {
  const std::string out = (dir / "stdout.txt").string(), err = (dir / "stderr.txt").string();
  const int status = std::system((cmd + " >" + quote(out) + " 2>" + quote(err)).c_str());
  ToolResult r;
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

// args: "loom-run -m x.gguf ..." (a shell command line relative to the bin folder).
inline ToolResult run_tool(const std::string& args) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("loom-e2e-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const std::string err_path = (dir / "stderr.txt").string();
  const std::string cmd = std::string(LOOM_BIN_DIR) + "/" + args + " 2>" + err_path;
  ToolResult r;
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  std::ifstream e(err_path);
  r.err.assign(std::istreambuf_iterator<char>(e), {});
  return r;
}

}  // namespace loom::test
