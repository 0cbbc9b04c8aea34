// Every output file is written through AtomicFile: a unique temporary name in the destination's
// folder (created with O_EXCL, so a symlink or another writer's file is never followed or
// shared), fsync, then rename over the destination. The temporary is removed on failure, and on
// SIGINT/SIGTERM when the process handlers from install_exit_on_signal() run. A destination
// that exists and is not a regular file (device, FIFO, directory) is refused.
// Inputs are opened through open_regular_file: a FIFO or device is refused before it can block.
#pragma once

#include <atomic>
#include <cstddef>
#include <string>
#include <string_view>

namespace loom {

// Throws io (exit 3) when `path` exists and is not a regular file (or a symlink to one: a
// device, FIFO, socket or folder), or when its folder does not exist or cannot be written. `flag` names the option in the message ("-o").
void check_output_path(const std::string& path, std::string_view flag = "-o");

// Opens path read-only after checking it is a regular file (O_NONBLOCK for the check, so a FIFO
// never blocks open). Returns the descriptor (blocking again); throws io naming `what` and path.
int open_regular_file(const std::string& path, std::string_view what);
// The whole regular file (throws io when it cannot be read).
std::string read_regular_file(const std::string& path, std::string_view what);

class AtomicFile {
 public:
  // Checks the destination (check_output_path) and creates the temporary.
  explicit AtomicFile(std::string path);
  ~AtomicFile();  // removes the temporary unless committed
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return tmp_; }
  void write(const void* data, size_t n);
  void truncate(size_t size);  // extends with a sparse hole (header-only files)
  // fsync, close, rename into place, fsync the folder. After this the file is the destination.
  void commit();

  // Writes bytes to path atomically.
  static void write_file(const std::string& path, std::string_view bytes);

 private:
  std::string path_, tmp_;
  int fd_ = -1;
  int slot_ = -1;  // registration for removal on a signal
  bool committed_ = false;
};

// A path removed when this object dies, at exit through a signal (install_exit_on_signal), or
// never when release() is called. For temporaries a tool makes by other means.
class ScopedTempPath {
 public:
  explicit ScopedTempPath(std::string path);
  ~ScopedTempPath();
  ScopedTempPath(const ScopedTempPath&) = delete;
  ScopedTempPath& operator=(const ScopedTempPath&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int slot_ = -1;
};

// SIGINT/SIGTERM: remove every registered temporary and exit 128 + signal at once. Installed by
// every tool's main (run_main).
void install_exit_on_signal();

// While one of these lives, SIGINT/SIGTERM are only recorded (pending_signal()): the holder
// polls and finishes its unit of work first (loom-train's steps). A signal still pending when
// it dies (not taken with take_pending_signal) is acted on then. One at a time.
class DeferSignals {
 public:
  DeferSignals();
  ~DeferSignals();
  DeferSignals(const DeferSignals&) = delete;
  DeferSignals& operator=(const DeferSignals&) = delete;
};
// The signal received while deferred (0 when none).
int pending_signal();
// The same, and forgets it: the caller handles it.
int take_pending_signal();
// Unlinks every registered temporary (async-signal-safe; for fatal-signal handlers).
void remove_registered_temps();
// Removes the registered temporaries and exits 128 + sig (what the handler does).
[[noreturn]] void exit_on_signal(int sig);

}  // namespace loom
