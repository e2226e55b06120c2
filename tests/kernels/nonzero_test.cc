// nonzero against hand-computed indices (torch's documented semantics): row-major order, NaN counted,
// -0.0 not, complex by either part, 0-d and empty inputs, the block offset, and its error.
#include <complex>
#include <limits>

#include "gtest/gtest.h"
#include "kernels/cpu/nonzero.h"
#include "tests/kernels/test_util.h"

namespace dtensor::kernels {
namespace {

using testing::expect_error;
using testing::I;
using testing::T;

TEST(Nonzero, HandComputedIndices) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  // [[0, nan, -0.0], [inf, 0, 2]]: nonzero at (0, 1), (1, 0), (1, 2).
  const Tensor x = T({0, nan, -0.0, inf, 0, 2}, {2, 3}, DType::kFloat64);
  Tensor out = nonzero(x);
  EXPECT_EQ(out.sizes(), (Shape{3, 2}));
  EXPECT_EQ(out.dtype(), DType::kInt64);
  EXPECT_EQ(I(out), (std::vector<int64_t>{0, 1, 1, 0, 1, 2}));
  EXPECT_EQ(I(nonzero(x.to(DType::kBFloat16))), (std::vector<int64_t>{0, 1, 1, 0, 1, 2}));
  EXPECT_EQ(I(nonzero(T({1, 0, 1, 1}, {4}, DType::kBool))), (std::vector<int64_t>{0, 2, 3}));
  EXPECT_EQ(I(nonzero(T({0, -3, 0, 5}, {2, 1, 2}, DType::kInt32))), (std::vector<int64_t>{0, 0, 1, 1, 0, 1}));
  // A transposed (non-contiguous) view [[1, 1], [0, 1], [0, 0]]: row-major order of the view.
  EXPECT_EQ(I(nonzero(T({1, 0, 0, 1, 1, 0}, {2, 3}).transpose(0, 1))), (std::vector<int64_t>{0, 0, 0, 1, 1, 1}));
}

TEST(Nonzero, ComplexByEitherPart) {
  Tensor z = Tensor::empty({4}, DType::kComplex64);
  auto* p = z.data<std::complex<float>>();
  p[0] = {0, 0}, p[1] = {0, 2}, p[2] = {-0.0f, 0}, p[3] = {1, 0};
  EXPECT_EQ(I(nonzero(z)), (std::vector<int64_t>{1, 3}));
}

TEST(Nonzero, ZeroDimsEmptyAndAllZeros) {
  EXPECT_EQ(nonzero(T({2.5}, {})).sizes(), (Shape{1, 0}));
  EXPECT_EQ(nonzero(T({0}, {})).sizes(), (Shape{0, 0}));
  EXPECT_EQ(nonzero(Tensor::zeros({5, 0})).sizes(), (Shape{0, 2}));
  EXPECT_EQ(nonzero(Tensor::zeros({3, 4})).sizes(), (Shape{0, 2}));
}

TEST(Nonzero, BlockOffsetGivesGlobalIndices) {
  // The block [2, 4) x [1, 3) of a larger tensor: its nonzeros shifted by (2, 1).
  EXPECT_EQ(I(nonzero(T({0, 7, 8, 0}, {2, 2}), {2, 1})), (std::vector<int64_t>{2, 2, 3, 1}));
  expect_error([] { nonzero(T({1, 2}, {2}), {1, 1}); }, {"nonzero", "offset", "[2]"});
}

}  // namespace
}  // namespace dtensor::kernels
