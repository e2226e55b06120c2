// Order statistics per row (median, nanmedian, kthvalue): every element becomes an unsigned key
// that orders like kernels/cpu/selection.h compares (numbers ascending, -0 == +0, NaN after every
// number); the answer is the element at one rank of its row in the stable (key, index) order --
// exactly the CPU kernels' (value, index) order.
//
// Rows whose keys fit in 40 KiB of shared memory are selected a block a row (select_rows_kernel:
// a radix select with 11-bit digits, the first pass fused with the load). Longer rows are sorted:
// 32-bit keys get the row index in their upper 32 bits and one DeviceRadixSort covers all rows;
// 64-bit keys (float64, int64) of several rows use DeviceSegmentedRadixSort.
// The whole-tensor median / nanmedian of 2^16 elements or more reads the input about once (a
// sample brackets the median, one pass keeps the keys inside the bracket: whole_*_kernel; the
// steps and decisions are in kernels/cuda/selection_plan.h) and falls back to the sort when the
// data defeat the bracket.
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include <mutex>
#include <set>
#include <type_traits>
#include <utility>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/selection_plan.h"

namespace dtensor::kernels::cuda::detail {
namespace {

bool wide_keys(DType dt) { return dt == DType::kFloat64 || dt == DType::kInt64; }
bool is_float_dtype(DType dt) {
  return dt == DType::kFloat32 || dt == DType::kFloat64 || dt == DType::kBFloat16 ||
         dt == DType::kFloat16;
}

int bits_for(int64_t v) {  // bits needed to hold 0..v (at least 1)
  int b = 1;
  while (b < 63 && (int64_t{1} << b) <= v) ++b;
  return b;
}

enum class Mode { kOneRow, kComposite, kSegmented };
Mode mode_for(DType dt, int64_t rows) {
  if (rows == 1) return Mode::kOneRow;
  return wide_keys(dt) ? Mode::kSegmented : Mode::kComposite;
}

// Input storage types and their keys.
template <typename T>
using KeyOf = std::conditional_t<sizeof(T) == 8, uint64_t, uint32_t>;
template <typename T>
constexpr bool kFloating = !std::is_integral_v<T>;  // float, double, bfloat16, half

template <typename T>
__device__ __forceinline__ KeyOf<T> key_from(T v) {
  if constexpr (std::is_same_v<T, double>)
    return plan::key_of_double_bits(static_cast<uint64_t>(__double_as_longlong(v)));
  else if constexpr (std::is_same_v<T, int64_t>)
    return static_cast<uint64_t>(v) ^ (uint64_t{1} << 63);
  else if constexpr (std::is_same_v<T, int32_t>)
    return static_cast<uint32_t>(v) ^ 0x80000000u;
  else if constexpr (std::is_same_v<T, int16_t>)  // the narrow keys: radix_key_bits' 16 and 8 bits
    return static_cast<uint32_t>(static_cast<uint16_t>(v) ^ 0x8000u);
  else if constexpr (std::is_same_v<T, int8_t>)
    return static_cast<uint32_t>(static_cast<uint8_t>(v) ^ 0x80u);
  else if constexpr (std::is_same_v<T, uint8_t>)
    return static_cast<uint32_t>(v);
  else if constexpr (std::is_same_v<T, bool>)
    return v ? 1u : 0u;
  else
    return plan::key_of_float_bits(__float_as_uint(from_storage<float>(v)));
}

// The number a key stands for, in T (+0.0 for the zero key; not for the NaN key).
template <typename T>
__device__ __forceinline__ T value_of_key(KeyOf<T> k) {
  if constexpr (std::is_same_v<T, double>)
    return __longlong_as_double(static_cast<long long>(plan::double_bits_of_key(k)));
  else if constexpr (std::is_same_v<T, int64_t>)
    return static_cast<int64_t>(k ^ (uint64_t{1} << 63));
  else if constexpr (std::is_same_v<T, int32_t>)
    return static_cast<int32_t>(k ^ 0x80000000u);
  else if constexpr (std::is_same_v<T, int16_t>)
    return static_cast<int16_t>(static_cast<uint16_t>(k ^ 0x8000u));
  else if constexpr (std::is_same_v<T, int8_t>)
    return static_cast<int8_t>(static_cast<uint8_t>(k ^ 0x80u));
  else if constexpr (std::is_same_v<T, uint8_t>)
    return static_cast<uint8_t>(k);
  else if constexpr (std::is_same_v<T, bool>)
    return k != 0;
  else
    return to_storage<T>(__uint_as_float(plan::float_bits_of_key(k)));
}

// key_from of element i of a buffer of dtype dt (16-bit floats through float, exactly).
__device__ __forceinline__ uint64_t key_of(const void* x, DType dt, int64_t i) {
  switch (dt) {
    case DType::kFloat64:
      return key_from(static_cast<const double*>(x)[i]);
    case DType::kInt64:
      return key_from(static_cast<const int64_t*>(x)[i]);
    case DType::kInt32:
      return key_from(static_cast<const int32_t*>(x)[i]);
    case DType::kInt16:
      return key_from(static_cast<const int16_t*>(x)[i]);
    case DType::kInt8:
      return key_from(static_cast<const int8_t*>(x)[i]);
    case DType::kUInt8:
      return key_from(static_cast<const uint8_t*>(x)[i]);
    case DType::kBool:
      return key_from(static_cast<const bool*>(x)[i]);
    default:  // float32, bfloat16, float16
      return key_from(load_as<float>(x, dt, i));
  }
}

__global__ void make_keys(const void* x, DType dt, int64_t rows, int64_t n, bool composite,
                          uint64_t* keys, int32_t* pos) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < rows * n;
       t += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t k = key_of(x, dt, t);
    keys[t] = composite ? (static_cast<uint64_t>(t / n) << 32) | k : k;
    pos[t] = static_cast<int32_t>(t % n);
  }
}

