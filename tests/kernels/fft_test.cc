// The FFT kernels (kernels/cpu/fft.h) against a direct O(n^2) DFT written from the definition
// X[k] = sum_j x[j] exp(-+2 pi i jk / n), on 1-d and 2-d transforms with every normalization, and
// their backward kernels against the adjoint identity <g, F(x)> = <F*(g), x> (real inner products).
#include "kernels/cpu/fft.h"

#include <cmath>
#include <complex>
#include <numbers>

#include "gtest/gtest.h"

namespace dtensor::kernels {
namespace {

using C = std::complex<double>;

Tensor complex_tensor(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::kComplex128);
  C* p = t.data<C>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = {std::sin(1.3 * i + seed), std::cos(0.7 * i * i + seed)};
  return t;
}

Tensor real_tensor(const Shape& shape, uint64_t seed) {
  Tensor t = Tensor::empty(shape, DType::kFloat64);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<double>()[i] = std::sin(0.9 * i + seed) + 0.1 * i;
  return t;
}

std::vector<C> values(const Tensor& t) {
  Tensor c = t.to(DType::kComplex128).contiguous();
  return {c.data<C>(), c.data<C>() + c.numel()};
}

// The direct DFT of a row-major [rows, n] array along its last dim.
std::vector<C> dft_rows(const std::vector<C>& x, int64_t rows, int64_t n, bool forward) {
  std::vector<C> out(x.size());
  const double sign = forward ? -1.0 : 1.0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < n; ++k) {
      C s = 0;
      for (int64_t j = 0; j < n; ++j) s += x[r * n + j] * std::polar(1.0, sign * 2 * std::numbers::pi * j * k / n);
      out[r * n + k] = s;
    }
  return out;
}

void expect_near(const std::vector<C>& got, const std::vector<C>& want, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_LT(std::abs(got[i] - want[i]), 1e-9) << what << " element " << i << ": " << got[i] << " vs " << want[i];
}

TEST(Fft, C2CMatchesTheDefinitionAlongTheLastDim) {
  for (int64_t n : {1, 2, 5, 6, 7, 12}) {
    Tensor x = complex_tensor({3, n}, n);
    for (bool forward : {true, false})
      for (int64_t norm : {0, 1, 2}) {
        std::vector<C> want = dft_rows(values(x), 3, n, forward);
        const double f = norm == 0 ? 1.0 : norm == 1 ? 1.0 / std::sqrt(n) : 1.0 / n;
        for (C& v : want) v *= f;
        expect_near(values(fft_c2c(x, {1}, norm, forward)), want, "c2c");
      }
  }
}

TEST(Fft, C2COverTwoDimsIsTheProductOfOneDimTransforms) {
  // A 2-d transform of [4, 6] = rows transformed, then columns (the DFT along dim 0 via a transpose).
  Tensor x = complex_tensor({4, 6}, 3);
  std::vector<C> rows = dft_rows(values(x), 4, 6, true);
  Tensor r = Tensor::empty({4, 6}, DType::kComplex128);
  std::copy(rows.begin(), rows.end(), r.data<C>());
  std::vector<C> cols = dft_rows(values(r.transpose(0, 1)), 6, 4, true);
  Tensor want = Tensor::empty({6, 4}, DType::kComplex128);
  std::copy(cols.begin(), cols.end(), want.data<C>());
  expect_near(values(fft_c2c(x, {-1, 0}, 0, true)), values(want.transpose(0, 1)), "c2c 2-d, dims in another order");
  std::vector<C> scaled = values(want.transpose(0, 1));
  for (C& v : scaled) v /= 24.0;
  expect_near(values(fft_c2c(x, {0, 1}, 2, true)), scaled, "c2c 2-d by 1/n");
}

