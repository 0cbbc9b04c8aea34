// AtomicFile, the registry of temporaries removed on a signal, and the process signal handlers.
#include "loom/core/files.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "loom/core/error.h"

namespace loom {

namespace {

namespace fs = std::filesystem;

// Paths to unlink from a signal handler: heap copies published through atomics (the handler
// only reads them and calls unlink, both async-signal-safe).
constexpr int kSlots = 64;
std::atomic<char*> g_temps[kSlots];
std::atomic<int> g_defer{0};
std::atomic<int> g_pending{0};

int register_temp(const std::string& path) {
  char* copy = ::strdup(path.c_str());
  if (!copy) throw std::bad_alloc();
  for (int i = 0; i < kSlots; ++i) {
    char* expected = nullptr;
    if (g_temps[i].compare_exchange_strong(expected, copy)) return i;
  }
  std::free(copy);  // more than kSlots at once: still removed by the owner's destructor
  return -1;
}

void unregister_temp(int slot) {
  if (slot < 0) return;
  std::free(g_temps[slot].exchange(nullptr));
}

extern "C" void on_exit_signal(int sig) {
  if (g_defer.load() > 0) {
    g_pending.store(sig);
    if (g_defer.load() > 0) return;
    // The holder let go between the two loads and may have missed the signal: act on it here
    // unless it did not.
    sig = g_pending.exchange(0);
    if (sig == 0) return;
  }
  exit_on_signal(sig);
}

// Holds SIGINT and SIGTERM (from any thread) for a short critical section: one that arrives is
// recorded and acted on at the end, unless an outer DeferSignals still holds them.
class SignalsHeld {
 public:
  SignalsHeld() { g_defer.fetch_add(1); }
  ~SignalsHeld() {
    if (g_defer.fetch_sub(1) == 1)
      if (const int sig = g_pending.exchange(0)) exit_on_signal(sig);
  }
  SignalsHeld(const SignalsHeld&) = delete;
  SignalsHeld& operator=(const SignalsHeld&) = delete;
};

mode_t file_mode() {
  static const mode_t mode = [] {
    const mode_t mask = ::umask(0);
    ::umask(mask);
    return (mode_t)(0666 & ~mask);
  }();
  return mode;
}

std::string folder_of(const std::string& path) {
  const fs::path parent = fs::path(path).parent_path();
  return parent.empty() ? std::string(".") : parent.string();
}

}  // namespace

void check_output_path(const std::string& path, std::string_view flag) {
  LOOM_CHECK(!path.empty(), usage, "{}: no output file given", flag);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    LOOM_CHECK(!S_ISDIR(st.st_mode), io, "{} '{}': is a directory", flag, path);
    LOOM_CHECK(S_ISREG(st.st_mode), io, "{} '{}': exists and is not a regular file (device, FIFO or socket)", flag,
               path);
  }
  const std::string dir = folder_of(path);
  struct stat ds {};
  LOOM_CHECK(::stat(dir.c_str(), &ds) == 0 && S_ISDIR(ds.st_mode), io, "{} '{}': no such directory '{}'", flag, path,
             dir);
  LOOM_CHECK(::access(dir.c_str(), W_OK | X_OK) == 0, io, "{} '{}': cannot write in '{}': {}", flag, path, dir,
             std::strerror(errno));
}

int open_regular_file(const std::string& path, std::string_view what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail(ErrorKind::io, "{} '{}': cannot open: {}", what, path, std::strerror(errno));
  struct stat st {};
  const bool ok = ::fstat(fd, &st) == 0;
  const int e = errno;
  if (!ok || !S_ISREG(st.st_mode)) {
    ::close(fd);
    if (!ok) fail(ErrorKind::io, "{} '{}': cannot stat: {}", what, path, std::strerror(e));
    if (S_ISDIR(st.st_mode)) fail(ErrorKind::io, "{} '{}': is a directory", what, path);
    fail(ErrorKind::io, "{} '{}': not a regular file (FIFO, device or socket)", what, path);
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

std::string read_regular_file(const std::string& path, std::string_view what) {
  const int fd = open_regular_file(path, what);
  std::string out;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      fail(ErrorKind::io, "{} '{}': read error: {}", what, path, std::strerror(e));
    }
    if (n == 0) break;
    out.append(buf, (size_t)n);
  }
  ::close(fd);
  return out;
}