__global__ void pick(SelectKind kind, int64_t k, const void* x, DType dt, size_t item, int64_t rows,
                     int64_t n, const uint64_t* keys, const int32_t* pos, bool floating, bool wide,
                     void* values, int64_t* indices) {
  const uint64_t mask = wide ? ~uint64_t{0} : 0xffffffffull;
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    const uint64_t* rk = keys + r * n;
    int64_t nan = 0;
    if (floating) {  // NaN keys are the largest: find where they start
      int64_t lo = 0, hi = n;
      while (lo < hi) {
        const int64_t mid = (lo + hi) / 2;
        if ((rk[mid] & mask) == mask)
          hi = mid;
        else
          lo = mid + 1;
      }
      nan = n - lo;
    }
    int64_t at;
    switch (kind) {
      case SelectKind::kMedian:
        at = nan > 0 ? n - nan : (n - 1) / 2;
        break;
      case SelectKind::kNanMedian:
        at = n - nan == 0 ? 0 : (n - nan - 1) / 2;
        break;
      default:
        at = k - 1;
        break;
    }
    const int64_t j = pos[r * n + at];
    const char* src = static_cast<const char*>(x) + (r * n + j) * item;
    char* dst = static_cast<char*>(values) + r * item;
    for (size_t b = 0; b < item; ++b) dst[b] = src[b];
    if (indices != nullptr) indices[r] = j;
  }
}

// ---- Rows short enough for shared memory: one block a row keeps the row's keys there and finds
// the rank-th (key, index) by a radix select with 11-bit digits (kernels/cuda/selection_plan.h:
// 3 passes for 32-bit keys, 6 for 64-bit), the first pass fused with the load (keys made from the
// input once, counted as they are stored), each bin found by a block-wide scan of the histogram,
// and the select stops as soon as one key is left. Among equal keys, the occurrence the stable
// order puts at the rank is found in index order (ballots, 256 positions at a time).
constexpr int kSelThreads = 256;
// The keys of a row: 10240 32-bit or 5120 64-bit. With the kernel's ~8.5 KiB of static shared
// memory (the 2048-bin histogram) this passes the 48 KiB a launch gets by default, so the kernels
// opt in to more (cudaFuncAttributeMaxDynamicSharedMemorySize); 40 KiB of keys is kept as the
// limit of this path.
constexpr size_t kSelSharedBytes = 40 * 1024;
constexpr int kBinsPerThread = plan::kDigitBins / kSelThreads;  // 8
static_assert(kBinsPerThread == 8, "pick_bin loads two uint4 a thread");


template <typename F>
void by_storage(DType dt, F&& f) {
  switch (dt) {
    case DType::kFloat32: f(float{}); break;
    case DType::kFloat64: f(double{}); break;
    case DType::kBFloat16: f(__nv_bfloat16{}); break;
    case DType::kFloat16: f(__half{}); break;
    case DType::kInt32: f(int32_t{}); break;
    case DType::kInt64: f(int64_t{}); break;
    case DType::kInt16: f(int16_t{}); break;
    case DType::kInt8: f(int8_t{}); break;
    case DType::kUInt8: f(uint8_t{}); break;
    case DType::kBool: f(bool{}); break;
    default: break;  // complex: refused by the host side first
  }
}

using BinScan = cub::BlockScan<unsigned, kSelThreads>;
struct PickShared {
  typename BinScan::TempStorage scan;
  unsigned bin, rem, count;
};

// Block-wide: the bin holding rank `rem` among the counts of kPer consecutive bins a thread
// (thread t holds bins t * kPer ...); rem becomes the rank inside it, count its count. Needs
// rem < the total. Every thread calls it; it syncs.
template <int kPer>
__device__ __forceinline__ unsigned pick_bin(const unsigned (&c)[kPer], unsigned& rem, unsigned& count,
                                             PickShared& s) {
  unsigned sum = 0;
#pragma unroll
  for (int i = 0; i < kPer; ++i) sum += c[i];
  unsigned before;
  BinScan(s.scan).ExclusiveSum(sum, before);
  if (rem >= before && rem - before < sum) {
    unsigned r = rem - before;
    int i = 0;
#pragma unroll
    for (int q = 0; q < kPer - 1; ++q)
      if (i == q && r >= c[q]) {
        r -= c[q];
        i = q + 1;
      }
    s.bin = threadIdx.x * kPer + i;
    s.rem = r;
    s.count = c[0];
#pragma unroll
    for (int q = 1; q < kPer; ++q)
      if (i == q) s.count = c[q];
  }
  __syncthreads();
  rem = s.rem;
  count = s.count;
  const unsigned bin = s.bin;
  __syncthreads();  // s is written again by the next call
  return bin;
}

// This thread's 8 bins of a 2048-bin histogram (16-byte aligned).
__device__ __forceinline__ void load_bins(const unsigned* hist, unsigned (&c)[kBinsPerThread]) {
  const uint4* h = reinterpret_cast<const uint4*>(hist) + threadIdx.x * 2;
  const uint4 a = h[0], b = h[1];
  c[0] = a.x, c[1] = a.y, c[2] = a.z, c[3] = a.w, c[4] = b.x, c[5] = b.y, c[6] = b.z, c[7] = b.w;
}