TEST(Fft, R2CIsTheFirstHalfOfTheComplexTransform) {
  for (int64_t n : {1, 4, 5, 8}) {
    Tensor x = real_tensor({2, n}, n);
    std::vector<C> full = dft_rows(values(x), 2, n, true);
    Tensor one = fft_r2c(x, {1}, 2, true);
    ASSERT_EQ(one.sizes(), (Shape{2, n / 2 + 1}));
    EXPECT_EQ(one.dtype(), DType::kComplex128);
    std::vector<C> want;
    for (int64_t r = 0; r < 2; ++r)
      for (int64_t k = 0; k <= n / 2; ++k) want.push_back(full[r * n + k] / static_cast<double>(n));
    expect_near(values(one), want, "r2c onesided");
    for (C& v : full) v /= static_cast<double>(n);
    expect_near(values(fft_r2c(x, {1}, 2, false)), full, "r2c two-sided");
    EXPECT_EQ(fft_r2c(x.to(DType::kFloat32), {1}, 0, true).dtype(), DType::kComplex64);
  }
}

TEST(Fft, C2RInvertsR2COverEveryTransformedDim) {
  // irfftn(rfftn(x)) = x for 1-d and 2-d, even and odd last sizes, as torch's round trip.
  for (int64_t n : {4, 5}) {
    Tensor x = real_tensor({3, n}, n);
    Tensor back = fft_c2r(fft_r2c(x, {0, 1}, 0, true), {0, 1}, 2, n);
    EXPECT_EQ(back.dtype(), DType::kFloat64);
    expect_near(values(back), values(x), "c2r(r2c(x)) 2-d");
    expect_near(values(fft_c2r(fft_r2c(x, {1}, 1, true), {1}, 1, n)), values(x), "c2r(r2c(x)) ortho");
  }
  Tensor half = complex_tensor({2, 3}, 1);
  EXPECT_THROW(fft_c2r(half, {1}, 0, 6), Error);  // 6 reads 4 entries, only 3 given
}

// <a, b> over the reals: sum Re(a) Re(b) + Im(a) Im(b).
double dot(const Tensor& a, const Tensor& b) {
  std::vector<C> x = values(a), y = values(b);
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += x[i].real() * y[i].real() + x[i].imag() * y[i].imag();
  return s;
}

TEST(Fft, BackwardKernelsAreTheAdjoints) {
  // The gradient of L = <g, F(x)> is F*(g): <F*(g), dx> = <g, F(dx)> for any dx (F is real-linear).
  for (int64_t n : {4, 5})
    for (bool onesided : {true, false})
      for (int64_t norm : {0, 1, 2}) {
        Tensor dx = real_tensor({3, n}, 7);
        Tensor y = fft_r2c(dx, {0, 1}, norm, onesided);
        Tensor g = complex_tensor(y.sizes(), 2);
        EXPECT_NEAR(dot(fft_r2c_backward(g, {0, 1}, norm, onesided, n), dx), dot(g, y), 1e-9)
            << "r2c n=" << n << " onesided=" << onesided << " norm=" << norm;
      }
  for (int64_t n : {4, 5})
    for (int64_t norm : {0, 1, 2}) {
      Tensor dz = complex_tensor({3, n / 2 + 1}, 5);
      Tensor y = fft_c2r(dz, {0, 1}, norm, n);
      Tensor g = real_tensor(y.sizes(), 4);
      EXPECT_NEAR(dot(fft_c2r_backward(g, {0, 1}, norm), dz), dot(g, y), 1e-9) << "c2r n=" << n << " norm=" << norm;
    }
}

TEST(Fft, BadArgumentsNameTheOp) {
  Tensor x = real_tensor({2, 4}, 0);
  try {
    fft_c2c(x, {1}, 0, true);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("_fft_c2c"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("float64"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fft_r2c(x, {1, 1}, 0, true), Error);
  EXPECT_THROW(fft_r2c(x, {2}, 0, true), Error);
  EXPECT_THROW(fft_r2c(x, {1}, 3, true), Error);
}

}  // namespace
}  // namespace dtensor::kernels
