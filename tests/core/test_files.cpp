// AtomicFile and the input checks: unique temporaries that never follow a link, no leftovers
// on failure, non-regular destinations and inputs refused; Hasher's streaming equals one shot;
// a thread pool that cannot start its threads throws instead of terminating.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "loom/core/error.h"
#include "loom/core/files.h"
#include "loom/core/hash.h"
#include "loom/core/thread_pool.h"

namespace loom {
namespace {

namespace fs = std::filesystem;

struct Scratch {
  fs::path dir = fs::temp_directory_path() / ("loom-files-" + std::to_string(::getpid()) + "-" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
  Scratch() {
    fs::remove_all(dir);
    fs::create_directories(dir);
  }
  ~Scratch() { fs::remove_all(dir); }
  std::string file(const std::string& n) const { return (dir / n).string(); }
  size_t entries() const { return (size_t)std::distance(fs::directory_iterator(dir), fs::directory_iterator()); }
};

std::string slurp(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(AtomicFile, WritesAndRenamesWithoutFollowingLinks) {
  Scratch s;
  std::ofstream(s.file("victim")) << "keep";
  fs::create_symlink(s.file("victim"), s.file("out.tmp"));
  AtomicFile::write_file(s.file("out"), "new");
  EXPECT_EQ(slurp(s.file("out")), "new");
  EXPECT_EQ(slurp(s.file("victim")), "keep");
  // The link at the old fixed temporary name is removed (never followed); no temporary left.
  EXPECT_FALSE(fs::exists(fs::symlink_status(s.file("out.tmp"))));
  EXPECT_EQ(s.entries(), 2u);
}

TEST(AtomicFile, FailureLeavesNothing) {
  Scratch s;
  {
    AtomicFile f(s.file("out"));
    f.write("partial", 7);
    EXPECT_TRUE(fs::exists(f.temp_path()));
  }  // not committed
  EXPECT_EQ(s.entries(), 0u);
}

TEST(AtomicFile, RefusesNonRegularDestinations) {
  Scratch s;
  ASSERT_EQ(mkfifo(s.file("fifo").c_str(), 0600), 0);
  fs::create_directory(s.file("folder"));
  for (const std::string& p : {std::string("/dev/null"), s.file("fifo"), s.file("folder")}) {
    try {
      AtomicFile f(p);
      ADD_FAILURE() << p << " accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::io) << e.what();
    }
  }
  try {
    AtomicFile f(s.file("no/such/folder/out"));
    ADD_FAILURE() << "a missing folder accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::io);
  }
  struct stat st {};
  ASSERT_EQ(stat("/dev/null", &st), 0);
  EXPECT_TRUE(S_ISCHR(st.st_mode));
}

TEST(InputFiles, FifoAndDirectoryRefusedWithoutBlocking) {
  Scratch s;
  ASSERT_EQ(mkfifo(s.file("fifo").c_str(), 0600), 0);
  for (const std::string& p : {s.file("fifo"), s.dir.string()}) {
    try {
      (void)read_regular_file(p, "-f");
      ADD_FAILURE() << p << " read";
    } catch (const Error& e) {
      EXPECT_EQ(e.kind(), ErrorKind::io) << e.what();
    }
  }
  std::ofstream(s.file("t")) << "text";
  EXPECT_EQ(read_regular_file(s.file("t"), "-f"), "text");
}

TEST(Hasher, StreamingEqualsOneShot) {
  std::string data;
  for (int i = 0; i < 1000; ++i) data += (char)(i * 37);
  const uint64_t one = hash_bytes(data.data(), data.size());
  for (size_t piece : {1, 7, 31, 32, 33, 100}) {
    Hasher h;
    for (size_t at = 0; at < data.size(); at += piece) h.update(data.data() + at, std::min(piece, data.size() - at));
    EXPECT_EQ(h.digest(), one) << piece;
  }
  std::string other = data;
  other[500] ^= 1;
  EXPECT_NE(hash_bytes(other.data(), other.size()), one);
  EXPECT_NE(hash_bytes(data.data(), 999), one);
}

// In a child process (the death test): 512 MiB of address space, 8 MiB thread stacks.
[[noreturn]] void start_300_threads() {
  rlimit lim{};
  lim.rlim_cur = lim.rlim_max = 512u << 20;
  if (setrlimit(RLIMIT_AS, &lim) != 0) std::abort();
  try {
    ThreadPool pool(300);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s\n", e.what());
    std::exit(e.kind() == ErrorKind::out_of_memory ? 4 : 11);
  }
  std::exit(12);
}

TEST(ThreadPool, ThreadsThatCannotStartThrow) {
  EXPECT_EXIT(start_300_threads(), ::testing::ExitedWithCode(4), "cannot start thread");
}

}  // namespace
}  // namespace loom
