// The one wrapper every tool's main() goes through: runs the tool, turns loom::Error, CLI11
// parse errors and std::bad_alloc into one stderr line `loom-<tool>: error: ...` and the
// documented exit code (0 ok, 1 negative result, 2 usage, 3 bad input, 4 memory/device).
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace CLI {
class App;
}

namespace loom::tools {

inline constexpr const char* kVersion = "0.1.0";

// body parses nothing itself: it receives the parsed app state through captured options.
// Returns the process exit code.
int run_main(const char* tool_name, int argc, char** argv, CLI::App& app, const std::function<int()>& body);

// argv[1..] with llama.cpp's multi-letter single-dash flags (-ngl, -ub, ...) renamed to their
// long forms, reversed as CLI::App::parse(std::vector) expects.
std::vector<std::string> normalize_args(int argc, char** argv);

// llama.cpp's multi-letter single-dash flags and the long names they stand for.
std::vector<std::pair<std::string, std::string>> llama_aliases();
// A bash completion script for the tool (`loom-<tool> --completion-bash` prints it).
std::string bash_completion(const CLI::App& app, const char* tool_name);

// Prints `loom-<tool>: error: <message>` on stderr.
void print_error(const char* tool_name, const char* message);

}  // namespace loom::tools
