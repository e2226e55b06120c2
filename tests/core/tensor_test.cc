#include "dtensor/core/tensor.h"

#include <cmath>
#include <limits>

#include "gtest/gtest.h"

namespace dtensor {
namespace {

Tensor iota(const Shape& s, DType dt = DType::kFloat32) {
  return Tensor::arange(numel(s), dt).view(s);
}

TEST(Tensor, ContiguousStridesAndViews) {
  Tensor t = iota({2, 3, 4});
  EXPECT_EQ(t.strides(), (Shape{12, 4, 1}));
  EXPECT_TRUE(t.is_contiguous());
  Tensor tt = t.transpose(0, 2);
  EXPECT_EQ(tt.sizes(), (Shape{4, 3, 2}));
  EXPECT_FALSE(tt.is_contiguous());
  // Element [i][j][k] of the transpose is t[k][j][i] = k*12 + j*4 + i.
  auto v = tt.contiguous().to_vector<float>();
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 2; ++k) EXPECT_EQ(v[i * 6 + j * 2 + k], k * 12 + j * 4 + i);
}

TEST(Tensor, NarrowSliceSelect) {
  Tensor t = iota({4, 5});
  EXPECT_EQ(t.narrow(1, 1, 3).contiguous().to_vector<float>(),
            (std::vector<float>{1, 2, 3, 6, 7, 8, 11, 12, 13, 16, 17, 18}));
  EXPECT_EQ(t.slice(0, 0, 4, 2).select(1, -1).to_vector<float>(), (std::vector<float>{4, 14}));
  EXPECT_EQ(t.select(0, 2).to_vector<float>(), (std::vector<float>{10, 11, 12, 13, 14}));
  EXPECT_THROW(t.narrow(0, 3, 2), Error);
  EXPECT_THROW(t.select(2, 0), Error);
}

TEST(Tensor, PermuteMovedimViewReshape) {
  Tensor t = iota({2, 3, 4});
  Tensor p = t.permute({2, 0, 1});
  EXPECT_EQ(p.sizes(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.contiguous().to_vector<float>()[1], 4.0f);  // p[0][0][1] = t[0][1][0]
  EXPECT_EQ(t.movedim(2, 0).sizes(), (Shape{4, 2, 3}));
  EXPECT_EQ(t.view({6, -1}).sizes(), (Shape{6, 4}));
  // A transposed tensor can't be flattened as a view, but reshape copies.
  EXPECT_THROW(t.transpose(0, 1).view({-1}), Error);
  Tensor r = t.transpose(0, 1).reshape({-1});
  EXPECT_EQ(r.to_vector<float>()[1], 1.0f);
  EXPECT_EQ(r.to_vector<float>()[4], 12.0f);
  // Splitting a contiguous group of a non-contiguous tensor is still a view.
  Tensor s = t.transpose(0, 2).view({2, 2, 3, 2});
  EXPECT_EQ(s.storage(), t.storage());
  EXPECT_THROW(t.view({5, -1}), Error);
}

TEST(Tensor, ExpandUnsqueezeSqueeze) {
  Tensor t = iota({3, 1});
  Tensor e = t.expand({2, 3, 4});
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
  auto v = e.contiguous().to_vector<float>();
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_EQ(v[5], 1.0f);
  EXPECT_EQ(v[12 + 11], 2.0f);
  EXPECT_THROW(t.expand({3, 2, 2}), Error);
  EXPECT_EQ(t.unsqueeze(0).sizes(), (Shape{1, 3, 1}));
  EXPECT_EQ(t.squeeze(1).sizes(), (Shape{3}));
}

TEST(Tensor, DtypeCasts) {
  Tensor t = Tensor::from_vector<float>({1.5f, -2.25f, 0.0f, 3.0e38f}, {4});
  EXPECT_EQ(t.to(DType::kFloat64).to_vector<double>(), (std::vector<double>{1.5, -2.25, 0.0, static_cast<double>(3.0e38f)}));
  EXPECT_EQ(t.to(DType::kInt64).to_vector<int64_t>()[1], -2);
  EXPECT_EQ(t.to(DType::kBool).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 0, 1}));
  // bf16 and fp16 keep these values exactly (few mantissa bits).
  EXPECT_EQ(t.narrow(0, 0, 3).to(DType::kBFloat16).to_vector<float>(),
            (std::vector<float>{1.5f, -2.25f, 0.0f}));
  EXPECT_EQ(t.narrow(0, 0, 3).to(DType::kFloat16).to_vector<float>(),
            (std::vector<float>{1.5f, -2.25f, 0.0f}));
  // fp16 overflows to inf; bf16 keeps the range.
  EXPECT_TRUE(std::isinf(t.to(DType::kFloat16).to_vector<float>()[3]));
  EXPECT_NEAR(t.to(DType::kBFloat16).to_vector<float>()[3], 3.0e38f, 3.0e36f);
}

