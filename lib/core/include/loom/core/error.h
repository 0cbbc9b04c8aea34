// Errors that a user or a file can cause are exceptions of one type, loom::Error, carrying a
// kind that each tool maps to an exit code (see docs/CLI.md). LOOM_ASSERT is for broken
// invariants only. Status/Result are for the few APIs that must not throw (allocation).
#pragma once

#include <fmt/format.h>

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

namespace loom {

enum class ErrorKind { usage, invalid_input, out_of_memory, unsupported, io, internal };

const char* error_kind_name(ErrorKind kind);
// Exit code a tool returns for an error of this kind: 2 usage, 3 bad input, 4 memory/device.
int exit_code_for(ErrorKind kind);

class Error : public std::runtime_error {
 public:
  Error(ErrorKind kind, std::string message) : std::runtime_error(std::move(message)), kind_(kind) {}
  ErrorKind kind() const { return kind_; }

 private:
  ErrorKind kind_;
};

template <typename... Args>
[[noreturn]] void fail(ErrorKind kind, fmt::format_string<Args...> f, Args&&... args) {
  throw Error(kind, fmt::format(f, std::forward<Args>(args)...));
}

[[noreturn]] void assert_failed(const char* file, int line, const char* cond, const std::string& msg);

// A success or an error, for calls that report failure instead of throwing.
class Status {
 public:
  Status() = default;
  static Status ok() { return {}; }
  static Status error(ErrorKind kind, std::string message) { return Status(kind, std::move(message)); }
  bool is_ok() const { return !error_.has_value(); }
  explicit operator bool() const { return is_ok(); }
  ErrorKind kind() const { return error_->first; }
  const std::string& message() const { return error_->second; }
  // Throws the error as loom::Error (no-op when ok).
  void throw_if_error() const {
    if (error_) throw Error(error_->first, error_->second);
  }

 private:
  Status(ErrorKind kind, std::string message) : error_(std::in_place, kind, std::move(message)) {}
  std::optional<std::pair<ErrorKind, std::string>> error_;
};

}  // namespace loom

// Condition a user or file can break: throws loom::Error{kind, message}.
#define LOOM_CHECK(cond, kind, ...)                                 \
  do {                                                              \
    if (!(cond)) ::loom::fail(::loom::ErrorKind::kind, __VA_ARGS__); \
  } while (0)

// Internal invariant: a failure is a bug in loom.
#define LOOM_ASSERT(cond, ...)                                                                 \
  do {                                                                                         \
    if (!(cond)) ::loom::assert_failed(__FILE__, __LINE__, #cond, fmt::format("" __VA_ARGS__)); \
  } while (0)
