// The library's log: one spdlog logger ("loom") on stderr, colored by level on a terminal only.
// Tools configure it from -v / -lv / --log-file / --log-disable (lib/tools-common); until then
// it shows warnings and errors. Results and the loom_perf lines are not log: tools print those.
#pragma once

#include <spdlog/spdlog.h>

#include <memory>
#include <string>

namespace loom {

spdlog::logger& logger();

// llama.cpp's -lv scale: 0 nothing, 1 errors, 2 + warnings, 3 + info (the load log), 4 + debug.
// file: also write every message at this level there (no colors), empty for none; throws
// Error(io) when it cannot be opened.
void configure_log(int verbosity, const std::string& file);

}  // namespace loom
