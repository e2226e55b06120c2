// complex64/complex128 in the core and the kernels: conversions (torch's: to real keeps the real
// part), promotion, arithmetic against std::complex computed here, the real/complex views, sums,
// and the refusal of complex by kernels written for real types (an error naming the dtype).
#include "kernels/cpu/complex.h"

#include <complex>

#include "gtest/gtest.h"
#include "kernels/cpu/kernels.h"

namespace dtensor::kernels {
namespace {

using C = std::complex<double>;

Tensor make(const std::vector<C>& v, const Shape& shape, DType dt = DType::kComplex128) {
  Tensor t = Tensor::empty(shape, DType::kComplex128);
  std::copy(v.begin(), v.end(), t.data<C>());
  return t.to(dt);
}

std::vector<C> values(const Tensor& t) {
  Tensor c = t.to(DType::kComplex128).contiguous();
  return {c.data<C>(), c.data<C>() + c.numel()};
}

TEST(ComplexDType, NamesSizesAndConversions) {
  EXPECT_EQ(itemsize(DType::kComplex64), 8u);
  EXPECT_EQ(itemsize(DType::kComplex128), 16u);
  EXPECT_EQ(dtype_from_name("complex64"), DType::kComplex64);
  EXPECT_EQ(dtype_from_name("cdouble"), DType::kComplex128);
  EXPECT_STREQ(dtype_name(DType::kComplex128), "complex128");
  EXPECT_FALSE(is_floating(DType::kComplex64));
  Tensor z = make({{1.5, -2.0}, {0.0, 3.0}}, {2});
  EXPECT_EQ(z.to(DType::kFloat64).to_vector<double>(), (std::vector<double>{1.5, 0.0}));  // real part
  EXPECT_EQ(z.to(DType::kBool).to_vector<double>(), (std::vector<double>{1.0, 1.0}));     // either part
  EXPECT_EQ(values(Tensor::from_vector<double>({2.0, -1.0}, {2}).to(DType::kComplex64)),
            (std::vector<C>{{2.0, 0.0}, {-1.0, 0.0}}));
  EXPECT_EQ(values(z.to(DType::kComplex64)), values(z));
  EXPECT_EQ(promote_types(DType::kComplex64, DType::kFloat64), DType::kComplex128);
  EXPECT_EQ(promote_types(DType::kInt64, DType::kComplex64), DType::kComplex64);
  EXPECT_TRUE(allclose(z, z));
  EXPECT_FALSE(allclose(z, make({{1.5, -2.0}, {0.0, 3.5}}, {2})));  // differs in an imaginary part only
  EXPECT_EQ(max_abs_diff(z, make({{1.5, -2.0}, {0.0, 3.5}}, {2})), 0.5);
}

TEST(ComplexKernels, ArithmeticMatchesStdComplex) {
  const std::vector<C> a = {{1, 2}, {-0.5, 3}, {2, -1}, {0, 0.25}, {4, 4}, {-1, -1}};
  const std::vector<C> b = {{0.5, -1}, {2, 0}};  // broadcast along the last dim
  Tensor ta = make(a, {3, 2}), tb = make(b, {2});
  auto expect = [&](const Tensor& got, auto f, const char* what) {
    std::vector<C> g = values(got);
    ASSERT_EQ(g.size(), a.size()) << what;
    for (size_t i = 0; i < a.size(); ++i) EXPECT_LT(std::abs(g[i] - f(a[i], b[i % 2])), 1e-12) << what << " " << i;
  };
  expect(add(ta, tb, 2), [](C x, C y) { return x + 2.0 * y; }, "add alpha 2");
  expect(sub(ta, tb, 1), [](C x, C y) { return x - y; }, "sub");
  expect(mul(ta, tb), [](C x, C y) { return x * y; }, "mul");
  expect(div(ta, tb, ""), [](C x, C y) { return x / y; }, "div");
  expect(neg(ta), [](C x, C) { return -x; }, "neg");
  expect(conj_physical(ta), [](C x, C) { return std::conj(x); }, "conj_physical");
  expect(mul(ta, Scalar(0.5)), [](C x, C) { return 0.5 * x; }, "mul by a real Scalar");
  // A real operand converts with imaginary part 0; the result is complex of the promoted parts.
  Tensor r = Tensor::from_vector<float>({2.0f, -3.0f}, {2});
  Tensor m = mul(ta.to(DType::kComplex64), r);
  EXPECT_EQ(m.dtype(), DType::kComplex64);
  EXPECT_EQ(values(m)[1], (C{1.5, -9.0}));
  EXPECT_THROW(div(ta, tb, "floor"), Error);
}

TEST(ComplexKernels, ViewsPartsAndSums) {
  Tensor z = make({{1, 2}, {3, 4}, {5, 6}, {7, 8}}, {2, 2});
  Tensor pairs = view_as_real(z);
  EXPECT_EQ(pairs.sizes(), (Shape{2, 2, 2}));
  EXPECT_EQ(pairs.data_ptr(), z.data_ptr());
  EXPECT_EQ(pairs.contiguous().to_vector<double>(), (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}));
  EXPECT_EQ(real_part(z.transpose(0, 1)).contiguous().to_vector<double>(), (std::vector<double>{1, 5, 3, 7}));
  EXPECT_EQ(imag_part(z).contiguous().to_vector<double>(), (std::vector<double>{2, 4, 6, 8}));
  Tensor back = view_as_complex(pairs);
  EXPECT_EQ(back.dtype(), DType::kComplex128);
  EXPECT_EQ(values(back), values(z));
  EXPECT_THROW(view_as_complex(pairs.transpose(1, 2)), Error);  // last-dim stride 2
  EXPECT_EQ(values(sum(z, {0}, false)), (std::vector<C>{{6, 8}, {10, 12}}));
  EXPECT_EQ(values(sum(z, {-1}, true)), (std::vector<C>{{4, 6}, {12, 14}}));
  EXPECT_EQ(values(sum(z, {}, false)), (std::vector<C>{{16, 20}}));
  EXPECT_EQ(values(complex_from_parts(Tensor::from_vector<double>({1, 2}, {2}), Tensor::from_vector<double>({-1}, {1}))),
            (std::vector<C>{{1, -1}, {2, -1}}));
}

TEST(ComplexKernels, RealKernelsRefuseComplexNamingTheDtype) {
  Tensor z = make({{1, 2}}, {1}, DType::kComplex64);
  const std::vector<std::pair<const char*, Tensor (*)(const Tensor&)>> kernels = {
      {"exp", [](const Tensor& t) { return exp(t); }},
      {"relu", [](const Tensor& t) { return relu(t); }},
      {"amax", [](const Tensor& t) { return amax(t, {}, false); }},
      {"mean", [](const Tensor& t) { return mean(t, {}, false); }},
      {"eq", [](const Tensor& t) { return eq(t, t); }}};
  for (const auto& [name, f] : kernels) {
    try {
      f(z);
      FAIL() << name << " accepted complex64";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("complex64"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace dtensor::kernels
