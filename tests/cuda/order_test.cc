// CUDA scans, value-selecting reductions (max/argmax, median, kthvalue) and pooling against the
// CPU kernels; indices must match exactly.
#include <algorithm>
#include <limits>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/kernels.h"
#include "tests/cuda/cuda_test_util.h"

namespace dtensor::cuda::testing {
namespace {

namespace K = ::dtensor::kernels;
namespace C = ::dtensor::kernels::cuda;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void expect_pair(const std::pair<Tensor, Tensor>& got, const std::pair<Tensor, Tensor>& want,
                 double t, const std::string& what) {
  expect_matches(got.first, want.first, t, what + " values");
  expect_matches(got.second, want.second, 0, what + " indices");
}

// Values with ties, NaN, infinities and both zeros.
Tensor tricky(DType dt) {
  std::vector<double> v = {3, -0.0, 0.0, kNaN, 3, -kInf, 1, kInf, 1, kNaN, 2, 0.0};
  return Tensor::from_vector(v, {3, 4}).to(dt);
}

using Scan = CudaTest;

// f of each value of t (as double), cast to dt.
template <typename F>
Tensor mapped(const Tensor& t, F f, DType dt) {
  std::vector<double> v = t.to_vector<double>();
  for (double& e : v) e = f(e);
  return Tensor::from_vector(v, t.sizes()).to(dt);
}

TEST_F(Scan, EveryScanAlongEveryDim) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kInt64, DType::kInt32,
                   DType::kInt16, DType::kInt8, DType::kUInt8, DType::kBool}) {
    Tensor x =
        is_floating(dt) ? rand({4, 33, 5}, 40, dt, -1.2, 1.2) : randint({4, 33, 5}, 41, 3, dt);
    for (int64_t dim : {0, 1, 2}) {
      const std::string w = absl::StrCat(dtype_name(dt), " dim ", dim);
      const double t = is_floating(dt) ? tol(dt) * 20 : 0;
      expect_matches(C::cumsum(G(x), dim), K::cumsum(x, dim), t, "cumsum " + w);
      expect_matches(C::cumprod(G(x), dim), K::cumprod(x, dim), t, "cumprod " + w);
      expect_pair(C::cummax(G(x), dim), K::cummax(x, dim), 0, "cummax " + w);
      expect_pair(C::cummin(G(x.transpose(0, 2)), dim), K::cummin(x.transpose(0, 2), dim), 0,
                  "cummin " + w);
      if (is_floating(dt))
        expect_matches(C::logcumsumexp(G(x), dim), K::logcumsumexp(x, dim), t, "logcumsumexp " + w);
    }
  }
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Tensor t = tricky(dt);
    for (int64_t dim : {0, 1}) {
      expect_pair(C::cummax(G(t), dim), K::cummax(t, dim), 0, "cummax NaN");
      expect_pair(C::cummin(G(t), dim), K::cummin(t, dim), 0, "cummin NaN");
      expect_matches(C::logcumsumexp(G(t), dim), K::logcumsumexp(t, dim), 1e-6, "logcumsumexp inf");
    }
  }
  // 256 rows or more (a block a row): rows of several tiles with a partial last one, ties, NaN and
  // infinities in every row, wrapping integer products.
  {
    const Tensor f = rand({300, 5000}, 44, DType::kFloat64, -1, 1);
    expect_matches(C::cumsum(G(f), 1), K::cumsum(f, 1), 1e-9, "cumsum, block rows");
    expect_matches(C::logcumsumexp(G(f), 1), K::logcumsumexp(f, 1), 1e-9, "logcumsumexp, block rows");
    const Tensor near1 = rand({300, 5000}, 45, DType::kFloat32, 0.999, 1.001);
    expect_matches(C::cumprod(G(near1), 1), K::cumprod(near1, 1), 1e-4, "cumprod, block rows");
    const Tensor ties = randint({300, 5000}, 46, 40, DType::kFloat64);
    expect_pair(C::cummax(G(ties), 1), K::cummax(ties, 1), 0, "cummax, block rows");
    expect_pair(C::cummin(G(ties), 1), K::cummin(ties, 1), 0, "cummin, block rows");
    std::vector<double> special;
    const std::vector<double> v = {3, -0.0, 0.0, kNaN, 3, -kInf, 1, kInf, 1, kNaN, 2, 0.0};
    for (int r = 0; r < 260; ++r)
      for (int j = 0; j < 12; ++j) special.push_back(v[(j + r) % 12]);
    const Tensor sp = Tensor::from_vector(special, {260, 12}).to(DType::kFloat32);
    expect_pair(C::cummax(G(sp), 1), K::cummax(sp, 1), 0, "cummax NaN, block rows");
    expect_pair(C::cummin(G(sp), 1), K::cummin(sp, 1), 0, "cummin NaN, block rows");
    expect_matches(C::logcumsumexp(G(sp), 1), K::logcumsumexp(sp, 1), 1e-6, "logcumsumexp inf, block rows");
    const Tensor big = randint({256, 3000}, 47, 1000000, DType::kInt64);
    expect_matches(C::cumsum(G(big), 1), K::cumsum(big, 1), 0, "int64 cumsum, block rows");
    expect_matches(C::cumprod(G(big), 1), K::cumprod(big, 1), 0, "int64 cumprod (wrapping), block rows");
  }
  // One long row and a 0-d tensor.
  Tensor row = rand({1 << 20}, 42, DType::kFloat64);
  expect_matches(C::cumsum(G(row), 0), K::cumsum(row, 0), 1e-9);
  expect_pair(C::cummax(G(row), 0), K::cummax(row, 0), 0, "long cummax");
  Tensor s = Tensor::full({}, 2.0);
  expect_matches(C::cumsum(G(s), 0), K::cumsum(s, 0), 0);
}

