#include "kernels/cpu/norm.h"

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
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(Softmax, HandValuesAndRowSums) {
  const double e1 = std::exp(1.0), e2 = std::exp(2.0), e3 = std::exp(3.0), z = e1 + e2 + e3;
  expect_near(V(softmax(T({1, 2, 3}, {3}, DType::kFloat64), 0)), {e1 / z, e2 / z, e3 / z}, 1e-15);
  Tensor x = rand({4, 7}, 31, DType::kFloat32);
  for (int64_t dim : {0, 1, -1}) {
    Tensor s = softmax(x, dim);
    EXPECT_EQ(s.dtype(), DType::kFloat32);
    EXPECT_EQ(s.sizes(), x.sizes());
    int64_t d = dim < 0 ? dim + 2 : dim;
    Tensor other = x.movedim(d, 1);  // rows along the softmax dim
    Tensor so = s.movedim(d, 1);
    for (int64_t r = 0; r < other.size(0); ++r) {
      double total = 0;
      for (double v : V(so.select(0, r))) total += v;
      EXPECT_NEAR(total, 1, 1e-6);
    }
  }
  // Softmax along dim 0 is softmax of the transpose along dim 1.
  EXPECT_EQ(V(softmax(x, 0).transpose(0, 1)), V(softmax(x.transpose(0, 1), 1)));
}

TEST(Softmax, StableAndEdgeCases) {
  // exp(1000) overflows; the max shift keeps it finite.
  expect_near(V(softmax(T({1000, 1001}, {2}), 0)),
              {1 / (1 + std::exp(1.0)), 1 / (1 + std::exp(-1.0))}, 1e-6);
  expect_near(V(log_softmax(T({1000, 1001}, {2}, DType::kFloat64), 0)),
              {-std::log1p(std::exp(1.0)), -std::log1p(std::exp(-1.0))}, 1e-12);
  // Rows far from 0: (x - max) - log(sum), not x - (max + log(sum)), which gave 0 here (torch:
  // -log 3 and -log 2).
  expect_near(V(log_softmax(T({1e30, 1e30, 1e30}, {3}, DType::kFloat64), 0)),
              {-std::log(3.0), -std::log(3.0), -std::log(3.0)}, 1e-12);
  expect_near(V(log_softmax(T({-1e20, -1e20}, {2}, DType::kFloat64), 0)), {-std::log(2.0), -std::log(2.0)},
              1e-12);
  // Masked (-inf) entries get probability 0.
  expect_near(V(softmax(T({0, -kInf, 0}, {3}), 0)), {0.5, 0, 0.5}, 1e-7);
  EXPECT_EQ(softmax(T({3}, {}), 0).item(), 1);
  expect_error([] { softmax(T({1, 2}, {2}, DType::kInt64), 0); }, {"softmax", "int64", "float32"});
  expect_error([] { softmax(T({1, 2}, {2}), 1); }, {"softmax", "dim 1", "-1 to 0"});
}

TEST(Softmax, LogSoftmaxIsLogOfSoftmax) {
  Tensor x = rand({3, 5}, 32, DType::kFloat64);
  std::vector<double> ls = V(log_softmax(x, 1)), s = V(softmax(x, 1));
  for (size_t i = 0; i < s.size(); ++i) EXPECT_NEAR(ls[i], std::log(s[i]), 1e-14);
  Tensor b = log_softmax(x.to(DType::kBFloat16), 1);
  EXPECT_EQ(b.dtype(), DType::kBFloat16);
}

TEST(LayerNorm, MatchesFormula) {
  Tensor x = rand({2, 3, 4}, 33, DType::kFloat64);
  Tensor w = rand({3, 4}, 34, DType::kFloat64), b = rand({3, 4}, 35, DType::kFloat64);
  Tensor y = layer_norm(x, {3, 4}, w, b, 1e-5);
  ASSERT_EQ(y.sizes(), x.sizes());
  std::vector<double> xv = V(x), wv = V(w), bv = V(b), want;
  for (int r = 0; r < 2; ++r) {
    double m = 0, v = 0;
    for (int i = 0; i < 12; ++i) m += xv[r * 12 + i] / 12;
    for (int i = 0; i < 12; ++i) v += (xv[r * 12 + i] - m) * (xv[r * 12 + i] - m) / 12;
    for (int i = 0; i < 12; ++i)
      want.push_back((xv[r * 12 + i] - m) / std::sqrt(v + 1e-5) * wv[i] + bv[i]);
  }
  expect_near(V(y), want, 1e-13);
  // Without affine parameters each row has mean 0 and variance 1 (up to eps).
  Tensor n = layer_norm(T({1, 2, 3, 4, 10, 10, 10, 14}, {2, 4}), {4});
  expect_near(
      V(n),
      {-1.3416355, -0.4472118, 0.4472118, 1.3416355, -0.5773483, -0.5773483, -0.5773483, 1.7320448},
      1e-5);
  expect_error([&] { layer_norm(x, {3}); }, {"layer_norm", "[3]", "[2, 3, 4]"});
  expect_error([&] { layer_norm(x, {4}, w); }, {"layer_norm", "weight", "[3, 4]", "[4]"});
}

