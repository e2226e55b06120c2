#include "kernels/cpu/blas_core.h"

#include <cblas.h>

#include <cstdlib>
#include <strings.h>

namespace dtensor::kernels {

std::string blas_core_name() {
  const char* name = openblas_get_corename();
  return name ? name : "";
}

std::string better_blas_core() {
  if (std::getenv("OPENBLAS_CORETYPE")) return "";
  const std::string core = blas_core_name();
  if (strcasecmp(core.c_str(), "prescott") != 0 && strcasecmp(core.c_str(), "core2") != 0) return "";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl"))
    return "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return "Haswell";
  return "";
}

}  // namespace dtensor::kernels