// The carried scans of the carry exchange: a carry for each row (values with NaN and infinities,
// global indices) then the block, as the cpu kernels scan them.
TEST_F(Scan, CarriedScansMatchTheCpu) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kInt64}) {
    Tensor x = is_floating(dt) ? tricky(dt) : randint({3, 4}, 43, 3, dt);
    for (int64_t dim : {0, 1}) {
      Shape cs = x.sizes();
      cs[dim] = 1;
      const std::vector<double> pool = {0.5, kNaN, -kInf, 2, kInf, 1};
      std::vector<double> cvals(numel(cs)), cidx(numel(cs));
      for (size_t k = 0; k < cvals.size(); ++k) {
        cvals[k] = is_floating(dt) ? pool[k % pool.size()] : static_cast<double>(k % 3);
        cidx[k] = static_cast<double>(k) * 7;
      }
      Tensor cv = Tensor::from_vector(cvals, cs).to(dt), ci = Tensor::from_vector(cidx, cs).to(DType::kInt64);
      const std::string w = absl::StrCat(dtype_name(dt), " dim ", dim);
      const double t = is_floating(dt) ? tol(dt) * 20 : 0;
      const Tensor sum_carry = is_floating(dt) ? cv : cv.to(DType::kInt64);
      expect_matches(C::cumsum_with_carry(G(x), dim, G(sum_carry)), K::cumsum_with_carry(x, dim, sum_carry), t,
                     "cumsum_with_carry " + w);
      expect_matches(C::cumprod_with_carry(G(x), dim, G(sum_carry)), K::cumprod_with_carry(x, dim, sum_carry), t,
                     "cumprod_with_carry " + w);
      if (is_floating(dt))
        expect_matches(C::logcumsumexp_with_carry(G(x), dim, G(cv)), K::logcumsumexp_with_carry(x, dim, cv), 1e-6,
                       "logcumsumexp_with_carry " + w);
      expect_pair(C::cummax_with_carry(G(x), dim, G(cv), G(ci), 100), K::cummax_with_carry(x, dim, cv, ci, 100), 0,
                  "cummax_with_carry " + w);
      expect_pair(C::cummin_with_carry(G(x), dim, G(cv), G(ci), 100), K::cummin_with_carry(x, dim, cv, ci, 100), 0,
                  "cummin_with_carry " + w);
    }
  }
}

