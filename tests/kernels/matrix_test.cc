#include "kernels/cpu/matrix.h"

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

// Naive triple loop in double over any strided 2-d views: [n, k] @ [k, m].
std::vector<double> naive_mm(const Tensor& a, const Tensor& b) {
  const int64_t n = a.size(0), k = a.size(1), m = b.size(1);
  std::vector<double> av = V(a), bv = V(b), out(n * m, 0.0);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < m; ++j)
      for (int64_t p = 0; p < k; ++p) out[i * m + j] += av[i * k + p] * bv[p * m + j];
  return out;
}

TEST(Matmul, MmMatchesNaiveLoop) {
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Tensor a = rand({5, 7}, 1, dt), b = rand({7, 3}, 2, dt);
    Tensor r = mm(a, b);
    EXPECT_EQ(r.dtype(), dt);
    EXPECT_EQ(r.sizes(), (Shape{5, 3}));
    expect_near(V(r), naive_mm(a, b), dt == DType::kFloat32 ? 1e-5 : 1e-13);
  }
  // Hand-computed.
  EXPECT_EQ(V(mm(T({1, 2, 3, 4}, {2, 2}), T({5, 6, 7, 8}, {2, 2}))),
            (std::vector<double>{19, 22, 43, 50}));
}

TEST(Matmul, StridedOperands) {
  Tensor base = rand({6, 8}, 3, DType::kFloat64);
  Tensor at = base.transpose(0, 1).narrow(0, 1, 4);    // [4, 6], column-contiguous: Trans flag
  Tensor bs = base.slice(1, 0, 8, 2).narrow(1, 0, 3);  // [6, 3], column stride 2: copied
  Tensor bw = base.narrow(1, 2, 5);                    // [6, 5], row stride 8 > 5
  expect_near(V(mm(at, bs)), naive_mm(at, bs), 1e-13);
  expect_near(V(mm(at, bw)), naive_mm(at, bw), 1e-13);
  // Broadcast rows (stride 0) and single rows/columns.
  Tensor e = T({1, 2, 3}, {1, 3}, DType::kFloat64).expand({4, 3});
  expect_near(V(mm(e, base.narrow(0, 0, 3))), naive_mm(e, base.narrow(0, 0, 3)), 1e-13);
  Tensor row = base.select(0, 2).unsqueeze(0);  // [1, 8]
  Tensor col = base.select(1, 5).unsqueeze(1);  // [6, 1] with stride 8
  expect_near(V(mm(col, row)), naive_mm(col, row), 1e-13);
  expect_near(V(mm(row, base.transpose(0, 1))), naive_mm(row, base.transpose(0, 1)), 1e-13);
}

TEST(Matmul, HalfPrecisionViaFloat) {
  for (DType dt : {DType::kBFloat16, DType::kFloat16}) {
    Tensor a = rand({4, 16}, 4, dt), b = rand({16, 3}, 5, dt);
    Tensor r = mm(a, b);
    EXPECT_EQ(r.dtype(), dt);
    std::vector<double> want = naive_mm(a, b), got = V(r);
    const double ulp = dt == DType::kBFloat16 ? 0x1p-8 : 0x1p-11;  // half an ulp, relative
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_LE(std::abs(got[i] - want[i]), std::abs(want[i]) * ulp + 1e-6) << i;
  }
}

TEST(Matmul, Bmm) {
  Tensor a = rand({3, 2, 4}, 6, DType::kFloat64), b = rand({3, 5, 4}, 7, DType::kFloat64);
  Tensor bt = b.transpose(1, 2);  // [3, 4, 5]
  Tensor r = bmm(a, bt);
  ASSERT_EQ(r.sizes(), (Shape{3, 2, 5}));
  for (int64_t i = 0; i < 3; ++i)
    expect_near(V(r.select(0, i)), naive_mm(a.select(0, i), bt.select(0, i)), 1e-13);
  expect_error(
      [&] {
        bmm(a, rand({2, 4, 5}, 1, DType::kFloat64));
      },
      {"bmm", "[3, 2, 4]", "[2, 4, 5]"});
}

TEST(Matmul, AddmmBetaAlphaBroadcast) {
  Tensor a = rand({3, 4}, 8, DType::kFloat64), b = rand({4, 2}, 9, DType::kFloat64);
  Tensor self = T({10, 20}, {2}, DType::kFloat64);
  std::vector<double> prod = naive_mm(a, b), want;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) want.push_back(0.5 * (j ? 20 : 10) + 2 * prod[i * 2 + j]);
  expect_near(V(addmm(self, a, b, 0.5, 2)), want, 1e-13);
  // beta = 0 ignores self, NaNs included.
  Tensor nan = T({std::nan("")}, {1, 1}, DType::kFloat64);
  expect_near(V(addmm(nan, a, b, 0, 1)), prod, 1e-13);
  // self is not modified.
  Tensor s2 = rand({3, 2}, 10, DType::kFloat64);
  std::vector<double> before = V(s2);
  addmm(s2, a, b);
  EXPECT_EQ(V(s2), before);
  expect_error(
      [&] {
        addmm(T({1, 2, 3}, {3}, DType::kFloat64), a, b);
      },
      {"addmm", "[3]", "[3, 2]"});
}

