#include "kernels/cpu/view.h"

#include "gtest/gtest.h"
#include "tests/kernels/test_util.h"

namespace dtensor::kernels {
namespace {

using testing::expect_error;
using testing::T;
using testing::V;

TEST(ShapeOps, Stack) {
  Tensor a = T({1, 2, 3}, {3}), b = T({4, 5, 6}, {3});
  Tensor s0 = stack({a, b});
  EXPECT_EQ(s0.sizes(), (Shape{2, 3}));
  EXPECT_EQ(V(s0), (std::vector<double>{1, 2, 3, 4, 5, 6}));
  Tensor s1 = stack({a, b}, -1);
  EXPECT_EQ(s1.sizes(), (Shape{3, 2}));
  EXPECT_EQ(V(s1), (std::vector<double>{1, 4, 2, 5, 3, 6}));
  // Strided inputs and a middle dim.
  Tensor m = T({1, 2, 3, 4}, {2, 2});
  Tensor sm = stack({m, m.transpose(0, 1)}, 1);
  EXPECT_EQ(sm.sizes(), (Shape{2, 2, 2}));
  EXPECT_EQ(V(sm), (std::vector<double>{1, 2, 1, 3, 3, 4, 2, 4}));
  expect_error([&] { stack({a, T({1, 2}, {2})}); }, {"stack", "[3]", "[2]"});
  expect_error([&] { stack({a, b}, 2); }, {"stack", "dim 2"});
  EXPECT_EQ(V(cat({a, b}, 0)), (std::vector<double>{1, 2, 3, 4, 5, 6}));
}

TEST(ShapeOps, SplitIntoViews) {
  Tensor x = Tensor::arange(14).view({7, 2});
  std::vector<Tensor> parts = split(x, 3);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].sizes(), (Shape{3, 2}));
  EXPECT_EQ(parts[2].sizes(), (Shape{1, 2}));
  EXPECT_EQ(V(parts[2]), (std::vector<double>{12, 13}));
  EXPECT_EQ(parts[1].storage(), x.storage());  // a view
  std::vector<Tensor> cols = split(x, 1, -1);
  ASSERT_EQ(cols.size(), 2u);
  EXPECT_EQ(V(cols[1]), (std::vector<double>{1, 3, 5, 7, 9, 11, 13}));
  EXPECT_EQ(split(Tensor::zeros({0, 2}), 0).size(), 1u);
  expect_error([&] { split(x, 0); }, {"split", "split_size 0", "[7, 2]"});

  std::vector<Tensor> ws = split_with_sizes(x, {2, 0, 5});
  ASSERT_EQ(ws.size(), 3u);
  EXPECT_EQ(ws[1].sizes(), (Shape{0, 2}));
  EXPECT_EQ(V(ws[2].select(0, 0)), (std::vector<double>{4, 5}));
  expect_error(
      [&] {
        split_with_sizes(x, {2, 4});
      },
      {"split_with_sizes", "[2, 4]", "sum to 6", "7"});
}

TEST(ShapeOps, IndexSelect) {
  Tensor x = Tensor::arange(12).view({3, 4});
  Tensor r = index_select(x, 1, T({3, 0, 3}, {3}, DType::kInt64));
  EXPECT_EQ(r.sizes(), (Shape{3, 3}));
  EXPECT_TRUE(r.is_contiguous());
  EXPECT_EQ(V(r), (std::vector<double>{3, 0, 3, 7, 4, 7, 11, 8, 11}));
  EXPECT_EQ(V(index_select(x.transpose(0, 1), 0, T({2}, {}, DType::kInt32))),
            (std::vector<double>{2, 6, 10}));
  EXPECT_EQ(index_select(x, 0, Tensor::zeros({0}, DType::kInt64)).sizes(), (Shape{0, 4}));
  expect_error([&] { index_select(x, 0, T({3}, {1}, DType::kInt64)); },
               {"index_select", "index 3", "[3, 4]"});
  expect_error([&] { index_select(x, 0, T({1}, {1})); }, {"index_select", "float32"});
}

}  // namespace
}  // namespace dtensor::kernels
