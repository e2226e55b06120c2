// The float tolerance of CUDA results against the CPU kernels (relative and absolute), for the GPU
// tests (cuda_test_util.h) and the host tests that replay the kernels' arithmetic on the CPU.
#pragma once

#include "dtensor/core/dtype.h"

namespace dtensor::cuda::testing {

inline double tol(DType dt) {
  switch (dt) {
    case DType::kFloat64:
      return 1e-10;
    case DType::kFloat32:
      return 2e-5;
    case DType::kFloat16:
      return 2e-3;
    case DType::kBFloat16:
      return 1.6e-2;
    default:
      return 0;
  }
}

}  // namespace dtensor::cuda::testing
