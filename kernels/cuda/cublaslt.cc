#include "kernels/cuda/cublaslt.h"

#include <dlfcn.h>

#include <mutex>

#include "dtensor/core/error.h"

namespace dtensor::kernels::cuda {
namespace {

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "no error text";
}

// Sets *fn to the library's function `name`; raises when it is missing (an older cuBLASLt).
template <typename Fn>
void resolve(void* lib, const char* name, Fn* fn) {
  void* p = dlsym(lib, name);
  if (!p)
    DT_FAIL("cuBLASLt: ", kCublasLtLibrary, " has no ", name, " (", dl_error(),
            "); accepted: CUDA 13's cuBLASLt");
  *fn = reinterpret_cast<Fn>(p);
}

}  // namespace

const CublasLt& cublaslt() {
  static CublasLt lt;
  static std::once_flag once;
  // call_once runs again after a throw, so a library put on the path later is still found.
  std::call_once(once, [] {
    dlerror();
    void* lib = dlopen(kCublasLtLibrary, RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      DT_FAIL("cuBLASLt: cannot open ", kCublasLtLibrary, " (", dl_error(),
              "); accepted: the CUDA 13 toolkit's lib64 or PyTorch's nvidia-cublas wheel on "
              "LD_LIBRARY_PATH");
    CublasLt r{};
#define DT_RESOLVE(name) resolve(lib, #name, &r.name)
    DT_RESOLVE(cublasLtCreate);
    DT_RESOLVE(cublasLtGetStatusName);
    DT_RESOLVE(cublasLtGetStatusString);
    DT_RESOLVE(cublasLtMatmul);
    DT_RESOLVE(cublasLtMatmulAlgoGetHeuristic);
    DT_RESOLVE(cublasLtMatmulDescCreate);
    DT_RESOLVE(cublasLtMatmulDescDestroy);
    DT_RESOLVE(cublasLtMatmulDescSetAttribute);
    DT_RESOLVE(cublasLtMatmulPreferenceCreate);
    DT_RESOLVE(cublasLtMatmulPreferenceDestroy);
    DT_RESOLVE(cublasLtMatmulPreferenceSetAttribute);
    DT_RESOLVE(cublasLtMatrixLayoutCreate);
    DT_RESOLVE(cublasLtMatrixLayoutDestroy);
    DT_RESOLVE(cublasLtMatrixLayoutSetAttribute);
#undef DT_RESOLVE
    lt = r;
  });
  return lt;
}

}  // namespace dtensor::kernels::cuda
