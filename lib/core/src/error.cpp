// Error kinds, their exit codes, and the assertion handler.
#include "loom/core/error.h"

namespace loom {

const char* error_kind_name(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::usage: return "usage";
    case ErrorKind::invalid_input: return "invalid input";
    case ErrorKind::out_of_memory: return "out of memory";
    case ErrorKind::unsupported: return "unsupported";
    case ErrorKind::io: return "io";
    case ErrorKind::internal: return "internal";
  }
  return "unknown";
}

int exit_code_for(ErrorKind kind) {
  switch (kind) {
    case ErrorKind::usage: return 2;
    case ErrorKind::invalid_input:
    case ErrorKind::unsupported:
    case ErrorKind::io: return 3;
    case ErrorKind::out_of_memory: return 4;
    case ErrorKind::internal: return 5;
  }
  return 5;
}

void assert_failed(const char* file, int line, const char* cond, const std::string& msg) {
  throw Error(ErrorKind::internal,
              fmt::format("internal error at {}:{}: {}{}{}", file, line, cond, msg.empty() ? "" : ": ", msg));
}

}  // namespace loom