template <typename T>
__global__ void __launch_bounds__(kSelThreads)
    select_rows_kernel(SelectKind kind, int64_t k, const T* __restrict__ x, int64_t rows, int n,
                       T* __restrict__ values, int64_t* __restrict__ indices) {
  using K = KeyOf<T>;
  constexpr int kBits = 8 * sizeof(K);
  constexpr int kPasses = plan::digit_passes(kBits);
  constexpr int kShift0 = plan::digit_shift(kBits, 0);
  extern __shared__ __align__(16) unsigned char raw[];
  K* keys = reinterpret_cast<K*>(raw);
  __shared__ __align__(16) unsigned hist[plan::kDigitBins];
  __shared__ unsigned where[plan::kDigitBins];  // a position per bin (exchanged: no racing stores)
  __shared__ PickShared pick;
  __shared__ unsigned warp_counts[kSelThreads / 32];
  __shared__ int found;
  const K nan_key = ~K{0};
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = x + r * n;
    for (int b = threadIdx.x; b < plan::kDigitBins / 4; b += kSelThreads)
      reinterpret_cast<uint4*>(hist)[b] = make_uint4(0, 0, 0, 0);
    __syncthreads();
    // Pass 0, fused with the load: keys stored and their top digit counted (4-byte types 16 bytes
    // at a time where the rows allow it).
    unsigned nan = 0;
    const auto count0 = [&](K key) {
      if (kFloating<T>) nan += key == nan_key;
      atomicAdd(&hist[static_cast<unsigned>(key >> kShift0)], 1u);
    };
    int scalar_from = 0;
    if constexpr (sizeof(T) == 4) {
      if ((reinterpret_cast<uintptr_t>(x) & 15) == 0 && (n & 3) == 0) {  // block-uniform
        const uint4* row4 = reinterpret_cast<const uint4*>(row);
        for (int g = threadIdx.x; g < n / 4; g += kSelThreads) {
          const uint4 u = __ldg(row4 + g);
          const unsigned w[4] = {u.x, u.y, u.z, u.w};
          K k4[4];
#pragma unroll
          for (int q = 0; q < 4; ++q) {
            T v;
            memcpy(&v, &w[q], sizeof(T));
            k4[q] = key_from(v);
            count0(k4[q]);
          }
          reinterpret_cast<uint4*>(keys)[g] = make_uint4(k4[0], k4[1], k4[2], k4[3]);
        }
        scalar_from = n;
      }
    }
    for (int j = scalar_from + threadIdx.x; j < n; j += kSelThreads) {
      const K key = key_from(row[j]);
      keys[j] = key;
      count0(key);
    }
    if (kFloating<T>) {
      nan = __reduce_add_sync(0xffffffffu, nan);
      if (lane == 0) warp_counts[warp] = nan;
    }
    __syncthreads();
    nan = 0;
    if (kFloating<T>)
#pragma unroll
      for (int w = 0; w < kSelThreads / 32; ++w) nan += warp_counts[w];
    unsigned rem = static_cast<unsigned>(plan::row_rank(static_cast<int>(kind), k, n, nan));
    unsigned c[kBinsPerThread], count;
    load_bins(hist, c);
    K prefix = static_cast<K>(pick_bin(c, rem, count, pick)) << kShift0;
    int shift = kShift0;
    // Further digits among the keys that share the prefix, until one key is left. The keys are
    // read 16 bytes at a time; the few that match also leave their position in `where`, so a
    // digit that leaves one key names its element without another pass.
    int located = -1;  // block-uniform
#pragma unroll
    for (int p = 1; p < kPasses; ++p) {
      if (count == 1) break;  // block-uniform
      const int high = shift;
      shift = plan::digit_shift(kBits, p);
      const unsigned mask = (1u << plan::digit_width(kBits, p)) - 1;
      const K want = prefix >> high;
      for (int b = threadIdx.x; b < plan::kDigitBins / 4; b += kSelThreads)
        reinterpret_cast<uint4*>(hist)[b] = make_uint4(0, 0, 0, 0);
      __syncthreads();
      const auto visit = [&](int j, K key) {
        if ((key >> high) == want) {
          const unsigned d = static_cast<unsigned>(key >> shift) & mask;
          atomicAdd(&hist[d], 1u);
          atomicExch(&where[d], static_cast<unsigned>(j));
        }
      };
      constexpr int kPerLoad = 16 / sizeof(K);
      using Vec = std::conditional_t<sizeof(K) == 4, uint4, ulonglong2>;
      const int groups = n / kPerLoad;
      for (int g = threadIdx.x; g < groups; g += kSelThreads) {
        const Vec v = reinterpret_cast<const Vec*>(keys)[g];
        K k4[kPerLoad];
        if constexpr (sizeof(K) == 4) {
          k4[0] = v.x, k4[1] = v.y, k4[2] = v.z, k4[3] = v.w;
        } else {
          k4[0] = v.x, k4[1] = v.y;
        }
        bool any = false;
#pragma unroll
        for (int q = 0; q < kPerLoad; ++q) any |= (k4[q] >> high) == want;
        if (any)  // rare: one test for the 16 bytes
#pragma unroll
          for (int q = 0; q < kPerLoad; ++q) visit(g * kPerLoad + q, k4[q]);
      }
      for (int j = groups * kPerLoad + threadIdx.x; j < n; j += kSelThreads) visit(j, keys[j]);
      __syncthreads();
      load_bins(hist, c);
      const unsigned bin = pick_bin(c, rem, count, pick);
      prefix |= static_cast<K>(bin) << shift;
      if (count == 1) located = static_cast<int>(where[bin]);  // written by the one key of that bin
    }
    if (count == 1) {
      if (located >= 0) {
        if (threadIdx.x == 0) found = located;
      } else {
        // One key left by the first digit (rem is 0): find it.
        for (int j = threadIdx.x; j < n; j += kSelThreads)
          if ((keys[j] >> shift) == (prefix >> shift)) found = j;
      }
    } else {
      // prefix is the whole key, held by `count` elements: the rem-th of them in index order.
      const unsigned below_lane = (1u << lane) - 1;
      for (int base = 0; base < n; base += kSelThreads) {
        const int j = base + threadIdx.x;
        const bool hit = j < n && keys[j] == prefix;
        const unsigned ballot = __ballot_sync(0xffffffffu, hit);
        if (lane == 0) warp_counts[warp] = __popc(ballot);
        __syncthreads();
        unsigned before = 0, total = 0;
#pragma unroll
        for (int w = 0; w < kSelThreads / 32; ++w) {
          const unsigned cw = warp_counts[w];
          before += w < warp ? cw : 0;
          total += cw;
        }
        if (hit && rem >= before && rem - before == static_cast<unsigned>(__popc(ballot & below_lane)))
          found = j;
        __syncthreads();  // warp_counts is written again
        if (rem < total) break;  // block-uniform
        rem -= total;
      }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      const int j = found;
      values[r] = row[j];
      if (indices != nullptr) indices[r] = j;
    }
    __syncthreads();  // keys and found are reused by the next row
  }
}

// Whether launch_select takes select_rows_kernel (no workspace) for rows of n elements.
bool rows_in_shared(DType dt, int64_t n) {
  return static_cast<size_t>(n) * (wide_keys(dt) ? 8 : 4) <= kSelSharedBytes;
}

// ---- Whole-tensor median (kernels/cuda/selection_plan.h has the steps and their reasons).
// Counters and the outcome, zeroed by whole_sample_kernel.
struct WholeState {
  unsigned long long nan, below, inside, first_nan, extracted, done;
  unsigned int negative_zero, status;  // status: 0 the value is written, 1 take the exact path
  unsigned long long hist[plan::kBuckets];
};
static_assert(plan::kBuckets == kSelThreads, "one sub-bucket a thread");

