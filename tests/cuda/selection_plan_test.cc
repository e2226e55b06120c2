// The CUDA median kernels' decisions (kernels/cuda/selection_plan.h) on the CPU, without a GPU:
// the keys' order, the splitters, the sub-buckets, the rank arithmetic and fallback conditions,
// and host emulations of the kernels' phases (the whole-tensor sample / pass / finish of
// selection_kernels.cu and select_rows_kernel's radix select) checked against the CPU kernels.
#include "kernels/cuda/selection_plan.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <vector>

#include "dtensor/core/tensor.h"
#include "gtest/gtest.h"
#include "kernels/cpu/kernels.h"
#include "tests/cuda/median_inputs.h"

namespace dtensor::kernels::cuda::plan {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

uint32_t bits(float v) {
  uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}
float from_bits(uint32_t b) {
  float v;
  std::memcpy(&v, &b, 4);
  return v;
}
uint32_t key(float v) { return key_of_float_bits(bits(v)); }
uint64_t key(double v) {
  uint64_t b;
  std::memcpy(&b, &v, 8);
  return key_of_double_bits(b);
}

TEST(SelectionPlan, KeysOrderLikeTheCpuComparison) {
  const std::vector<float> v = {-kInf, -3e38f, -1.5f, -1e-45f, -0.0f, 0.0f, 1e-45f, 1.0f, 2.5f, 3e38f, kInf};
  for (size_t i = 0; i < v.size(); ++i)
    for (size_t j = 0; j < v.size(); ++j) {
      EXPECT_EQ(key(v[i]) < key(v[j]), v[i] < v[j]) << v[i] << " " << v[j];
      EXPECT_EQ(key(static_cast<double>(v[i])) < key(static_cast<double>(v[j])), v[i] < v[j]);
    }
  for (float e : v) {
    EXPECT_LT(key(e), key(kNaN));
    EXPECT_LT(key(static_cast<double>(e)), key(static_cast<double>(kNaN)));
    if (e != 0) {
      EXPECT_EQ(float_bits_of_key(key(e)), bits(e)) << e;  // the value back, bit for bit
    }
  }
  EXPECT_EQ(key(-0.0f), kFloatZeroKey);
  EXPECT_EQ(key(0.0f), kFloatZeroKey);
  EXPECT_EQ(float_bits_of_key(kFloatZeroKey), 0u);
  EXPECT_EQ(key(-kNaN), key(kNaN));  // every NaN one key
  EXPECT_EQ(key(-0.0), kDoubleZeroKey);
}

TEST(SelectionPlan, DigitsCoverTheKey) {
  for (int bits_ : {32, 64}) {
    int covered = 0;
    for (int p = 0; p < digit_passes(bits_); ++p) {
      EXPECT_LE(digit_width(bits_, p), 11);
      EXPECT_EQ(digit_shift(bits_, p), bits_ - covered - digit_width(bits_, p));
      covered += digit_width(bits_, p);
    }
    EXPECT_EQ(covered, bits_);
    EXPECT_EQ(digit_shift(bits_, digit_passes(bits_) - 1), 0);
  }
  EXPECT_EQ(digit_passes(32), 3);
  EXPECT_EQ(digit_passes(64), 6);
}

TEST(SelectionPlan, RankArithmetic) {
  // median: lower median, the first NaN when there is one; nanmedian: among the numbers.
  EXPECT_EQ(row_rank(0, 0, 4, 0), 1);
  EXPECT_EQ(row_rank(0, 0, 5, 0), 2);
  EXPECT_EQ(row_rank(0, 0, 5, 2), 3);
  EXPECT_EQ(row_rank(1, 0, 5, 2), 1);
  EXPECT_EQ(row_rank(1, 0, 3, 3), 0);
  EXPECT_EQ(row_rank(2, 4, 9, 0), 3);
  // resolve: NaN answers, overflow before miss, the rank inside the bracket.
  EXPECT_EQ(resolve(false, 100, 1, 0, 0, 10).outcome, Outcome::kNan);
  EXPECT_EQ(resolve(true, 100, 100, 0, 0, 10).outcome, Outcome::kNan);
  EXPECT_EQ(resolve(true, 100, 1, 40, 20, 30).outcome, Outcome::kInside);
  EXPECT_EQ(resolve(true, 100, 1, 40, 20, 30).rank, 49 - 40);
  EXPECT_EQ(resolve(false, 100, 0, 40, 20, 10).outcome, Outcome::kOverflow);
  EXPECT_EQ(resolve(false, 100, 0, 50, 20, 30).outcome, Outcome::kMiss);   // rank 49 below the bracket
  EXPECT_EQ(resolve(false, 100, 0, 29, 20, 30).outcome, Outcome::kMiss);   // 49 == below + inside
  EXPECT_EQ(resolve(false, 100, 0, 30, 20, 30).outcome, Outcome::kInside);  // the last key inside
  EXPECT_EQ(resolve(false, 100, 0, 30, 20, 30).rank, 19);
  EXPECT_EQ(resolve(false, 100, 0, 49, 1, 30).rank, 0);  // the first key inside
  const unsigned hist[4] = {2, 0, 3, 1};
  for (int64_t r = 0; r < 6; ++r) {
    int64_t rem = r;
    const int b = bin_of_rank(hist, 4, rem);
    const int want = r < 2 ? 0 : r < 5 ? 2 : 3;
    EXPECT_EQ(b, want) << r;
    EXPECT_EQ(rem, r < 2 ? r : r < 5 ? r - 2 : 0);
  }
}

TEST(SelectionPlan, SplittersAndSubBuckets) {
  std::vector<uint32_t> sorted(kSample);
  for (int64_t i = 0; i < kSample; ++i) sorted[i] = static_cast<uint32_t>(1000 + 3 * i);
  const uint32_t max_number = 0xfffffffeu;
  // All numbers: the splitters are the sample ranks c - kMargin ... c + kMargin.
  const int64_t c = (kSample - 1) / 2;
  for (int j = 0; j <= kBuckets; ++j)
    EXPECT_EQ(splitter(sorted.data(), kSample, j, max_number), sorted[c - kMargin + j]);
  // Few numbers (the rest NaN): the ends of the key range stand in.
  EXPECT_EQ(splitter(sorted.data(), 11, 0, max_number), 0u);
  EXPECT_EQ(splitter(sorted.data(), 11, kBuckets, max_number), max_number);
  EXPECT_EQ(splitter(sorted.data(), 11, kMargin, max_number), sorted[5]);
  EXPECT_EQ(splitter(sorted.data(), 0, kMargin, max_number), max_number);
  // bucket_of: the greatest j < kBuckets with t[j] <= key, as a linear search finds it, also with
  // repeated splitters; in_bucket agrees.
  std::mt19937 gen(5);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<uint32_t> t(kBuckets + 1);
    for (auto& e : t) e = gen() % (trial < 10 ? 50 : 100000);
    std::sort(t.begin(), t.end());
    for (int q = 0; q < 2000; ++q) {
      const uint32_t k = t[0] + gen() % (t[kBuckets] - t[0] + 1);
      int want = 0;
      for (int j = 0; j < kBuckets; ++j)
        if (t[j] <= k) want = j;
      const int b = bucket_of(t.data(), k);
      ASSERT_EQ(b, want) << k;
      for (int j = 0; j < kBuckets; ++j) ASSERT_EQ(in_bucket(t.data(), j, k), j == b) << k << " " << j;
    }
  }
  EXPECT_EQ(sample_position(0, kSample), 0);
  EXPECT_EQ(sample_position(kSample - 1, 10 * kSample + 7), (kSample - 1) * 10 + 5);
  EXPECT_GT(inside_capacity(1 << 24), (int64_t{1} << 24) * 2 * kMargin / kSample);
}