// The scans' backward against the CPU kernels (both in float64): grads of both signs and zeros in
// x (cumprod's exact zeros), every dim, float32 and bfloat16 grads, a 0-d tensor; cummaxmin with
// the forward's indices and, as on a shard, an offset with indices of earlier shards skipped.
TEST_F(Scan, BackwardMatchesTheCpu) {
  for (DType dt : {DType::kFloat64, DType::kFloat32, DType::kBFloat16}) {
    const Tensor x = mapped(randint({5, 9, 4}, 71, 5, DType::kFloat64), [](double e) { return e - 2; }, dt);
    const Tensor g = rand({5, 9, 4}, 72, dt, -2, 2);
    for (int64_t dim : {0, 1, -1}) {
      const std::string w = absl::StrCat(dtype_name(dt), " dim ", dim);
      const double t = dt == DType::kFloat64 ? 1e-12 : tol(dt);
      expect_matches(C::cumsum_backward(G(g), dim), K::cumsum_backward(g, dim), t, "cumsum_backward " + w);
      const Tensor p = K::cumprod(x, dim), l = K::logcumsumexp(x, dim);
      expect_matches(C::cumprod_backward(G(g), G(x), G(p), dim), K::cumprod_backward(g, x, p, dim), t,
                     "cumprod_backward " + w);
      expect_matches(C::logcumsumexp_backward(G(g), G(x), G(l), dim), K::logcumsumexp_backward(g, x, l, dim), t,
                     "logcumsumexp_backward " + w);
      const Tensor idx = K::cummax(x, dim).second;
      expect_matches(C::cummaxmin_backward(G(g), G(idx), x.sizes(), dim, 0),
                     K::cummaxmin_backward(g, idx, x.sizes(), dim, 0), 0, "cummaxmin_backward " + w);
      // A shard at offset 3: indices 0..2 are an earlier shard's carry (skipped); the rest shift by 3.
      const Tensor shifted = mapped(idx, [](double e) { return e < 1 ? e : e + 3; }, DType::kInt64);
      expect_matches(C::cummaxmin_backward(G(g), G(shifted), x.sizes(), dim, 3),
                     K::cummaxmin_backward(g, shifted, x.sizes(), dim, 3), 0, "cummaxmin_backward offset " + w);
    }
  }
  const Tensor s = Tensor::full({}, 1.5, DType::kFloat64);
  expect_matches(C::cumsum_backward(G(s), 0), K::cumsum_backward(s, 0), 0, "0-d");
  // An index past the dim (hostile input) is an error naming it, as on the CPU.
  const Tensor bad = Tensor::from_vector(std::vector<double>{0, 7}, {2}).to(DType::kInt64);
  EXPECT_THROW(C::cummaxmin_backward(G(rand({2}, 73, DType::kFloat64)), G(bad), Shape{2}, 0, 0), Error);
  EXPECT_THROW(K::cummaxmin_backward(G(rand({2}, 73, DType::kFloat64)), G(bad), Shape{2}, 0, 0), Error);
}

using Selection = CudaTest;

TEST_F(Selection, MaxMinArgmaxArgminWithTiesAndNaN) {
  for (DType dt :
       {DType::kFloat32, DType::kBFloat16, DType::kFloat64, DType::kInt64, DType::kBool}) {
    Tensor x = is_floating(dt) ? randint({6, 70, 5}, 50, 5, DType::kFloat64).to(dt)
                               : randint({6, 70, 5}, 51, 5, dt);
    for (int64_t dim : {0, 1, 2})
      for (bool keep : {false, true}) {
        const std::string w = absl::StrCat(dtype_name(dt), " dim ", dim);
        expect_pair(C::max_dim(G(x), dim, keep), K::max_dim(x, dim, keep), 0, "max_dim " + w);
        expect_pair(C::min_dim(G(x), dim, keep), K::min_dim(x, dim, keep), 0, "min_dim " + w);
        expect_matches(C::argmax(G(x), dim, keep), K::argmax(x, dim, keep), 0, "argmax " + w);
      }
    expect_matches(C::argmin(G(x), std::nullopt, false), K::argmin(x), 0, "argmin all");
    expect_matches(C::argmax(G(x), std::nullopt, true), K::argmax(x, std::nullopt, true), 0);
  }
  Tensor t = tricky(DType::kFloat32);
  for (int64_t dim : {0, 1}) {
    expect_pair(C::max_dim(G(t), dim, false), K::max_dim(t, dim), 0, "max NaN");
    expect_pair(C::min_dim(G(t), dim, false), K::min_dim(t, dim), 0, "min NaN");
  }
  // Long rows: the split two-pass path.
  Tensor big = randint({2, 300000}, 52, 1000, DType::kFloat64).to(DType::kFloat32);
  expect_pair(C::max_dim(G(big), 1, false), K::max_dim(big, 1), 0, "long max_dim");
  expect_matches(C::argmin(G(big), std::nullopt, false), K::argmin(big), 0, "long argmin");
}

