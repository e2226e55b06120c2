#include "kernels/cpu/selection.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

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

// Values from a small set (many ties), NaN at some positions.
Tensor tie_data(const Shape& s, uint64_t seed, int nan_every = 0) {
  std::vector<double> v = V(rand(s, seed, kF64));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = std::round(v[i] * 2);
    if (nan_every > 0 && (i * 5 + seed) % nan_every == 0) v[i] = kNaN;
  }
  return T(v, s, kF64);
}

// ---- Naive references over one row.
// Positions sorted stably by value, NaN last.
std::vector<int64_t> stable_order(const std::vector<double>& r) {
  std::vector<int64_t> o(r.size());
  std::iota(o.begin(), o.end(), 0);
  std::stable_sort(o.begin(), o.end(), [&](int64_t a, int64_t b) {
    if (std::isnan(r[a]) || std::isnan(r[b])) return !std::isnan(r[a]) && std::isnan(r[b]);
    return r[a] < r[b];
  });
  return o;
}
int64_t ref_arg(const std::vector<double>& r, bool is_max) {
  for (size_t i = 0; i < r.size(); ++i)
    if (std::isnan(r[i])) return static_cast<int64_t>(i);
  int64_t best = 0;
  for (size_t i = 1; i < r.size(); ++i)
    if (is_max ? r[i] > r[best] : r[i] < r[best]) best = static_cast<int64_t>(i);
  return best;
}
int64_t ref_median(const std::vector<double>& r, bool ignore_nan) {
  int64_t nans = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    if (!std::isnan(r[i])) continue;
    if (!ignore_nan) return static_cast<int64_t>(i);
    ++nans;
  }
  const int64_t m = static_cast<int64_t>(r.size()) - nans;
  return m == 0 ? 0 : stable_order(r)[(m - 1) / 2];
}

// Rows of x along dim as vectors.
std::vector<std::vector<double>> rows(const Tensor& x, int64_t dim) {
  Tensor t = x.movedim(dim, -1).contiguous();
  const int64_t n = t.size(-1);
  std::vector<double> v = V(t);
  std::vector<std::vector<double>> out;
  for (size_t r = 0; r * n < v.size(); ++r)
    out.emplace_back(v.begin() + r * n, v.begin() + (r + 1) * n);
  return out;
}

TEST(Selection, MaxMinDimHandValues) {
  Tensor x = T({1, 3, 3, 2, kNaN, 5, kNaN, 0, 2, kNaN, 1, kNaN}, {3, 4});
  auto [mx, mxi] = max_dim(x, 1);
  expect_same(V(mx), {3, kNaN, kNaN});
  EXPECT_EQ(I(mxi), (std::vector<int64_t>{1, 0, 1}));  // first of the tied 3s; first NaN
  auto [mn, mni] = min_dim(x, -1, true);
  EXPECT_EQ(mn.sizes(), (Shape{3, 1}));
  expect_same(V(mn), {1, kNaN, kNaN});
  EXPECT_EQ(I(mni), (std::vector<int64_t>{0, 0, 1}));
  auto [c, ci] = max_dim(x, 0);
  expect_same(V(c), {kNaN, kNaN, kNaN, kNaN});  // every column holds a NaN
  EXPECT_EQ(I(ci), (std::vector<int64_t>{1, 2, 1, 2}));
  EXPECT_EQ(max_dim(x, 0).first.dtype(), DType::kFloat32);
  // 0-d, integers, empty dims.
  auto [s, si] = max_dim(T({4}, {}), 0);
  EXPECT_EQ(s.sizes(), Shape{});
  EXPECT_EQ(I(si), (std::vector<int64_t>{0}));
  auto [iv, ii] = min_dim(T({5, -2, -2}, {3}, DType::kInt32), 0);
  EXPECT_EQ(iv.dtype(), DType::kInt32);
  EXPECT_EQ(iv.item(), -2);
  EXPECT_EQ(I(ii), (std::vector<int64_t>{1}));
  EXPECT_EQ(max_dim(Tensor::zeros({0, 3}), 1).first.sizes(), (Shape{0}));
  expect_error([] { max_dim(Tensor::zeros({0, 3}), 0); }, {"max_dim", "dim 0", "size 0"});
}