// The pass's raw keys classify every value as the keys do, for brackets at the special keys.
TEST(SelectionPlan, RawKeysClassifyLikeKeys) {
  std::vector<float> v = {-kInf, -3e38f, -1.5f, -1e-45f, -0.0f, 0.0f, 1e-45f, 1.0f, 3e38f, kInf, kNaN, -kNaN,
                          from_bits(0x7f800001u), from_bits(0xff800001u), from_bits(0x7fffffffu), from_bits(0xffffffffu)};
  std::mt19937 gen(8);
  for (int i = 0; i < 200; ++i) v.push_back(from_bits(gen()));
  // The bracket's ends as the splitters make them: lo the least key or a number's, hi a number's
  // or the greatest number key's stand-in.
  std::vector<uint32_t> numbers = {0x007fffffu, 0x7ffffffeu, 0x80000000u, 0x80000001u, 0xff800000u};
  for (float e : v)
    if (!std::isnan(e)) numbers.push_back(key(e));
  std::vector<uint32_t> los = numbers, his = numbers;
  los.push_back(0u);
  his.push_back(0xfffffffeu);
  for (uint32_t lo : los)
    for (uint32_t hi : his) {
      if (hi < lo) continue;
      const RawBracket<uint32_t> br = raw_bracket(lo, hi, true);
      for (float e : v) {
        const uint32_t k = key(e), raw = raw_key_of_float_bits(bits(e));
        const bool nan = std::isnan(e);
        ASSERT_EQ(raw_is_nan(raw), nan) << e;
        const bool in_raw = static_cast<uint32_t>(raw - br.lo) <= br.span;
        ASSERT_EQ(in_raw, !nan && lo <= k && k <= hi) << e << " " << lo << " " << hi;
        ASSERT_EQ(!nan && raw < br.lo, !nan && k < lo) << e << " " << lo << " " << hi;
        if (in_raw) {
          ASSERT_EQ(key_of_raw(raw, true), k) << e;
        }
      }
    }
  // float64 and the integer keys (no fix-up).
  for (double d : {-static_cast<double>(kInf), -2.0, -0.0, 0.0, 3.0, static_cast<double>(kInf)}) {
    uint64_t b;
    std::memcpy(&b, &d, 8);
    const uint64_t raw = raw_key_of_double_bits(b);
    EXPECT_FALSE(raw_is_nan(raw));
    EXPECT_EQ(key_of_raw(raw, true), key(d)) << d;
  }
  EXPECT_TRUE(raw_is_nan(raw_key_of_double_bits(0xfff8000000000000ull)));
  EXPECT_EQ(raw_bracket<uint32_t>(0, 0xffffffffu, false).span, 0xffffffffu);
  EXPECT_EQ(key_of_raw<uint32_t>(0x7fffffffu, false), 0x7fffffffu);
}

