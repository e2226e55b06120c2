// The CUDA median kernels of selection_kernels.cu against the CPU kernels, values and indices
// exactly: the whole-tensor median's sample bracket (a hit; a miss, an overflow of either buffer,
// a zero with -0.0, each answered by the exact path; NaN, +-inf, all equal, few distinct values;
// every dtype; sizes around the path's and the tiles' limits) and the block-a-row radix select
// (11-bit digits: keys that differ only in the last digit, ties, NaN, signed zeros, rows at the
// 40 KiB limit). The branch each case takes is checked on the CPU by selection_plan_test.
#include <limits>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/kernels.h"
#include "tests/cuda/cuda_test_util.h"
#include "tests/cuda/median_inputs.h"

namespace dtensor::cuda::testing {
namespace {

namespace K = ::dtensor::kernels;
namespace C = ::dtensor::kernels::cuda;
// kernels/cuda/selection_plan.h's kMinWhole (shorter tensors take the exact path) and kSample.
constexpr int64_t kMinWhole = int64_t{1} << 16, kSample = 4096;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using Median = CudaTest;

// The whole-tensor median's bits are those of the element the stable (value, index) order puts
// at the rank, as both CUDA paths give it (the exact path is a stable radix sort; the fast path
// sends a zero answer with -0.0 in the input there): K::median_dim of the flattened input. The
// CPU's K::median (nth_element over doubles) agrees in value, but the sign of a zero answer is
// whichever equal element nth_element leaves there (the signed-zero input below: +0.0, where the
// stable order holds -0.0), and a NaN answer is the canonical NaN, so it is compared by value.
void expect_whole(const Tensor& x, const std::string& what) {
  const Tensor flat = x.contiguous().reshape({x.numel()});
  const auto same_value = [](const Tensor& got, const Tensor& want, const std::string& w) {
    const double g = H(got).to_vector<double>()[0], v = want.to_vector<double>()[0];
    EXPECT_TRUE(v != v ? g != g : g == v) << w << ": " << g << " vs " << v;  // -0.0 == +0.0
  };
  const Tensor median = C::median(G(x)), nanmedian = C::nanmedian(G(x));
  expect_matches(median, K::median_dim(flat, 0).first, 0, "median " + what);
  expect_matches(nanmedian, K::nanmedian_dim(flat, 0).first, 0, "nanmedian " + what);
  same_value(median, K::median(x), "median vs K::median " + what);
  same_value(nanmedian, K::nanmedian(x), "nanmedian vs K::nanmedian " + what);
}

void expect_rows(const Tensor& x, int64_t dim, const std::string& what) {
  const auto pair = [&](const std::pair<Tensor, Tensor>& got, const std::pair<Tensor, Tensor>& want,
                        const std::string& w) {
    expect_matches(got.first, want.first, 0, w + " values");
    expect_matches(got.second, want.second, 0, w + " indices");
  };
  pair(C::median_dim(G(x), dim, false), K::median_dim(x, dim), "median_dim " + what);
  pair(C::nanmedian_dim(G(x), dim, false), K::nanmedian_dim(x, dim), "nanmedian_dim " + what);
  const int64_t n = x.size(dim);
  for (int64_t k : {int64_t{1}, (n + 1) / 2, n})
    pair(C::kthvalue(G(x), k, dim, false), K::kthvalue(x, k, dim), "kthvalue " + what);
}

Tensor from(const std::vector<double>& v, DType dt) {
  return Tensor::from_vector(v, {static_cast<int64_t>(v.size())}).to(dt);
}

// ---- Whole tensor.
TEST_F(Median, WholeBracketHitsEveryDtype) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16}) {
    expect_whole(rand({1 << 20}, 1, dt), std::string(dtype_name(dt)));
    expect_whole(rand({3, 1 << 17}, 2, dt), std::string(dtype_name(dt)) + " 2-d");
  }
  for (DType dt : {DType::kInt32, DType::kInt64}) {
    expect_whole(randint({1 << 20}, 3, int64_t{1} << 30, dt), std::string(dtype_name(dt)));
    expect_whole(randint({1 << 18}, 4, 7, dt), std::string(dtype_name(dt)) + " 7 values");
  }
  expect_whole(randint({1 << 18}, 5, 2, DType::kBool), "bool");
}

TEST_F(Median, WholeSizesAroundTheLimits) {
  const int64_t tile = 4096;
  for (int64_t n : {kMinWhole - 1, kMinWhole, kMinWhole + 1, kMinWhole + tile - 1,
                    20 * tile + 1, int64_t{1} << 22, (int64_t{1} << 22) + 3})
    expect_whole(rand({n}, 10 + n, DType::kFloat32), "n " + std::to_string(n));
}

