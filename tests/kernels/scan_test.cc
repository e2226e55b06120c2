#include "kernels/cpu/scan.h"

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
using testing::I;
using testing::expect_same;
using testing::numeric_grad;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr DType kF64 = DType::kFloat64;

TEST(Scan, CumsumCumprodHandValues) {
  Tensor x = T({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(V(cumsum(x, 1)), (std::vector<double>{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(V(cumsum(x, -1)), (std::vector<double>{1, 3, 6, 4, 9, 15}));
  EXPECT_EQ(V(cumsum(x, 0)), (std::vector<double>{1, 2, 3, 5, 7, 9}));
  EXPECT_EQ(V(cumprod(x, 1)), (std::vector<double>{1, 2, 6, 4, 20, 120}));
  EXPECT_EQ(V(cumprod(x, 0)), (std::vector<double>{1, 2, 3, 4, 10, 18}));
  EXPECT_EQ(cumsum(x, 1).dtype(), DType::kFloat32);
  // Strided input: along dim 0 of the transpose = along dim 1.
  EXPECT_EQ(V(cumsum(x.transpose(0, 1), 0)), V(cumsum(x, 1).transpose(0, 1)));
  // 0-d scans as one element.
  EXPECT_EQ(cumsum(T({7}, {}), 0).item(), 7);
  EXPECT_EQ(cumsum(T({7}, {}), -1).sizes(), Shape{});
  // Integers give int64 and wrap.
  Tensor i = T({2, -3, 4}, {3}, DType::kInt32);
  EXPECT_EQ(cumsum(i, 0).dtype(), DType::kInt64);
  EXPECT_EQ(I(cumprod(i, 0)), (std::vector<int64_t>{2, -6, -24}));
  Tensor big = Tensor::from_vector<int64_t>({int64_t{1} << 62, 4}, {2});
  EXPECT_EQ(I(cumprod(big, 0))[1], 0);  // 2^64 wraps to 0
  // NaN / inf propagate; zeros stay.
  expect_same(V(cumsum(T({1, kNaN, 2}, {3}), 0)), {1, kNaN, kNaN});
  expect_same(V(cumprod(T({2, 0, kInf}, {3}, kF64), 0)), {2, 0, kNaN});
  // bfloat16 keeps its dtype.
  Tensor b = cumsum(T({1, 2, 3}, {3}, DType::kBFloat16), 0);
  EXPECT_EQ(b.dtype(), DType::kBFloat16);
  EXPECT_EQ(V(b), (std::vector<double>{1, 3, 6}));
  EXPECT_EQ(cumsum(Tensor::zeros({0, 3}), 0).sizes(), (Shape{0, 3}));
  expect_error([&] { cumsum(x, 2); }, {"cumsum", "dim 2"});
}

TEST(Scan, LogcumsumexpMatchesNaiveAndInfinities) {
  Tensor x = rand({3, 6}, 41, kF64);
  std::vector<double> xv = V(x), want;
  for (int r = 0; r < 3; ++r) {
    double s = 0;
    for (int i = 0; i < 6; ++i) want.push_back(std::log(s += std::exp(xv[r * 6 + i])));
  }
  expect_near(V(logcumsumexp(x, 1)), want, 1e-14);
  // Stable for large values; infinities follow torch's helper.
  expect_near(V(logcumsumexp(T({1000, 1000}, {2}, kF64), 0)), {1000, 1000 + std::log(2.0)}, 1e-12);
  expect_same(V(logcumsumexp(T({-kInf, -kInf, 0}, {3}, kF64), 0)), {-kInf, -kInf, 0});
  expect_same(V(logcumsumexp(T({kInf, kInf, 1}, {3}, kF64), 0)), {kInf, kInf, kInf});
  expect_same(V(logcumsumexp(T({-kInf, kInf, -kInf}, {3}, kF64), 0)), {-kInf, kInf, kInf});
  expect_same(V(logcumsumexp(T({0, kNaN, 0}, {3}, kF64), 0)), {0, kNaN, kNaN});
  expect_error(
      [] {
        logcumsumexp(T({1, 2}, {2}, DType::kInt64), 0);
      },
      {"logcumsumexp", "int64", "floating"});
}

TEST(Scan, CummaxCumminTiesTakeLastIndexAndNaNSticks) {
  auto [v, i] = cummax(T({1, 3, 3, 2, 3}, {5}), 0);
  EXPECT_EQ(V(v), (std::vector<double>{1, 3, 3, 3, 3}));
  EXPECT_EQ(I(i), (std::vector<int64_t>{0, 1, 2, 2, 4}));
  auto [mv, mi] = cummin(T({3, 1, 1, 2, 1}, {5}), 0);
  EXPECT_EQ(V(mv), (std::vector<double>{3, 1, 1, 1, 1}));
  EXPECT_EQ(I(mi), (std::vector<int64_t>{0, 1, 2, 2, 4}));
  // Once NaN is seen the value stays NaN and the index follows each later NaN.
  auto [nv, ni] = cummax(T({1, kNaN, 5, kNaN, 0}, {5}), 0);
  expect_same(V(nv), {1, kNaN, kNaN, kNaN, kNaN});
  EXPECT_EQ(I(ni), (std::vector<int64_t>{0, 1, 1, 3, 3}));
  auto [cv, ci] = cummin(T({kNaN, -1, kNaN}, {3}), 0);
  expect_same(V(cv), {kNaN, kNaN, kNaN});
  EXPECT_EQ(I(ci), (std::vector<int64_t>{0, 0, 2}));
  // -inf ties too; integers keep their dtype.
  EXPECT_EQ(I(cummax(T({-kInf, -kInf}, {2}), 0).second), (std::vector<int64_t>{0, 1}));
  auto [iv, ii] = cummax(T({2, 5, 5}, {3}, DType::kInt32), 0);
  EXPECT_EQ(iv.dtype(), DType::kInt32);
  EXPECT_EQ(I(ii), (std::vector<int64_t>{0, 1, 2}));
}

// Independent formulation of the rule: the prefix max (NaN if any NaN) and the LAST position in
// the prefix holding it (the last NaN when NaN).
void ref_cumext(const std::vector<double>& x, bool is_max, std::vector<double>& v,
                std::vector<int64_t>& idx) {
  v.assign(x.size(), 0);
  idx.assign(x.size(), 0);
  for (size_t i = 0; i < x.size(); ++i) {
    double best = x[0];
    bool nan = false;
    for (size_t j = 0; j <= i; ++j) {
      nan = nan || std::isnan(x[j]);
      if (!std::isnan(x[j]))
        best = std::isnan(best) ? x[j] : is_max ? std::max(best, x[j]) : std::min(best, x[j]);
    }
    v[i] = nan ? kNaN : best;
    for (size_t j = 0; j <= i; ++j)
      if (nan ? std::isnan(x[j]) : x[j] == best) idx[i] = static_cast<int64_t>(j);
  }
}

// Rows with many ties (values from a small set) and some NaNs.
Tensor tie_data(const Shape& s, uint64_t seed, double nan_every = 0) {
  std::vector<double> v = V(rand(s, seed, kF64));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = std::round(v[i] * 2);
    if (nan_every > 0 && std::fmod(static_cast<double>(i * 7 + seed), nan_every) == 0) v[i] = kNaN;
  }
  return T(v, s, kF64);
}

TEST(Scan, CummaxCumminMatchReferenceAlongEveryDim) {
  Tensor x = tie_data({3, 4, 9}, 42, 11);
  for (bool is_max : {true, false})
    for (int64_t dim : {0, 1, 2, -1}) {
      auto [v, i] = is_max ? cummax(x, dim) : cummin(x, dim);
      const int64_t d = dim < 0 ? dim + 3 : dim;
      Tensor xr = x.movedim(d, -1).contiguous(), vr = v.movedim(d, -1), ir = i.movedim(d, -1);
      const int64_t n = x.size(d), rows = x.numel() / n;
      std::vector<double> xv = V(xr), vv = V(vr);
      std::vector<int64_t> iv = I(ir);
      for (int64_t r = 0; r < rows; ++r) {
        std::vector<double> row(xv.begin() + r * n, xv.begin() + (r + 1) * n), rv;
        std::vector<int64_t> ri;
        ref_cumext(row, is_max, rv, ri);
        expect_same(std::vector<double>(vv.begin() + r * n, vv.begin() + (r + 1) * n), rv);
        EXPECT_EQ(std::vector<int64_t>(iv.begin() + r * n, iv.begin() + (r + 1) * n), ri)
            << "dim " << dim << " row " << r << (is_max ? " cummax" : " cummin");
      }
    }
}

// Splits dim 1 of x into pieces and scans them with carries; the result must equal the full scan
// exactly (float64, same operation order).
TEST(Scan, CarriedScansEqualTheFullScan) {
  Tensor x = tie_data({2, 10, 3}, 43, 13);
  Tensor xs = rand({2, 10, 3}, 44, kF64);
  const std::vector<std::pair<int64_t, int64_t>> shards = {{0, 3}, {3, 4}, {7, 3}};
  std::vector<Tensor> sum, prod, lse, mx, mxi, mn, mni;
  Tensor cs = Tensor::zeros({2, 1, 3}, kF64), cp = Tensor::full({2, 1, 3}, 1, kF64);
  Tensor cl = Tensor::full({2, 1, 3}, -kInf, kF64);
  Tensor cmx = Tensor::full({2, 1, 3}, -kInf, kF64), cmn = Tensor::full({2, 1, 3}, kInf, kF64);
  Tensor cmxi = Tensor::zeros({2, 1, 3}, DType::kInt64), cmni = cmxi;
  for (auto [start, len] : shards) {
    Tensor piece = xs.narrow(1, start, len), tpiece = x.narrow(1, start, len);
    sum.push_back(cumsum_with_carry(piece, 1, cs));
    prod.push_back(cumprod_with_carry(piece, 1, cp));
    lse.push_back(logcumsumexp_with_carry(piece, 1, cl));
    auto [a, ai] = cummax_with_carry(tpiece, 1, cmx, cmxi, start);
    auto [b, bi] = cummin_with_carry(tpiece, 1, cmn, cmni, start);
    mx.push_back(a), mxi.push_back(ai), mn.push_back(b), mni.push_back(bi);
    cs = sum.back().narrow(1, len - 1, 1), cp = prod.back().narrow(1, len - 1, 1);
    cl = lse.back().narrow(1, len - 1, 1);
    cmx = a.narrow(1, len - 1, 1), cmxi = ai.narrow(1, len - 1, 1);
    cmn = b.narrow(1, len - 1, 1), cmni = bi.narrow(1, len - 1, 1);
  }
  EXPECT_TRUE(equal(cat(sum, 1), cumsum(xs, 1)));
  EXPECT_TRUE(equal(cat(prod, 1), cumprod(xs, 1)));
  EXPECT_TRUE(equal(cat(lse, 1), logcumsumexp(xs, 1)));
  EXPECT_TRUE(equal(cat(mx, 1), cummax(x, 1).first));
  EXPECT_TRUE(equal(cat(mxi, 1), cummax(x, 1).second));
  EXPECT_TRUE(equal(cat(mn, 1), cummin(x, 1).first));
  EXPECT_TRUE(equal(cat(mni, 1), cummin(x, 1).second));
}

TEST(Scan, CarryHandValuesAndErrors) {
  // A local element equal to the carry wins (it is later); a NaN carry sticks.
  auto [v, i] = cummax_with_carry(T({3, 1, 4}, {3}), 0, T({3}, {1}), T({2}, {1}, DType::kInt64), 5);
  EXPECT_EQ(V(v), (std::vector<double>{3, 3, 4}));
  EXPECT_EQ(I(i), (std::vector<int64_t>{5, 5, 7}));
  auto [nv, ni] =
      cummin_with_carry(T({3, kNaN}, {2}), 0, T({kNaN}, {1}), T({1}, {1}, DType::kInt64), 4);
  expect_same(V(nv), {kNaN, kNaN});
  EXPECT_EQ(I(ni), (std::vector<int64_t>{1, 5}));
  EXPECT_EQ(V(cumsum_with_carry(T({1, 2, 3, 4}, {2, 2}), 1, T({10, 20}, {2, 1}))),
            (std::vector<double>{11, 13, 23, 27}));
  EXPECT_EQ(V(cumprod_with_carry(T({1, 2, 3, 4}, {2, 2}), 0, T({2, 3}, {1, 2}))),
            (std::vector<double>{2, 6, 6, 24}));
  expect_near(V(logcumsumexp_with_carry(T({0}, {1}, kF64), 0, T({0}, {1}, kF64))), {std::log(2.0)},
              1e-15);
  expect_error(
      [] {
        cumsum_with_carry(T({1, 2, 3, 4}, {2, 2}), 1, T({1, 2}, {2}));
      },
      {"cumsum_with_carry", "carry", "[2]", "[2, 1]"});
}

TEST(Scan, BackwardAgainstFiniteDifferences) {
  Tensor x = rand({3, 5}, 45, kF64), w = rand({3, 5}, 46, kF64);
  for (int64_t dim : {0, 1}) {
    expect_near(V(cumsum_backward(w, dim)),
                numeric_grad(x, w, [&](const Tensor& t) { return cumsum(t, dim); }), 1e-8);
    expect_near(V(cumprod_backward(w, x, cumprod(x, dim), dim)),
                numeric_grad(x, w, [&](const Tensor& t) { return cumprod(t, dim); }), 1e-8);
    expect_near(V(logcumsumexp_backward(w, x, logcumsumexp(x, dim), dim)),
                numeric_grad(x, w, [&](const Tensor& t) { return logcumsumexp(t, dim); }), 1e-8);
    // Distinct values: the cummax/cummin selection is locally constant.
    expect_near(V(cummaxmin_backward(w, cummax(x, dim).second, x.sizes(), dim)),
                numeric_grad(x, w, [&](const Tensor& t) { return cummax(t, dim).first; }), 1e-8);
    expect_near(V(cummaxmin_backward(w, cummin(x, dim).second, x.sizes(), dim)),
                numeric_grad(x, w, [&](const Tensor& t) { return cummin(t, dim).first; }), 1e-8);
  }
}

TEST(Scan, CumprodBackwardWithZeros) {
  // cumprod is multilinear, so central differences are exact up to rounding even at zeros.
  for (const std::vector<double>& xv :
       {std::vector<double>{2, 0, 3, 0.5, 4}, std::vector<double>{0, 2, 0, 3, 1},
        std::vector<double>{1.5, 2, -1, 3, 0}, std::vector<double>{0, 0, 0, 0, 0}}) {
    Tensor x = T(xv, {5}, kF64), w = rand({5}, 47, kF64);
    expect_near(V(cumprod_backward(w, x, cumprod(x, 0), 0)),
                numeric_grad(x, w, [](const Tensor& t) { return cumprod(t, 0); }), 1e-9);
  }
  // Hand value: x = [2, 0, 3], g = 1: d/dx1 = 2 + 2*3 = 8, d/dx0 = 1, d/dx2 = 0.
  Tensor x = T({2, 0, 3}, {3}, kF64);
  EXPECT_EQ(V(cumprod_backward(T({1, 1, 1}, {3}, kF64), x, cumprod(x, 0), 0)),
            (std::vector<double>{1, 8, 0}));
}

TEST(Scan, BackwardHandValuesDtypesAndOffsets) {
  EXPECT_EQ(V(cumsum_backward(T({1, 2, 3}, {3}), 0)), (std::vector<double>{6, 5, 3}));
  Tensor g = cumsum_backward(T({1, 2, 3}, {3}, DType::kBFloat16), 0);
  EXPECT_EQ(g.dtype(), DType::kBFloat16);
  // Ties: all gradient lands on the selected (last) index.
  Tensor x = T({1, 3, 3, 2}, {4});
  EXPECT_EQ(V(cummaxmin_backward(T({1, 1, 1, 1}, {4}), cummax(x, 0).second, x.sizes(), 0)),
            (std::vector<double>{1, 1, 2, 0}));
  // A shard at offset 4: indices below 4 point at the carry and are skipped.
  EXPECT_EQ(V(cummaxmin_backward(T({1, 2, 3}, {3}), T({2, 4, 6}, {3}, DType::kInt64), {3}, 0, 4)),
            (std::vector<double>{2, 0, 3}));
  expect_error([] { cummaxmin_backward(T({1}, {1}), T({3}, {1}, DType::kInt64), {1}, 0); },
               {"cummaxmin_backward", "index 3"});
  expect_error([] { cumsum_backward(T({1}, {1}, DType::kInt64), 0); },
               {"cumsum_backward", "floating"});
}

}  // namespace
}  // namespace dtensor::kernels
