// tanh for the GELU kernels. glibc's tanhf (through expm1f) was ~19% of the tp=1 training step;
// float goes through one expf instead: tanh|y| = (1 - e) / (1 + e), e = exp(-2|y|) in (0, 1], so no
// overflow. Absolute error stays within a few float ulps of 1, which is what GELU's 1 + t and 1 - t^2
// see. double keeps std::tanh (the float64 --check runs stay as they were).
#pragma once

#include <cmath>

namespace dtensor::kernels::detail {

template <typename T>
inline T tanh_exp(T y) {
  if constexpr (sizeof(T) == sizeof(float)) {
    const T e = std::exp(T(-2) * std::fabs(y));
    return std::copysign((1 - e) / (1 + e), y);
  } else {
    return std::tanh(y);
  }
}

}  // namespace dtensor::kernels::detail