TEST_F(Median, WholeFallbacks) {
  const int64_t n = 1 << 18, stride = n / kSample;
  // A miss: every sampled position holds 0, the rest is larger.
  std::vector<double> v(n);
  for (int64_t j = 0; j < n; ++j) v[j] = j % stride == stride / 2 ? 0.0 : 1.0 + static_cast<double>(j);
  for (DType dt : {DType::kFloat32, DType::kFloat64}) expect_whole(from(v, dt), "miss");
  // Overflows of the first buffer: all equal, two values, mostly +inf.
  expect_whole(Tensor::full({n}, 2.5, DType::kFloat32), "all equal");
  expect_whole(randint({n}, 20, 2, DType::kFloat32), "two values");
  std::vector<double> inf(n, kInf);
  for (int64_t j = 0; j < n; j += 3) inf[j] = -kInf;
  for (int64_t j = 1; j < n; j += 7) inf[j] = static_cast<double>(j);
  expect_whole(from(inf, DType::kFloat32), "+-inf");
  // An overflow of the second buffer: 3% of the input equal to the median.
  Tensor r = rand({n}, 21, DType::kFloat64);
  std::vector<double> tie = r.to_vector<double>();
  for (int64_t j = 0; j < n; j += 33) tie[j] = 0.0;
  expect_whole(from(tie, DType::kFloat64), "ties at the median");
  // Signed zeros: a zero median with -0.0 in the input (the first buffer overflows; the stable order
  // puts -0.0 at the rank, K::median's nth_element +0.0); zeros and -0.0 away from the median.
  std::vector<double> z = rand({n}, 22, DType::kFloat64).to_vector<double>();
  for (int64_t j = 0; j < n; j += 2) z[j] = j % 4 ? 0.0 : -0.0;
  expect_whole(from(z, DType::kFloat32), "signed zeros");
  z = rand({n}, 23, DType::kFloat64).to_vector<double>();
  z[5] = -0.0;
  z[6] = 0.0;
  expect_whole(from(z, DType::kFloat32), "-0.0 away from the median");
}

// A zero median inside the bracket, no overflow of either buffer (selection_plan_test's
// WholeEmulationZeroMedianSign checks that on the CPU, same input): only the finish kernel's -0.0
// check sends the call to the exact path, which answers the zero the stable order puts at the rank
// (-0.0 for zeros 1 and 2, where the fast path alone would give +0.0; expect_whole compares bits
// with K::median_dim). The input: tests/cuda/median_inputs.h.

TEST_F(Median, WholeZeroMedianSign) {
  for (int zeros : {0, 1, 2})
    for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16})
      expect_whole(from(zero_median_input<double>(zeros), dt),
                   "zero median, zeros " + std::to_string(zeros) + " " + std::string(dtype_name(dt)));
}

TEST_F(Median, WholeNaN) {
  const int64_t n = 1 << 18;
  std::vector<double> v = rand({n}, 30, DType::kFloat64).to_vector<double>();
  v[n - 1] = kNaN;  // median: NaN; nanmedian: the numbers' median
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) expect_whole(from(v, dt), "one NaN");
  for (int64_t j = 0; j < n; j += 3) v[j] = kNaN;
  expect_whole(from(v, DType::kFloat32), "a third NaN");
  expect_whole(Tensor::full({n}, kNaN, DType::kFloat32), "all NaN");
}

// ---- Rows.
TEST_F(Median, RowsEveryDtypeAndLimit) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16, DType::kInt32,
                   DType::kInt64}) {
    const std::string w(dtype_name(dt));
    expect_rows(is_floating(dt) ? rand({33, 4096}, 40, dt) : randint({33, 4096}, 40, 1 << 20, dt), 1, w);
    expect_rows(randint({9, 300}, 41, 5, DType::kFloat64).to(dt), 1, w + " ties");
    expect_rows(rand({5, 7, 3}, 42, DType::kFloat64).to(dt), 1, w + " short rows");
  }
  expect_rows(randint({4, 1000}, 43, 2, DType::kBool), 1, "bool");
  // At the 40 KiB limit (10240 32-bit keys, 5120 64-bit) and one past (the sort).
  expect_rows(rand({3, 10240}, 44, DType::kFloat32), 1, "10240");
  expect_rows(rand({3, 10241}, 45, DType::kFloat32), 1, "10241");
  expect_rows(rand({3, 5120}, 46, DType::kFloat64), 1, "5120 float64");
  expect_rows(randint({3, 5120}, 47, 9, DType::kInt64), 1, "5120 int64 ties");
  for (int64_t n : {1, 2, 255, 256, 257}) expect_rows(rand({6, n}, 48 + n, DType::kFloat32), 1, "n " + std::to_string(n));
}

TEST_F(Median, RowsDigitsAndSpecialValues) {
  // Keys that differ only in their last digits: every pass runs (1 + k 2^-23 share 21 top bits).
  std::vector<double> v(4 * 2048);
  for (size_t j = 0; j < v.size(); ++j) v[j] = 1.0 + static_cast<double>((j * 797) % 2048) * std::ldexp(1.0, -23);
  expect_rows(Tensor::from_vector(v, {4, 2048}).to(DType::kFloat32), 1, "last digit");
  for (size_t j = 0; j < v.size(); ++j) v[j] = 1.0 + static_cast<double>((j * 797) % 2048) * std::ldexp(1.0, -52);
  expect_rows(Tensor::from_vector(v, {4, 2048}), 1, "float64 last digit");
  // NaN, +-inf, both zeros, ties among them.
  std::vector<double> s(6 * 500);
  const double pool[] = {kNaN, kInf, -kInf, 0.0, -0.0, 1.0, -1.0};
  for (size_t j = 0; j < s.size(); ++j) s[j] = pool[(j * 5 + j / 7) % 7];
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16})
    expect_rows(Tensor::from_vector(s, {6, 500}).to(dt), 1, "special " + std::string(dtype_name(dt)));
  std::vector<double> z(4 * 301);
  for (size_t j = 0; j < z.size(); ++j) z[j] = j % 2 ? 0.0 : -0.0;
  expect_rows(Tensor::from_vector(z, {4, 301}).to(DType::kFloat32), 1, "signed zeros");
  expect_rows(Tensor::full({3, 777}, kNaN, DType::kFloat32), 1, "all NaN");
  // Along dim 0 (rows made contiguous first).
  expect_rows(rand({600, 5}, 49, DType::kFloat32), 0, "dim 0");
}

}  // namespace
}  // namespace dtensor::cuda::testing