TEST(RmsNorm, MatchesFormulaAndDefaultEps) {
  Tensor x = rand({3, 8}, 36, DType::kFloat64), w = rand({8}, 37, DType::kFloat64);
  std::vector<double> xv = V(x), wv = V(w), want;
  for (int r = 0; r < 3; ++r) {
    double ms = 0;
    for (int i = 0; i < 8; ++i) ms += xv[r * 8 + i] * xv[r * 8 + i] / 8;
    for (int i = 0; i < 8; ++i) want.push_back(xv[r * 8 + i] / std::sqrt(ms + 1e-6) * wv[i]);
  }
  expect_near(V(rms_norm(x, {8}, w, 1e-6)), want, 1e-13);
  // Default eps is the dtype's machine epsilon; tiny inputs make it visible.
  Tensor tiny = T({1e-4, 1e-4}, {2});
  const double eps32 = std::numeric_limits<float>::epsilon();
  EXPECT_NEAR(V(rms_norm(tiny, {2}))[0], 1e-4 / std::sqrt(1e-8 + eps32), 1e-5);
  Tensor tiny64 = T({1e-9, 1e-9}, {2}, DType::kFloat64);
  EXPECT_NEAR(V(rms_norm(tiny64, {2}))[0], 1e-9 / std::sqrt(1e-18 + 0x1p-52), 1e-9);
  Tensor tb = T({0.0625, 0.0625}, {2}, DType::kBFloat16);  // ms = 2^-8, eps = 2^-7
  EXPECT_NEAR(V(rms_norm(tb, {2}))[0], 0.0625 / std::sqrt(0x1p-8 + 0x1p-7), 0.004);
  expect_error(
      [&] {
        rms_norm(x, {8}, T({1, 2}, {2}, DType::kFloat64));
      },
      {"rms_norm", "weight", "[2]"});
}

// layer_norm_backward against central finite differences of layer_norm (float64): the input
// gradient of L = sum(grad_out * layer_norm(x, w, b)) and the weight and bias gradients.
TEST(LayerNormBackward, MatchesFiniteDifferences) {
  const Shape xs{3, 2, 5}, ns{2, 5};
  const Tensor x = rand(xs, 41, DType::kFloat64), w = rand(ns, 42, DType::kFloat64),
               b = rand(ns, 43, DType::kFloat64), g = rand(xs, 44, DType::kFloat64);
  auto loss = [&](const Tensor& xx, const Tensor& ww, const Tensor& bb) {
    std::vector<double> y = V(layer_norm(xx, ns, ww, bb, 1e-5)), gv = V(g);
    double s = 0;
    for (size_t i = 0; i < y.size(); ++i) s += y[i] * gv[i];
    return s;
  };
  auto fd = [&](const Tensor& t, int which) {
    std::vector<double> base = V(t), out(base.size());
    const double h = 1e-6;
    for (size_t i = 0; i < base.size(); ++i) {
      std::vector<double> p = base, m = base;
      p[i] += h;
      m[i] -= h;
      Tensor tp = T(p, t.sizes(), DType::kFloat64), tm = T(m, t.sizes(), DType::kFloat64);
      double lp = which == 0 ? loss(tp, w, b) : which == 1 ? loss(x, tp, b) : loss(x, w, tp);
      double lm = which == 0 ? loss(tm, w, b) : which == 1 ? loss(x, tm, b) : loss(x, w, tm);
      out[i] = (lp - lm) / (2 * h);
    }
    return out;
  };
  std::vector<Tensor> r = layer_norm_backward(g, x, ns, w, 1e-5);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].sizes(), xs);
  EXPECT_EQ(r[1].sizes(), ns);
  EXPECT_EQ(r[2].sizes(), ns);
  expect_near(V(r[0]), fd(x, 0), 1e-6);
  expect_near(V(r[1]), fd(w, 1), 1e-6);
  expect_near(V(r[2]), fd(b, 2), 1e-6);
  // Without a weight: the input gradient of plain normalization, float32 in and out.
  std::vector<Tensor> u = layer_norm_backward(g.to(DType::kFloat32), x.to(DType::kFloat32), ns, std::nullopt, 1e-5);
  EXPECT_EQ(u[0].dtype(), DType::kFloat32);
  std::vector<Tensor> ref = layer_norm_backward(g, x, ns, Tensor::full(ns, 1.0, DType::kFloat64), 1e-5);
  expect_near(V(u[0]), V(ref[0]), 1e-5);
}

TEST(LayerNormBackward, BadInput) {
  const Tensor x = rand({4, 6}, 1), g = rand({4, 6}, 2);
  expect_error([&] { layer_norm_backward(rand({4, 5}, 3), x, {6}, std::nullopt, 1e-5); },
               {"layer_norm_backward", "grad_out", "[4, 5]", "[4, 6]"});
  expect_error([&] { layer_norm_backward(g, x, {5}, std::nullopt, 1e-5); },
               {"layer_norm_backward", "normalized_shape", "[5]"});
  expect_error([&] { layer_norm_backward(g, x, {6}, rand({5}, 4), 1e-5); },
               {"layer_norm_backward", "weight", "[5]"});
}

}  // namespace
}  // namespace dtensor::kernels