// ---- A host emulation of the whole-tensor kernels (float32 keys), phase by phase.
struct WholeRun {
  Outcome outcome = Outcome::kMiss;
  bool fallback = true;     // the exact path answers
  bool overflow2 = false;   // the rank's sub-bucket did not fit buf2
  bool zero_sign = false;   // a zero answer with -0.0 in the input
  float value = 0;
};

WholeRun emulate_whole(const std::vector<float>& x, bool ignore_nan) {
  const int64_t n = static_cast<int64_t>(x.size());
  WholeRun run;
  // whole_sample_kernel
  std::vector<uint32_t> sorted(kSample);
  for (int64_t i = 0; i < kSample; ++i) sorted[i] = key(x[sample_position(i, n)]);
  std::sort(sorted.begin(), sorted.end());
  const int64_t numbers = std::find(sorted.begin(), sorted.end(), 0xffffffffu) - sorted.begin();
  std::vector<uint32_t> t(kBuckets + 1);
  for (int j = 0; j <= kBuckets; ++j) t[j] = splitter(sorted.data(), numbers, j, 0xfffffffeu);
  // whole_pass_kernel
  const int64_t cap1 = inside_capacity(n), cap2 = bucket_capacity(n);
  int64_t below = 0, nan = 0, first_nan = -1, inside = 0;
  bool negative_zero = false;
  std::vector<unsigned> hist(kBuckets, 0);
  std::vector<uint32_t> buf1;
  // As whole_pass_kernel: raw keys against the raw bracket, the fix-up on the keys inside.
  const RawBracket<uint32_t> br = raw_bracket(t[0], t[kBuckets], true);
  for (int64_t j = 0; j < n; ++j) {
    const uint32_t raw = raw_key_of_float_bits(bits(x[j]));
    const bool is_nan = raw_is_nan(raw);
    if (raw < br.lo && !is_nan) ++below;
    if (static_cast<uint32_t>(raw - br.lo) <= br.span) {
      const uint32_t k = key_of_raw(raw, true);
      if (k != raw) negative_zero = true;
      ++hist[bucket_of(t.data(), k)];
      if (inside++ < cap1) buf1.push_back(k);
    }
    if (is_nan && nan++ == 0) first_nan = j;
  }
  // whole_finish_kernel
  const Resolved res = resolve(ignore_nan, n, nan, below, inside, cap1);
  run.outcome = res.outcome;
  if (res.outcome == Outcome::kNan) {
    run.fallback = false;
    run.value = x[first_nan];
    return run;
  }
  if (res.outcome != Outcome::kInside) return run;
  int64_t rem = res.rank;
  const int b = bin_of_rank(hist.data(), kBuckets, rem);
  if (hist[b] > cap2) {
    run.overflow2 = true;
    return run;
  }
  std::vector<uint32_t> buf2;
  for (uint32_t k : buf1)
    if (in_bucket(t.data(), b, k)) buf2.push_back(k);
  EXPECT_EQ(static_cast<int64_t>(buf2.size()), hist[b]);
  uint32_t prefix = 0;
  for (int p = 0; p < digit_passes(32); ++p) {
    const int shift = digit_shift(32, p), high = shift + digit_width(32, p);
    std::vector<unsigned> h(kDigitBins, 0);
    for (uint32_t k : buf2)
      if (p == 0 || (k >> high) == (prefix >> high)) ++h[(k >> shift) & ((1u << digit_width(32, p)) - 1)];
    prefix |= static_cast<uint32_t>(bin_of_rank(h.data(), kDigitBins, rem)) << shift;
  }
  if (prefix == kFloatZeroKey && negative_zero) {
    run.zero_sign = true;
    return run;
  }
  run.fallback = false;
  run.value = from_bits(float_bits_of_key(prefix));
  return run;
}

