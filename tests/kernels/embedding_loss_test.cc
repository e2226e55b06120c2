#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "kernels/cpu/kernels.h"
#include "tests/kernels/test_util.h"

namespace dtensor::kernels {
namespace {

using testing::expect_error;
using testing::expect_near;
using testing::rand;
using testing::T;
using testing::V;

Tensor ids(const std::vector<double>& v, const Shape& s, DType dt = DType::kInt64) {
  return T(v, s, dt);
}

TEST(Embedding, LooksUpRows) {
  Tensor w = Tensor::arange(15).view({5, 3});  // row r = 3r, 3r+1, 3r+2
  Tensor e = embedding(w, ids({0, 4, 2, 2}, {2, 2}, DType::kInt32));
  EXPECT_EQ(e.sizes(), (Shape{2, 2, 3}));
  EXPECT_EQ(e.dtype(), DType::kFloat32);
  EXPECT_EQ(V(e), (std::vector<double>{0, 1, 2, 12, 13, 14, 6, 7, 8, 6, 7, 8}));
  EXPECT_EQ(embedding(w, ids({3}, {})).sizes(), (Shape{3}));
  // A strided (transposed) weight.
  Tensor wt = Tensor::arange(15).view({3, 5}).transpose(0, 1);  // [5, 3], row r = r, r+5, r+10
  EXPECT_EQ(V(embedding(wt, ids({1}, {1}))), (std::vector<double>{1, 6, 11}));
  expect_error([&] { embedding(w, ids({1, 5}, {2})); }, {"embedding", "index 5", "[5, 3]"});
  expect_error([&] { embedding(w, ids({-1}, {1})); }, {"embedding", "index -1"});
  expect_error([&] { embedding(w, T({1}, {1})); }, {"embedding", "int64", "float32"});
}

TEST(Embedding, MaskedShardsSumToFullLookup) {
  Tensor w = rand({7, 4}, 41, DType::kFloat64);
  Tensor idx = ids({6, 0, 3, 2, 5, 3}, {2, 3});
  Tensor full = embedding(w, idx);
  // Row-wise shards [0, 3), [3, 5), [5, 7): each contributes its rows, zeros elsewhere.
  std::vector<double> total(full.numel(), 0.0);
  for (auto [lo, hi] : {std::pair<int64_t, int64_t>{0, 3}, {3, 5}, {5, 7}}) {
    Tensor part = embedding_masked(w.narrow(0, lo, hi - lo), idx, lo, hi);
    EXPECT_EQ(part.sizes(), (Shape{2, 3, 4}));
    std::vector<double> pv = V(part);
    for (size_t i = 0; i < pv.size(); ++i) total[i] += pv[i];
  }
  EXPECT_EQ(total, V(full));
  // Out-of-range rows are exactly zero.
  Tensor mid = embedding_masked(w.narrow(0, 3, 2), idx, 3, 5);
  EXPECT_EQ(V(mid.select(0, 0).select(0, 0)), std::vector<double>(4, 0.0));
  EXPECT_EQ(V(mid.select(0, 0).select(0, 2)), V(w.select(0, 3)));
  expect_error([&] { embedding_masked(w, idx, 0, 3); }, {"embedding_masked", "[7, 4]", "[0, 3)"});
}

// logp rows [[-1, -2, -3], [-0.5, -1.5, -2.5]].
Tensor logp() { return T({-1, -2, -3, -0.5, -1.5, -2.5}, {2, 3}); }

TEST(NllLoss, ReductionsWeightsIgnore) {
  Tensor t = ids({2, 0}, {2});
  EXPECT_NEAR(nll_loss(logp(), t).item(), (3 + 0.5) / 2, 1e-7);
  EXPECT_NEAR(nll_loss(logp(), t, std::nullopt, "sum").item(), 3.5, 1e-7);
  Tensor none = nll_loss(logp(), t, std::nullopt, "none");
  EXPECT_EQ(none.sizes(), (Shape{2}));
  EXPECT_EQ(V(none), (std::vector<double>{3, 0.5}));
  // Weighted mean divides by the weights of the picked classes: (3*3 + 1*0.5) / (3 + 1).
  Tensor w = T({1, 2, 3}, {3});
  EXPECT_NEAR(nll_loss(logp(), t, w).item(), 9.5 / 4, 1e-7);
  // ignore_index drops an element from both sums.
  EXPECT_NEAR(nll_loss(logp(), ids({2, -100}, {2}), w).item(), 3, 1e-7);
  EXPECT_NEAR(nll_loss(logp(), ids({2, 1}, {2}), std::nullopt, "mean", 1).item(), 3, 1e-7);
  EXPECT_TRUE(std::isnan(nll_loss(logp(), ids({-100, -100}, {2})).item()));
  // 1-d input with a 0-d target, and a spatial [N, C, d] input.
  EXPECT_NEAR(nll_loss(T({-1, -2, -3}, {3}), ids({1}, {})).item(), 2, 1e-7);
  Tensor sp = logp().unsqueeze(2).expand({2, 3, 2});  // [N=2, C=3, d=2]
  Tensor spn = nll_loss(sp, ids({0, 1, 2, 2}, {2, 2}), std::nullopt, "none");
  EXPECT_EQ(spn.sizes(), (Shape{2, 2}));
  EXPECT_EQ(V(spn), (std::vector<double>{1, 2, 2.5, 2.5}));
  expect_error([&] { nll_loss(logp(), ids({3, 0}, {2})); }, {"nll_loss", "target 3", "3 classes"});
  expect_error([&] { nll_loss(logp(), ids({0}, {1})); }, {"nll_loss", "[1]", "[2]"});
  expect_error([&] { nll_loss(logp(), t, std::nullopt, "avg"); }, {"nll_loss", "avg", "mean"});
  expect_error([&] { nll_loss(logp(), t, T({1, 2}, {2})); }, {"nll_loss", "weight", "[2]", "[3]"});
}

// Reference log_softmax of one row, written independently of the kernels.
std::vector<double> ref_log_softmax(const std::vector<double>& row) {
  double s = 0;
  for (double v : row) s += std::exp(v);
  std::vector<double> out;
  for (double v : row) out.push_back(v - std::log(s));
  return out;
}

TEST(CrossEntropy, MatchesNllOfLogSoftmax) {
  Tensor x = rand({4, 5}, 42, DType::kFloat64);
  Tensor t = ids({1, 4, 0, 4}, {4});
  Tensor w = T({0.5, 1, 2, 1, 3}, {5}, DType::kFloat64);
  for (const char* red : {"mean", "sum", "none"}) {
    expect_near(V(cross_entropy(x, t, w, red)), V(nll_loss(log_softmax(x, 1), t, w, red)), 1e-14);
  }
  // Hand value for one row: logits [0, ln 3] -> p = [1/4, 3/4], target 1 -> -ln(3/4).
  EXPECT_NEAR(cross_entropy(T({0, std::log(3.0)}, {1, 2}), ids({1}, {1})).item(), -std::log(0.75),
              1e-6);
  // Logits far from 0 (torch: ln 2); x - (max + log(sum)) gave 0.
  EXPECT_NEAR(cross_entropy(T({1e30, 1e30}, {1, 2}, DType::kFloat64), ids({0}, {1})).item(),
              std::log(2.0), 1e-12);
}

TEST(CrossEntropy, LabelSmoothing) {
  Tensor x = rand({3, 4}, 43, DType::kFloat64);
  Tensor t = ids({2, -100, 0}, {3});
  Tensor w = T({1, 2, 3, 4}, {4}, DType::kFloat64);
  const double ls = 0.2, c = 4;
  double num = 0, den = 0;
  std::vector<double> per;
  for (int64_t i = 0; i < 3; ++i) {
    std::vector<double> lp = ref_log_softmax(V(x.select(0, i)));
    int64_t ti = V(t)[i];
    if (ti == -100) {
      per.push_back(0);
      continue;
    }
    double smooth = 0;
    for (int j = 0; j < 4; ++j) smooth -= V(w)[j] * lp[j];
    double li = (1 - ls) * -V(w)[ti] * lp[ti] + ls / c * smooth;
    per.push_back(li);
    num += li;
    den += V(w)[ti];
  }
  expect_near(V(cross_entropy(x, t, w, "none", -100, ls)), per, 1e-14);
  EXPECT_NEAR(cross_entropy(x, t, w, "sum", -100, ls).item(), num, 1e-14);
  EXPECT_NEAR(cross_entropy(x, t, w, "mean", -100, ls).item(), num / den, 1e-14);
  expect_error([&] { cross_entropy(x, t, w, "mean", -100, 1.5); },
               {"cross_entropy", "label_smoothing"});
}

TEST(CrossEntropy, ProbabilityTargets) {
  Tensor x = rand({3, 4}, 44, DType::kFloat64);
  Tensor t = ids({3, 1, 1}, {3});
  // One-hot probabilities give the class-index loss; "mean" divides by N, not by weights.
  std::vector<double> onehot(12, 0.0);
  for (int i = 0; i < 3; ++i) onehot[i * 4 + static_cast<int>(V(t)[i])] = 1;
  Tensor q = T(onehot, {3, 4}, DType::kFloat64);
  Tensor w = T({1, 2, 3, 4}, {4}, DType::kFloat64);
  EXPECT_NEAR(cross_entropy(x, q, w, "sum").item(), cross_entropy(x, t, w, "sum").item(), 1e-14);
  EXPECT_NEAR(cross_entropy(x, q, w).item(), cross_entropy(x, t, w, "sum").item() / 3, 1e-14);
  // Smoothing mixes in the uniform distribution: q' = 0.9 q + 0.1 / 4.
  std::vector<double> lp = ref_log_softmax(V(x.select(0, 0)));
  double want = 0;
  for (int j = 0; j < 4; ++j) want -= (0.9 * onehot[j] + 0.025) * lp[j];
  EXPECT_NEAR(V(cross_entropy(x, q, std::nullopt, "none", -100, 0.1))[0], want, 1e-14);
}

}  // namespace
}  // namespace dtensor::kernels
