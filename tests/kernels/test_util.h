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

inline std::vector<int64_t> I(const Tensor& t) { return t.to_vector<int64_t>(); }

// Values equal elementwise, NaN matching NaN.
inline void expect_same(const std::vector<double>& got, const std::vector<double>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i]))
      EXPECT_TRUE(std::isnan(got[i])) << "at " << i << ": " << got[i];
    else
      EXPECT_EQ(got[i], want[i]) << "at " << i;
  }
}

// Central differences of L(x) = sum(f(x) * w) with respect to x, in float64: the reference the
// kernels' backward formulas are checked against.
template <typename F>
std::vector<double> numeric_grad(const Tensor& x, const Tensor& w, F f, double h = 1e-6) {
  std::vector<double> xv = V(x), wv = V(w), g(xv.size());
  auto loss = [&](const std::vector<double>& v) {
    std::vector<double> y = V(f(T(v, x.sizes(), DType::kFloat64)));
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += y[i] * wv[i];
    return s;
  };
  for (size_t i = 0; i < xv.size(); ++i) {
    std::vector<double> p = xv, m = xv;
    p[i] += h;
    m[i] -= h;
    g[i] = (loss(p) - loss(m)) / (2 * h);
  }
  return g;
}

}  // namespace dtensor::kernels::testing
