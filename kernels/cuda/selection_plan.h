// Internal to //kernels/cuda: the decisions of the CUDA median / kthvalue kernels
// (selection_kernels.cu) as plain functions, compiled both by nvcc (device and host) and by the
// host compiler, so tests/cuda/selection_plan_test.cc checks them on machines without a GPU.
//
// Keys: every element becomes an unsigned key that orders like kernels/cpu/selection.h compares
// (numbers ascending, -0 == +0, every NaN one key above every number); 16-bit floats go through
// float (32-bit keys), float64 / int64 have 64-bit keys.
//
// Whole-tensor median (select_whole in selection_kernels.cu), reading the input about once:
//  1. sample kSample keys at fixed strided positions, sort them (one block);
//  2. the bracket: the sample keys kMargin ranks either side of the sample's median (the ends of
//     the key range where that runs off the sample) bound kBuckets sub-buckets, one per sample gap;
//  3. one pass over the input counts NaNs (and the first NaN's position), the keys below the
//     bracket, a histogram of the sub-buckets, and copies the keys inside it to a buffer;
//  4. resolve: the median's rank falls inside the bracket (else: a miss), the buffer held every key
//     inside (else: an overflow), the sub-bucket holding the rank fits the second buffer; its keys
//     are copied there and one block selects the rank among them (11-bit digits).
// A miss, an overflow, a full second buffer, or an answer of zero with a -0.0 in the input (the
// element the stable order puts at the rank decides the zero's sign) sends the call to the exact
// path (the radix sort), so adversarial data (all equal, few distinct values, NaN, +-inf, signed
// zeros) is never answered wrong; sampling decides only the speed.
//
// Rows in shared memory (select_rows_kernel): a radix select with 11-bit digits first (3 passes for
// 32-bit keys, 6 for 64-bit instead of 4 and 8 with 8-bit digits), the first fused with the load.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define DT_PLAN_FN __host__ __device__ constexpr
#else
#define DT_PLAN_FN constexpr
#endif