TEST(Selection, Argmax) {
  Tensor x = T({1, 7, 7, kNaN, 2, kNaN}, {2, 3});
  EXPECT_EQ(I(argmax(x)), (std::vector<int64_t>{3}));
  EXPECT_EQ(argmax(x).sizes(), Shape{});
  EXPECT_EQ(argmax(x, std::nullopt, true).sizes(), (Shape{1, 1}));
  EXPECT_EQ(I(argmax(x, 1)), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(I(argmin(x, 0)), (std::vector<int64_t>{1, 1, 1}));
  EXPECT_EQ(I(argmin(T({3, 1, 1}, {3}))), (std::vector<int64_t>{1}));
  expect_error([] { argmax(Tensor::zeros({0})); }, {"argmax", "empty"});
}

TEST(Selection, MaxMinArgAgainstReference) {
  Tensor x = tie_data({4, 5, 6}, 51, 17);
  for (int64_t dim : {0, 1, 2})
    for (bool is_max : {true, false}) {
      auto [v, i] = is_max ? max_dim(x, dim) : min_dim(x, dim);
      std::vector<int64_t> got = I(i), arg = I(is_max ? argmax(x, dim) : argmin(x, dim));
      std::vector<double> gv = V(v);
      auto rs = rows(x, dim);
      for (size_t r = 0; r < rs.size(); ++r) {
        const int64_t want = ref_arg(rs[r], is_max);
        EXPECT_EQ(got[r], want) << "dim " << dim << " row " << r;
        EXPECT_EQ(arg[r], want);
        expect_same({gv[r]}, {rs[r][want]});
      }
    }
}

TEST(Selection, MedianWholeTensor) {
  EXPECT_EQ(median(T({4, 1, 3, 2}, {2, 2})).item(), 2);  // lower median of an even count
  EXPECT_EQ(median(T({5, 1, 3}, {3})).item(), 3);
  EXPECT_EQ(median(T({5, 1, 3}, {3})).sizes(), Shape{});
  EXPECT_TRUE(std::isnan(median(T({1, kNaN, 3}, {3})).item()));
  EXPECT_TRUE(std::isnan(median(Tensor::zeros({0, 2})).item()));
  EXPECT_EQ(nanmedian(T({1, kNaN, 3, kNaN, 2, 9}, {6})).item(), 2);
  EXPECT_TRUE(std::isnan(nanmedian(T({kNaN, kNaN}, {2})).item()));
  EXPECT_TRUE(std::isnan(nanmedian(Tensor::zeros({0})).item()));
  Tensor i = T({7, 3, 9, 1}, {4}, DType::kInt64);
  EXPECT_EQ(median(i).dtype(), DType::kInt64);
  EXPECT_EQ(median(i).item(), 3);
  EXPECT_EQ(median(T({1, 2}, {2}, DType::kBFloat16)).dtype(), DType::kBFloat16);
}

TEST(Selection, MedianDimTieIndexIsStableRank) {
  // Equal values are ordered by position; the lower median is rank (n - 1) / 2 of that order.
  // [5, 1, 5, 5]: 1@1, 5@0, 5@2, 5@3 -> rank 1 = 5@0.  [1, 1, 1, 0]: 0@3, 1@0, .. -> 1@0.
  // [2, 2, 2, 2]: rank 1 = 2@1.
  auto [v, i] = median_dim(T({5, 1, 5, 5, 1, 1, 1, 0, 2, 2, 2, 2}, {3, 4}), 1);
  EXPECT_EQ(V(v), (std::vector<double>{5, 1, 2}));
  EXPECT_EQ(I(i), (std::vector<int64_t>{0, 0, 1}));
  EXPECT_EQ(I(median_dim(T({1, 1, 1}, {3}), 0).second), (std::vector<int64_t>{1}));
  EXPECT_EQ(I(median_dim(T({7, 7}, {2, 1}), 0).second), (std::vector<int64_t>{0}));
}

TEST(Selection, MedianDimNaNAndReference) {
  auto [v, i] = median_dim(T({3, kNaN, 1, kNaN}, {4}), 0);
  EXPECT_TRUE(std::isnan(v.item()));
  EXPECT_EQ(I(i), (std::vector<int64_t>{1}));  // the first NaN
  // Row 0's numbers in stable order: 1@3, 2@1, 2@4; rank (3 - 1) / 2 = 1 -> 2@1. Row 1 is all NaN.
  auto [nv, ni] =
      nanmedian_dim(T({kNaN, 2, kNaN, 1, 2, kNaN, kNaN, kNaN, kNaN, kNaN}, {2, 5}), 1, true);
  EXPECT_EQ(nv.sizes(), (Shape{2, 1}));
  expect_same(V(nv), {2, kNaN});
  EXPECT_EQ(I(ni), (std::vector<int64_t>{1, 0}));
  Tensor x = tie_data({5, 6, 7}, 52, 19);
  for (int64_t dim : {0, 1, 2})
    for (bool ignore : {false, true}) {
      auto [mv, mi] = ignore ? nanmedian_dim(x, dim) : median_dim(x, dim);
      std::vector<int64_t> got = I(mi);
      std::vector<double> gv = V(mv);
      auto rs = rows(x, dim);
      for (size_t r = 0; r < rs.size(); ++r) {
        const int64_t want = ref_median(rs[r], ignore);
        EXPECT_EQ(got[r], want) << "dim " << dim << " row " << r << " nan-ignoring " << ignore;
        expect_same({gv[r]}, {rs[r][want]});
      }
    }
}

TEST(Selection, KthvalueOrderAndTies) {
  // Stable order of [3, NaN, 1, 3, NaN]: 1@2, 3@0, 3@3, NaN@1, NaN@4.
  Tensor x = T({3, kNaN, 1, 3, kNaN}, {5});
  const std::vector<double> wv = {1, 3, 3, kNaN, kNaN};
  const std::vector<int64_t> wi = {2, 0, 3, 1, 4};
  for (int64_t k = 1; k <= 5; ++k) {
    auto [v, i] = kthvalue(x, k, 0);
    expect_same({v.item()}, {wv[k - 1]});
    EXPECT_EQ(I(i)[0], wi[k - 1]) << "k = " << k;
  }
  expect_error([&] { kthvalue(x, 6, 0); }, {"kthvalue", "k = 6", "1 <= k <= 5"});
  expect_error([&] { kthvalue(x, 0); }, {"kthvalue", "k = 0"});
  // kthvalue at the lower-median rank agrees with median_dim on NaN-free rows.
  Tensor y = tie_data({4, 9}, 53);
  EXPECT_TRUE(equal(kthvalue(y, 5, 1).second, median_dim(y, 1).second));
  Tensor z = tie_data({3, 4, 8}, 54, 7);
  for (int64_t dim : {0, 1, 2}) {
    auto rs = rows(z, dim);
    for (int64_t k = 1; k <= z.size(dim); ++k) {
      auto [v, i] = kthvalue(z, k, dim, true);
      std::vector<int64_t> got = I(i);
      std::vector<double> gv = V(v);
      for (size_t r = 0; r < rs.size(); ++r) {
        const int64_t want = stable_order(rs[r])[k - 1];
        EXPECT_EQ(got[r], want) << "dim " << dim << " k " << k << " row " << r;
        expect_same({gv[r]}, {rs[r][want]});
      }
    }
  }
  auto [s, si] = kthvalue(T({2}, {}), 1, 0);
  EXPECT_EQ(s.item(), 2);
  EXPECT_EQ(si.sizes(), Shape{});
}

TEST(Selection, BackwardAgainstFiniteDifferences) {
  Tensor x = rand({3, 5}, 55, kF64);  // distinct values: selections are locally constant
  for (int64_t dim : {0, 1})
    for (bool keepdim : {false, true}) {
      Shape rs = x.sizes();
      if (keepdim)
        rs[dim] = 1;
      else
        rs.erase(rs.begin() + dim);
      Tensor w = rand(rs, 56 + dim, kF64);
      using Sel = std::pair<Tensor, Tensor> (*)(const Tensor&, int64_t, bool);
      for (Sel f : {Sel{max_dim}, Sel{min_dim}, Sel{median_dim}, Sel{nanmedian_dim}}) {
        expect_near(V(value_index_backward(w, f(x, dim, keepdim).second, x.sizes(), dim, keepdim)),
                    numeric_grad(x, w, [&](const Tensor& t) { return f(t, dim, keepdim).first; }),
                    1e-8);
      }
      expect_near(
          V(value_index_backward(w, kthvalue(x, 2, dim, keepdim).second, x.sizes(), dim, keepdim)),
          numeric_grad(x, w, [&](const Tensor& t) { return kthvalue(t, 2, dim, keepdim).first; }),
          1e-8);
    }
  Tensor g = T({0.5}, {}, kF64);
  expect_near(V(median_backward(g, x, median(x))),
              numeric_grad(x, g, [](const Tensor& t) { return median(t); }), 1e-8);
}

TEST(Selection, BackwardTiesAndShapes) {
  // Whole-tensor median: split evenly among the elements equal to the result (NaN: the NaNs).
  Tensor x = T({1, 2, 2, 3}, {2, 2});
  EXPECT_EQ(V(median_backward(T({1}, {}), x, median(x))), (std::vector<double>{0, 0.5, 0.5, 0}));
  Tensor y = T({kNaN, 1, kNaN}, {3});
  EXPECT_EQ(V(median_backward(T({3}, {}), y, median(y))), (std::vector<double>{1.5, 0, 1.5}));
  EXPECT_EQ(V(median_backward(T({2}, {}), y, nanmedian(y))), (std::vector<double>{0, 2, 0}));
  // value_index_backward puts the grad at the single selected index.
  Tensor gi = value_index_backward(T({1, 2}, {2}), T({2, 0}, {2}, DType::kInt64), {2, 3}, 1, false);
  EXPECT_EQ(V(gi), (std::vector<double>{0, 0, 1, 2, 0, 0}));
  Tensor gk =
      value_index_backward(T({1, 2}, {1, 2}), T({1, 0}, {1, 2}, DType::kInt64), {2, 2}, 0, true);
  EXPECT_EQ(V(gk), (std::vector<double>{0, 2, 1, 0}));
  EXPECT_EQ(
      value_index_backward(T({4}, {}, DType::kBFloat16), T({0}, {}, DType::kInt64), {}, 0, false)
          .dtype(),
      DType::kBFloat16);
  expect_error(
      [] {
        value_index_backward(T({1}, {1}), T({0}, {1}, DType::kInt64), {2, 3}, 1, false);
      },
      {"value_index_backward", "[1]", "[2, 3]"});
  expect_error(
      [] {
        value_index_backward(T({1}, {1, 1}), T({3}, {1, 1}, DType::kInt64), {1, 3}, 1, true);
      },
      {"value_index_backward", "index 3"});
}

TEST(Selection, DistributedHelpersHandValues) {
  Tensor x = T({1, kNaN, 3, 3, kNaN, kNaN, kNaN, kNaN}, {2, 4});
  EXPECT_EQ(I(count_less(x, 1, T({3, 3}, {2}))), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(I(count_less_equal(x, 1, T({3, 3}, {2, 1}))), (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(count_less_equal(x, 1, T({3, 3}, {2, 1})).sizes(), (Shape{2, 1}));
  EXPECT_EQ(I(count_less(x, 1, T({kNaN, kNaN}, {2}))), (std::vector<int64_t>{3, 0}));
  EXPECT_EQ(I(count_less_equal(x, 1, T({kNaN, kNaN}, {2}))), (std::vector<int64_t>{4, 4}));
  EXPECT_EQ(I(count_nan(x, 1)), (std::vector<int64_t>{1, 4}));
  auto [lo, hi] = min_max(x, 1, false);
  EXPECT_EQ(V(lo), (std::vector<double>{1, kInf}));
  EXPECT_EQ(V(hi), (std::vector<double>{3, -kInf}));
  auto [ilo, ihi] = min_max(Tensor::zeros({2, 0}, DType::kInt32), 1);
  EXPECT_EQ(I(ilo), (std::vector<int64_t>{2147483647, 2147483647}));
  EXPECT_EQ(I(ihi)[0], -2147483648LL);
  EXPECT_EQ(I(count_less(Tensor::zeros({2, 0}), 1, T({0, 0}, {2}))), (std::vector<int64_t>{0, 0}));
  auto [m, c] = median_between(T({1, 2, 3, 2.5, kNaN, 0}, {6}), 0, T({1}, {1}), T({3}, {1}));
  EXPECT_EQ(V(m), (std::vector<double>{2}));
  EXPECT_EQ(I(c), (std::vector<int64_t>{2}));
  auto [m0, c0] = median_between(T({1, 3}, {2}), 0, T({1}, {1}), T({3}, {1}));
  EXPECT_TRUE(std::isnan(m0.item()));
  EXPECT_EQ(I(c0), (std::vector<int64_t>{0}));
  Tensor y = T({4, 2, 4, 4, kNaN, kNaN}, {6});
  auto occ = [&](double v, int64_t k) {
    return I(index_of_occurrence(y, 0, T({v}, {1}), T({double(k)}, {1}, DType::kInt64), 10))[0];
  };
  EXPECT_EQ(occ(4, 1), 10);
  EXPECT_EQ(occ(4, 3), 13);
  EXPECT_EQ(occ(4, 4), -1);
  EXPECT_EQ(occ(4, 0), -1);
  EXPECT_EQ(occ(kNaN, 2), 15);
  expect_error([&] { count_less(x, 1, T({1, 2, 3}, {3})); }, {"count_less", "pivots", "[3]"});
}

// The distributed search sketched in selection.h, run over shards of dim 1, must reproduce
// kthvalue's value and index for every k (ties and NaNs included).
TEST(Selection, ShardedKthvalueWithHelpersMatchesKthvalue) {
  Tensor x = tie_data({4, 11}, 57, 9);
  const std::vector<std::pair<int64_t, int64_t>> shards = {{0, 4}, {4, 0}, {4, 5}, {9, 2}};
  const int64_t R = 4, n = 11;
  auto sum_over = [&](auto f) {  // all-reduce SUM of an int64 per-row quantity
    std::vector<int64_t> s(R, 0);
    for (auto [start, len] : shards) {
      std::vector<int64_t> v = I(f(x.narrow(1, start, len), start));
      for (int64_t r = 0; r < R; ++r) s[r] += v[r];
    }
    return s;
  };
  auto rowt = [&](const std::vector<double>& v) { return T(v, {R}, kF64); };
  const std::vector<int64_t> nans =
      sum_over([](const Tensor& s, int64_t) { return count_nan(s, 1, false); });
  std::vector<double> mn(R, kInf), mx(R, -kInf);
  for (auto [start, len] : shards) {
    auto [a, b] = min_max(x.narrow(1, start, len), 1, false);
    for (int64_t r = 0; r < R; ++r)
      mn[r] = std::min(mn[r], V(a)[r]), mx[r] = std::max(mx[r], V(b)[r]);
  }
  for (int64_t k = 1; k <= n; ++k) {
    std::vector<double> ans(R, kNaN), lo(R), hi(R);
    std::vector<bool> done(R, false);
    auto counts = [&](const std::vector<double>& p) {
      Tensor pt = rowt(p);
      return std::make_pair(
          sum_over([&](const Tensor& s, int64_t) { return count_less(s, 1, pt); }),
          sum_over([&](const Tensor& s, int64_t) { return count_less_equal(s, 1, pt); }));
    };
    for (int64_t r = 0; r < R; ++r) done[r] = k > n - nans[r];  // the answer is NaN
    {  // the answer may be the min or the max; else it lies strictly between
      auto [lmin, lemin] = counts(mn);
      auto [lmax, lemax] = counts(mx);
      for (int64_t r = 0; r < R; ++r) {
        if (done[r]) continue;
        if (k <= lemin[r])
          ans[r] = mn[r], done[r] = true;
        else if (k > lmax[r])
          ans[r] = mx[r], done[r] = true;
        lo[r] = mn[r], hi[r] = mx[r];
      }
    }
    for (int round = 0;
         round < 64 && !std::all_of(done.begin(), done.end(), [](bool b) { return b; }); ++round) {
      // Pivot: the count-weighted median of the shards' proposals (any proposal would do).
      std::vector<std::vector<std::pair<double, int64_t>>> props(R);
      for (auto [start, len] : shards) {
        auto [m, c] = median_between(x.narrow(1, start, len), 1, rowt(lo), rowt(hi));
        for (int64_t r = 0; r < R; ++r)
          if (I(c)[r] > 0) props[r].push_back({V(m)[r], I(c)[r]});
      }
      std::vector<double> piv(R);
      for (int64_t r = 0; r < R; ++r) {
        if (done[r]) {
          piv[r] = ans[r];
          continue;
        }
        ASSERT_FALSE(props[r].empty());
        std::sort(props[r].begin(), props[r].end());
        int64_t total = 0, acc = 0;
        for (auto& p : props[r]) total += p.second;
        for (auto& p : props[r])
          if ((acc += p.second) * 2 >= total) {
            piv[r] = p.first;
            break;
          }
      }
      auto [cl, cle] = counts(piv);
      for (int64_t r = 0; r < R; ++r) {
        if (done[r]) continue;
        if (cl[r] < k && k <= cle[r])
          ans[r] = piv[r], done[r] = true;
        else if (k <= cl[r])
          hi[r] = piv[r];
        else
          lo[r] = piv[r];
      }
    }
    // Index: the (k - count_less(v))-th occurrence of v in global order.
    auto [cl, cle] = counts(ans);
    std::vector<int64_t> before(R, 0), idx(R, -1);
    for (auto [start, len] : shards) {
      Tensor s = x.narrow(1, start, len);
      std::vector<int64_t> here = I(count_less_equal(s, 1, rowt(ans))),
                           less = I(count_less(s, 1, rowt(ans)));
      std::vector<double> occ(R);
      for (int64_t r = 0; r < R; ++r) occ[r] = static_cast<double>(k - cl[r] - before[r]);
      std::vector<int64_t> got =
          I(index_of_occurrence(s, 1, rowt(ans), T(occ, {R}, DType::kInt64), start));
      for (int64_t r = 0; r < R; ++r) {
        idx[r] = std::max(idx[r], got[r]);
        before[r] += here[r] - less[r];
      }
    }
    auto [wv, wi] = kthvalue(x, k, 1);
    expect_same(ans, V(wv));
    EXPECT_EQ(idx, I(wi)) << "k = " << k;
  }
}

}  // namespace
}  // namespace dtensor::kernels
