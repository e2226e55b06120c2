// gather / scatter_add against hand-computed values (torch's documented formulas), on a block of
// self along dim, and their errors.
#include "gtest/gtest.h"
#include "kernels/cpu/kernels.h"
#include "tests/kernels/test_util.h"

namespace dtensor::kernels {
namespace {

using testing::expect_error;
using testing::T;
using testing::V;

TEST(GatherScatter, HandComputedValues) {
  const Tensor x = Tensor::arange(12).view({3, 4});  // x[i][j] = 4i + j
  // dim 0: out[i][j] = x[index[i][j]][j]; dim 1: out[i][j] = x[i][index[i][j]].
  EXPECT_EQ(V(gather(x, 0, T({2, 0, 1, 2, 0, 0, 0, 1}, {2, 4}, DType::kInt64))),
            (std::vector<double>{8, 1, 6, 11, 0, 1, 2, 7}));
  EXPECT_EQ(V(gather(x, 1, T({3, 3, 0, 1, 2, 2}, {3, 2}, DType::kInt32))), (std::vector<double>{3, 3, 4, 5, 10, 10}));
  // scatter_add dim 0: self[index[i][j]][j] += src[i][j]; repeated indices add up.
  const Tensor self = Tensor::zeros({3, 2});
  const Tensor src = T({1, 2, 3, 4, 5, 6}, {3, 2});
  EXPECT_EQ(V(scatter_add(self, 0, T({2, 0, 2, 2, 0, 1}, {3, 2}, DType::kInt64), src)),
            (std::vector<double>{5, 2, 0, 6, 4, 4}));
  // An index smaller than src: only its positions count.
  EXPECT_EQ(V(scatter_add(self, 0, T({1, 1}, {1, 2}, DType::kInt64), src)), (std::vector<double>{0, 0, 1, 2, 0, 0}));
}

TEST(GatherScatter, BlocksAlongDimAddUpToTheWhole) {
  const Tensor x = Tensor::arange(12).view({6, 2});
  const Tensor index = T({5, 0, 3, 3, 1, 4}, {3, 2}, DType::kInt64);
  // Blocks [0, 2), [2, 6) of x's rows: gather's pieces sum to the whole; scatter_add's blocks are
  // the rows of the whole.
  const Tensor a = gather(x.narrow(0, 0, 2).contiguous(), 0, index, 0, 6);
  const Tensor b = gather(x.narrow(0, 2, 4).contiguous(), 0, index, 2, 6);
  EXPECT_EQ(V(add(a, b)), V(gather(x, 0, index)));
  const Tensor src = T({1, 2, 3, 4, 5, 6}, {3, 2});
  const Tensor whole = scatter_add(Tensor::zeros({6, 2}), 0, index, src);
  const Tensor top = scatter_add(Tensor::zeros({2, 2}), 0, index, src, 0, 6);
  const Tensor bottom = scatter_add(Tensor::zeros({4, 2}), 0, index, src, 2, 6);
  std::vector<double> joined = V(top), rest = V(bottom);
  joined.insert(joined.end(), rest.begin(), rest.end());
  EXPECT_EQ(joined, V(whole));
}

TEST(GatherScatter, ErrorsNameTheOpAndWhatIsAccepted) {
  const Tensor x = Tensor::zeros({3, 4});
  expect_error([&] { gather(x, 0, T({3}, {1, 1}, DType::kInt64)); }, {"gather", "index 3", "[0, 3)"});
  expect_error([&] { gather(x, 0, T({-1}, {1, 1}, DType::kInt64)); }, {"gather", "index -1"});
  expect_error([&] { gather(x, 0, T({0}, {1, 1})); }, {"gather", "float32", "int64, int32"});
  expect_error([&] { gather(x, 0, T({0}, {1}, DType::kInt64)); }, {"gather", "same number of dims"});
  expect_error([&] { gather(x, 0, Tensor::zeros({1, 5}, DType::kInt64)); }, {"gather", "larger than self"});
  expect_error([&] { gather(x, 0, T({4}, {1, 1}, DType::kInt64), 0, 4); }, {"gather", "index 4", "[0, 4)"});
  expect_error([&] { gather(x, 0, T({0}, {1, 1}, DType::kInt64), 2, 4); }, {"gather", "block"});
  expect_error([&] { scatter_add(x, 1, T({4}, {1, 1}, DType::kInt64), Tensor::zeros({1, 1})); },
               {"scatter_add", "index 4"});
  expect_error([&] { scatter_add(x, 1, Tensor::zeros({2, 2}, DType::kInt64), Tensor::zeros({1, 2})); },
               {"scatter_add", "larger than src"});
  expect_error([&] { scatter_add(x, 1, Tensor::zeros({1, 1}, DType::kInt64), Tensor::zeros({1, 1}, DType::kFloat64)); },
               {"scatter_add", "dtype"});
}

}  // namespace
}  // namespace dtensor::kernels
