// kernels/cuda/softmax_math.h's formulas run on the CPU the way softmax_rows_vec_kernel
// (kernels/cuda/norm_kernels.cu) runs them: the same per-element functions, the same shape
// (vec_shape), the same sum order per vector, thread, warp (xor butterfly) and block, and the same
// rounding of the results to the input dtype. Checked against the CPU kernels at the tolerances of
// tests/cuda/elementwise_test (Norm.SoftmaxAndLogSoftmax), with the device's approximations made
// worse than the device: MUFU.EX2 is std::exp2 off by 2^-21 relative (alternating sign), __logf is
// std::log off by 2^-21 relative and absolute. So the formulas (the pre-scaled exponent and its
// limit, the reciprocal multiply, the fast log) are checked without a GPU; the device's own
// arithmetic is checked by elementwise_test on one.
#include "kernels/cuda/softmax_math.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "dtensor/core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/cpu/norm.h"
#include "tests/cuda/tolerance.h"

namespace dtensor::kernels::cuda::softmax_math {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

using ::dtensor::cuda::testing::tol;  // the GPU tests' tolerance (tests/cuda/tolerance.h)

int vec_of(DType dt) { return dt == DType::kFloat32 ? 4 : 8; }  // elements of 16 bytes

// ex2 / log_of_sum with an error beyond the device's (see the top comment).
float ex2_off(float t, int64_t i) { return ex2(t) * (i % 2 ? 1.f + 0x1p-21f : 1.f - 0x1p-21f); }
float log_off(float s) { return log_of_sum(s) * (1.f + 0x1p-21f) + 0x1p-21f; }

// The kernel's result for one row (values exact in the input dtype, as float), before rounding.
std::vector<float> kernel_row(const std::vector<float>& x, int vec, bool log) {
  const int64_t n = static_cast<int64_t>(x.size()), nvec = n / vec;
  const VecShape shape = vec_shape(nvec, vec);
  EXPECT_GT(shape.threads, 0) << nvec;
  float m = -kInf;  // NaN-dropping, like HMNMX2 / FMNMX; the order does not matter
  for (float v : x) m = std::fmax(m, v);
  const bool pre = !log && prescaled(m);
  const float c = prescaled_shift(m);
  std::vector<float> e(n), d(n);
  for (int64_t i = 0; i < n; ++i) {
    if (log) {
      d[i] = x[i] - m;
      e[i] = ex2_off(exp2_arg(d[i]), i);
    } else {
      e[i] = ex2_off(pre ? exp2_arg_prescaled(x[i], c) : exp2_arg(x[i] - m), i);
    }
  }
  // Per thread: vector partial sums in element order, then the vectors in order (a vector past
  // the row's end adds nothing); per warp: the xor butterfly; per block: the warps in order.
  std::vector<float> lane(shape.threads);
  for (int t = 0; t < shape.threads; ++t) {
    float s = 0;
    for (int it = 0; it < shape.iters; ++it) {
      const int64_t vi = int64_t{it} * shape.threads + t;
      float part = 0;
      if (vi < nvec) {
        part = e[vi * vec];
        for (int u = 1; u < vec; ++u) part += e[vi * vec + u];
      }
      s = it == 0 ? part : s + part;
    }
    lane[t] = s;
  }
  float total = 0;
  for (int w = 0; w < shape.threads / 32; ++w) {
    float v[32];
    for (int l = 0; l < 32; ++l) v[l] = lane[w * 32 + l];
    for (int o = 16; o > 0; o >>= 1) {
      float nv[32];
      for (int l = 0; l < 32; ++l) nv[l] = v[l] + v[l ^ o];
      for (int l = 0; l < 32; ++l) v[l] = nv[l];
    }
    total = w == 0 ? v[0] : total + v[0];
  }
  std::vector<float> out(n);
  if (log) {
    const float ls = log_off(total);
    for (int64_t i = 0; i < n; ++i) out[i] = d[i] - ls;
  } else {
    const float r = reciprocal(total);
    for (int64_t i = 0; i < n; ++i) out[i] = e[i] * r;
  }
  return out;
}

// The kernel's result for x [rows, n] of dtype dt, rounded to dt (nearest even, as
// __floats2bfloat162_rn / __floats2half2_rn).
Tensor kernel_softmax(const Tensor& x, bool log) {
  const int64_t rows = x.size(0), n = x.size(1);
  const std::vector<float> v = x.to_vector<float>();
  std::vector<float> out;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<float> row(v.begin() + r * n, v.begin() + (r + 1) * n);
    std::vector<float> y = kernel_row(row, vec_of(x.dtype()), log);
    out.insert(out.end(), y.begin(), y.end());
  }
  return Tensor::from_vector<float>(out, x.sizes()).to(x.dtype());
}

// Deterministic values base + [-8, 8) (a 64-bit LCG), cast to dtype.
Tensor rows_of(int64_t rows, int64_t n, uint64_t seed, DType dt, double base = 0) {
  std::vector<double> v(rows * n);
  uint64_t s = seed * 6364136223846793005ull + 1442695040888963407ull;
  for (double& e : v) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    e = base + (static_cast<double>(s >> 11) / 9007199254740992.0 * 16 - 8);
  }
  return Tensor::from_vector(v, {rows, n}).to(dt);
}