// Step 1 and 2: sort a sample, write the bracket's splitters t[0..kBuckets].
template <typename T>
__global__ void __launch_bounds__(plan::kSampleThreads)
    whole_sample_kernel(const T* __restrict__ x, int64_t n, WholeState* st, KeyOf<T>* t) {
  using K = KeyOf<T>;
  using Sort = cub::BlockRadixSort<K, plan::kSampleThreads, plan::kSampleItems>;
  __shared__ union {
    typename Sort::TempStorage sort;
    K sorted[plan::kSample];
  } s;
  __shared__ int numbers;
  const K nan_key = ~K{0};
  K keys[plan::kSampleItems];
#pragma unroll
  for (int i = 0; i < plan::kSampleItems; ++i)
    keys[i] = key_from(x[plan::sample_position(threadIdx.x * plan::kSampleItems + i, n)]);
  if (threadIdx.x == 0) {
    st->nan = st->below = st->inside = st->extracted = st->done = 0;
    st->first_nan = ~0ull;
    st->negative_zero = 0;
    st->status = 1;
    numbers = static_cast<int>(plan::kSample);
  }
  for (int b = threadIdx.x; b < plan::kBuckets; b += blockDim.x) st->hist[b] = 0;
  Sort(s.sort).Sort(keys);
  __syncthreads();  // the sort's storage becomes the sorted keys
#pragma unroll
  for (int i = 0; i < plan::kSampleItems; ++i) s.sorted[threadIdx.x * plan::kSampleItems + i] = keys[i];
  __syncthreads();
  if (kFloating<T>)  // NaN keys sort last: the first of them ends the numbers
    for (int i = threadIdx.x; i < plan::kSample; i += blockDim.x)
      if (s.sorted[i] == nan_key && (i == 0 || s.sorted[i - 1] != nan_key)) numbers = i;
  __syncthreads();
  const K max_number = kFloating<T> ? nan_key - 1 : ~K{0};
  for (int j = threadIdx.x; j <= plan::kBuckets; j += blockDim.x)
    t[j] = plan::splitter(s.sorted, numbers, j, max_number);
}

constexpr int kPassThreads = 256, kPassItems = 16;
constexpr int64_t kPassTile = kPassThreads * kPassItems;

// Step 3: one read of the input, a tile of 4096 elements at a time. The hot loop is branch-free but
// for NaN: a raw key (plan::raw_bracket), three compares into bit masks. The keys inside the bracket
// are then staged in shared memory (one shared atomic a warp); the staged keys, dense, get their
// fix-up, their sub-bucket (binary search), and are copied to buf1 (one global atomic a tile).
template <typename T>
__device__ __forceinline__ KeyOf<T> raw_key_from(T v) {
  if constexpr (std::is_same_v<T, double>)
    return plan::raw_key_of_double_bits(static_cast<uint64_t>(__double_as_longlong(v)));
  else if constexpr (kFloating<T>)
    return plan::raw_key_of_float_bits(__float_as_uint(from_storage<float>(v)));
  else
    return key_from(v);
}

template <typename T, bool kChecked>
__device__ __forceinline__ void whole_pass_tile(const T* __restrict__ x, int64_t n, int64_t start,
                                                plan::RawBracket<KeyOf<T>> br, KeyOf<T>* stage, unsigned* staged,
                                                unsigned long long& below, unsigned long long& nan,
                                                unsigned long long& first_nan) {
  using K = KeyOf<T>;
  T v[kPassItems];
#pragma unroll
  for (int i = 0; i < kPassItems; ++i) {
    const int64_t j = start + i * kPassThreads;
    v[i] = !kChecked || j < n ? x[j] : T{};
  }
  K key[kPassItems];
  unsigned inside = 0, belows = 0, nans = 0;
#pragma unroll
  for (int i = 0; i < kPassItems; ++i) {
    const bool valid = !kChecked || start + i * kPassThreads < n;
    key[i] = raw_key_from(v[i]);
    belows |= static_cast<unsigned>(valid && key[i] < br.lo) << i;
    inside |= static_cast<unsigned>(valid && static_cast<K>(key[i] - br.lo) <= br.span) << i;
    if (kFloating<T>) nans |= static_cast<unsigned>(valid && plan::raw_is_nan(key[i])) << i;
  }
  below += __popc(belows & ~nans);  // a negative NaN's raw key is below every number's
  if (kFloating<T> && nans != 0) {  // rare
    nan += __popc(nans);
    const unsigned long long j = static_cast<unsigned long long>(start + (__ffs(nans) - 1) * kPassThreads);
    first_nan = first_nan < j ? first_nan : j;
  }
  // Stage this thread's keys inside the bracket: a warp scan of the counts, one atomic a warp.
  const unsigned lane = threadIdx.x & 31, count = __popc(inside);
  unsigned incl = count;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned up = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= static_cast<unsigned>(o)) incl += up;
  }
  unsigned base = 0;
  if (lane == 31 && incl != 0) base = atomicAdd(staged, incl);
  const unsigned pos = __shfl_sync(0xffffffffu, base, 31) + incl - count;
  if (inside != 0) {
    // Unpredicated stores: a key outside the bracket goes to this thread's spare slot.
    unsigned at = pos;
    const unsigned spare = kPassTile + threadIdx.x;
#pragma unroll
    for (int i = 0; i < kPassItems; ++i) {
      const unsigned bit = (inside >> i) & 1;
      stage[bit ? at : spare] = key[i];
      at += bit;
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kPassThreads)
    whole_pass_kernel(const T* __restrict__ x, int64_t n, WholeState* st, const KeyOf<T>* __restrict__ t_in,
                      KeyOf<T>* __restrict__ buf1, int64_t cap1) {
  using K = KeyOf<T>;
  __shared__ K t[plan::kBuckets + 1];
  __shared__ unsigned hist[plan::kBuckets];
  __shared__ K stage[kPassTile + kPassThreads];  // the tile's keys inside the bracket, then spare slots
  __shared__ unsigned staged, tile_count;
  __shared__ unsigned long long tile_base;
  __shared__ unsigned long long red[32];
  for (int j = threadIdx.x; j <= plan::kBuckets; j += kPassThreads) t[j] = t_in[j];
  hist[threadIdx.x] = 0;
  if (threadIdx.x == 0) staged = 0;
  __syncthreads();
  const plan::RawBracket<K> br = plan::raw_bracket(t[0], t[plan::kBuckets], kFloating<T>);
  unsigned long long below = 0, nan = 0, first_nan = ~0ull;
  bool negative_zero = false;
  const int64_t tiles = ceil_div(n, kPassTile);
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    const int64_t start = tile * kPassTile + threadIdx.x;
    if ((tile + 1) * kPassTile <= n)
      whole_pass_tile<T, false>(x, n, start, br, stage, &staged, below, nan, first_nan);
    else
      whole_pass_tile<T, true>(x, n, start, br, stage, &staged, below, nan, first_nan);
    __syncthreads();
    if (threadIdx.x == 0) {
      tile_count = staged;
      tile_base = staged == 0 ? 0 : atomicAdd(&st->inside, static_cast<unsigned long long>(staged));
      staged = 0;
    }
    __syncthreads();
    const unsigned cnt = tile_count;
    const unsigned long long base = tile_base;
    for (unsigned i = threadIdx.x; i < cnt; i += kPassThreads) {
      const K raw = stage[i];
      const K key = plan::key_of_raw(raw, kFloating<T>);
      negative_zero |= kFloating<T> && raw != key;  // -0.0
      atomicAdd(&hist[plan::bucket_of(t, key)], 1u);
      if (base + i < static_cast<unsigned long long>(cap1)) buf1[base + i] = key;
    }
    __syncthreads();  // stage, tile_count and tile_base are written again
  }
  if (hist[threadIdx.x] != 0) atomicAdd(&st->hist[threadIdx.x], static_cast<unsigned long long>(hist[threadIdx.x]));
  below = block_reduce(below, [](auto a, auto b) { return a + b; }, red, 0ull);
  if (threadIdx.x == 0 && below != 0) atomicAdd(&st->below, below);
  if (kFloating<T>) {
    nan = block_reduce(nan, [](auto a, auto b) { return a + b; }, red, 0ull);
    if (threadIdx.x == 0 && nan != 0) atomicAdd(&st->nan, nan);
    first_nan = block_reduce(first_nan, [](auto a, auto b) { return a < b ? a : b; }, red, ~0ull);
    if (threadIdx.x == 0 && nan != 0) atomicMin(&st->first_nan, first_nan);
    if (__syncthreads_or(negative_zero) && threadIdx.x == 0) atomicOr(&st->negative_zero, 1u);
  }
}