TEST_F(Selection, MedianNanmedianKthvalue) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16,
                   DType::kInt64, DType::kInt32, DType::kInt16, DType::kInt8, DType::kUInt8}) {
    // many ties; negative values too but for uint8 (the narrow keys flip the sign bit)
    Tensor x = K::sub(randint({7, 13, 4}, 60, 6, DType::kFloat64), K::Scalar(dt == DType::kUInt8 ? 0.0 : 2.0)).to(dt);
    for (int64_t dim : {0, 1, -1}) {
      const std::string w = absl::StrCat(dtype_name(dt), " dim ", dim);
      expect_pair(C::median_dim(G(x), dim, false), K::median_dim(x, dim), 0, "median_dim " + w);
      expect_pair(C::nanmedian_dim(G(x), dim, true), K::nanmedian_dim(x, dim, true), 0,
                  "nanmedian_dim " + w);
      for (int64_t k : {int64_t{1}, int64_t{3}, x.size(dim)})
        expect_pair(C::kthvalue(G(x), k, dim, false), K::kthvalue(x, k, dim), 0, "kthvalue " + w);
    }
    expect_matches(C::median(G(x)), K::median(x), 0, "median " + std::string(dtype_name(dt)));
  }
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    Tensor t = tricky(dt);
    for (int64_t dim : {0, 1}) {
      expect_pair(C::median_dim(G(t), dim, false), K::median_dim(t, dim), 0, "median NaN");
      expect_pair(C::nanmedian_dim(G(t), dim, false), K::nanmedian_dim(t, dim), 0, "nanmedian NaN");
      expect_pair(C::kthvalue(G(t), 2, dim, false), K::kthvalue(t, 2, dim), 0, "kthvalue NaN");
    }
    expect_matches(C::median(G(t)), K::median(t), 0);
    expect_matches(C::nanmedian(G(t)), K::nanmedian(t), 0);
    Tensor all_nan = Tensor::full({2, 3}, kNaN, dt);
    expect_pair(C::nanmedian_dim(G(all_nan), 1, false), K::nanmedian_dim(all_nan, 1), 0, "all NaN");
  }
  // Rows at the shared-memory limit (10240 32-bit keys: one block a row) and past it (rows sorted
  // together with the row in the key's upper bits; 64-bit keys by a segmented sort).
  for (const Tensor& t : {randint({2, 10240}, 62, 700, DType::kFloat64).to(DType::kFloat32),
                          randint({2, 5120}, 65, 700, DType::kFloat64),
                          randint({3, 20000}, 63, 700, DType::kFloat64).to(DType::kFloat32),
                          randint({2, 7000}, 64, 700, DType::kFloat64)}) {
    const std::string w = absl::StrCat(dtype_name(t.dtype()), " ", shape_str(t.sizes()));
    expect_pair(C::median_dim(G(t), 1, false), K::median_dim(t, 1), 0, "median_dim " + w);
    expect_pair(C::nanmedian_dim(G(t), 1, false), K::nanmedian_dim(t, 1), 0, "nanmedian_dim " + w);
    expect_pair(C::kthvalue(G(t), 5, 1, false), K::kthvalue(t, 5, 1), 0, "kthvalue " + w);
  }
  // One long row (a single radix sort) and the empty whole-tensor median.
  Tensor row = randint({1 << 20}, 61, 5000, DType::kFloat64).to(DType::kFloat32);
  expect_pair(C::median_dim(G(row), 0, false), K::median_dim(row, 0), 0, "long median");
  expect_matches(C::nanmedian(G(Tensor::zeros({0}))), K::nanmedian(Tensor::zeros({0})), 0);
  EXPECT_THROW(C::kthvalue(G(rand({3, 4}, 1)), 5, 1, false), Error);
  EXPECT_THROW(C::median_dim(G(Tensor::zeros({3, 0})), 1, false), Error);
}

