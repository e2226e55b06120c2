// The Philox draws (kernels/cpu/random.h): Random123's known-answer vectors, any block equal to the
// same slice of the whole tensor's draw, the distributions (Kolmogorov-Smirnov, chi-square), and
// the errors.
#include <algorithm>
#include <cmath>

#include "gtest/gtest.h"
#include "kernels/cpu/random.h"
#include "tests/kernels/test_util.h"

namespace dtensor::kernels {
namespace {

using testing::expect_error;
using testing::V;

// Random123's kat_vectors for philox4x32 with 10 rounds: (counter, key) -> words. The library's
// counter is {g lo, g hi, offset lo, offset hi} and its key {seed lo, seed hi} (random.h).
TEST(Philox, KnownAnswers) {
  EXPECT_EQ(philox_words(0, 0, 0), (std::array<uint32_t, 4>{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}));
  EXPECT_EQ(philox_words(~0ULL, ~0ULL, ~0ULL), (std::array<uint32_t, 4>{0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}));
  EXPECT_EQ(philox_words(0x299f31d0a4093822ULL, 0x0370734413198a2eULL, 0x85a308d3243f6a88ULL),
            (std::array<uint32_t, 4>{0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}));
}

// The whole [5, 7, 3] draw, then every block of a grid of cuts: each equals its slice of the whole.
TEST(Philox, EveryBlockIsItsSliceOfTheWhole) {
  const Shape g{5, 7, 3};
  for (int kind = 0; kind < 3; ++kind) {
    auto draw = [&](const Shape& start, const Shape& shape) {
      if (kind == 0) return philox_uniform(g, start, shape, 11, 4, DType::kFloat32);
      if (kind == 1) return philox_normal(g, start, shape, 11, 4, DType::kFloat64);
      return philox_bernoulli(g, start, shape, 11, 4, 0.3, DType::kFloat32);
    };
    const std::vector<double> whole = V(draw({0, 0, 0}, g));
    for (int64_t a0 : {0, 2, 4})
      for (int64_t a1 : {0, 3, 6})
        for (int64_t a2 : {0, 1}) {
          const Shape start{a0, a1, a2}, shape{std::min<int64_t>(2, 5 - a0), std::min<int64_t>(4, 7 - a1), 3 - a2};
          const std::vector<double> block = V(draw(start, shape));
          size_t k = 0;
          for (int64_t i = 0; i < shape[0]; ++i)
            for (int64_t j = 0; j < shape[1]; ++j)
              for (int64_t l = 0; l < shape[2]; ++l)
                ASSERT_EQ(block[k++], whole[((a0 + i) * 7 + (a1 + j)) * 3 + (a2 + l)])
                    << "kind " << kind << " block at " << shape_str(start) << " element " << i << "," << j << "," << l;
        }
  }
  // A 0-d tensor and an empty block.
  EXPECT_EQ(philox_uniform({}, {}, {}, 3, 0, DType::kFloat32).numel(), 1);
  EXPECT_EQ(philox_uniform({4, 0}, {0, 0}, {4, 0}, 3, 0, DType::kFloat32).numel(), 0);
}

TEST(Philox, SeedAndOffsetChangeTheDraw) {
  const std::vector<double> a = V(philox_uniform({64}, {0}, {64}, 1, 0, DType::kFloat64));
  EXPECT_NE(a, V(philox_uniform({64}, {0}, {64}, 2, 0, DType::kFloat64)));
  EXPECT_NE(a, V(philox_uniform({64}, {0}, {64}, 1, 1, DType::kFloat64)));
  EXPECT_EQ(a, V(philox_uniform({64}, {0}, {64}, 1, 0, DType::kFloat64)));
}

// Kolmogorov-Smirnov statistic of sorted samples against the CDF `cdf`.
template <typename Cdf>
double ks(std::vector<double> x, Cdf cdf) {
  std::sort(x.begin(), x.end());
  const double n = static_cast<double>(x.size());
  double d = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double f = cdf(x[i]);
    d = std::max({d, f - i / n, (i + 1) / n - f});
  }
  return d;
}

TEST(Philox, Distributions) {
  const int64_t n = 50000;
  const double critical = 1.95 / std::sqrt(static_cast<double>(n));  // KS at the 0.1% level
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    const std::vector<double> u = V(philox_uniform({n}, {0}, {n}, 77, 0, dt));
    EXPECT_LT(*std::max_element(u.begin(), u.end()), 1.0) << dtype_name(dt);
    EXPECT_GE(*std::min_element(u.begin(), u.end()), 0.0) << dtype_name(dt);
    // bfloat16 holds 256 values in [0, 1): the step of the CDF is 1/256 there.
    const double slack = dt == DType::kBFloat16 ? 1.0 / 256 : dt == DType::kFloat16 ? 1.0 / 2048 : 0;
    EXPECT_LT(ks(u, [](double x) { return x; }), critical + slack) << dtype_name(dt);
  }
  const std::vector<double> z = V(philox_normal({n}, {0}, {n}, 77, 0, DType::kFloat64));
  EXPECT_LT(ks(z, [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); }), critical);
  for (double p : {0.1, 0.5, 0.9}) {
    const std::vector<double> b = V(philox_bernoulli({n}, {0}, {n}, 5, 9, p, DType::kFloat32));
    double ones = 0;
    for (double v : b) {
      ASSERT_TRUE(v == 0 || v == 1);
      ones += v;
    }
    const double chi2 = (ones - n * p) * (ones - n * p) / (n * p * (1 - p));
    EXPECT_LT(chi2, 10.83) << "p " << p << ": " << ones << " ones of " << n;  // 1 dof, 0.1% level
  }
  EXPECT_EQ(V(philox_bernoulli({8}, {0}, {8}, 5, 9, 1.0, DType::kBool)), std::vector<double>(8, 1.0));
  EXPECT_EQ(V(philox_bernoulli({8}, {0}, {8}, 5, 9, 0.0, DType::kInt64)), std::vector<double>(8, 0.0));
}

TEST(Philox, Errors) {
  expect_error([] { philox_bernoulli({4}, {0}, {4}, 1, 0, 1.5, DType::kFloat32); }, {"philox_bernoulli", "p = 1.5", "[0, 1]"});
  expect_error([] { philox_uniform({4}, {3}, {2}, 1, 0, DType::kFloat32); }, {"philox_uniform", "[2]", "[3]", "not inside [4]"});
  expect_error([] { philox_uniform({4, 2}, {0}, {4}, 1, 0, DType::kFloat32); }, {"philox_uniform", "rank"});
  expect_error([] { philox_normal({4}, {0}, {4}, 1, 0, DType::kInt64); }, {"philox_normal", "int64", "float32"});
}

}  // namespace
}  // namespace dtensor::kernels