// Step 4: every block resolves the same way from the counts; then the keys of the sub-bucket
// holding the rank are copied to buf2 (one atomic a warp with hits), and the last block to finish
// selects the rank among them.
template <typename T>
__global__ void __launch_bounds__(kSelThreads)
    whole_finish_kernel(bool ignore_nan, const T* __restrict__ x, int64_t n, WholeState* st,
                        const KeyOf<T>* __restrict__ t_in, const KeyOf<T>* buf1, int64_t cap1, KeyOf<T>* buf2,
                        int64_t cap2, T* value) {
  using K = KeyOf<T>;
  constexpr int kBits = 8 * sizeof(K);
  __shared__ __align__(16) unsigned hist[plan::kDigitBins];
  __shared__ PickShared pick;
  __shared__ K t[plan::kBuckets + 1];
  __shared__ bool last;
  const plan::Resolved res = plan::resolve(ignore_nan, n, static_cast<int64_t>(st->nan), static_cast<int64_t>(st->below),
                                           static_cast<int64_t>(st->inside), cap1);
  if (res.outcome != plan::Outcome::kInside) {
    if (res.outcome == plan::Outcome::kNan && blockIdx.x == 0 && threadIdx.x == 0) {
      *value = x[st->first_nan];
      st->status = 0;
    }
    return;  // a miss or an overflow: status stays 1
  }
  // The sub-bucket holding the rank (one a thread).
  unsigned rem = static_cast<unsigned>(res.rank), count;
  const unsigned mine[1] = {static_cast<unsigned>(st->hist[threadIdx.x])};
  const unsigned b = pick_bin(mine, rem, count, pick);
  if (count > static_cast<unsigned long long>(cap2)) return;  // status stays 1
  for (int j = threadIdx.x; j <= plan::kBuckets; j += kSelThreads) t[j] = t_in[j];
  __syncthreads();
  const int64_t inside = static_cast<int64_t>(st->inside);
  const int lane = threadIdx.x & 31;
  for (int64_t base = int64_t(blockIdx.x) * kSelThreads; base < inside; base += int64_t(gridDim.x) * kSelThreads) {
    const int64_t i = base + threadIdx.x;
    const K key = i < inside ? buf1[i] : K{0};
    const bool hit = i < inside && plan::in_bucket(t, static_cast<int>(b), key);
    const unsigned ballot = __ballot_sync(0xffffffffu, hit);
    if (ballot == 0) continue;
    unsigned long long slot = 0;
    if (lane == 0) slot = atomicAdd(&st->extracted, static_cast<unsigned long long>(__popc(ballot)));
    slot = __shfl_sync(0xffffffffu, slot, 0) + __popc(ballot & ((1u << lane) - 1));
    if (hit && slot < static_cast<unsigned long long>(cap2)) buf2[slot] = key;
  }
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&st->done, 1ull) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  if (*reinterpret_cast<volatile unsigned long long*>(&st->extracted) != count) return;  // never expected
  // The rank-th of the `count` keys in buf2, by 11-bit digits (L2-resident: read past L1).
  K prefix = 0;
#pragma unroll 1
  for (int p = 0; p < plan::digit_passes(kBits); ++p) {
    const int shift = plan::digit_shift(kBits, p), high = shift + plan::digit_width(kBits, p);
    const unsigned mask = (1u << plan::digit_width(kBits, p)) - 1;
    for (int q = threadIdx.x; q < plan::kDigitBins; q += kSelThreads) hist[q] = 0;
    __syncthreads();
    for (unsigned i = threadIdx.x; i < count; i += kSelThreads) {
      const K key = __ldcg(buf2 + i);
      if (p == 0 || (key >> high) == (prefix >> high)) atomicAdd(&hist[static_cast<unsigned>(key >> shift) & mask], 1u);
    }
    __syncthreads();
    unsigned c[kBinsPerThread], unused;
    load_bins(hist, c);
    prefix |= static_cast<K>(pick_bin(c, rem, unused, pick)) << shift;
  }
  if (threadIdx.x == 0) {
    const K zero_key = sizeof(K) == 8 ? static_cast<K>(plan::kDoubleZeroKey) : static_cast<K>(plan::kFloatZeroKey);
    // A zero with a -0.0 in the input: which zero the stable order puts at the rank needs the
    // positions; the exact path decides (status stays 1).
    if (!(kFloating<T> && prefix == zero_key && st->negative_zero != 0)) {
      *value = value_of_key<T>(prefix);
      st->status = 0;
    }
  }
}