// Softmax and log_softmax of x through the kernel's arithmetic against the CPU kernels, at the GPU
// tests' tolerances (log_softmax: 10x, as there).
void expect_matches_cpu(const Tensor& x, const std::string& what, double t = -1) {
  if (t < 0) t = tol(x.dtype());
  const Tensor want = softmax(x, 1), got = kernel_softmax(x, false);
  EXPECT_TRUE(allclose(got, want, t, t)) << what << " softmax: max |diff| " << max_abs_diff(got, want);
  const Tensor want_log = log_softmax(x, 1), got_log = kernel_softmax(x, true);
  EXPECT_TRUE(allclose(got_log, want_log, t * 10, t * 10))
      << what << " log_softmax: max |diff| " << max_abs_diff(got_log, want_log);
}

const DType kDtypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

// Every shape the launcher instantiates, and only those; each covers its row.
TEST(SoftmaxMath, VecShapeCoversEveryRowWithAnInstantiatedShape) {
  const std::set<std::pair<int, int>> f32 = {{32, 1}, {32, 2}, {32, 8}, {64, 8}, {128, 8}, {256, 8}};
  const std::set<std::pair<int, int>> f16 = {{32, 1}, {32, 2}, {32, 4}, {64, 4}, {128, 4}, {256, 4}, {256, 8}};
  for (int vec : {4, 8}) {
    std::set<std::pair<int, int>> seen;
    for (int64_t nvec = 1; nvec <= 2048; ++nvec) {
      const VecShape s = vec_shape(nvec, vec);
      seen.insert({s.threads, s.iters});
      EXPECT_GE(int64_t{s.threads} * s.iters, nvec) << vec << " " << nvec;
      // As few warps as give each thread 32 elements: half the threads would not hold the row.
      if (s.threads > 32) {
        EXPECT_GT(nvec, int64_t{s.threads / 2} * (32 / vec)) << vec << " " << nvec;
      }
    }
    EXPECT_EQ(seen, vec == 4 ? f32 : f16) << vec;
    EXPECT_EQ(vec_shape(2049, vec).threads, 0);
    EXPECT_EQ(vec_shape(0, vec).threads, 0);
  }
}

// elementwise_test's random rows ([-8, 8)), at every shape.
TEST(SoftmaxMath, RandomRowsOfEveryShapeMatchTheCpuKernel) {
  uint64_t seed = 1;
  for (DType dt : kDtypes)
    for (int64_t nvec : {1, 20, 32, 33, 64, 65, 100, 128, 129, 256, 257, 512, 513, 1024, 1025, 2048})
      expect_matches_cpu(rows_of(3, nvec * vec_of(dt), seed++, dt),
                         std::string(dtype_name(dt)) + " rows of " + std::to_string(nvec) + " vectors");
}

// Rows far from 0: the pre-scaled exponent's shift c = m * log2e carries a rounding that grows
// with |m| (it cancels in the quotient); at and past |m| = 2^24 the subtract-first form takes over.
// log_softmax too: both kernels compute (x - m) - log(sum) (x - (m + log(sum)) loses log(sum) at
// 1e30).
TEST(SoftmaxMath, LargeMaximaMatchTheCpuKernel) {
  uint64_t seed = 100;
  for (DType dt : kDtypes)
    for (double base : {1e3, -1e3, 6e4, -6e4, 1.6e7, 0x1p24, -0x1p24, 3e7, 1e30, -1e30}) {
      if (dt == DType::kFloat16 && std::abs(base) > 6e4) continue;  // beyond float16
      expect_matches_cpu(rows_of(4, 64 * vec_of(dt), seed++, dt, base),
                         std::string(dtype_name(dt)) + " rows around " + std::to_string(base));
    }
}

// -inf entries, a row of -inf (NaN), +inf (NaN), NaN (NaN), as elementwise_test's register-path
// rows, in every dtype.
TEST(SoftmaxMath, InfinitiesAndNaNMatchTheCpuKernel) {
  for (DType dt : kDtypes) {
    const int64_t n = 4 * vec_of(dt);
    std::vector<float> v(5 * n, 0.5f);
    for (int64_t j = 0; j < n; ++j) v[j] = static_cast<float>(j % 7) - 3;
    v[0] = v[3] = -kInf;                                // row 0: -inf entries
    for (int64_t j = n; j < 2 * n; ++j) v[j] = -kInf;   // row 1: -inf only
    v[2 * n + 5] = kInf;                                // row 2: +inf
    v[3 * n + n - 1] = kNaN;                            // row 3: NaN (last)
    v[4 * n] = kNaN;                                    // row 4: NaN (first)
    const Tensor x = Tensor::from_vector<float>(v, {5, n}).to(dt);
    expect_matches_cpu(x, std::string(dtype_name(dt)) + " infinities",
                       dt == DType::kFloat32 ? 1e-6 : tol(dt));
    // The NaN rows are NaN throughout, the -inf entries 0.
    const std::vector<float> got = kernel_softmax(x, false).to_vector<float>();
    for (int64_t j = n; j < 5 * n; ++j) EXPECT_TRUE(std::isnan(got[j])) << dtype_name(dt) << " at " << j;
    EXPECT_EQ(got[0], 0.f);
    EXPECT_EQ(got[3], 0.f);
  }
}

}  // namespace
}  // namespace dtensor::kernels::cuda::softmax_math