namespace dtensor::kernels::cuda::plan {

// ---- Keys (the bit patterns of kernels/cuda/selection_kernels.cu's key_of).
DT_PLAN_FN uint32_t key_of_float_bits(uint32_t b) {
  // Negative numbers flip every bit, the others the sign bit; -0.0 takes +0.0's key, NaN the top.
  const uint32_t k =
      b == 0x80000000u ? 0x80000000u : b ^ (static_cast<uint32_t>(static_cast<int32_t>(b) >> 31) | 0x80000000u);
  return (b & 0x7fffffffu) > 0x7f800000u ? 0xffffffffu : k;
}
DT_PLAN_FN uint64_t key_of_double_bits(uint64_t b) {
  if ((b & 0x7fffffffffffffffull) > 0x7ff0000000000000ull) return ~uint64_t{0};
  if (b == 0x8000000000000000ull) b = 0;
  return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
}
// The bits of the number a key stands for (+0.0 for the zero key; not for the NaN key).
DT_PLAN_FN uint32_t float_bits_of_key(uint32_t k) { return (k >> 31) ? (k & 0x7fffffffu) : ~k; }
DT_PLAN_FN uint64_t double_bits_of_key(uint64_t k) {
  return (k >> 63) ? (k & 0x7fffffffffffffffull) : ~k;
}
constexpr uint32_t kFloatZeroKey = 0x80000000u;
constexpr uint64_t kDoubleZeroKey = 0x8000000000000000ull;

// ---- Raw keys, for the whole-tensor pass's hot loop: the key without its two fix-ups (2
// instructions where the key takes 7): -0.0 lands one below +0.0's key (where no number's key
// lies) and a NaN outside the keys of -inf .. +inf (a negative NaN below, a positive one above).
// Integer keys need no fix-up: their raw key is the key.
DT_PLAN_FN uint32_t raw_key_of_float_bits(uint32_t b) {
  return b ^ (static_cast<uint32_t>(static_cast<int32_t>(b) >> 31) | 0x80000000u);
}
DT_PLAN_FN uint64_t raw_key_of_double_bits(uint64_t b) {
  return b ^ (static_cast<uint64_t>(static_cast<int64_t>(b) >> 63) | 0x8000000000000000ull);
}
template <typename K>
struct FloatKeys;  // the keys of -inf, +inf and zero
template <>
struct FloatKeys<uint32_t> {
  static constexpr uint32_t neg_inf = 0x007fffffu, pos_inf = 0xff800000u, zero = 0x80000000u;
};
template <>
struct FloatKeys<uint64_t> {
  static constexpr uint64_t neg_inf = 0x000fffffffffffffull, pos_inf = 0xfff0000000000000ull,
                            zero = 0x8000000000000000ull;
};
// Whether a floating raw key is a NaN's.
template <typename K>
DT_PLAN_FN bool raw_is_nan(K raw) {
  return static_cast<K>(raw - FloatKeys<K>::neg_inf) > static_cast<K>(FloatKeys<K>::pos_inf - FloatKeys<K>::neg_inf);
}
// The key of a number from its raw key.
template <typename K>
DT_PLAN_FN K key_of_raw(K raw, bool floating) {
  return floating && raw == FloatKeys<K>::zero - 1 ? FloatKeys<K>::zero : raw;
}
// The bracket [lo, hi] of keys for raw keys: a number is inside iff raw - lo <= span (unsigned),
// below iff raw < lo; a NaN is never inside (a negative NaN is below: the pass takes those out).
// lo <= hi; lo is 0 or a number's key, hi a number's key or above +inf's (as splitter() makes them).
template <typename K>
struct RawBracket {
  K lo, span;
};
template <typename K>
DT_PLAN_FN RawBracket<K> raw_bracket(K lo, K hi, bool floating) {
  if (floating) {
    if (lo < FloatKeys<K>::neg_inf) lo = FloatKeys<K>::neg_inf;  // no number's key lies outside
    if (hi > FloatKeys<K>::pos_inf) hi = FloatKeys<K>::pos_inf;
    if (lo == FloatKeys<K>::zero) lo = FloatKeys<K>::zero - 1;  // -0.0 with +0.0
  }
  return {lo, static_cast<K>(hi - lo)};
}

// ---- Whole-tensor median.
constexpr int kSampleThreads = 1024, kSampleItems = 4;
constexpr int64_t kSample = kSampleThreads * kSampleItems;  // 4096 keys, sorted by one block
// Sample ranks either side of the sample median: its rank among the samples has a standard
// deviation of sqrt(kSample) / 2 = 32, so 128 is 4 of them (a miss about once in 16000 calls on
// data in random order).
constexpr int64_t kMargin = 128;
constexpr int kBuckets = 2 * kMargin;  // one per sample gap inside the bracket (a power of two)
constexpr int64_t kMinWhole = int64_t{1} << 16;  // shorter tensors take the exact path

// Position of sample i (0 <= i < kSample) in a tensor of n >= kSample elements: the middle of the
// i-th of kSample equal strides.
DT_PLAN_FN int64_t sample_position(int64_t i, int64_t n) {
  const int64_t stride = n / kSample;
  return i * stride + stride / 2;
}

// Splitter j (0 <= j <= kBuckets) of the bracket from the sorted sample, of which the first
// `numbers` are numbers (the rest NaN keys): sample rank c - kMargin + j, c the sample median's
// rank; ranks before the sample give the least key, past its numbers the greatest number key.
template <typename K>
DT_PLAN_FN K splitter(const K* sorted, int64_t numbers, int j, K max_number_key) {
  const int64_t c = (numbers - 1) / 2, at = c - kMargin + j;
  if (at < 0) return K{0};
  if (at >= numbers) return max_number_key;
  return sorted[at];
}

// The sub-bucket of a key inside the bracket (t[0] <= key <= t[kBuckets]): the greatest
// j < kBuckets with t[j] <= key (8 steps of a branch-free binary search).
template <typename K>
DT_PLAN_FN int bucket_of(const K* t, K key) {
  int j = 0;
  for (int step = kBuckets / 2; step >= 1; step /= 2)
    if (t[j + step] <= key) j += step;
  return j;
}
// Whether key lies in sub-bucket b (the keys bucket_of sends there).
template <typename K>
DT_PLAN_FN bool in_bucket(const K* t, int b, K key) {
  return t[b] <= key && (b == kBuckets - 1 ? key <= t[kBuckets] : key < t[b + 1]);
}

// Keys the first buffer holds (the bracket expects 2 * kMargin / kSample = 1/16 of n) and the
// second (a sub-bucket expects n / kSample; the one holding the rank, about twice that).
DT_PLAN_FN int64_t inside_capacity(int64_t n) { return n / 8 + 4 * kSample; }
DT_PLAN_FN int64_t bucket_capacity(int64_t n) { return 16 * (n / kSample) + 4096; }

enum class Outcome : int32_t {
  kNan,       // the answer is the first NaN (median with a NaN; nanmedian of all NaN)
  kInside,    // the rank is inside the bracket: select `rank` among the bracket's keys
  kMiss,      // the rank is outside the bracket: exact path
  kOverflow,  // the first buffer could not hold the bracket's keys: exact path
};
struct Resolved {
  Outcome outcome;
  int64_t rank;  // kInside: the rank among the keys inside the bracket
};
// n elements, nan NaNs among them, below keys under the bracket, inside keys in it.
DT_PLAN_FN Resolved resolve(bool ignore_nan, int64_t n, int64_t nan, int64_t below, int64_t inside,
                            int64_t capacity) {
  if ((!ignore_nan && nan > 0) || nan == n) return {Outcome::kNan, 0};
  const int64_t rank = ignore_nan ? (n - nan - 1) / 2 : (n - 1) / 2;
  if (inside > capacity) return {Outcome::kOverflow, 0};
  if (rank < below || rank >= below + inside) return {Outcome::kMiss, 0};
  return {Outcome::kInside, rank - below};
}

// The bin of a histogram holding rank `rank` (0-based); rank becomes the rank inside that bin.
// Bins past the counted total are never chosen: the last bin takes what is left.
template <typename C>
DT_PLAN_FN int bin_of_rank(const C* hist, int bins, int64_t& rank) {
  int b = 0;
  while (b < bins - 1 && rank >= static_cast<int64_t>(hist[b])) rank -= static_cast<int64_t>(hist[b++]);
  return b;
}

// ---- Radix-select digits: 11 bits first (2048 bins), then 11 or 10.
constexpr int kDigitBins = 2048;
DT_PLAN_FN int digit_passes(int key_bits) { return key_bits == 32 ? 3 : 6; }
DT_PLAN_FN int digit_width(int key_bits, int pass) {
  return key_bits == 32 ? (pass < 2 ? 11 : 10) : (pass < 4 ? 11 : 10);
}
// The lowest bit of pass p's digit.
DT_PLAN_FN int digit_shift(int key_bits, int pass) {
  int shift = key_bits;
  for (int p = 0; p <= pass; ++p) shift -= digit_width(key_bits, p);
  return shift;
}

// The rank a row selects (0-based) in the order numbers ascending, NaN last: median, nanmedian
// (kind 0, 1) from the row's length n and NaN count, kthvalue (kind 2) k - 1.
DT_PLAN_FN int64_t row_rank(int kind, int64_t k, int64_t n, int64_t nan) {
  switch (kind) {
    case 0:
      return nan > 0 ? n - nan : (n - 1) / 2;
    case 1:
      return n - nan == 0 ? 0 : (n - nan - 1) / 2;
    default:
      return k - 1;
  }
}

}  // namespace dtensor::kernels::cuda::plan

#undef DT_PLAN_FN