struct Times {
  int64_t n;
  __host__ __device__ int64_t operator()(int64_t i) const { return i * n; }
};
using OffsetIt = thrust::transform_iterator<Times, thrust::counting_iterator<int64_t>>;

size_t align16(size_t b) { return (b + 15) / 16 * 16; }

// CUB's call (temp == null: sizing only).
cudaError_t sort(Mode mode, DType dt, int64_t rows, int64_t n, const uint64_t* kin, uint64_t* kout,
                 const int32_t* vin, int32_t* vout, void* temp, size_t& bytes,
                 cudaStream_t stream) {
  const int64_t count = rows * n;
  const int key_bits = wide_keys(dt) ? 64 : 32;
  switch (mode) {
    case Mode::kOneRow:
      return cub::DeviceRadixSort::SortPairs(temp, bytes, kin, kout, vin, vout, count, 0, key_bits,
                                             stream);
    case Mode::kComposite:
      return cub::DeviceRadixSort::SortPairs(temp, bytes, kin, kout, vin, vout, count, 0,
                                             32 + bits_for(rows - 1), stream);
    case Mode::kSegmented: {
      OffsetIt begin(thrust::counting_iterator<int64_t>(0), Times{n});
      return cub::DeviceSegmentedRadixSort::SortPairs(
          temp, bytes, kin, kout, vin, vout, static_cast<int>(count), static_cast<int>(rows), begin,
          begin + 1, 0, 64, stream);
    }
  }
  return cudaErrorInvalidValue;
}

// ---- The distributed radix select's helpers: the keys of kernels/cpu/radix_select.cc, bit for bit
// (16-bit floats keep 16-bit keys here, unlike the sort keys above).
template <int kWidth>
__device__ __forceinline__ uint64_t float_key(uint64_t b) {
  constexpr uint64_t sign = uint64_t{1} << (kWidth - 1);
  constexpr uint64_t mask = kWidth == 64 ? ~uint64_t{0} : (uint64_t{1} << kWidth) - 1;
  if (b == sign) b = 0;  // -0.0 takes +0.0's key
  return (b & sign) ? (~b & mask) : (b | sign);
}

// The radix key of element t of x; false for NaN.
__device__ __forceinline__ bool radix_key(const void* x, DType dt, int64_t t, uint64_t* k) {
  switch (dt) {
    case DType::kFloat32: {
      const uint32_t b = static_cast<const uint32_t*>(x)[t];
      if ((b & 0x7fffffffu) > 0x7f800000u) return false;
      *k = float_key<32>(b);
      return true;
    }
    case DType::kFloat64: {
      const uint64_t b = static_cast<const uint64_t*>(x)[t];
      if ((b & 0x7fffffffffffffffull) > 0x7ff0000000000000ull) return false;
      *k = float_key<64>(b);
      return true;
    }
    case DType::kBFloat16: {
      const uint16_t b = static_cast<const uint16_t*>(x)[t];
      if ((b & 0x7fffu) > 0x7f80u) return false;
      *k = float_key<16>(b);
      return true;
    }
    case DType::kFloat16: {
      const uint16_t b = static_cast<const uint16_t*>(x)[t];
      if ((b & 0x7fffu) > 0x7c00u) return false;
      *k = float_key<16>(b);
      return true;
    }
    case DType::kInt32:
      *k = static_cast<uint32_t>(static_cast<const int32_t*>(x)[t]) ^ 0x80000000u;
      return true;
    case DType::kInt64:
      *k = static_cast<uint64_t>(static_cast<const int64_t*>(x)[t]) ^ (uint64_t{1} << 63);
      return true;
    case DType::kInt16:
      *k = static_cast<uint16_t>(static_cast<const int16_t*>(x)[t]) ^ 0x8000u;
      return true;
    case DType::kInt8:
      *k = static_cast<uint8_t>(static_cast<const int8_t*>(x)[t]) ^ 0x80u;
      return true;
    case DType::kUInt8:
      *k = static_cast<const uint8_t*>(x)[t];
      return true;
    case DType::kBool:
      *k = static_cast<const bool*>(x)[t] ? 1 : 0;
      return true;
    case DType::kComplex64:
    case DType::kComplex128:
      __trap();  // complex has no order: the host side refuses it first (radix_key_bits)
  }
  return false;
}

constexpr int kHistThreads = 256;
constexpr int64_t kHistChunk = 16 * kHistThreads;  // elements of one row a block counts
constexpr int64_t kSharedCols = 4097;               // histograms up to 12-bit digits count in shared memory

// Blocks (chunk, row): each counts kHistChunk elements of one row, in shared memory when the
// histogram fits (then adds it to the row's with one atomic per non-zero count), else straight
// into global memory.
template <bool kShared>
__global__ void radix_histogram_kernel(const void* x, DType dt, int64_t n, int64_t inner, int64_t rows,
                                       const uint64_t* prefix, int shift, int bits, int64_t cols,
                                       unsigned long long* out) {
  extern __shared__ unsigned int counts[];
  const uint64_t digit_mask = (uint64_t{1} << bits) - 1;
  const int high = shift + bits;
  const bool whole = prefix == nullptr;  // the digit is the key's last: every number counts
  const int64_t chunks = ceil_div(n, kHistChunk);
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t o = r / inner, i = r % inner;
    unsigned long long* row_out = out + r * cols;
    for (int64_t chunk = blockIdx.x; chunk < chunks; chunk += gridDim.x) {
      if (kShared) {
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) counts[c] = 0;
        __syncthreads();
      }
      const int64_t j1 = (chunk + 1) * kHistChunk < n ? (chunk + 1) * kHistChunk : n;
      for (int64_t j = chunk * kHistChunk + threadIdx.x; j < j1; j += blockDim.x) {
        uint64_t key;
        int64_t c;
        if (!radix_key(x, dt, (o * n + j) * inner + i, &key))
          c = cols - 1;  // NaN, whatever the prefix
        else if (!whole && (key >> high) != prefix[r])
          continue;
        else
          c = static_cast<int64_t>((key >> shift) & digit_mask);
        if (kShared)
          atomicAdd(counts + c, 1u);
        else
          atomicAdd(row_out + c, 1ull);
      }
      if (kShared) {
        __syncthreads();
        for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
          if (counts[c] != 0) atomicAdd(row_out + c, static_cast<unsigned long long>(counts[c]));
        __syncthreads();
      }
    }
  }
}