TEST(Tensor, HalfConversionsRoundToNearestEven) {
  // 1 + 2^-11 is a tie between 1 and 1 + 2^-10 in fp16: rounds to even (1).
  EXPECT_EQ(static_cast<float>(Float16(1.0f + std::ldexp(1.0f, -11))), 1.0f);
  EXPECT_EQ(static_cast<float>(Float16(1.0f + 3 * std::ldexp(1.0f, -11))), 1.0f + std::ldexp(1.0f, -9));
  // Smallest fp16 subnormal 2^-24 round trips; fp16 max 65504 round trips.
  EXPECT_EQ(static_cast<float>(Float16(std::ldexp(1.0f, -24))), std::ldexp(1.0f, -24));
  EXPECT_EQ(static_cast<float>(Float16(65504.0f)), 65504.0f);
  EXPECT_EQ(static_cast<float>(Float16(std::ldexp(1.0f, -20) * 3)), std::ldexp(1.0f, -20) * 3);
  EXPECT_TRUE(std::isnan(static_cast<float>(Float16(std::nanf("")))));
  // bf16: 1 + 2^-8 ties between 1 and 1 + 2^-7: rounds to even.
  EXPECT_EQ(static_cast<float>(BFloat16(1.0f + std::ldexp(1.0f, -8))), 1.0f);
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::nanf("")))));
}

TEST(Tensor, CatAndEqual) {
  Tensor a = iota({2, 3}), b = iota({1, 3});
  Tensor c = cat({a, b}, 0);
  EXPECT_EQ(c.sizes(), (Shape{3, 3}));
  EXPECT_EQ(c.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5, 0, 1, 2}));
  EXPECT_TRUE(equal(c.narrow(0, 0, 2), a));
  EXPECT_FALSE(equal(c.narrow(0, 1, 2), a));
  EXPECT_THROW(cat({a, iota({2, 2})}, 0), Error);
  EXPECT_EQ(cat({a, iota({2, 2})}, 1).sizes(), (Shape{2, 5}));
}

TEST(Tensor, StorageIsAlignedAndShared) {
  Tensor t = Tensor::zeros({7, 3}, DType::kFloat64);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data_ptr()) % Storage::kAlignment, 0u);
  Tensor v = t.select(0, 2);
  v.fill_(5.0);
  EXPECT_EQ(t.to_vector<double>()[6], 5.0);
  EXPECT_EQ(t.to_vector<double>()[9], 0.0);
  EXPECT_EQ(t.storage().use_count(), 2);
}

TEST(Tensor, EmptyShapes) {
  Tensor t = Tensor::empty({0, 4});
  EXPECT_EQ(t.numel(), 0);
  EXPECT_TRUE(equal(t.contiguous(), Tensor::empty({0, 4})));
  EXPECT_EQ(t.view({4, 0}).sizes(), (Shape{4, 0}));
  EXPECT_THROW(Tensor::empty({-1}), Error);
}

}  // namespace
}  // namespace dtensor

namespace dtensor {
namespace {

TEST(Storage, LargeBlocksAreReusedFromTheCache) {
  Storage::empty_cache();
  void* first;
  {
    auto s = Storage::allocate(1 << 20);
    first = s->data();
  }
  EXPECT_GE(Storage::cache_stats().cached_bytes, size_t{1} << 20);
  auto again = Storage::allocate((1 << 20) - 100);  // the same size class
  EXPECT_EQ(again->data(), first);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(again->data()) % Storage::kAlignment, 0u);
  auto small = Storage::allocate(100);  // below the cache threshold: plain allocation
  EXPECT_NE(small->data(), nullptr);
  Storage::empty_cache();
  EXPECT_EQ(Storage::cache_stats().cached_bytes, 0u);
}

}  // namespace
}  // namespace dtensor
