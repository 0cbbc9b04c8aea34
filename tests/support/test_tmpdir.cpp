// Linked into every test binary: the process works in a temporary folder of its own
// ($TMPDIR/loom-test-PID, exported as TMPDIR, so the tools a test runs use it too), removed when
// the tests end. Files a test or a tool leaves in the temporary directory stay off the machine.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

namespace {

namespace fs = std::filesystem;

class TestTmpdir : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* old = std::getenv("TMPDIR");
    if (old) old_ = old;
    dir_ = fs::temp_directory_path() / ("loom-test-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    ::setenv("TMPDIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    if (old_.empty())
      ::unsetenv("TMPDIR");
    else
      ::setenv("TMPDIR", old_.c_str(), 1);
    std::error_code ec;
    for (auto it = fs::recursive_directory_iterator(dir_, ec); !ec && it != fs::recursive_directory_iterator();
         it.increment(ec))
      if (it->is_directory(ec)) fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(dir_, ec);
  }

 private:
  fs::path dir_;
  std::string old_;
};

[[maybe_unused]] ::testing::Environment* const kTmpdir = ::testing::AddGlobalTestEnvironment(new TestTmpdir);

}  // namespace
