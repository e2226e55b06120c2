// Helpers shared by the kernel tests.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/core/tensor.h"
#include "gtest/gtest.h"

namespace dtensor::kernels::testing {

// A tensor of the given values (row-major) and shape, cast to dtype.
inline Tensor T(const std::vector<double>& v, const Shape& s, DType dt = DType::kFloat32) {
  return Tensor::from_vector(v, s).to(dt);
}

inline std::vector<double> V(const Tensor& t) { return t.to_vector<double>(); }

// Deterministic values in [-1, 1) (a 64-bit LCG), cast to dtype.
inline Tensor rand(const Shape& s, uint64_t seed, DType dt = DType::kFloat32) {
  std::vector<double> v(numel(s));
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (double& e : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    e = static_cast<double>(x >> 11) / 9007199254740992.0 * 2 - 1;
  }
  return T(v, s, dt);
}

// Runs f, expecting a dtensor::Error whose message contains every one of `parts`.
template <typename F>
void expect_error(F f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no dtensor::Error thrown; expected one mentioning " << parts[0];
  } catch (const Error& e) {
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "message \"" << e.what() << "\" lacks \"" << p << "\"";
  }
}

// Elementwise closeness of two double vectors.
inline void expect_near(const std::vector<double>& got, const std::vector<double>& want,
                        double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i]))
      EXPECT_EQ(got[i], want[i]) << "at " << i;
    else
      EXPECT_NEAR(got[i], want[i], tol) << "at " << i;
  }
}

}  // namespace dtensor::kernels::testing
