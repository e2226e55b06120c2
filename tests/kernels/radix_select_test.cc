// The radix-select helpers (kernels/cpu/radix_select.h) on hand-computed keys: float32 -1.0 has bits
// 0xBF800000, so key ~bits = 0x407FFFFF (top digit 0x40); +0.0 and -0.0 both key 0x80000000; 1.0
// keys 0xBF800000; int32 v keys v ^ 0x80000000; int64 min / max key 0 / 2^64 - 1.
#include "kernels/cpu/radix_select.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "tests/kernels/test_util.h"

namespace dtensor::kernels {
namespace {

using testing::expect_error;

std::vector<int64_t> row(const Tensor& h, int64_t r) {
  auto v = h.to_vector<int64_t>();
  const int64_t cols = h.size(1);
  return std::vector<int64_t>(v.begin() + r * cols, v.begin() + (r + 1) * cols);
}

TEST(RadixSelect, KeyWidths) {
  EXPECT_EQ(radix_key_bits(DType::kBool), 8);
  EXPECT_EQ(radix_key_bits(DType::kBFloat16), 16);
  EXPECT_EQ(radix_key_bits(DType::kFloat16), 16);
  EXPECT_EQ(radix_key_bits(DType::kFloat32), 32);
  EXPECT_EQ(radix_key_bits(DType::kInt32), 32);
  EXPECT_EQ(radix_key_bits(DType::kFloat64), 64);
  EXPECT_EQ(radix_key_bits(DType::kInt64), 64);
}

TEST(RadixSelect, Float32TopDigitZerosMergeNaNApart) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x = Tensor::from_vector(std::vector<float>{-1.0f, 0.0f, -0.0f, 1.0f, nan, -nan}, {6});
  Tensor h = radix_histogram(x, 0, {0}, 24, 8);
  ASSERT_EQ(h.sizes(), (Shape{1, 257}));
  std::vector<int64_t> want(257, 0);
  want[0x40] = 1;  // -1
  want[0x80] = 2;  // both zeros
  want[0xBF] = 1;  // 1
  want[256] = 2;   // NaNs, whatever their sign
  EXPECT_EQ(row(h, 0), want);
  EXPECT_EQ(radix_decode(0x407FFFFFu, DType::kFloat32).f, -1.0);
  EXPECT_EQ(radix_decode(0xBF800000u, DType::kFloat32).f, 1.0);
  const double zero = radix_decode(0x80000000u, DType::kFloat32).f;
  EXPECT_EQ(zero, 0.0);
  EXPECT_FALSE(std::signbit(zero));
  EXPECT_EQ(radix_decode(0x007FFFFFu, DType::kFloat32).f, -std::numeric_limits<float>::infinity());
}

TEST(RadixSelect, LowDigitCountsOnlyRowsMatchingThePrefix) {
  // int32 [[1, 2], [3, 4]] along dim 0: rows are the columns {1, 3} and {2, 4}.
  Tensor x = Tensor::from_vector(std::vector<int32_t>{1, 2, 3, 4}, {2, 2});
  Tensor top = radix_histogram(x, 0, {0, 0}, 24, 8);
  EXPECT_EQ(row(top, 0)[0x80], 2);
  EXPECT_EQ(row(top, 1)[0x80], 2);
  // Row 0 matches the prefix of 0x800001.. (key >> 8 = 0x800000); row 1 is given another prefix.
  Tensor low = radix_histogram(x, 0, {0x800000u, 0x7FFFFFu}, 0, 8);
  std::vector<int64_t> want0(257, 0), want1(257, 0);
  want0[1] = 1;
  want0[3] = 1;
  EXPECT_EQ(row(low, 0), want0);
  EXPECT_EQ(row(low, 1), want1);
  EXPECT_EQ(radix_decode(0x80000003u, DType::kInt32).i, 3);
}

TEST(RadixSelect, Int64Extremes) {
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  Tensor x = Tensor::from_vector(std::vector<int64_t>{lo, hi, -1, 0}, {4});
  std::vector<int64_t> want(257, 0);
  want[0x00] = 1;  // min
  want[0x7F] = 1;  // -1: 0x7FFF...F
  want[0x80] = 1;  // 0
  want[0xFF] = 1;  // max
  EXPECT_EQ(row(radix_histogram(x, 0, {0}, 56, 8), 0), want);
  EXPECT_EQ(radix_decode(0, DType::kInt64).i, lo);
  EXPECT_EQ(radix_decode(~uint64_t{0}, DType::kInt64).i, hi);
}

TEST(RadixSelect, BadDigitOrPrefixCountThrows) {
  Tensor x = Tensor::zeros({3}, DType::kFloat32);
  expect_error([&] { radix_histogram(x, 0, {0}, 30, 8); }, {"radix_histogram", "32-bit keys", "float32"});
  expect_error([&] { radix_histogram(x, 0, {0, 0}, 24, 8); }, {"radix_histogram", "2 prefixes", "1 rows"});
}

}  // namespace
}  // namespace dtensor::kernels