// value_index_backward and median_backward against the CPU kernels: the indices of max/median over
// every dim (keepdim both ways), a 0-d input; the whole-tensor median's grad split over ties and
// over NaNs; bad indices are errors.
TEST_F(Selection, BackwardMatchesTheCpu) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    const Tensor x = randint({6, 7, 3}, 81, 4, DType::kFloat64).to(dt);  // many ties
    for (int64_t dim : {0, 1, 2, -1})
      for (bool keep : {false, true}) {
        const std::string w = absl::StrCat(dtype_name(dt), " dim ", dim, keep ? " keepdim" : "");
        const Tensor idx = K::max_dim(x, dim, keep).second;
        const Tensor g = rand(idx.sizes(), 82, dt, -3, 3);
        expect_matches(C::value_index_backward(G(g), G(idx), x.sizes(), dim, keep),
                       K::value_index_backward(g, idx, x.sizes(), dim, keep), 0, "value_index_backward " + w);
      }
    const Tensor g0 = Tensor::full({}, 2.5, dt);
    expect_matches(C::median_backward(G(g0), G(x), G(K::median(x))), K::median_backward(g0, x, K::median(x)), 0,
                   std::string("median_backward ") + dtype_name(dt));
    const Tensor t = tricky(dt == DType::kBFloat16 ? DType::kFloat32 : dt);
    const Tensor nan = Tensor::full({}, kNaN, t.dtype());
    expect_matches(C::median_backward(G(g0.to(t.dtype())), G(t), G(nan)),
                   K::median_backward(g0.to(t.dtype()), t, nan), 0, "median_backward over NaNs");
  }
  const Tensor s = Tensor::full({}, 4.0, DType::kFloat64), i0 = Tensor::full({}, 0.0, DType::kInt64);
  expect_matches(C::value_index_backward(G(s), G(i0), Shape{}, 0, false), K::value_index_backward(s, i0, Shape{}, 0, false),
                 0, "0-d");
  const Tensor bad = Tensor::from_vector(std::vector<double>{1, 5}, {2}).to(DType::kInt64);
  const Tensor g2 = rand({2}, 83, DType::kFloat64);
  EXPECT_THROW(C::value_index_backward(G(g2), G(bad), Shape{2, 3}, 1, false), Error);
  EXPECT_THROW(K::value_index_backward(G(g2), G(bad), Shape{2, 3}, 1, false), Error);
}

// The distributed radix select's helpers (ops/selection/steps.cc) against the CPU kernels: every
// dtype's keys (NaN, -0.0, infinities), a first digit, a middle digit under per-row prefixes taken
// from the data, the last digit, 13-bit digits (counted in global memory), rows along dim 0 and the
// last dim, one long row; then the occurrence search with NaN and signed zeros as values.
TEST_F(Selection, RadixHistogramAndIndexOfOccurrence) {
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16, DType::kFloat16, DType::kInt64,
                   DType::kInt32, DType::kInt16, DType::kInt8, DType::kUInt8, DType::kBool}) {
    Tensor x = randint({6, 37}, 70, 9, DType::kFloat64);
    if (is_floating(dt)) {
      x = K::sub(x, K::Scalar(4.0));
      double* p = x.data<double>();
      p[3] = kNaN, p[40] = -0.0, p[41] = 0.0, p[77] = kInf, p[100] = -kInf, p[150] = kNaN;
    }
    x = x.to(dt);
    const int width = K::radix_key_bits(dt);
    for (int64_t dim : {0, 1}) {
      const int64_t rows = dim == 0 ? 37 : 6;
      const std::string w = absl::StrCat(dtype_name(dt), " dim ", dim);
      for (int bits : {8, 13, 16}) {  // 13 and 16: counted in global memory; 16 on 16-bit keys: whole
        if (bits > width || (bits == 16 && width != 16)) continue;
        // The first digit (no prefix), then the next one under each row's most common first digit.
        const int shift0 = width - bits;
        const std::vector<uint64_t> none(rows, 0);
        const Tensor h0 = K::radix_histogram(x, dim, none, shift0, bits);
        expect_matches(C::radix_histogram(G(x), dim, none, shift0, bits), h0, 0, "first digit " + w);
        if (shift0 >= bits) {
          std::vector<uint64_t> prefix(rows);
          const int64_t cols = (int64_t{1} << bits) + 1;
          const auto counts = h0.to_vector<int64_t>();
          for (int64_t r = 0; r < rows; ++r)
            prefix[r] = std::max_element(counts.begin() + r * cols, counts.begin() + (r + 1) * cols - 1) -
                        (counts.begin() + r * cols);
          expect_matches(C::radix_histogram(G(x), dim, prefix, shift0 - bits, bits),
                         K::radix_histogram(x, dim, prefix, shift0 - bits, bits), 0, "second digit " + w);
        }
      }
      const std::vector<uint64_t> zero(rows, 0);  // the last digit under the prefix 0
      const int last = std::min(width, 8);
      expect_matches(C::radix_histogram(G(x), dim, zero, 0, last), K::radix_histogram(x, dim, zero, 0, last), 0,
                     "last digit " + w);
      // The occurrence search: each row's values taken from its own elements, occurrences 0 to 3.
      Tensor values = dim == 0 ? x.narrow(0, 2, 1).contiguous() : x.narrow(1, 5, 1).contiguous();
      for (int64_t occ : {0, 1, 2, 3}) {
        const Tensor o = Tensor::full(values.sizes(), static_cast<double>(occ), DType::kInt64);
        expect_matches(C::index_of_occurrence(G(x), dim, G(values), G(o), 100),
                       K::index_of_occurrence(x, dim, values, o, 100), 0, absl::StrCat("occurrence ", occ, " ", w));
      }
    }
  }
  // One long row: several blocks add to one histogram.
  const Tensor row = randint({1 << 20}, 71, 50000, DType::kFloat64).to(DType::kFloat32);
  expect_matches(C::radix_histogram(G(row), 0, {0}, 24, 8), K::radix_histogram(row, 0, {0}, 24, 8), 0, "long row");
  EXPECT_THROW(C::radix_histogram(G(row), 0, {0}, 30, 8), Error);
  EXPECT_THROW(C::radix_histogram(G(row), 0, {0, 1}, 24, 8), Error);
}

