#include "kernels/cpu/pointwise.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "gtest/gtest.h"
#include "tests/kernels/test_util.h"

namespace dtensor::kernels {
namespace {

using testing::expect_error;
using testing::expect_near;
using testing::T;
using testing::V;
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(Broadcast, Shapes) {
  EXPECT_EQ(broadcast_shapes({2, 1, 3}, {4, 1}), (Shape{2, 4, 3}));
  EXPECT_EQ(broadcast_shapes({}, {2}), (Shape{2}));
  EXPECT_EQ(broadcast_shapes({0, 3}, {1, 3}), (Shape{0, 3}));
  EXPECT_EQ(broadcast_shapes({1}, {0}), (Shape{0}));
  expect_error([] { broadcast_shapes({2, 3}, {4}); }, {"broadcast_shapes", "[2, 3]", "[4]"});
  expect_error([] { broadcast_shapes({0}, {2}); }, {"[0]", "[2]"});
}

TEST(Promotion, PromoteTypes) {
  using D = DType;
  EXPECT_EQ(promote_types(D::kBool, D::kBool), D::kBool);
  EXPECT_EQ(promote_types(D::kBool, D::kInt32), D::kInt32);
  EXPECT_EQ(promote_types(D::kInt64, D::kInt32), D::kInt64);
  EXPECT_EQ(promote_types(D::kInt64, D::kFloat16), D::kFloat16);
  EXPECT_EQ(promote_types(D::kBFloat16, D::kInt32), D::kBFloat16);
  EXPECT_EQ(promote_types(D::kBFloat16, D::kFloat16), D::kFloat32);
  EXPECT_EQ(promote_types(D::kFloat16, D::kFloat32), D::kFloat32);
  EXPECT_EQ(promote_types(D::kFloat64, D::kBFloat16), D::kFloat64);
  // torch.promote_types on the narrow integers: uint8 and int8 meet at int16, not at either.
  EXPECT_EQ(promote_types(D::kUInt8, D::kInt8), D::kInt16);
  EXPECT_EQ(promote_types(D::kInt8, D::kUInt8), D::kInt16);
  EXPECT_EQ(promote_types(D::kUInt8, D::kInt16), D::kInt16);
  EXPECT_EQ(promote_types(D::kInt8, D::kInt32), D::kInt32);
  EXPECT_EQ(promote_types(D::kBool, D::kUInt8), D::kUInt8);
  EXPECT_EQ(promote_types(D::kInt16, D::kFloat16), D::kFloat16);
  EXPECT_EQ(promote_types(D::kUInt8, D::kBFloat16), D::kBFloat16);
  EXPECT_EQ(promote_types(D::kFloat32, D::kFloat64), D::kFloat64);
}

TEST(Promotion, ResultTypeZeroDimAndScalars) {
  using D = DType;
  Tensor f32 = T({1, 2}, {2}), i32 = T({1, 2}, {2}, D::kInt32), b = T({1, 0}, {2}, D::kBool);
  // 0-d tensors only matter across categories.
  EXPECT_EQ(result_type(f32, T({1}, {}, D::kFloat64)), D::kFloat32);
  EXPECT_EQ(result_type(i32, T({1}, {}, D::kFloat64)), D::kFloat64);
  EXPECT_EQ(result_type(T({1}, {}, D::kInt64), i32), D::kInt32);
  EXPECT_EQ(result_type(b, T({1}, {}, D::kInt64)), D::kInt64);
  EXPECT_EQ(result_type(T({1}, {}, D::kInt32), T({1}, {}, D::kFloat16)), D::kFloat16);
  // Scalars: an integer keeps integer tensors, a float gives float32 (not float64).
  EXPECT_EQ(result_type(i32, 2), D::kInt32);
  EXPECT_EQ(result_type(i32, 2.5), D::kFloat32);
  EXPECT_EQ(result_type(T({1}, {1}, D::kFloat16), 2.5), D::kFloat16);
  EXPECT_EQ(result_type(b, 1), D::kInt64);
  EXPECT_EQ(result_type(b, true), D::kBool);
  EXPECT_EQ(add(i32, 2).dtype(), D::kInt32);
  EXPECT_EQ(V(add(i32, 2.5)), (std::vector<double>{3.5, 4.5}));
}

TEST(Pointwise, AddBroadcastAlpha) {
  Tensor a = T({1, 2}, {2, 1}), b = T({10, 20, 30}, {3});
  Tensor r = add(a, b);
  EXPECT_EQ(r.sizes(), (Shape{2, 3}));
  EXPECT_TRUE(r.is_contiguous());
  EXPECT_EQ(V(r), (std::vector<double>{11, 21, 31, 12, 22, 32}));
  EXPECT_EQ(V(add(a, b, 2)), (std::vector<double>{21, 41, 61, 22, 42, 62}));
  EXPECT_EQ(V(sub(a, b, 0.5)), (std::vector<double>{-4, -9, -14, -3, -8, -13}));
  EXPECT_EQ(V(sub(b, 1)), (std::vector<double>{9, 19, 29}));
  EXPECT_EQ(V(mul(a, b)), (std::vector<double>{10, 20, 30, 20, 40, 60}));
  expect_error(
      [&] {
        add(T({1, 2, 3, 4, 5, 6}, {2, 3}), T({1, 2, 3, 4}, {4}));
      },
      {"add", "[2, 3]", "[4]", "broadcast"});
}

TEST(Pointwise, StridedInputs) {
  // x[i][j] = 10 i + j on a [3, 4] base; take its transpose [4, 3] and a step-2 slice [4, 2].
  std::vector<double> base;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j) base.push_back(10 * i + j);
  Tensor x = T(base, {3, 4});
  Tensor xt = x.transpose(0, 1);                   // xt[j][i] = 10 i + j
  Tensor s = x.transpose(0, 1).slice(1, 0, 3, 2);  // s[j][k] = 10 (2k) + j
  Tensor r = add(xt.slice(1, 0, 3, 2), mul(s, 2));
  ASSERT_EQ(r.sizes(), (Shape{4, 2}));
  std::vector<double> want;
  for (int j = 0; j < 4; ++j)
    for (int k = 0; k < 2; ++k) want.push_back(3 * (20 * k + j));
  EXPECT_EQ(V(r), want);
  // An expanded (stride-0) operand.
  Tensor e = T({1, 2, 3}, {3}).expand({2, 3});
  EXPECT_EQ(V(sub(e, xt.slice(0, 0, 2).slice(1, 0, 3))),
            (std::vector<double>{1, -8, -17, 0, -9, -18}));
}

TEST(Pointwise, SizeZeroBroadcast) {
  EXPECT_EQ(add(Tensor::zeros({0, 3}), Tensor::zeros({1, 3})).sizes(), (Shape{0, 3}));
  EXPECT_EQ(mul(Tensor::zeros({2, 0}), Tensor::zeros({2, 1})).sizes(), (Shape{2, 0}));
  EXPECT_EQ(eq(Tensor::zeros({0}), Tensor::zeros({})).sizes(), (Shape{0}));
  EXPECT_EQ(where(T({1}, {}, DType::kBool), Tensor::zeros({3, 0}), Tensor::zeros({1})).sizes(),
            (Shape{3, 0}));
}

TEST(Pointwise, DtypesAndIntegerArithmetic) {
  using D = DType;
  Tensor i32 = T({1, -2, 3}, {3}, D::kInt32), i64 = T({10, 20, 30}, {3}, D::kInt64);
  Tensor s = add(i32, i64);
  EXPECT_EQ(s.dtype(), D::kInt64);
  EXPECT_EQ(V(s), (std::vector<double>{11, 18, 33}));
  EXPECT_EQ(add(i32, T({0.5}, {1})).dtype(), D::kFloat32);
  EXPECT_EQ(add(T({1}, {1}, D::kBFloat16), T({1}, {1}, D::kFloat16)).dtype(), D::kFloat32);
  // bool + bool stays bool (logical or); bool - bool is refused.
  Tensor b = T({1, 1, 0}, {3}, D::kBool), c = T({1, 0, 0}, {3}, D::kBool);
  EXPECT_EQ(add(b, c).dtype(), D::kBool);
  EXPECT_EQ(V(add(b, c)), (std::vector<double>{1, 1, 0}));
  EXPECT_EQ(V(mul(b, c)), (std::vector<double>{1, 0, 0}));
  expect_error([&] { sub(b, c); }, {"sub", "bool"});
  expect_error([&] { add(i32, i32, 0.5); }, {"add", "alpha", "int32"});
  // Integer arithmetic wraps like torch's.
  Tensor big = T({2147483647}, {1}, D::kInt32);
  EXPECT_EQ(add(big, 1).to_vector<int32_t>()[0], std::numeric_limits<int32_t>::min());
  Tensor huge = Tensor::from_vector<int64_t>({int64_t{1} << 62}, {1});
  EXPECT_EQ(mul(huge, 4).to_vector<int64_t>()[0], 0);
  // Large int64 values are not routed through double.
  Tensor odd = Tensor::from_vector<int64_t>({(int64_t{1} << 60) + 1}, {1});
  EXPECT_EQ(add(odd, odd).to_vector<int64_t>()[0], (int64_t{1} << 61) + 2);
}

TEST(Pointwise, Division) {
  using D = DType;
  Tensor a = T({7, -7, 6}, {3}, D::kInt64), b = T({2, 2, -4}, {3}, D::kInt64);
  Tensor q = div(a, b);
  EXPECT_EQ(q.dtype(), D::kFloat32);
  EXPECT_EQ(V(q), (std::vector<double>{3.5, -3.5, -1.5}));
  EXPECT_EQ(div(a, b, "trunc").dtype(), D::kInt64);
  EXPECT_EQ(V(div(a, b, "trunc")), (std::vector<double>{3, -3, -1}));
  EXPECT_EQ(V(div(a, b, "floor")), (std::vector<double>{3, -4, -2}));
  EXPECT_EQ(V(div(T({-7, 7.5}, {2}), 2, "floor")), (std::vector<double>{-4, 3}));
  EXPECT_EQ(V(div(T({1, -1, 0}, {3}), 0.0))[0], kInf);
  EXPECT_TRUE(std::isnan(V(div(T({0}, {1}), 0))[0]));
  expect_error([&] { div(a, 0, "floor"); }, {"div", "division by zero"});
  expect_error([&] { div(a, b, "round"); }, {"div", "round", "trunc", "floor"});
}

TEST(Pointwise, MaximumMinimumNaN) {
  Tensor a = T({1, kNaN, 3, -1}, {4}), b = T({2, 0, kNaN, -2}, {4});
  std::vector<double> mx = V(maximum(a, b)), mn = V(minimum(a, b));
  EXPECT_EQ(mx[0], 2);
  EXPECT_TRUE(std::isnan(mx[1]));
  EXPECT_TRUE(std::isnan(mx[2]));
  EXPECT_EQ(mx[3], -1);
  EXPECT_EQ(mn[0], 1);
  EXPECT_TRUE(std::isnan(mn[1]) && std::isnan(mn[2]));
  EXPECT_EQ(mn[3], -2);
  Tensor i = maximum(T({1, 5}, {2}, DType::kInt32), T({3}, {1}, DType::kInt32));
  EXPECT_EQ(i.dtype(), DType::kInt32);
  EXPECT_EQ(V(i), (std::vector<double>{3, 5}));
}

TEST(Pointwise, Pow) {
  using D = DType;
  // Exact integer powers by repeated squaring: 3^39 does not fit a double exactly.
  int64_t want = 1;
  for (int i = 0; i < 39; ++i) want *= 3;
  Tensor p = pow(Tensor::from_vector<int64_t>({3, -2, 0}, {3}), 39);
  EXPECT_EQ(p.dtype(), D::kInt64);
  EXPECT_EQ(p.to_vector<int64_t>(), (std::vector<int64_t>{want, -(int64_t{1} << 39), 0}));
  EXPECT_EQ(V(pow(T({2, 3}, {2}, D::kInt32), 0)), (std::vector<double>{1, 1}));
  expect_error([] { pow(T({2}, {1}, D::kInt32), -1); }, {"pow", "negative", "int32"});
  // A float exponent makes integer tensors float32.
  Tensor r = pow(T({4, 9}, {2}, D::kInt32), 0.5);
  EXPECT_EQ(r.dtype(), D::kFloat32);
  EXPECT_EQ(V(r), (std::vector<double>{2, 3}));
  // Tensor exponents; negative integer exponents follow torch (1, +-1 or 0).
  Tensor base = T({2, 1, -1, -1, 2}, {5}, D::kInt64), ex = T({10, -3, -3, -2, -1}, {5}, D::kInt64);
  EXPECT_EQ(V(pow(base, ex)), (std::vector<double>{1024, 1, -1, 1, 0}));
  expect_near(V(pow(T({2, 9}, {2}, D::kFloat64), T({-1, 0.5}, {2}, D::kFloat64))), {0.5, 3}, 1e-15);
}

TEST(Pointwise, Comparisons) {
  Tensor a = T({1, 2, kNaN}, {3}), b = T({2, 2, kNaN}, {3});
  EXPECT_EQ(eq(a, b).dtype(), DType::kBool);
  EXPECT_EQ(V(eq(a, b)), (std::vector<double>{0, 1, 0}));
  EXPECT_EQ(V(ne(a, b)), (std::vector<double>{1, 0, 1}));
  EXPECT_EQ(V(lt(a, b)), (std::vector<double>{1, 0, 0}));
  EXPECT_EQ(V(le(a, b)), (std::vector<double>{1, 1, 0}));
  EXPECT_EQ(V(gt(a, b)), (std::vector<double>{0, 0, 0}));
  EXPECT_EQ(V(ge(a, b)), (std::vector<double>{0, 1, 0}));
  // Integer tensor against a float scalar compares in float, not truncated.
  Tensor i = T({1, 2, 3}, {3}, DType::kInt32);
  EXPECT_EQ(V(lt(i, 2.5)), (std::vector<double>{1, 1, 0}));
  EXPECT_EQ(V(eq(i, 2)), (std::vector<double>{0, 1, 0}));
  // Broadcasting [2,1] against [3].
  EXPECT_EQ(V(gt(T({1, 3}, {2, 1}), T({0, 2, 4}, {3}))), (std::vector<double>{1, 0, 0, 1, 1, 0}));
}

TEST(Pointwise, WhereAndMaskedFill) {
  Tensor cond = T({1, 0}, {2, 1}, DType::kBool);
  Tensor r = where(cond, T({1, 2, 3}, {3}, DType::kInt32), T({-1.5}, {}, DType::kFloat64));
  EXPECT_EQ(r.dtype(), DType::kFloat64);  // int32 dim vs float64 0-d: float64
  EXPECT_EQ(r.sizes(), (Shape{2, 3}));
  EXPECT_EQ(V(r), (std::vector<double>{1, 2, 3, -1.5, -1.5, -1.5}));
  expect_error([] { where(T({1}, {1}), T({1}, {1}), T({1}, {1})); }, {"where", "bool", "float32"});

  Tensor x = T({1, 2, 3, 4, 5, 6}, {2, 3}, DType::kInt64);
  Tensor m = masked_fill(x, T({0, 1, 0}, {3}, DType::kBool), -7);
  EXPECT_EQ(m.dtype(), DType::kInt64);
  EXPECT_EQ(V(m), (std::vector<double>{1, -7, 3, 4, -7, 6}));
  Tensor mf = masked_fill(T({1, 2}, {2}, DType::kBFloat16), T({1, 0}, {2}, DType::kBool), -kInf);
  EXPECT_EQ(mf.dtype(), DType::kBFloat16);
  EXPECT_EQ(V(mf), (std::vector<double>{-kInf, 2}));
  expect_error(
      [] {
        masked_fill(T({1, 2, 3}, {3}), T({1, 0, 1, 0, 1, 0}, {2, 3}, DType::kBool), 0);
      },
      {"masked_fill", "[2, 3]", "[3]"});
}

TEST(Pointwise, UnaryOps) {
  using D = DType;
  Tensor i = T({-3, 0, 4}, {3}, D::kInt32);
  EXPECT_EQ(neg(i).dtype(), D::kInt32);
  EXPECT_EQ(V(neg(i)), (std::vector<double>{3, 0, -4}));
  EXPECT_EQ(V(abs(i)), (std::vector<double>{3, 0, 4}));
  EXPECT_EQ(V(relu(i)), (std::vector<double>{0, 0, 4}));
  expect_error([] { neg(T({1}, {1}, D::kBool)); }, {"neg", "bool"});
  // Float functions turn integers into float32.
  Tensor e = exp(i);
  EXPECT_EQ(e.dtype(), D::kFloat32);
  expect_near(V(e), {std::exp(-3.0), 1, std::exp(4.0)}, 1e-5);
  Tensor x = T({-2, 0.5, 3}, {3}, D::kFloat64);
  expect_near(V(log(T({1, std::exp(2.0)}, {2}, D::kFloat64))), {0, 2}, 1e-15);
  expect_near(V(sqrt(T({4, 2}, {2}, D::kFloat64))), {2, std::sqrt(2.0)}, 1e-15);
  expect_near(V(rsqrt(T({4, 0.25}, {2}, D::kFloat64))), {0.5, 2}, 1e-15);
  expect_near(V(tanh(x)), {std::tanh(-2.0), std::tanh(0.5), std::tanh(3.0)}, 1e-15);
  expect_near(V(sigmoid(x)),
              {1 / (1 + std::exp(2.0)), 1 / (1 + std::exp(-0.5)), 1 / (1 + std::exp(-3.0))}, 1e-15);
  // Known values: gelu(1) = Phi(1), the tanh form, and silu(1) = sigmoid(1).
  expect_near(V(gelu(T({1, 0, -1}, {3}, D::kFloat64))),
              {0.8413447460685429, 0, -0.15865525393145707}, 1e-12);
  expect_near(V(gelu(T({1}, {1}, D::kFloat64), "tanh")), {0.8411919906082768}, 1e-12);
  expect_near(V(silu(T({1, -1}, {2}, D::kFloat64))), {0.7310585786300049, -0.2689414213699951},
              1e-12);
  expect_error([] { gelu(T({1}, {1}), "erf"); }, {"gelu", "erf", "none", "tanh"});
  expect_error([] { silu(T({1}, {1}, D::kInt64)); }, {"silu", "int64", "float32"});
  std::vector<double> rn = V(relu(T({kNaN, -1}, {2})));
  EXPECT_TRUE(std::isnan(rn[0]));
  EXPECT_EQ(rn[1], 0);
}

TEST(Pointwise, HalfPrecisionRoundsResults) {
  // bfloat16 keeps 8 significant bits: 1 + 2^-8 and 256 + 1 are ties that round to even.
  Tensor a = T({1, 256, 3}, {3}, DType::kBFloat16),
         b = T({0.00390625, 1, 0.0078125}, {3}, DType::kBFloat16);
  Tensor s = add(a, b);
  EXPECT_EQ(s.dtype(), DType::kBFloat16);
  EXPECT_EQ(V(s), (std::vector<double>{1, 256, 3}));
  EXPECT_EQ(V(add(a, b).to(DType::kFloat32)),
            V(add(a.to(DType::kFloat32), b).to(DType::kBFloat16)));
  // gelu on bfloat16 matches the float64 formula rounded once to bfloat16 (within one ulp).
  Tensor x = testing::rand({64}, 7, DType::kBFloat16);
  std::vector<double> xv = V(x), got = V(gelu(x));
  EXPECT_EQ(gelu(x).dtype(), DType::kBFloat16);
  for (size_t i = 0; i < xv.size(); ++i) {
    double want = static_cast<float>(
        BFloat16(static_cast<float>(0.5 * xv[i] * (1 + std::erf(xv[i] / std::sqrt(2.0))))));
    EXPECT_LE(std::abs(got[i] - want), std::abs(want) * 0x1p-7 + 1e-30) << xv[i];
  }
  Tensor h = exp(T({1}, {1}, DType::kFloat16));
  EXPECT_EQ(h.dtype(), DType::kFloat16);
  EXPECT_EQ(V(h)[0], static_cast<float>(Float16(std::exp(1.0f))));
  EXPECT_NE(V(h)[0], std::exp(1.0));
}

}  // namespace
}  // namespace dtensor::kernels
