// Shared main() wrapper: flag parsing with CLI11 and error-to-exit-code mapping.
#include "loom/tools/main.h"

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <algorithm>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/error.h"
#include "loom/core/files.h"
#include "loom/meta/comm.h"

namespace loom::tools {

void print_error(const char* tool_name, const char* message) {
  std::fflush(stdout);
  fmt::print(stderr, "loom-{}: error: {}\n", tool_name, message);
}

namespace {
// llama.cpp's multi-letter single-dash flags, which CLI11 cannot declare, mapped to long names.
constexpr std::pair<const char*, const char*> kAliases[] = {
    {"-ngl", "--n-gpu-layers"}, {"-ub", "--ubatch-size"},   {"-ts", "--tensor-split"},    {"-sm", "--split-mode"},
    {"-mg", "--main-gpu"},      {"-dev", "--device"},       {"-ot", "--override-tensor"}, {"-cmoe", "--cpu-moe"},
    {"-fa", "--flash-attn"},    {"-ctk", "--cache-type-k"}, {"-ctv", "--cache-type-v"},   {"-opt", "--optimizer"},
    {"-lr", "--learning-rate"}, {"-lr-min", "--lr-min"},    {"-wd", "--weight-decay"},    {"-epochs", "--epochs"},
    {"-nr", "--no-repack"},
};
}  // namespace

std::vector<std::string> normalize_args(int argc, char** argv) {
  std::vector<std::string> out;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    for (const auto& [from, to] : kAliases)
      if (a == from) a = to;
    out.push_back(std::move(a));
  }
  std::reverse(out.begin(), out.end());  // CLI11 takes a reversed vector
  return out;
}

int run_main(const char* tool_name, int argc, char** argv, CLI::App& app, const std::function<int()>& body) {
  app.set_version_flag("--version", fmt::format("loom-{} {}", tool_name, kVersion));
  try {
    std::vector<std::string> args = normalize_args(argc, argv);
    app.parse(args);
  } catch (const CLI::CallForHelp&) {
    fmt::print("{}", app.help());
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    fmt::print("{}", app.help("", CLI::AppFormatMode::All));
    return 0;
  } catch (const CLI::CallForVersion&) {
    fmt::print("loom-{} {}\n", tool_name, kVersion);
    return 0;
  } catch (const CLI::ParseError& e) {
    print_error(tool_name, e.what());
    return 2;
  }
  install_exit_on_signal();  // SIGINT/SIGTERM: temporaries removed, exit 130/143
  int rc = 0;
  try {
    rc = body();
    // Buffered output is only written now: a full disk or closed pipe must not read as success.
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
      print_error(tool_name, fmt::format("cannot write to standard output: {}", std::strerror(errno)).c_str());
      rc = 1;
    }
    return rc;
  } catch (const Error& e) {
    print_error(tool_name, e.what());
    rc = exit_code_for(e.kind());
  } catch (const std::bad_alloc&) {
    print_error(tool_name, "out of memory");
    rc = 4;
  } catch (const std::exception& e) {
    print_error(tool_name, e.what());
    rc = std::ferror(stdout) ? 1 : 5;  // fmt throws when a write to stdout fails
  }
  meta::mpi_abort_if_running(rc);  // --comm mpi: the other ranks would wait in a collective forever
  return rc;
}

}  // namespace loom::tools
