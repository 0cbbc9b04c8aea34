// The "loom" logger and its configuration.
#include "loom/core/log.h"

#include <spdlog/sinks/basic_file_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>

#include "loom/core/error.h"

namespace loom {

namespace {

std::shared_ptr<spdlog::logger> make_default() {
  auto sink = std::make_shared<spdlog::sinks::stderr_color_sink_mt>(spdlog::color_mode::automatic);
  sink->set_pattern("%^%v%$");  // messages read like llama.cpp's: the text, colored by level on a TTY
  auto log = std::make_shared<spdlog::logger>("loom", sink);
  log->set_level(spdlog::level::warn);
  log->flush_on(spdlog::level::trace);  // interleaves correctly with the tools' own stderr lines
  return log;
}

std::shared_ptr<spdlog::logger>& instance() {
  static std::shared_ptr<spdlog::logger> log = make_default();
  return log;
}

spdlog::level::level_enum level_for(int verbosity) {
  switch (verbosity) {
    case 0: return spdlog::level::off;
    case 1: return spdlog::level::err;
    case 2: return spdlog::level::warn;
    case 3: return spdlog::level::info;
    default: return spdlog::level::trace;
  }
}

}  // namespace

spdlog::logger& logger() { return *instance(); }

void configure_log(int verbosity, const std::string& file) {
  LOOM_CHECK(verbosity >= 0, usage, "-lv {}: expected 0 (off) to 4 (debug)", verbosity);
  auto log = make_default();
  const spdlog::level::level_enum console = level_for(verbosity);
  log->sinks().front()->set_level(console);
  log->set_level(console);
  if (!file.empty()) {
    // opened here first: spdlog would create missing parent folders rather than fail
    std::FILE* f = std::fopen(file.c_str(), "w");
    LOOM_CHECK(f != nullptr, usage, "--log-file '{}': cannot open it for writing: {}", file, std::strerror(errno));
    std::fclose(f);
    auto sink = std::make_shared<spdlog::sinks::basic_file_sink_mt>(file, /*truncate=*/true);
    sink->set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%l] %v");
    const auto level = std::min(console, spdlog::level::info);  // the file keeps the load log at least
    sink->set_level(level);
    log->sinks().push_back(sink);
    log->set_level(level);
  }
  instance() = log;
}

}  // namespace loom
