// The packed keys of CUDA cummax / cummin (kernels/cuda/scan_key.h) on the CPU: the flat max-scan
// of row | code | position keys that scan_kernels.cu hands to CUB, run here as a sequential prefix
// max and decoded as the kernel's output writer decodes it (with the reload of NaN and zero), must
// give the CPU kernel's values (bit for bit) and indices (exactly) for every row -- ties, NaN with
// payloads and both signs, both zeros, infinities, several rows in one flat scan, float, double and
// int64. Runs on every machine: no GPU, no CUDA library.
#include "kernels/cuda/scan_key.h"

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/scan.h"

namespace dtensor::kernels::cuda::scan_key {
namespace {

template <typename T>
T nan_with(uint64_t payload, bool negative) {
  Code<T> b = to_bits(std::numeric_limits<T>::quiet_NaN());
  b |= static_cast<Code<T>>(payload & 0xff);
  if (negative) b |= Code<T>(1) << (kCodeBits<T> - 1);
  return from_bits<T>(b);
}

// Values of a [rows, n] tensor with ties, both zeros, infinities and NaN (payloads, both signs)
// at positions that move from row to row; small integers (ties) for int64.
template <typename T>
std::vector<T> tricky(int64_t rows, int64_t n, uint64_t seed) {
  std::vector<T> v(rows * n);
  uint64_t x = seed * 6364136223846793005ull + 1;
  for (int64_t i = 0; i < rows * n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const uint64_t r = x >> 33;
    if constexpr (std::is_floating_point_v<T>) {
      switch (r % 16) {
        case 0: v[i] = nan_with<T>(r >> 8, (r >> 4) & 1); break;
        case 1: v[i] = T(-0.0); break;
        case 2: v[i] = T(0.0); break;
        case 3: v[i] = std::numeric_limits<T>::infinity(); break;
        case 4: v[i] = -std::numeric_limits<T>::infinity(); break;
        default: v[i] = static_cast<T>(static_cast<int64_t>((r >> 4) % 9) - 4) / T(2); break;  // ties
      }
    } else {
      v[i] = static_cast<T>(static_cast<int64_t>((r >> 4) % 7) - 3);
      if (r % 16 == 0) v[i] = std::numeric_limits<int64_t>::min();
      if (r % 16 == 1) v[i] = std::numeric_limits<int64_t>::max();
    }
  }
  if constexpr (std::is_floating_point_v<T>) {
    if (n >= 3) {  // NaN first, last and in the middle of row 0
      v[0] = nan_with<T>(3, true);
      v[n - 1] = nan_with<T>(5, false);
      v[n / 2] = nan_with<T>(7, false);
    }
  }
  return v;
}

// What scan_kernels.cu computes: keys (MakeKey), one flat inclusive max-scan, decode (WriteKey).
template <typename T, typename Key>
std::pair<std::vector<T>, std::vector<int64_t>> key_scan(const std::vector<T>& x, int64_t rows, int64_t n,
                                                         bool is_max) {
  const Layout<T, Key> layout(n);
  std::vector<T> values(x.size());
  std::vector<int64_t> indices(x.size());
  Key run = 0;
  for (int64_t i = 0; i < rows * n; ++i) {
    const int64_t row = i / n, pos = i % n;
    const Key k = layout.pack(static_cast<uint64_t>(row), code_of<T>(x[i], is_max), static_cast<uint64_t>(pos));
    run = i == 0 || k > run ? k : run;  // cuda::maximum
    const Code<T> code = layout.code(run);
    T v = value_of<T>(code, is_max);
    if (needs_reload<T>(code, is_max)) v = x[static_cast<int64_t>(layout.row(run)) * n + layout.pos(run)];
    values[i] = v;
    indices[i] = static_cast<int64_t>(layout.pos(run));
  }
  return {values, indices};
}

template <typename T, typename Key>
void expect_like_cpu(int64_t rows, int64_t n, uint64_t seed, const std::string& what) {
  const std::vector<T> x = tricky<T>(rows, n, seed);
  const Tensor t = Tensor::from_vector(x, {rows, n});
  for (bool is_max : {true, false}) {
    const auto [want_v, want_i] = is_max ? kernels::cummax(t, 1) : kernels::cummin(t, 1);
    const auto [got_v, got_i] = key_scan<T, Key>(x, rows, n, is_max);
    const std::vector<T> wv = want_v.to_vector<T>();
    const std::vector<int64_t> wi = want_i.to_vector<int64_t>();
    for (int64_t i = 0; i < rows * n; ++i) {
      ASSERT_EQ(got_i[i], wi[i]) << what << (is_max ? " cummax" : " cummin") << " index at " << i / n << ", "
                                 << i % n;
      ASSERT_EQ(to_bits(got_v[i]), to_bits(wv[i]))
          << what << (is_max ? " cummax" : " cummin") << " value bits at " << i / n << ", " << i % n;
    }
  }
}

TEST(ScanKey, FlatMaxScanOfPackedKeysIsTheCpuCummaxAndCummin) {
  for (auto [rows, n] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {1, 2}, {1, 1000}, {5, 1}, {7, 13},
                                                                 {64, 33}, {3, 4096}}) {
    const std::string w = std::to_string(rows) + "x" + std::to_string(n);
    ASSERT_TRUE(fits_64<float>(rows, n)) << w;
    expect_like_cpu<float, uint64_t>(rows, n, rows * 31 + n, "float, 64-bit keys, " + w);
    expect_like_cpu<float, u128>(rows, n, rows * 37 + n, "float, 128-bit keys, " + w);
    expect_like_cpu<double, u128>(rows, n, rows * 41 + n, "double, " + w);
    expect_like_cpu<int64_t, u128>(rows, n, rows * 43 + n, "int64, " + w);
  }
}

// Codes order values as the CPU rule compares them; value_of inverts code_of except where
// needs_reload says so.
template <typename T>
void expect_codes_order() {
  const std::vector<T> v = tricky<T>(1, 4000, 9);
  for (bool is_max : {true, false}) {
    for (size_t a = 0; a + 1 < v.size(); ++a) {
      const T e = v[a + 1], run = v[a];  // does e (later) replace run?
      bool take = is_max ? e >= run : e <= run;
      if constexpr (std::is_floating_point_v<T>) take = e != e || (run == run && take);
      ASSERT_EQ(code_of<T>(e, is_max) >= code_of<T>(run, is_max), take) << a;
      const Code<T> c = code_of<T>(v[a], is_max);
      if (!needs_reload<T>(c, is_max)) {
        ASSERT_EQ(to_bits(value_of<T>(c, is_max)), to_bits(v[a])) << a;
      }
    }
  }
}

TEST(ScanKey, CodesOrderLikeTheCpuRule) {
  expect_codes_order<float>();
  expect_codes_order<double>();
  expect_codes_order<int64_t>();
}

// The kernel takes 64-bit keys for float whenever rows * n < 2^31 (scan_kernels.cu's KeyOf):
// row and position then fit in 32 bits, and the fields come back at the extremes.
TEST(ScanKey, SixtyFourBitKeysHoldEveryShapeOfTheThirtyTwoBitPath) {
  const int64_t limit = int64_t{1} << 31;
  for (int64_t rows = 1; rows < limit; rows = rows * 2 + (rows & 1)) {
    for (int64_t r : {rows, rows + 1}) {
      const int64_t n = (limit - 1) / r;
      if (n < 1) continue;
      ASSERT_TRUE(fits_64<float>(r, n)) << r << " x " << n;
      const Layout<float, uint64_t> layout(n);
      const uint64_t k = layout.pack(static_cast<uint64_t>(r - 1), ~uint32_t{0}, static_cast<uint64_t>(n - 1));
      EXPECT_EQ(layout.row(k), static_cast<uint64_t>(r - 1)) << r << " x " << n;
      EXPECT_EQ(layout.code(k), ~uint32_t{0}) << r << " x " << n;
      EXPECT_EQ(layout.pos(k), static_cast<uint64_t>(n - 1)) << r << " x " << n;
    }
  }
  EXPECT_FALSE(fits_64<float>(int64_t{1} << 16, int64_t{1} << 16 | 1));
  EXPECT_FALSE(fits_64<double>(2, 1));
  // A row shift of the key's full width (undefined) is refused even with no row bits.
  EXPECT_FALSE(fits_64<double>(1, 1));
  EXPECT_FALSE(fits_64<float>(1, int64_t{1} << 32 | 1));
  EXPECT_TRUE(fits_64<float>(1, int64_t{1} << 31));
  const Layout<double, u128> wide(int64_t{1} << 40);
  const u128 k = wide.pack((uint64_t{1} << 22) - 1, ~uint64_t{0}, (uint64_t{1} << 40) - 1);
  EXPECT_EQ(wide.row(k), (uint64_t{1} << 22) - 1);
  EXPECT_EQ(wide.code(k), ~uint64_t{0});
  EXPECT_EQ(wide.pos(k), (uint64_t{1} << 40) - 1);
}

}  // namespace
}  // namespace dtensor::kernels::cuda::scan_key
