// Helpers of the CUDA tests: each test compares a CUDA kernel with the CPU kernel on the same data
// and skips (GTEST_SKIP) when this machine has no usable CUDA device.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "dtensor/core/cuda/cuda_storage.h"
#include "dtensor/core/cuda/cuda_util.h"
#include "dtensor/core/tensor.h"
#include "gtest/gtest.h"
#include "tests/cuda/tolerance.h"

namespace dtensor::cuda::testing {

// Skips the test when there is no GPU, saying why.
#define DT_SKIP_WITHOUT_CUDA()                                                     \
  do {                                                                             \
    if (!::dtensor::cuda::is_available())                                          \
      GTEST_SKIP() << "no CUDA device: " << ::dtensor::cuda::unavailable_reason(); \
  } while (0)

class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override { DT_SKIP_WITHOUT_CUDA(); }
};

inline Device gpu() { return Device{DeviceType::kCUDA, 0}; }
inline Tensor G(const Tensor& t) { return to_device(t, gpu()); }             // host -> cuda:0
inline Tensor H(const Tensor& t) { return to_device(t, ::dtensor::cpu()); }  // -> host

// Deterministic values in [lo, hi) (a 64-bit LCG), cast to dtype.
inline Tensor rand(const Shape& s, uint64_t seed, DType dt = DType::kFloat32, double lo = -1,
                   double hi = 1) {
  std::vector<double> v(numel(s));
  uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (double& e : v) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    e = lo + static_cast<double>(x >> 11) / 9007199254740992.0 * (hi - lo);
  }
  return Tensor::from_vector(v, s).to(dt);
}

// Small integers in [0, n) (ties on purpose), as dtype.
inline Tensor randint(const Shape& s, uint64_t seed, int64_t n, DType dt = DType::kInt64) {
  Tensor r = rand(s, seed, DType::kFloat64, 0, static_cast<double>(n));
  std::vector<double> v = r.to_vector<double>();
  for (double& e : v) e = std::floor(e);
  return Tensor::from_vector(v, s).to(dt);
}


// The CUDA result `got` against the CPU result `want`: same shape and dtype, on the GPU; values
// within tol (floats, NaN matching NaN) or equal (integers, bool; exact also for floats with
// tolerance 0).
inline void expect_matches(const Tensor& got, const Tensor& want, double t = -1,
                           const std::string& what = "") {
  ASSERT_TRUE(got.device().is_cuda()) << what << ": result on " << got.device().str();
  ASSERT_EQ(got.sizes(), want.sizes()) << what;
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  Tensor h = H(got);
  if (t < 0) t = tol(want.dtype());
  if (t == 0) {
    EXPECT_TRUE(equal(h, want)) << what << ": max |diff| " << max_abs_diff(h, want);
  } else {
    EXPECT_TRUE(allclose(h, want, t, t)) << what << ": max |diff| " << max_abs_diff(h, want);
  }
}

}  // namespace dtensor::cuda::testing