AtomicFile::AtomicFile(std::string path) : path_(std::move(path)) {
  check_output_path(path_);
  const fs::path p(path_);
  std::string name = (fs::path(folder_of(path_)) / fmt::format(".{}.XXXXXX.tmp", p.filename().string())).string();
  {
    // A SIGINT between creating the file and registering it would leave the file behind: hold
    // the exit signals until the handler can see it.
    const SignalsHeld held;
    fd_ = ::mkostemps(name.data(), 4, O_CLOEXEC);  // O_CREAT | O_EXCL: never an existing name or link
    const int e = errno;
    if (fd_ < 0)
      fail(ErrorKind::io, "{}: cannot create a temporary file in '{}': {}", path_, folder_of(path_), std::strerror(e));
    tmp_ = name;
    slot_ = register_temp(tmp_);
  }
  // Earlier versions wrote a fixed PATH.tmp, left behind by an interrupted run (or planted as a
  // link to redirect the write): remove it, never following a link.
  struct stat legacy {};
  const std::string old_tmp = path_ + ".tmp";
  if (::lstat(old_tmp.c_str(), &legacy) == 0 && (S_ISLNK(legacy.st_mode) || S_ISREG(legacy.st_mode)))
    ::unlink(old_tmp.c_str());
  if (::fchmod(fd_, file_mode()) != 0) {
    const int e = errno;
    ::close(fd_);
    ::unlink(tmp_.c_str());
    unregister_temp(slot_);
    fail(ErrorKind::io, "{}: cannot set the mode of '{}': {}", path_, tmp_, std::strerror(e));
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(tmp_.c_str());
  unregister_temp(slot_);
}

void AtomicFile::write(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, std::min(n, (size_t)1 << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) fail(ErrorKind::io, "{}: write failed: {}", path_, w < 0 ? std::strerror(errno) : "no progress");
    p += w;
    n -= (size_t)w;
  }
}

void AtomicFile::truncate(size_t size) {
  if (::ftruncate(fd_, (off_t)size) != 0)
    fail(ErrorKind::io, "{}: cannot extend to {} bytes: {}", path_, size, std::strerror(errno));
}

void AtomicFile::commit() {
  LOOM_ASSERT(fd_ >= 0 && !committed_, "commit of a closed AtomicFile");
  if (::fsync(fd_) != 0) fail(ErrorKind::io, "{}: fsync failed: {}", path_, std::strerror(errno));
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) fail(ErrorKind::io, "{}: close failed: {}", path_, std::strerror(errno));
  // The destination may have become something else since the constructor checked it.
  struct stat st {};
  if (::stat(path_.c_str(), &st) == 0)
    LOOM_CHECK(S_ISREG(st.st_mode), io, "{}: exists and is not a regular file", path_);
  if (::rename(tmp_.c_str(), path_.c_str()) != 0)
    fail(ErrorKind::io, "{}: cannot rename '{}' into place: {}", path_, tmp_, std::strerror(errno));
  committed_ = true;
  unregister_temp(slot_);
  slot_ = -1;
  const int dir = ::open(folder_of(path_).c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir >= 0) {
    ::fsync(dir);  // the rename itself durable; best effort (some file systems refuse)
    ::close(dir);
  }
}

void AtomicFile::write_file(const std::string& path, std::string_view bytes) {
  AtomicFile f(path);
  f.write(bytes.data(), bytes.size());
  f.commit();
}

ScopedTempPath::ScopedTempPath(std::string path) : path_(std::move(path)), slot_(register_temp(path_)) {}

ScopedTempPath::~ScopedTempPath() {
  ::unlink(path_.c_str());
  unregister_temp(slot_);
}

void install_exit_on_signal() {
  struct sigaction sa {};
  sa.sa_handler = on_exit_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // a deferred signal must not fail the write to stdout in progress
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

DeferSignals::DeferSignals() {
  g_pending.store(0);
  g_defer.fetch_add(1);
}

DeferSignals::~DeferSignals() {
  g_defer.fetch_sub(1);
  if (const int sig = g_pending.exchange(0)) exit_on_signal(sig);
}

int pending_signal() { return g_pending.load(); }

int take_pending_signal() { return g_pending.exchange(0); }

void remove_registered_temps() {
  for (auto& slot : g_temps)
    if (const char* p = slot.load()) ::unlink(p);
}

void exit_on_signal(int sig) {
  remove_registered_temps();
  ::_exit(128 + sig);
}

}  // namespace loom