// The CPU kernel's whole-tensor median (median / nanmedian) as float.
float cpu_median(const std::vector<float>& x, bool ignore_nan) {
  const Tensor t = Tensor::from_vector(x, {static_cast<int64_t>(x.size())});
  return (ignore_nan ? kernels::nanmedian(t) : kernels::median(t)).to_vector<float>()[0];
}

void expect_same(float got, float want, const char* what) {
  if (std::isnan(want)) {
    EXPECT_TRUE(std::isnan(got)) << what << ": " << got;
  } else {
    EXPECT_EQ(bits(got), bits(want)) << what << ": " << got << " vs " << want;  // the zero's sign too
  }
}

std::vector<float> uniform(int64_t n, uint32_t seed, int distinct = 0) {
  std::mt19937 gen(seed);
  std::vector<float> x(n);
  for (auto& e : x)
    e = distinct > 0 ? static_cast<float>(gen() % distinct) : std::uniform_real_distribution<float>(-1, 1)(gen);
  return x;
}

TEST(SelectionPlan, WholeEmulationHitsTheBracket) {
  for (int64_t n : {kMinWhole, kMinWhole + 1, int64_t{1} << 20, (int64_t{1} << 20) + 4095}) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      const std::vector<float> x = uniform(n, seed);
      for (bool ignore_nan : {false, true}) {
        const WholeRun r = emulate_whole(x, ignore_nan);
        EXPECT_EQ(r.outcome, Outcome::kInside) << n;
        ASSERT_FALSE(r.fallback) << n;
        expect_same(r.value, cpu_median(x, ignore_nan), "uniform");
      }
    }
  }
  // Sorted and reversed input: the strided sample is the exact quantiles.
  std::vector<float> x = uniform(1 << 18, 9);
  std::sort(x.begin(), x.end());
  WholeRun r = emulate_whole(x, false);
  ASSERT_FALSE(r.fallback);
  expect_same(r.value, cpu_median(x, false), "sorted");
  std::reverse(x.begin(), x.end());
  r = emulate_whole(x, false);
  ASSERT_FALSE(r.fallback);
  expect_same(r.value, cpu_median(x, false), "reversed");
  // Ties (1000 distinct values over 2^18), +-inf among the numbers.
  x = uniform(1 << 18, 10, 1000);
  for (int i = 0; i < 1000; ++i) x[i * 7] = i % 2 ? kInf : -kInf;
  r = emulate_whole(x, false);
  ASSERT_FALSE(r.fallback);
  expect_same(r.value, cpu_median(x, false), "ties and infinities");
}

