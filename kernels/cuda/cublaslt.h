// cuBLASLt, opened on first use (dlopen) instead of linked. Loading libcublasLt runs its static
// initialization in every process that links it, with a GPU or without: about 0.1 s and 210 MB of
// resident memory, most of `dtensor --help`'s 0.24 s and 270 MB (measured 2026-11-29, 2-core Xeon),
// paid by every plan, explain and launch that never touches a GPU.
#pragma once

#include <cublasLt.h>

namespace dtensor::kernels::cuda {

// The library's soname: CUDA 13's cuBLASLt (the toolkit's lib64, or PyTorch's nvidia-cublas wheel
// on the GPU machine, found through LD_LIBRARY_PATH, this binary's RUNPATH or ld.so.cache).
inline constexpr const char kCublasLtLibrary[] = "libcublasLt.so.13";

// The cuBLASLt functions dtensor calls, each resolved by its own name; the types are the header's,
// so a call is checked against cublasLt.h as a direct call would be.
struct CublasLt {
  decltype(&::cublasLtCreate) cublasLtCreate;
  decltype(&::cublasLtGetStatusName) cublasLtGetStatusName;
  decltype(&::cublasLtGetStatusString) cublasLtGetStatusString;
  decltype(&::cublasLtMatmul) cublasLtMatmul;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) cublasLtMatmulAlgoGetHeuristic;
  decltype(&::cublasLtMatmulDescCreate) cublasLtMatmulDescCreate;
  decltype(&::cublasLtMatmulDescDestroy) cublasLtMatmulDescDestroy;
  decltype(&::cublasLtMatmulDescSetAttribute) cublasLtMatmulDescSetAttribute;
  decltype(&::cublasLtMatmulPreferenceCreate) cublasLtMatmulPreferenceCreate;
  decltype(&::cublasLtMatmulPreferenceDestroy) cublasLtMatmulPreferenceDestroy;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) cublasLtMatmulPreferenceSetAttribute;
  decltype(&::cublasLtMatrixLayoutCreate) cublasLtMatrixLayoutCreate;
  decltype(&::cublasLtMatrixLayoutDestroy) cublasLtMatrixLayoutDestroy;
  decltype(&::cublasLtMatrixLayoutSetAttribute) cublasLtMatrixLayoutSetAttribute;
};

// The library, opened and resolved once per process (thread-safe; the handle is never closed).
// Raises DTensorError naming kCublasLtLibrary and dlerror()'s text when the library or one of the
// functions cannot be found; a later call tries again.
const CublasLt& cublaslt();

}  // namespace dtensor::kernels::cuda
