// CUDA cumsum (one long row: CUB's tuned single-pass scan with ::cuda::std::plus) and cummax /
// cummin (one flat max-scan of packed row | value | position keys, kernels/cuda/scan_key.h) against
// the CPU kernels: indices exactly, cummax / cummin values bit for bit, sums within tolerance.
// The cases cross CUB's tiles (2688 elements a tile for float keys, 2880 for 128-bit keys, 3072
// for float sums on sm_90), put NaN at the first and last element and at tile edges, mix ties, both
// zeros and infinities, scan many rows and rows of one element in one flat scan, and cover every
// compute type (float for float32 / bfloat16, double, int64 for the integers and bool).
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/kernels.h"
#include "tests/cuda/cuda_test_util.h"

namespace dtensor::cuda::testing {
namespace {

namespace K = ::dtensor::kernels;
namespace C = ::dtensor::kernels::cuda;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

using ScanKeys = CudaTest;

void expect_pair(const std::pair<Tensor, Tensor>& got, const std::pair<Tensor, Tensor>& want,
                 const std::string& what) {
  expect_matches(got.first, want.first, 0, what + " values");
  expect_matches(got.second, want.second, 0, what + " indices");
}

void expect_extremes(const Tensor& x, int64_t dim, const std::string& what) {
  expect_pair(C::cummax(G(x), dim), K::cummax(x, dim), "cummax " + what);
  expect_pair(C::cummin(G(x), dim), K::cummin(x, dim), "cummin " + what);
}

// n small integers (ties) with `specials` written at the given positions.
Tensor with_specials(int64_t n, uint64_t seed, const std::vector<std::pair<int64_t, double>>& specials) {
  std::vector<double> v = randint({n}, seed, 50, DType::kFloat64).to_vector<double>();
  for (auto [at, value] : specials)
    if (at >= 0 && at < n) v[at] = value;
  return Tensor::from_vector(v, {n});
}

TEST_F(ScanKeys, OneLongRowAcrossManyTiles) {
  const int64_t n = (1 << 20) + 7;
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt64, DType::kInt32,
                   DType::kBool}) {
    const Tensor ties = randint({n}, 51, dt == DType::kBool ? 2 : 40, dt);
    expect_extremes(ties, 0, std::string("ties, ") + dtype_name(dt));
  }
  // Increasing then decreasing: every element replaces the running value, then none does.
  std::vector<double> ramp(n);
  for (int64_t i = 0; i < n; ++i) ramp[i] = i < n / 2 ? i : n - i;
  expect_extremes(Tensor::from_vector(ramp, {n}).to(DType::kFloat32), 0, "ramp float32");
  expect_extremes(Tensor::from_vector(ramp, {n}).to(DType::kFloat64), 0, "ramp float64");
}

TEST_F(ScanKeys, NanZerosAndInfinitiesAtTileEdges) {
  const int64_t n = 3 * 3072 + 11;
  const std::vector<std::vector<std::pair<int64_t, double>>> layouts = {
      {{0, kNaN}},                                                   // NaN first: all NaN, index 0
      {{n - 1, kNaN}},                                               // NaN last
      {{2687, kNaN}, {2688, 7}, {2689, kNaN}, {5376, kNaN}},         // float keys' tile edges
      {{2879, kNaN}, {2880, kNaN}, {5759, kNaN}},                    // 128-bit keys' tile edges
      {{0, -kInf}, {1, -0.0}, {2, 0.0}, {3, -0.0}, {2688, kInf}, {2689, kInf}},  // zeros, infinities
      {{0, -0.0}, {2688, 0.0}, {5000, -0.0}},
  };
  for (size_t l = 0; l < layouts.size(); ++l) {
    const Tensor base = with_specials(n, 60 + l, layouts[l]);
    for (DType dt : {DType::kFloat32, DType::kFloat64}) {
      expect_extremes(base.to(dt), 0, "layout " + std::to_string(l) + " " + dtype_name(dt));
    }
  }
  // Only zeros of both signs, and only -inf: ties decide every index.
  std::vector<double> zeros(5000);
  for (size_t i = 0; i < zeros.size(); ++i) zeros[i] = (i * 7919) % 3 == 0 ? -0.0 : 0.0;
  expect_extremes(Tensor::from_vector(zeros, {5000}).to(DType::kFloat32), 0, "zeros");
  expect_extremes(Tensor::full({4000}, -kInf).to(DType::kFloat32), 0, "-inf");
  expect_extremes(Tensor::full({4000}, kNaN).to(DType::kFloat32), 0, "all NaN");
}

