// grouped_mm against hand-computed values and a per-group triple loop in double; the error cases.
// The forms and torch's rules (checked with torch 2.15's torch._grouped_mm) are in
// kernels/cpu/grouped_mm.h.
#include "kernels/cpu/grouped_mm.h"

#include "gtest/gtest.h"
#include "tests/kernels/test_util.h"

namespace dtensor::kernels {
namespace {

using testing::expect_error;
using testing::expect_near;
using testing::rand;
using testing::T;
using testing::V;

Tensor offsets(const std::vector<int32_t>& v) {
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())});
}

// out[i, j] += sum_p a[i, p] b[p, j] over i in rows, j in cols, p in ks (views of any strides).
void naive_add(const Tensor& a, const Tensor& b, std::vector<double>& out, int64_t ld, int64_t r0, int64_t r1,
               int64_t c0, int64_t c1, int64_t k0, int64_t k1, int64_t at = 0) {
  std::vector<double> av = V(a.contiguous()), bv = V(b.contiguous());
  const int64_t ka = a.size(1), nb = b.size(1);
  for (int64_t i = r0; i < r1; ++i)
    for (int64_t j = c0; j < c1; ++j)
      for (int64_t p = k0; p < k1; ++p) out[at + i * ld + j] += av[i * ka + p] * bv[p * nb + j];
}

TEST(GroupedMm, RowsFormHandComputed) {
  Tensor a = T({1, 2, 3, 4, 5, 6}, {3, 2});
  Tensor b = T({1, 0, 0, 1, 2, 0, 0, 2}, {2, 2, 2});  // I, 2I
  expect_near(V(grouped_mm(a, b, offsets({1, 3}))), {1, 2, 6, 8, 10, 12}, 0);
  // Rows past offs[-1] are zero; an empty group contributes nothing.
  expect_near(V(grouped_mm(a, b, offsets({0, 2}))), {2, 4, 6, 8, 0, 0}, 0);
}

TEST(GroupedMm, EveryFormMatchesPerGroupLoop) {
  const std::vector<int32_t> ends{3, 3, 8};  // an empty group and 2 trailing rows / cols
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    const double tol = dt == DType::kFloat64 ? 1e-12 : 1e-4;
    {  // a[M, K] @ b[G, K, N] -> [M, N]
      Tensor a = rand({10, 5}, 1, dt), b = rand({3, 5, 4}, 2, dt);
      std::vector<double> want(10 * 4, 0.0);
      for (int g = 0, s = 0; g < 3; s = ends[g++]) {
        Tensor bg = b.select(0, g);
        naive_add(a, bg, want, 4, s, ends[g], 0, 4, 0, 5);
      }
      expect_near(V(grouped_mm(a, b, offsets(ends))), want, tol);
    }
    {  // a[M, K] @ b[K, N], groups over K -> [G, M, N]; strided (transposed) operands
      Tensor a = rand({10, 4}, 3, dt).transpose(0, 1), b = rand({6, 10}, 4, dt).transpose(0, 1);
      std::vector<double> want(3 * 4 * 6, 0.0);
      for (int g = 0, s = 0; g < 3; s = ends[g++]) naive_add(a, b, want, 6, 0, 4, 0, 6, s, ends[g], g * 24);
      expect_near(V(grouped_mm(a, b, offsets(ends))), want, tol);
    }
    {  // a[G, M, K] @ b[K, N], groups over N -> [M, N]
      Tensor a = rand({3, 4, 5}, 5, dt), b = rand({5, 10}, 6, dt);
      std::vector<double> want(4 * 10, 0.0);
      for (int g = 0, s = 0; g < 3; s = ends[g++]) naive_add(a.select(0, g), b, want, 10, 0, 4, s, ends[g], 0, 5);
      expect_near(V(grouped_mm(a, b, offsets(ends))), want, tol);
    }
    {  // a[G, M, K] @ b[G, K, N] -> [G, M, N]
      Tensor a = rand({3, 4, 5}, 7, dt), b = rand({3, 5, 2}, 8, dt);
      std::vector<double> want(3 * 4 * 2, 0.0);
      for (int g = 0; g < 3; ++g) naive_add(a.select(0, g), b.select(0, g), want, 2, 0, 4, 0, 2, 0, 5, g * 8);
      expect_near(V(grouped_mm(a, b, std::nullopt)), want, tol);
    }
  }
}

TEST(GroupedMm, BFloat16RoundsTheFloatResult) {
  Tensor a = rand({6, 4}, 9, DType::kBFloat16), b = rand({2, 4, 3}, 10, DType::kBFloat16);
  Tensor got = grouped_mm(a, b, offsets({2, 6}));
  EXPECT_EQ(got.dtype(), DType::kBFloat16);
  Tensor ref = grouped_mm(a.to(DType::kFloat32), b.to(DType::kFloat32), offsets({2, 6}));
  expect_near(V(got), V(ref), 0.05);
}

TEST(GroupedMm, BadInputNamesOpAndShapes) {
  Tensor a = rand({6, 4}, 1), b = rand({2, 4, 3}, 2);
  expect_error([&] { grouped_mm(a, b, offsets({4, 2})); }, {"grouped_mm", "[6, 4]", "[2, 4, 3]", "offs[1] = 2"});
  expect_error([&] { grouped_mm(a, b, offsets({4, 7})); }, {"grouped_mm", "offs[1] = 7", "<= 6"});
  expect_error([&] { grouped_mm(a, b, Tensor::from_vector<int64_t>({2, 6}, {2})); }, {"grouped_mm", "int32", "int64"});
  expect_error([&] { grouped_mm(a, b, offsets({6})); }, {"grouped_mm", "int32 [2]"});
  expect_error([&] { grouped_mm(a, rand({2, 5, 3}, 3), offsets({2, 6})); }, {"grouped_mm", "contraction dims differ", "[2, 5, 3]"});
  expect_error([&] { grouped_mm(a, b, std::nullopt); }, {"grouped_mm", "offs are required"});
  expect_error([&] { grouped_mm(rand({2, 6, 4}, 4), b, offsets({2, 6})); }, {"grouped_mm", "takes no offs"});
  expect_error([&] { grouped_mm(a, b.to(DType::kFloat64), offsets({2, 6})); }, {"grouped_mm", "one floating dtype"});
}

}  // namespace
}  // namespace dtensor::kernels
