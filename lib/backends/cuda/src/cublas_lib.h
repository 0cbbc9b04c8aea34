// cuBLAS, opened on first use (dlopen) instead of linked: libcublasLt's constructors run at every
// process start that links it -- ~0.5 s and ~200 MiB on a Zen 5 VM, where `loom-fit-params --help`
// took 0.6 s -- a cost every loom tool paid, GPU or not. Only a CUDA stream opens it.
#pragma once

#include <cublas_v2.h>

namespace loom::cuda {

struct CublasLib {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasDestroy_v2) destroy;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSetWorkspace_v2) set_workspace;
  // the exported cublasGemmEx (the header adds an inline overload taking a cudaDataType compute type)
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
};

// The library's entry points; throws loom::Error (unsupported) naming the library or symbol that
// could not be loaded.
const CublasLib& cublas();

}  // namespace loom::cuda