TEST(Matmul, EmptyInnerDim) {
  Tensor a = Tensor::zeros({2, 0}), b = Tensor::zeros({0, 3});
  Tensor r = mm(a, b);
  EXPECT_EQ(r.sizes(), (Shape{2, 3}));
  EXPECT_EQ(V(r), std::vector<double>(6, 0.0));
  EXPECT_EQ(V(addmm(T({1, 2, 3}, {3}), a, b, 2)), (std::vector<double>{2, 4, 6, 2, 4, 6}));
  EXPECT_EQ(mm(Tensor::zeros({0, 4}), Tensor::zeros({4, 3})).sizes(), (Shape{0, 3}));
}

TEST(Matmul, Linear) {
  Tensor x = rand({2, 3, 4}, 11, DType::kFloat64), w = rand({5, 4}, 12, DType::kFloat64);
  Tensor bias = T({1, 2, 3, 4, 5}, {5}, DType::kFloat64);
  Tensor y = linear(x, w, bias);
  ASSERT_EQ(y.sizes(), (Shape{2, 3, 5}));
  std::vector<double> want = naive_mm(x.reshape({6, 4}), w.transpose(0, 1));
  for (size_t i = 0; i < want.size(); ++i) want[i] += 1 + static_cast<double>(i % 5);
  expect_near(V(y), want, 1e-13);
  // 1-d input, no bias.
  Tensor y1 = linear(x.select(0, 1).select(0, 2), w);
  EXPECT_EQ(y1.sizes(), (Shape{5}));
  expect_near(V(y1), naive_mm(x.select(0, 1).narrow(0, 2, 1), w.transpose(0, 1)), 1e-13);
  expect_error(
      [&] {
        linear(x, rand({5, 3}, 1, DType::kFloat64));
      },
      {"linear", "[2, 3, 4]", "[5, 3]"});
  expect_error([&] { linear(x, w, T({1, 2}, {2}, DType::kFloat64)); }, {"linear", "bias", "[2]"});
}

TEST(Matmul, MatmulRules) {
  using D = DType;
  Tensor v3 = T({1, 2, 3}, {3}, D::kFloat64), w3 = T({4, 5, 6}, {3}, D::kFloat64);
  Tensor dot = matmul(v3, w3);
  EXPECT_EQ(dot.sizes(), Shape{});
  EXPECT_EQ(dot.item(), 32);
  Tensor m = T({1, 2, 3, 4, 5, 6}, {2, 3}, D::kFloat64);
  Tensor mv = matmul(m, v3);
  EXPECT_EQ(mv.sizes(), (Shape{2}));
  EXPECT_EQ(V(mv), (std::vector<double>{14, 32}));
  Tensor vm = matmul(T({1, -1}, {2}, D::kFloat64), m);
  EXPECT_EQ(vm.sizes(), (Shape{3}));
  EXPECT_EQ(V(vm), (std::vector<double>{-3, -3, -3}));
  // Batch dims broadcast: [2, 1, 3, 4] @ [5, 4, 2] -> [2, 5, 3, 2].
  Tensor a = rand({2, 1, 3, 4}, 13, D::kFloat64), b = rand({5, 4, 2}, 14, D::kFloat64);
  Tensor r = matmul(a, b);
  ASSERT_EQ(r.sizes(), (Shape{2, 5, 3, 2}));
  EXPECT_TRUE(r.is_contiguous());
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 5; ++j)
      expect_near(V(r.select(0, i).select(0, j)),
                  naive_mm(a.select(0, i).select(0, 0), b.select(0, j)), 1e-13);
  // A 1-d operand against a batch.
  Tensor v4 = T({1, 0, -1, 2}, {4}, D::kFloat64);
  Tensor left = matmul(v4, b);  // [5, 2]
  ASSERT_EQ(left.sizes(), (Shape{5, 2}));
  expect_near(V(left.select(0, 3)), naive_mm(v4.unsqueeze(0), b.select(0, 3)), 1e-13);
  Tensor right = matmul(a, v4);  // [2, 1, 3]
  ASSERT_EQ(right.sizes(), (Shape{2, 1, 3}));
  expect_near(V(right.select(0, 1).select(0, 0)),
              naive_mm(a.select(0, 1).select(0, 0), v4.unsqueeze(1)), 1e-13);
  expect_error([&] { matmul(m, m); }, {"matmul", "[2, 3]", "3 != 2"});
  expect_error([&] { matmul(rand({2, 3, 4}, 1), rand({3, 4, 2}, 1)); }, {"matmul", "[2]", "[3]"});
  expect_error([&] { matmul(T({1}, {}), T({1}, {1})); }, {"matmul", "1 dim"});
}

TEST(Matmul, DtypeErrors) {
  expect_error(
      [] {
        mm(rand({2, 2}, 1), rand({2, 2}, 1, DType::kFloat64));
      },
      {"mm", "float32 [2, 2]", "float64 [2, 2]", "one floating or complex dtype"});
  expect_error(
      [] {
        mm(T({1}, {1, 1}, DType::kInt64), T({1}, {1, 1}, DType::kInt64));
      },
      {"mm", "int64", "floating"});
  expect_error([] { mm(rand({2, 3}, 1), rand({2, 3}, 1)); }, {"mm", "[2, 3]", "[n, k] @ [k, m]"});
}

}  // namespace
}  // namespace dtensor::kernels
