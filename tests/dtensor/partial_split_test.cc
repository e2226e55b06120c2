// The adversarial Partial pieces of dtensor/partial_split.h reduce back to the global tensor exactly,
// in the integer dtype's own arithmetic: sums wrap as the dtype does, and a max (min) piece is
// never above (below) the value, also at a narrow integer's ends (uint8's 0, int8's -128).
#include "dtensor/partial_split.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

namespace dtensor {
namespace {

// The values of `dt` the pieces are checked on: random ones and each end of an integer range.
Tensor values_of(DType dt) {
  std::vector<double> v = random_tensor({40}, DType::kInt64, 7).to_vector<double>();  // [-5, 5]
  if (dt == DType::kUInt8) v.insert(v.end(), {0, 255, 1, 254});
  if (dt == DType::kInt8) v.insert(v.end(), {-128, 127, -127, 0});
  if (dt == DType::kInt16) v.insert(v.end(), {-32768, 32767, 0, -1});
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(dt);
}

TEST(PartialSplit, PiecesReduceToTheValueInTheDtypesArithmetic) {
  const int64_t k = 4;
  for (DType dt : {DType::kUInt8, DType::kInt8, DType::kInt16, DType::kInt32, DType::kInt64}) {
    const Tensor global = values_of(dt);
    const std::vector<int64_t> want = global.to(DType::kInt64).to_vector<int64_t>();
    for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kMax, ReduceOp::kMin}) {
      const std::string what = std::string(dtype_name(dt)) + " " + Partial(op).str();
      std::vector<std::vector<int64_t>> pieces;
      for (int64_t r = 0; r < k; ++r)
        pieces.push_back(adversarial_local_block(global, {Partial(op)}, {k}, {r}, 3)
                             .to(DType::kInt64).to_vector<int64_t>());
      for (size_t i = 0; i < want.size(); ++i) {
        int64_t got = pieces[0][i];
        for (int64_t r = 1; r < k; ++r)
          got = op == ReduceOp::kSum ? got + pieces[r][i]
                : op == ReduceOp::kMax ? std::max(got, pieces[r][i]) : std::min(got, pieces[r][i]);
        if (op == ReduceOp::kSum) {  // the sum in the dtype: wrapped back to its range
          Tensor one = Tensor::from_vector(std::vector<int64_t>{got}, {1}).to(dt);
          got = one.to(DType::kInt64).to_vector<int64_t>()[0];
        }
        EXPECT_EQ(got, want[i]) << what << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace dtensor