TEST(SelectionPlan, WholeEmulationNaN) {
  std::vector<float> x = uniform(1 << 17, 11);
  x[70001] = -kNaN;
  x[5] = kNaN;
  WholeRun r = emulate_whole(x, false);  // median: the first NaN
  EXPECT_EQ(r.outcome, Outcome::kNan);
  EXPECT_EQ(bits(r.value), bits(x[5]));
  expect_same(r.value, cpu_median(x, false), "median NaN");
  r = emulate_whole(x, true);  // nanmedian: among the numbers
  EXPECT_EQ(r.outcome, Outcome::kInside);
  expect_same(r.value, cpu_median(x, true), "nanmedian NaN");
  // A third of the input NaN (the sample sees them): nanmedian still brackets the numbers.
  for (size_t i = 0; i < x.size(); i += 3) x[i] = kNaN;
  r = emulate_whole(x, true);
  ASSERT_FALSE(r.fallback);
  expect_same(r.value, cpu_median(x, true), "nanmedian third NaN");
  // All NaN: the first NaN either way.
  std::fill(x.begin(), x.end(), kNaN);
  for (bool ignore_nan : {false, true}) {
    r = emulate_whole(x, ignore_nan);
    EXPECT_EQ(r.outcome, Outcome::kNan);
    expect_same(r.value, cpu_median(x, ignore_nan), "all NaN");
  }
}

TEST(SelectionPlan, WholeEmulationFallsBack) {
  // All equal: every element is inside the bracket [v, v]: an overflow.
  std::vector<float> x(1 << 17, 2.5f);
  EXPECT_EQ(emulate_whole(x, false).outcome, Outcome::kOverflow);
  // Two values: the bracket is one of them and holds half the input: an overflow.
  x = uniform(1 << 17, 12, 2);
  EXPECT_EQ(emulate_whole(x, false).outcome, Outcome::kOverflow);
  // The sampled positions (one a stride) hold 0, the rest is larger: the bracket [0, 0] misses.
  const int64_t n = 1 << 18, stride = n / kSample;
  x.assign(n, 0);
  for (int64_t j = 0; j < n; ++j) x[j] = j % stride == stride / 2 ? 0.0f : 1.0f + static_cast<float>(j);
  WholeRun r = emulate_whole(x, false);
  EXPECT_EQ(r.outcome, Outcome::kMiss);
  EXPECT_TRUE(r.fallback);
  // The median is zero and a -0.0 is in the input: the sign needs the positions.
  x = uniform(1 << 17, 13);
  for (size_t i = 0; i < x.size(); i += 2) x[i] = i % 4 ? 0.0f : -0.0f;
  r = emulate_whole(x, false);
  EXPECT_TRUE(r.fallback);
  EXPECT_TRUE(r.zero_sign || r.outcome == Outcome::kOverflow);
  // Zeros without -0.0 answer on the fast path.
  for (size_t i = 0; i < x.size(); i += 2) x[i] = 0.0f;
  x[1] = x[3] = 0.0f;  // a few more, so that the lower median is a zero
  r = emulate_whole(x, false);
  if (!r.fallback) expect_same(r.value, cpu_median(x, false), "zeros");
  // -0.0 present but the median not zero: the fast path answers.
  x = uniform(1 << 17, 14);
  x[17] = -0.0f;
  r = emulate_whole(x, false);
  ASSERT_FALSE(r.fallback);
  expect_same(r.value, cpu_median(x, false), "-0.0 elsewhere");
}


// The finish kernel's zero check: the rank lands on a zero inside the bracket (no overflow of
// either buffer), so only the -0.0 flag keeps the fast path from answering +0.0.
TEST(SelectionPlan, WholeEmulationZeroMedianSign) {
  for (int zeros : {0, 1, 2}) {
    const std::vector<float> x = ::dtensor::cuda::testing::zero_median_input<float>(zeros);
    const WholeRun r = emulate_whole(x, false);
    ASSERT_EQ(r.outcome, Outcome::kInside) << zeros;
    EXPECT_FALSE(r.overflow2) << zeros;
    EXPECT_EQ(cpu_median(x, false), 0.0f);
    // The exact path's answer: the stable (value, index) order's element at the rank, as
    // K::median_dim picks it (K::median's nth_element may leave either zero there).
    const float stable =
        kernels::median_dim(Tensor::from_vector(x, {static_cast<int64_t>(x.size())}), 0).first.to_vector<float>()[0];
    if (zeros == 0) {
      ASSERT_FALSE(r.fallback);
      expect_same(r.value, stable, "+0.0 only");
    } else {
      EXPECT_TRUE(r.zero_sign) << zeros;
      EXPECT_TRUE(r.fallback) << zeros;
      EXPECT_EQ(bits(stable), 0x80000000u) << zeros;  // what the exact path gives: not the fast path's +0.0
    }
  }
}

