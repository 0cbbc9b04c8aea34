// Runs a loom tool from build/bin as a user would and captures exit code, stdout and stderr.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
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
