// cuBLAS is opened on first use, not at process start (cublas_lib.h); no GPU needed.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "cublas_lib.h"

namespace {

bool cublas_mapped() {
  std::ifstream maps("/proc/self/maps");
  std::stringstream text;
  text << maps.rdbuf();
  return text.str().find("libcublas.so") != std::string::npos;
}

TEST(CublasLib, OpensOnFirstUseWithEveryEntryPoint) {
  // (ctest runs each test in its own process; run whole, an earlier test may have opened it. That
  // no tool links it is link.tools_without_cublas.)
  if (cublas_mapped()) GTEST_SKIP() << "cuBLAS already opened by an earlier test in this process";
  const loom::cuda::CublasLib& lib = loom::cuda::cublas();
  EXPECT_TRUE(cublas_mapped());
  EXPECT_NE(lib.create, nullptr);
  EXPECT_NE(lib.destroy, nullptr);
  EXPECT_NE(lib.set_stream, nullptr);
  EXPECT_NE(lib.set_workspace, nullptr);
  EXPECT_NE(lib.gemm_ex, nullptr);
  EXPECT_EQ(&loom::cuda::cublas(), &lib);  // loaded once
}

}  // namespace