using Pooling = CudaTest;

struct PoolCase {
  Shape shape;
  std::vector<int64_t> kernel, stride, padding, dilation;
  bool ceil_mode, count_include_pad;
  std::optional<int64_t> divisor;
};

TEST_F(Pooling, AvgAndMaxForwardAndBackward) {
  const std::vector<PoolCase> cases = {
      {{2, 3, 9, 8}, {3}, {}, {}, {}, false, true, std::nullopt},
      {{2, 3, 9, 8}, {3, 2}, {2, 1}, {1, 1}, {1, 2}, true, false, std::nullopt},
      {{3, 10, 7}, {4, 3}, {3, 2}, {2, 1}, {2, 1}, true, true, std::nullopt},
      {{1, 2, 11, 13}, {2}, {2}, {1}, {}, false, true, 3},
      // Several tiles of the tiled kernels in both dims (pooling_tiles.h; filled enough to be
      // taken: 0.68-0.93 of the slots), the benchmark's window and an uneven one.
      {{2, 2, 63, 130}, {3}, {2}, {1}, {}, false, true, std::nullopt},
      {{1, 3, 100, 62}, {4, 5}, {3, 2}, {2, 2}, {2, 1}, true, false, std::nullopt},
      // A plane over the device's shared memory per block (227 KiB on an H100/H200): max-pool's
      // backward takes the global-atomics kernel instead of a block per plane.
      {{1, 1, 260, 260}, {2}, {2}, {}, {}, false, true, std::nullopt},
  };
  for (DType dt : {DType::kFloat32, DType::kFloat64, DType::kBFloat16}) {
    for (const PoolCase& c : cases) {
      Tensor x = randint(c.shape, 70, 7, DType::kFloat64).to(dt);  // ties for max-pool
      const std::string w = absl::StrCat(dtype_name(dt), " ", shape_str(c.shape));
      const double t = tol(dt) * 10;
      Tensor avg = K::avg_pool(x, 2, c.kernel, c.stride, c.padding, c.ceil_mode,
                               c.count_include_pad, c.divisor);
      expect_matches(C::avg_pool(G(x), 2, c.kernel, c.stride, c.padding, c.ceil_mode,
                                 c.count_include_pad, c.divisor),
                     avg, t, "avg_pool " + w);
      Tensor g = rand(avg.sizes(), 71, dt);
      expect_matches(C::avg_pool_backward(G(g), G(x), 2, c.kernel, c.stride, c.padding, c.ceil_mode,
                                          c.count_include_pad, c.divisor),
                     K::avg_pool_backward(g, x, 2, c.kernel, c.stride, c.padding, c.ceil_mode,
                                          c.count_include_pad, c.divisor),
                     t, "avg_pool_backward " + w);
      auto want =
          K::max_pool_with_indices(x, 2, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode);
      auto got =
          C::max_pool_with_indices(G(x), 2, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode);
      expect_pair(got, want, 0, "max_pool " + w);
      // max_pool's output differs from avg_pool's under dilation: a gradient of its own shape.
      Tensor gm = rand(want.first.sizes(), 72, dt);
      expect_matches(C::max_pool_backward(G(gm), got.second, x.sizes(), 2),
                     K::max_pool_backward(gm, want.second, x.sizes(), 2), t,
                     "max_pool_backward " + w);
    }
  }
  // 1-d and 3-d pooling (each on the kernels' 3-d geometry), forward and backward, against the CPU.
  struct RankCase {
    int dims;
    Shape shape;
    std::vector<int64_t> kernel, stride, padding, dilation;
    bool ceil_mode, count_include_pad;
  };
  const std::vector<RankCase> ranks = {
      {1, {2, 3, 17}, {3}, {2}, {1}, {2}, true, false},
      {1, {4, 11}, {4}, {}, {2}, {}, false, true},
      {1, {2, 3, 600}, {3}, {2}, {1}, {2}, false, true},  // 1-d tiles of 256 outputs
      {3, {2, 2, 5, 6, 7}, {3, 2, 3}, {2, 1, 2}, {1, 1, 1}, {1, 2, 1}, true, true},
      {3, {3, 4, 5, 6}, {2}, {}, {}, {}, false, false},
  };
  for (DType dt : {DType::kFloat32, DType::kFloat64}) {
    for (const RankCase& c : ranks) {
      Tensor x = randint(c.shape, 80, 7, DType::kFloat64).to(dt);  // ties for max-pool
      const std::string w = absl::StrCat(c.dims, "-d ", dtype_name(dt), " ", shape_str(c.shape));
      const double t = tol(dt) * 10;
      Tensor avg = K::avg_pool(x, c.dims, c.kernel, c.stride, c.padding, c.ceil_mode, c.count_include_pad,
                               std::nullopt);
      expect_matches(C::avg_pool(G(x), c.dims, c.kernel, c.stride, c.padding, c.ceil_mode,
                                 c.count_include_pad, std::nullopt),
                     avg, t, "avg_pool " + w);
      Tensor g = rand(avg.sizes(), 81, dt);
      expect_matches(C::avg_pool_backward(G(g), G(x), c.dims, c.kernel, c.stride, c.padding, c.ceil_mode,
                                          c.count_include_pad, std::nullopt),
                     K::avg_pool_backward(g, x, c.dims, c.kernel, c.stride, c.padding, c.ceil_mode,
                                          c.count_include_pad, std::nullopt),
                     t, "avg_pool_backward " + w);
      auto want = K::max_pool_with_indices(x, c.dims, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode);
      auto got = C::max_pool_with_indices(G(x), c.dims, c.kernel, c.stride, c.padding, c.dilation, c.ceil_mode);
      expect_pair(got, want, 0, "max_pool " + w);
      Tensor gm = rand(want.first.sizes(), 82, dt);
      expect_matches(C::max_pool_backward(G(gm), got.second, x.sizes(), c.dims),
                     K::max_pool_backward(gm, want.second, x.sizes(), c.dims), t, "max_pool_backward " + w);
    }
  }
  // The CPU's 3-d checks: padding at most kernel / 2, and avg inputs at least the kernel.
  EXPECT_THROW(C::max_pool_with_indices(G(rand({1, 1, 6, 6, 6}, 3)), 3, {3}, {1}, {2}, {}, false), Error);
  EXPECT_THROW(C::avg_pool(G(rand({1, 1, 2, 6, 6}, 3)), 3, {3}, {1}, {}, false, true, std::nullopt), Error);
  Tensor n = Tensor::from_vector<double>(
      {1, kNaN, 3, kNaN, -kInf, -kInf, -kInf, -kInf, 2, 2, 1, 2, 0, 5, 5, 0}, {1, 1, 4, 4});
  expect_pair(C::max_pool_with_indices(G(n), 2, {2}, {1}, {}, {}, false),
              K::max_pool_with_indices(n, 2, {2}, {1}, {}, {}, false), 0, "max_pool NaN");
  EXPECT_THROW(C::avg_pool(G(rand({2, 3, 8}, 1)), 4, {2}, {}, {}, false, true, std::nullopt),
               Error);  // 4 spatial dims
  Tensor bad = G(Tensor::full({1, 1, 1, 1}, 99, DType::kInt64));
  EXPECT_THROW(C::max_pool_backward(G(rand({1, 1, 1, 1}, 2)), bad, {1, 1, 2, 2}, 2), Error);
}

}  // namespace
}  // namespace dtensor::cuda::testing
