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
#include "loom/backend/registry.h"
#include "loom/core/files.h"
#include "loom/core/log.h"

namespace loom::tools {

void print_error(const char* tool_name, const char* message) {
  std::fflush(stdout);
  fmt::print(stderr, "loom-{}: error: {}\n", tool_name, message);
}

namespace {

struct LogOptions {
  bool verbose = false;
  int verbosity = 2;
  bool disable = false;
  std::string file;
};

void add_log_flags(CLI::App& app, LogOptions& o) {
  app.add_flag("-v,--verbose", o.verbose, "log everything (-lv 4)");
  app.add_option("--verbosity", o.verbosity,
                 "log threshold (-lv): 0 nothing, 1 errors, 2 warnings (default), 3 info (the load log), 4 debug");
  app.add_flag("--log-disable", o.disable, "no log messages at all");
  app.add_option("--log-file", o.file, "also write the log (info and up) to this file");
}

}  // namespace

std::string version_string(const char* tool_name) {
  return fmt::format("loom-{} {} (commit {})", tool_name, kVersion, kBuildCommit);
}

int run_main(const char* tool_name, int argc, char** argv, CLI::App& app, const std::function<int()>& body) {
  app.set_version_flag("--version", version_string(tool_name));
  LogOptions log;
  add_log_flags(app, log);
  take_last_repetition(app);
  if (argc == 2 && std::string(argv[1]) == "--completion-bash") {
    fmt::print("{}", bash_completion(app, tool_name));
    return 0;
  }
  try {
    std::vector<std::string> args = normalize_args(app, argc, argv);
    app.parse(args);
    configure_log(log.disable ? 0 : log.verbose ? 4 : log.verbosity, log.file);
  } catch (const CLI::CallForHelp&) {
    fmt::print("{}", app.help());
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    fmt::print("{}", app.help("", CLI::AppFormatMode::All));
    return 0;
  } catch (const CLI::CallForVersion&) {
    fmt::print("{}\n", version_string(tool_name));
    return 0;
  } catch (const CLI::ParseError& e) {
    print_error(tool_name, e.what());
    return 2;
  } catch (const Error& e) {  // a flag normalize_args or the log refused
    print_error(tool_name, e.what());
    return exit_code_for(e.kind());
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
  // --comm mpi: the other ranks would wait in a collective forever
  if (const auto& abort_world = registry().collectives().abort_world) abort_world(rc);
  return rc;
}

}  // namespace loom::tools