constexpr int kOccThreads = 256;

__device__ __forceinline__ bool same_value(const void* x, DType dt, int64_t t, const void* values, int64_t r) {
  if (dt == DType::kInt64) return static_cast<const int64_t*>(x)[t] == static_cast<const int64_t*>(values)[r];
  const double a = load_as<double>(x, dt, t), b = load_as<double>(values, dt, r);
  return b != b ? a != a : a == b;  // NaN matches NaN; -0 == +0
}

// One block a row: each thread counts the matches in its contiguous part of the row, an exclusive
// prefix over the threads finds the part holding the occurrence-th match, and that thread finds it.
__global__ void index_of_occurrence_kernel(const void* x, DType dt, int64_t n, int64_t inner, int64_t rows,
                                           const void* values, const int64_t* occurrence, int64_t offset,
                                           int64_t* out) {
  __shared__ int64_t before[kOccThreads];
  __shared__ int64_t found;
  const int64_t per = ceil_div(n, kOccThreads);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t o = r / inner, i = r % inner, want = occurrence[r];
    const int64_t j0 = threadIdx.x * per < n ? threadIdx.x * per : n, j1 = j0 + per < n ? j0 + per : n;
    int64_t mine = 0;
    if (want >= 1)
      for (int64_t j = j0; j < j1; ++j) mine += same_value(x, dt, (o * n + j) * inner + i, values, r);
    before[threadIdx.x] = mine;
    if (threadIdx.x == 0) found = -1;
    __syncthreads();
    if (threadIdx.x == 0) {
      int64_t run = 0;
      for (int t = 0; t < kOccThreads; ++t) {
        const int64_t c = before[t];
        before[t] = run;
        run += c;
      }
    }
    __syncthreads();
    int64_t seen = before[threadIdx.x];
    if (want >= 1 && want > seen && want <= seen + mine)
      for (int64_t j = j0; j < j1; ++j)
        if (same_value(x, dt, (o * n + j) * inner + i, values, r) && ++seen == want) {
          found = offset + j;
          break;
        }
    __syncthreads();
    if (threadIdx.x == 0) out[r] = found;
    __syncthreads();
  }
}

}  // namespace

void launch_radix_histogram(const void* x, DType dtype, int64_t outer, int64_t n, int64_t inner,
                            const uint64_t* prefix, int shift, int bits, int64_t cols, int64_t* out,
                            cudaStream_t stream) {
  const int64_t rows = outer * inner;
  if (rows == 0 || n == 0) return;
  const int64_t chunks = ceil_div(n, kHistChunk);
  const dim3 grid(static_cast<unsigned>(chunks < 65535 ? chunks : 65535),
                  static_cast<unsigned>(rows < 65535 ? rows : 65535));
  auto* o = reinterpret_cast<unsigned long long*>(out);
  if (cols <= kSharedCols)
    radix_histogram_kernel<true><<<grid, kHistThreads, cols * sizeof(unsigned int), stream>>>(
        x, dtype, n, inner, rows, prefix, shift, bits, cols, o);
  else
    radix_histogram_kernel<false><<<grid, kHistThreads, 0, stream>>>(x, dtype, n, inner, rows, prefix, shift,
                                                                     bits, cols, o);
}

void launch_index_of_occurrence(const void* x, DType dtype, int64_t outer, int64_t n, int64_t inner,
                                const void* values, const int64_t* occurrence, int64_t index_offset, int64_t* out,
                                cudaStream_t stream) {
  const int64_t rows = outer * inner;
  if (rows == 0) return;
  index_of_occurrence_kernel<<<grid_for(rows, 1, 65535LL * 8), kOccThreads, 0, stream>>>(
      x, dtype, n, inner, rows, values, occurrence, index_offset, out);
}

namespace {

// Lets `kernel` take `bytes` of dynamic shared memory on the current device (more than the default
// 48 KiB less its static shared memory); once per kernel and device.
void allow_shared(const void* kernel, size_t bytes) {
  static std::mutex mu;
  static std::set<std::pair<const void*, int>> done;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return;  // the launch reports it
  std::lock_guard<std::mutex> lock(mu);
  if (done.count({kernel, device})) return;
  // Recorded only once it took: a failure is retried on the next call (and this launch reports it).
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)) ==
      cudaSuccess)
    done.insert({kernel, device});
}

// The whole-tensor median's workspace: the state, the splitters, the two key buffers.
struct WholeLayout {
  size_t t = 0, buf1 = 0, buf2 = 0, total = 0;
  int64_t cap1 = 0, cap2 = 0;
};
WholeLayout whole_layout(DType dtype, int64_t n) {
  WholeLayout l;
  const size_t key = wide_keys(dtype) ? 8 : 4;
  l.cap1 = plan::inside_capacity(n);
  l.cap2 = plan::bucket_capacity(n);
  l.t = align16(sizeof(WholeState));
  l.buf1 = l.t + align16((plan::kBuckets + 1) * key);
  l.buf2 = l.buf1 + align16(l.cap1 * key);
  l.total = l.buf2 + align16(l.cap2 * key);
  return l;
}

bool whole_fast_path(DType dtype, int64_t n) {
  return n >= plan::kMinWhole && n < (int64_t{1} << 31) && dtype != DType::kBool &&
         dtype != DType::kComplex64 && dtype != DType::kComplex128;
}

}  // namespace

size_t median_whole_workspace_bytes(DType dtype, int64_t n) {
  return whole_fast_path(dtype, n) ? whole_layout(dtype, n).total : 0;
}