TEST_F(ScanKeys, ManyRowsInOneFlatScan) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kInt64, DType::kBFloat16}) {
    const std::string w = dtype_name(dt);
    expect_extremes(randint({300, 5000}, 70, 40, dt), 1, "300 x 5000 " + w);  // a row spans tiles
    expect_extremes(randint({4096, 33}, 71, 9, dt), 1, "4096 x 33 " + w);      // tiles span rows
    expect_extremes(randint({3, 100001}, 72, 1000, dt), 1, "3 x 100001 " + w);
    expect_extremes(randint({1000, 1}, 73, 5, dt), 1, "rows of one " + w);
    expect_extremes(rand({64, 700}, 74, dt, -5, 5), 0, "along dim 0 " + w);
  }
  // A NaN row between ordinary rows must not leak into the next row.
  std::vector<double> v = randint({5, 3000}, 75, 20, DType::kFloat64).to_vector<double>();
  for (int64_t j = 0; j < 3000; j += 7) v[3000 + j] = kNaN;
  v[2 * 3000 + 2999] = kNaN;
  const Tensor t = Tensor::from_vector(v, {5, 3000});
  expect_extremes(t.to(DType::kFloat32), 1, "NaN rows float32");
  expect_extremes(t, 1, "NaN rows float64");
}

TEST_F(ScanKeys, CarriedCummaxKeepsTheShardOffset) {
  const Tensor x = with_specials(7000, 80, {{10, kNaN}, {2700, 0.0}});
  const Tensor cv = Tensor::from_vector(std::vector<double>{30}, {1});
  const Tensor ci = Tensor::from_vector(std::vector<int64_t>{12}, {1});
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    const Tensor xd = x.to(dt), cvd = cv.to(dt);
    expect_pair(C::cummax_with_carry(G(xd), 0, G(cvd), G(ci), 5000), K::cummax_with_carry(xd, 0, cvd, ci, 5000),
                std::string("cummax_with_carry ") + dtype_name(dt));
    expect_pair(C::cummin_with_carry(G(xd), 0, G(cvd), G(ci), 5000), K::cummin_with_carry(xd, 0, cvd, ci, 5000),
                std::string("cummin_with_carry ") + dtype_name(dt));
  }
}

TEST_F(ScanKeys, CumsumOfOneLongRow) {
  const int64_t n = (1 << 22) + 5;
  const Tensor f = rand({n}, 90, DType::kFloat32, 0, 1);  // positive: relative error stays small
  expect_matches(C::cumsum(G(f), 0), K::cumsum(f, 0), 4e-4, "cumsum float32 one row");
  const Tensor d = rand({n}, 91, DType::kFloat64, -1, 1);
  expect_matches(C::cumsum(G(d), 0), K::cumsum(d, 0), 1e-9, "cumsum float64 one row");
  // int64 wrapping past 2^63 (uint64 adds on the device, wrap_add on the CPU).
  std::vector<int64_t> big(1 << 20);
  for (size_t i = 0; i < big.size(); ++i) big[i] = std::numeric_limits<int64_t>::max() / 3 - int64_t(i);
  const Tensor b = Tensor::from_vector(big, {int64_t(big.size())});
  expect_matches(C::cumsum(G(b), 0), K::cumsum(b, 0), 0, "cumsum int64 wrapping");
  const Tensor i32 = randint({n}, 92, 1000, DType::kInt32);
  expect_matches(C::cumsum(G(i32), 0), K::cumsum(i32, 0), 0, "cumsum int32 one row");
  const Tensor bf = rand({5000}, 93, DType::kBFloat16, 0, 1);
  expect_matches(C::cumsum(G(bf), 0), K::cumsum(bf, 0), tol(DType::kBFloat16) * 20, "cumsum bfloat16 one row");
  // A few long rows (the keyed scan, also ::cuda::std::plus now).
  const Tensor rows = rand({7, 300001}, 94, DType::kFloat64, -1, 1);
  expect_matches(C::cumsum(G(rows), 1), K::cumsum(rows, 1), 1e-9, "cumsum 7 long rows");
}

}  // namespace
}  // namespace dtensor::cuda::testing
