#include "kernels/cpu/reduction.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "tests/kernels/test_util.h"

namespace dtensor::kernels {
namespace {

using testing::expect_error;
using testing::expect_near;
using testing::rand;
using testing::T;
using testing::V;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor iota(const Shape& s, DType dt = DType::kFloat32) {
  return Tensor::arange(numel(s), dt).view(s);
}

TEST(Reduction, SumDimsAndKeepdim) {
  Tensor x = iota({2, 3, 4});  // x[i][j][k] = 12 i + 4 j + k
  Tensor all = sum(x);
  EXPECT_EQ(all.sizes(), Shape{});
  EXPECT_EQ(all.item(), 276);  // 0 + ... + 23
  EXPECT_EQ(V(sum(x, {0})), (std::vector<double>{12, 14, 16, 18, 20, 22, 24, 26, 28, 30, 32, 34}));
  EXPECT_EQ(V(sum(x, {-1})), (std::vector<double>{6, 22, 38, 54, 70, 86}));
  Tensor s02 = sum(x, {0, 2}, true);
  EXPECT_EQ(s02.sizes(), (Shape{1, 3, 1}));
  // sum over i, k of 12 i + 4 j + k = 4 * 12 + 8 * 4 j + 2 * 6 = 60 + 32 j
  EXPECT_EQ(V(s02), (std::vector<double>{60, 92, 124}));
  EXPECT_EQ(sum(x, {2, 0}).sizes(), (Shape{3}));
  // Strided input: the transpose sums the same numbers along the other dim.
  EXPECT_EQ(V(sum(x.transpose(0, 2), {2})), V(sum(x, {0}).transpose(0, 1)));
  // A 0-d tensor reduces over dim 0 / -1 to itself.
  EXPECT_EQ(sum(T({5}, {}), {0}).item(), 5);
  expect_error([&] { sum(x, {1, -2}); }, {"sum", "dim 1", "more than once"});
  expect_error([&] { sum(x, {3}); }, {"sum", "dim 3", "-3 to 2"});
}

TEST(Reduction, DtypesOfSumAndProd) {
  Tensor b = T({1, 0, 1, 1}, {4}, DType::kBool);
  EXPECT_EQ(sum(b).dtype(), DType::kInt64);
  EXPECT_EQ(sum(b).item(), 3);
  Tensor i = T({2, -3, 4}, {3}, DType::kInt32);
  EXPECT_EQ(sum(i).dtype(), DType::kInt64);
  EXPECT_EQ(prod(i).dtype(), DType::kInt64);
  EXPECT_EQ(prod(i).item(), -24);
  // int64 sums stay exact beyond 2^53.
  Tensor big = Tensor::from_vector<int64_t>({(int64_t{1} << 60) + 1, 2}, {2});
  EXPECT_EQ(sum(big).to_vector<int64_t>()[0], (int64_t{1} << 60) + 3);
  EXPECT_EQ(sum(T({1, 2}, {2}, DType::kBFloat16)).dtype(), DType::kBFloat16);
  EXPECT_EQ(V(prod(T({1, 2, 3, 4, 5, 6}, {2, 3}, DType::kFloat64), {1})),
            (std::vector<double>{6, 120}));
}

TEST(Reduction, FloatSumAccumulatesInDouble) {
  // In float32 arithmetic 1e8 + 1 - 1e8 is 0; accumulated in double it is 1.
  Tensor x = T({1e8, 1, -1e8}, {3}, DType::kFloat32);
  EXPECT_EQ(sum(x).item(), 1);
  EXPECT_EQ(sum(x).dtype(), DType::kFloat32);
  EXPECT_NEAR(mean(x).item(), 1.0 / 3, 1e-7);
}

TEST(Reduction, EmptyReductions) {
  Tensor e = Tensor::zeros({0, 3});
  EXPECT_EQ(V(sum(e, {0})), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(V(prod(e, {0})), (std::vector<double>{1, 1, 1}));
  EXPECT_TRUE(std::isnan(mean(e).item()));
  EXPECT_EQ(amax(e, {1}).sizes(), (Shape{0}));
  expect_error([&] { amax(e, {0}); }, {"amax", "dim 0", "size 0", "[0, 3]"});
  expect_error([&] { amin(e); }, {"amin", "size 0"});
}

TEST(Reduction, MeanRejectsIntegers) {
  expect_error([] { mean(T({1, 2}, {2}, DType::kInt64)); }, {"mean", "int64", "float32"});
  expect_error([] { var(T({1, 2}, {2}, DType::kInt32)); }, {"var", "int32"});
  EXPECT_EQ(V(mean(T({1, 2, 3, 4}, {2, 2}, DType::kFloat64), {0})), (std::vector<double>{2, 3}));
}

TEST(Reduction, AmaxAminNaNAndInts) {
  Tensor x = T({1, kNaN, 3, -1, 5, 2}, {2, 3});
  std::vector<double> mx = V(amax(x, {1})), mn = V(amin(x, {1}));
  EXPECT_TRUE(std::isnan(mx[0]) && std::isnan(mn[0]));
  EXPECT_EQ(mx[1], 5);
  EXPECT_EQ(mn[1], -1);
  std::vector<double> col = V(amax(x, {0}));
  EXPECT_EQ(col[0], 1);
  EXPECT_TRUE(std::isnan(col[1]));
  EXPECT_EQ(col[2], 3);
  Tensor i = T({4, -7, 2}, {3}, DType::kInt32);
  EXPECT_EQ(amax(i).dtype(), DType::kInt32);
  EXPECT_EQ(amax(i).item(), 4);
  EXPECT_EQ(amin(i).item(), -7);
  EXPECT_EQ(amax(T({0, 1}, {2}, DType::kBool)).dtype(), DType::kBool);
}

// Two-pass reference in the test: mean first, then squared deviations.
double ref_var(const std::vector<double>& v, double correction) {
  double m = 0, ss = 0;
  for (double e : v) m += e;
  m /= static_cast<double>(v.size());
  for (double e : v) ss += (e - m) * (e - m);
  return ss / (static_cast<double>(v.size()) - correction);
}

TEST(Reduction, VarStdAgainstTwoPass) {
  Tensor x = rand({4, 6}, 21, DType::kFloat64);
  for (double corr : {0.0, 1.0}) {
    std::vector<double> want_rows, want_std;
    for (int64_t r = 0; r < 4; ++r) {
      want_rows.push_back(ref_var(V(x.select(0, r)), corr));
      want_std.push_back(std::sqrt(want_rows.back()));
    }
    expect_near(V(var(x, {1}, corr)), want_rows, 1e-15);
    expect_near(V(std(x, {1}, corr)), want_std, 1e-15);
    EXPECT_NEAR(var(x, {}, corr).item(), ref_var(V(x), corr), 1e-15);
  }
  // Hand value: var([1, 2, 3, 4]) = 5/3 (unbiased), 5/4 (biased).
  EXPECT_NEAR(var(T({1, 2, 3, 4}, {4})).item(), 5.0 / 3, 1e-6);
  EXPECT_NEAR(var(T({1, 2, 3, 4}, {4}), {}, 0).item(), 1.25, 1e-7);
  // Large offset: a one-pass E[x^2] - E[x]^2 in float would lose everything here.
  EXPECT_NEAR(var(T({1e4 + 1, 1e4 + 2, 1e4 + 3}, {3})).item(), 1, 1e-6);
  EXPECT_TRUE(std::isnan(var(T({3}, {1})).item()));  // N - correction = 0
  Tensor v = var(x.to(DType::kFloat32), {0}, 1, true);
  EXPECT_EQ(v.dtype(), DType::kFloat32);
  EXPECT_EQ(v.sizes(), (Shape{1, 6}));
}

TEST(Reduction, Logsumexp) {
  Tensor x = rand({3, 5}, 22, DType::kFloat64);
  std::vector<double> want;
  for (int64_t r = 0; r < 3; ++r) {
    double s = 0;
    for (double e : V(x.select(0, r))) s += std::exp(e);
    want.push_back(std::log(s));
  }
  expect_near(V(logsumexp(x, {1})), want, 1e-14);
  // Stable for large values and correct at the infinities.
  expect_near(V(logsumexp(T({1000, 1000, -kInf, -kInf, 5, kInf}, {3, 2}), {1})),
              {1000 + std::log(2.0), -kInf, kInf}, 1e-3);
  EXPECT_EQ(logsumexp(T({1, 2}, {2}, DType::kInt64), {0}).dtype(), DType::kFloat32);
  EXPECT_EQ(logsumexp(Tensor::zeros({0}), {0}).item(), -kInf);
}

}  // namespace
}  // namespace dtensor::kernels