// ---- A host emulation of select_rows_kernel: (value, index) of one row.
std::pair<float, int64_t> emulate_row(const std::vector<float>& row, int kind, int64_t k) {
  const int n = static_cast<int>(row.size());
  std::vector<uint32_t> keys(n);
  int64_t nan = 0;
  for (int j = 0; j < n; ++j) {
    keys[j] = key(row[j]);
    nan += keys[j] == 0xffffffffu;
  }
  int64_t rem = row_rank(kind, k, n, nan);
  uint32_t prefix = 0;
  int shift = 32;
  int64_t count = n, located = -1;
  std::vector<int> where(kDigitBins, -1);
  for (int p = 0; p < digit_passes(32); ++p) {
    if (p > 0 && count == 1) break;  // pass 0 always runs (fused with the load)
    const int high = shift;
    shift = digit_shift(32, p);
    std::vector<unsigned> h(kDigitBins, 0);
    for (int j = 0; j < n; ++j)
      if (p == 0 || (keys[j] >> high) == (prefix >> high)) {
        const uint32_t d = (keys[j] >> shift) & ((1u << digit_width(32, p)) - 1);
        ++h[d];
        if (p > 0) where[d] = j;  // passes after the first note a position per bin
      }
    const int b = bin_of_rank(h.data(), kDigitBins, rem);
    count = h[b];
    prefix |= static_cast<uint32_t>(b) << shift;
    if (p > 0 && count == 1) located = where[b];
  }
  int64_t found = -1;
  if (count == 1 && located >= 0) {
    found = located;
  } else if (count == 1) {
    for (int j = 0; j < n; ++j)
      if ((keys[j] >> shift) == (prefix >> shift)) found = j;
  } else {
    for (int j = 0; j < n && found < 0; ++j)
      if (keys[j] == prefix && rem-- == 0) found = j;
  }
  return {row[found], found};
}

TEST(SelectionPlan, RowEmulationMatchesTheCpuKernels) {
  std::mt19937 gen(21);
  for (int n : {1, 2, 5, 256, 257, 4096, 10240}) {
    for (int variant = 0; variant < 5; ++variant) {
      std::vector<float> row = uniform(n, gen(), variant == 1 ? 3 : variant == 2 ? 1 : 0);
      if (variant == 3)
        for (int j = 0; j < n; j += 3) row[j] = j % 2 ? kNaN : -0.0f;
      if (variant == 4)
        for (int j = 0; j < n; j += 5) row[j] = j % 2 ? kInf : 0.0f;
      const Tensor t = Tensor::from_vector(row, {1, n});
      const auto check = [&](int kind, int64_t k, const std::pair<Tensor, Tensor>& want) {
        const auto [v, i] = emulate_row(row, kind, k);
        const float wv = want.first.to_vector<float>()[0];
        const int64_t wi = want.second.to_vector<int64_t>()[0];
        EXPECT_EQ(i, wi) << "n " << n << " variant " << variant << " kind " << kind << " k " << k;
        if (std::isnan(wv)) {
          EXPECT_TRUE(std::isnan(v));
        } else {
          EXPECT_EQ(bits(v), bits(wv));
        }
      };
      check(0, 0, kernels::median_dim(t, 1));
      check(1, 0, kernels::nanmedian_dim(t, 1));
      for (int64_t k : {int64_t{1}, int64_t{(n + 1) / 2}, int64_t{n}}) check(2, k, kernels::kthvalue(t, k, 1));
    }
  }
}

}  // namespace
}  // namespace dtensor::kernels::cuda::plan
