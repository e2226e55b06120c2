#include "kernels/cpu/backward.h"

#include <cmath>
#include <functional>

#include "gtest/gtest.h"
#include "kernels/cpu/embedding.h"
#include "kernels/cpu/loss.h"
#include "kernels/cpu/pointwise.h"
#include "tests/kernels/test_util.h"

namespace dtensor::kernels {
namespace {

using testing::expect_error;
using testing::expect_near;
using testing::rand;
using testing::T;
using testing::V;
using testing::numeric_grad;
constexpr DType kF64 = DType::kFloat64;

TEST(GeluBackward, MatchesFiniteDifferences) {
  const Tensor x = rand({4, 5}, 1, kF64), w = rand({4, 5}, 2, kF64);
  for (const char* a : {"none", "tanh"}) {
    SCOPED_TRACE(a);
    expect_near(V(gelu_backward(w, x, a)), numeric_grad(x, w, [&](const Tensor& t) { return gelu(t, a); }), 1e-8);
  }
  // float32 computes in float; grad broadcasts against self.
  Tensor g32 = gelu_backward(T({2.0}, {1}), rand({3, 2}, 3), "tanh");
  EXPECT_EQ(g32.dtype(), DType::kFloat32);
  EXPECT_EQ(g32.sizes(), (Shape{3, 2}));
  expect_error([&] { gelu_backward(x, x, "erf"); }, {"gelu_backward", "erf"});
}

TEST(EmbeddingDenseBackward, MatchesFiniteDifferencesAndSkipsPadding) {
  const Tensor weight = rand({6, 3}, 4, kF64);
  const Tensor idx = Tensor::from_vector<int64_t>({1, 4, 1, 0, 5, 4, 1}, {7});
  const Tensor w = rand({7, 3}, 5, kF64);
  std::vector<double> want = numeric_grad(weight, w, [&](const Tensor& t) { return embedding(t, idx); });
  expect_near(V(embedding_dense_backward(w, idx, 6)), want, 1e-8);
  // padding_idx 4: row 4 stays 0.
  std::vector<double> pad = want;
  for (int j = 0; j < 3; ++j) pad[4 * 3 + j] = 0;
  expect_near(V(embedding_dense_backward(w, idx, 6, 4)), pad, 1e-8);
  // Row block [2, 5) equals those rows of the whole.
  expect_near(V(embedding_dense_backward(w, idx, 6, -1, 2, 3)),
              std::vector<double>(want.begin() + 6, want.begin() + 15), 1e-8);
  // [*indices, D] with 2-d indices; int32 indices.
  Tensor g2 = embedding_dense_backward(rand({2, 2, 3}, 6), T({0, 1, 2, 1}, {2, 2}, DType::kInt32), 3);
  EXPECT_EQ(g2.sizes(), (Shape{3, 3}));
  expect_error([&] { embedding_dense_backward(w, idx, 5); }, {"index 5 out of range"});
}

TEST(NllLossBackward, MatchesFiniteDifferences) {
  const Tensor x = rand({6, 4}, 7, kF64);
  const Tensor target = Tensor::from_vector<int64_t>({0, 3, 2, 2, 1, 3}, {6});
  const Tensor weight = T({0.5, 1.5, 2.0, 0.75}, {4}, kF64);
  for (const std::string red : {"none", "sum", "mean"}) {
    for (int64_t ignore : {-100, 2}) {
      for (bool with_w : {false, true}) {
        SCOPED_TRACE(red + " ignore " + std::to_string(ignore) + (with_w ? " weighted" : ""));
        std::optional<Tensor> wt = with_w ? std::optional<Tensor>(weight) : std::nullopt;
        const Tensor g = red == "none" ? rand({6}, 8, kF64) : T({1.3}, {}, kF64);
        auto f = [&](const Tensor& t) { return nll_loss(t, target, wt, red, ignore); };
        expect_near(V(nll_loss_backward(g, x.sizes(), kF64, target, wt, red, ignore)), numeric_grad(x, g, f), 1e-8);
      }
    }
  }
  // 1-d input with a 0-d target.
  const Tensor x1 = rand({5}, 9, kF64), t1 = Tensor::from_vector<int64_t>({3}, {});
  const Tensor g1 = T({0.7}, {}, kF64);
  expect_near(V(nll_loss_backward(g1, {5}, kF64, t1, std::nullopt, "mean", -100)),
              numeric_grad(x1, g1, [&](const Tensor& t) { return nll_loss(t, t1); }), 1e-8);
}

TEST(NllLossBackward, ClassBlocksAreColumnsOfTheWhole) {
  const Tensor target = Tensor::from_vector<int64_t>({0, 4, 2, 3, 4}, {5});
  const Tensor weight = T({0.5, 1.5, 2.0, 0.75, 3.0}, {5}, kF64);
  const Tensor g = T({0.9}, {}, kF64);
  Tensor whole = nll_loss_backward(g, {5, 5}, kF64, target, weight, "mean", 3);
  const double total = nll_loss_total_weight(target, weight, 3);
  EXPECT_DOUBLE_EQ(total, 0.5 + 3.0 + 2.0 + 3.0);
  Tensor block = nll_loss_backward(g, {5, 2}, kF64, target, weight, "mean", 3, total, 2, 5);
  expect_near(V(block), V(whole.narrow(1, 2, 2)), 0);
  expect_error([&] { nll_loss_backward(g, {5, 5}, kF64, target, weight, "avg", -100); }, {"unknown reduction"});
  expect_error([&] { nll_loss_backward(g, {5, 4}, kF64, target, std::nullopt, "sum", -100); }, {"target 4 out of range"});
}

TEST(SliceSelectBackward, PlaceGradIntoZeros) {
  const Tensor g = T({1, 2, 3, 4, 5, 6}, {2, 3});
  // Columns 1, 4, 7 of [2, 9].
  std::vector<double> want(18, 0.0);
  for (int r = 0; r < 2; ++r)
    for (int j = 0; j < 3; ++j) want[r * 9 + 1 + 3 * j] = 1 + r * 3 + j;
  expect_near(V(slice_backward(g, {2, 9}, 1, 1, 8, 3)), want, 0);
  // Negative / unclamped bounds are normalized like Python slices: 1:-1:3 of 9 is 1, 4, 7.
  expect_near(V(slice_backward(g, {2, 9}, -1, 1, -1, 3)), want, 0);
  // A block of the result: columns [3, 8) from the whole grad.
  Tensor blk = slice_backward_block(g, {0, 0}, {2, 9}, 1, 1, 8, 3, {2, 5}, {0, 3});
  std::vector<double> bw;
  for (int r = 0; r < 2; ++r)
    for (int c = 3; c < 8; ++c) bw.push_back(want[r * 9 + c]);
  expect_near(V(blk), bw, 0);
  // select: row -1 of [3, 2].
  expect_near(V(select_backward(T({7, 8}, {2}), {3, 2}, 0, -1)), {0, 0, 0, 0, 7, 8}, 0);
  expect_error([&] { slice_backward(g, {2, 9}, 1, 0, 9, 2); }, {"slice_backward", "[2, 3]"});
  expect_error([&] { select_backward(T({7, 8}, {2}), {3, 2}, 0, 3); }, {"index 3 out of range"});
}

}  // namespace
}  // namespace dtensor::kernels