bool launch_median_whole(bool ignore_nan, const void* in, DType dtype, int64_t n, void* value, void* workspace,
                         cudaStream_t stream) {
  if (!whole_fast_path(dtype, n)) return false;
  const WholeLayout l = whole_layout(dtype, n);
  char* w = static_cast<char*>(workspace);
  auto* st = reinterpret_cast<WholeState*>(w);
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (sms < 1) sms = 1;
  const int64_t tiles = ceil_div(n, kPassTile);
  const int64_t finish_want = ceil_div(l.cap1, kSelThreads);
  const unsigned finish_blocks = static_cast<unsigned>(finish_want < 2LL * sms ? finish_want : 2LL * sms);
  bool ok = false;
  by_storage(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (!std::is_same_v<T, bool>) {
      using K = KeyOf<T>;
      K* t = reinterpret_cast<K*>(w + l.t);
      K* buf1 = reinterpret_cast<K*>(w + l.buf1);
      K* buf2 = reinterpret_cast<K*>(w + l.buf2);
      const T* x = static_cast<const T*>(in);
      // As many pass blocks as fit on the device at once (one wave; each loops over tiles).
      static const int per_sm = [] {
        int b = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, whole_pass_kernel<T>, kPassThreads, 0) != cudaSuccess)
          b = 0;
        return b < 1 ? 1 : b;
      }();
      const int64_t resident = int64_t{per_sm} * sms;
      const unsigned pass_blocks = static_cast<unsigned>(tiles < resident ? tiles : resident);
      whole_sample_kernel<T><<<1, plan::kSampleThreads, 0, stream>>>(x, n, st, t);
      whole_pass_kernel<T><<<pass_blocks, kPassThreads, 0, stream>>>(x, n, st, t, buf1, l.cap1);
      whole_finish_kernel<T><<<finish_blocks, kSelThreads, 0, stream>>>(ignore_nan, x, n, st, t, buf1, l.cap1,
                                                                         buf2, l.cap2, static_cast<T*>(value));
      unsigned status = 1;
      if (cudaMemcpyAsync(&status, &st->status, sizeof(status), cudaMemcpyDeviceToHost, stream) == cudaSuccess &&
          cudaStreamSynchronize(stream) == cudaSuccess)
        ok = status == 0;
    }
  });
  return ok;
}

size_t select_workspace_bytes(DType dtype, int64_t rows, int64_t n) {
  const int64_t count = rows * n;
  if (count == 0 || rows_in_shared(dtype, n)) return 0;
  size_t bytes = 0;
  sort(mode_for(dtype, rows), dtype, rows, n, nullptr, nullptr, nullptr, nullptr, nullptr, bytes,
       nullptr);
  return 2 * align16(count * sizeof(uint64_t)) + 2 * align16(count * sizeof(int32_t)) +
         align16(bytes);
}

void launch_select(SelectKind kind, int64_t k, const void* in, DType dtype, int64_t rows, int64_t n,
                   void* values, int64_t* indices, void* workspace, size_t workspace_bytes,
                   cudaStream_t stream) {
  const int64_t count = rows * n;
  if (count == 0) return;
  if (rows_in_shared(dtype, n)) {
    const unsigned blocks = grid_for(rows, 1, 65535LL * 8);
    by_storage(dtype, [&](auto tag) {
      using T = decltype(tag);
      auto* kernel = select_rows_kernel<T>;
      allow_shared(reinterpret_cast<const void*>(kernel), kSelSharedBytes);
      kernel<<<blocks, kSelThreads, n * sizeof(KeyOf<T>), stream>>>(
          kind, k, static_cast<const T*>(in), rows, static_cast<int>(n), static_cast<T*>(values), indices);
    });
    return;
  }
  const Mode mode = mode_for(dtype, rows);
  // CUB's temp storage first (the workspace itself is 512-byte aligned), then keys and positions.
  const size_t arrays =
      2 * align16(count * sizeof(uint64_t)) + 2 * align16(count * sizeof(int32_t));
  size_t bytes = workspace_bytes - arrays;
  void* temp = workspace;
  char* w = static_cast<char*>(workspace) + bytes;
  auto take = [&](size_t b) {
    char* p = w;
    w += align16(b);
    return p;
  };
  uint64_t* kin = reinterpret_cast<uint64_t*>(take(count * sizeof(uint64_t)));
  uint64_t* kout = reinterpret_cast<uint64_t*>(take(count * sizeof(uint64_t)));
  int32_t* vin = reinterpret_cast<int32_t*>(take(count * sizeof(int32_t)));
  int32_t* vout = reinterpret_cast<int32_t*>(take(count * sizeof(int32_t)));
  make_keys<<<grid_for(count, 256), 256, 0, stream>>>(in, dtype, rows, n, mode == Mode::kComposite,
                                                      kin, vin);
  sort(mode, dtype, rows, n, kin, kout, vin, vout, temp, bytes, stream);
  pick<<<grid_for(rows, 128), 128, 0, stream>>>(kind, k, in, dtype, itemsize(dtype), rows, n, kout,
                                                vout, is_float_dtype(dtype), wide_keys(dtype),
                                                values, indices);
}

namespace {

__global__ void value_index_backward_kernel(const double* __restrict__ g, const int64_t* __restrict__ indices,
                                            int64_t rows, int64_t n, double* __restrict__ dx, int64_t* bad) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    const int64_t j = indices[r];
    if (j < 0 || j >= n) {
      bad[0] = 1;
      atomicExch(reinterpret_cast<unsigned long long*>(bad + 1), static_cast<unsigned long long>(j));
      continue;
    }
    dx[r * n + j] = g[r];
  }
}

__device__ __forceinline__ bool median_hit(double e, double v) { return isnan(v) ? isnan(e) : e == v; }

__global__ void median_hits_kernel(const double* __restrict__ x, int64_t count, const double* __restrict__ v,
                                   int64_t* hits) {
  int64_t mine = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    mine += median_hit(x[i], *v) ? 1 : 0;
  if (mine > 0) atomicAdd(reinterpret_cast<unsigned long long*>(hits), static_cast<unsigned long long>(mine));
}

__global__ void median_backward_kernel(const double* __restrict__ x, int64_t count, const double* __restrict__ g,
                                       const double* __restrict__ v, const int64_t* __restrict__ hits,
                                       double* __restrict__ dx) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x)
    dx[i] = median_hit(x[i], *v) ? *g / static_cast<double>(*hits) : 0.0;
}

}  // namespace

void launch_value_index_backward(const double* g, const int64_t* indices, int64_t rows, int64_t n,
                                 double* dx, int64_t* bad_index, cudaStream_t stream) {
  if (rows == 0) return;
  value_index_backward_kernel<<<grid_for(rows, 256), 256, 0, stream>>>(g, indices, rows, n, dx, bad_index);
}

void launch_median_backward(const double* x, int64_t count, const double* g, const double* v,
                            double* dx, int64_t* hits, cudaStream_t stream) {
  if (count == 0) return;
  median_hits_kernel<<<grid_for(count, 256), 256, 0, stream>>>(x, count, v, hits);
  median_backward_kernel<<<grid_for(count, 256), 256, 0, stream>>>(x, count, g, v, hits, dx);
}

}  // namespace dtensor::kernels::cuda::detail
