// cuBLAS opened on first use (cublas_lib.h).
#include "cublas_lib.h"

#include <dlfcn.h>

#include <type_traits>

#include "loom/core/error.h"

namespace loom::cuda {
namespace {

// The soname the toolkit's headers belong to (libcublas.so.13 for CUDA 13), then the plain name.
constexpr const char* kNames[] = {"libcublas.so." LOOM_CUBLAS_SOVERSION, "libcublas.so"};

CublasLib load() {
  void* lib = nullptr;
  for (const char* name : kNames)
    if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL))) break;
  LOOM_CHECK(lib, unsupported, "cannot load cuBLAS ({}): {}", kNames[0], dlerror());
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
    LOOM_CHECK(fn, unsupported, "cuBLAS has no {}", name);
  };
  CublasLib l{};
  sym(l.create, "cublasCreate_v2");
  sym(l.destroy, "cublasDestroy_v2");
  sym(l.set_stream, "cublasSetStream_v2");
  sym(l.set_workspace, "cublasSetWorkspace_v2");
  sym(l.gemm_ex, "cublasGemmEx");
  return l;  // the library stays open for the process
}

}  // namespace

const CublasLib& cublas() {
  static const CublasLib lib = load();
  return lib;
}

}  // namespace loom::cuda
