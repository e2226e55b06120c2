// Order statistics per row (median, nanmedian, kthvalue) by radix sort: every element becomes an
// unsigned key that orders like kernels/cpu/selection.h compares (numbers ascending, -0 == +0, NaN
// after every number), paired with its position in the row. Radix sort is stable, so equal values
// stay in index order -- exactly the CPU kernels' (value, index) order -- and the answer is the
// element at one rank of its row.
//
// Rows whose keys fit in 40 KiB of shared memory are selected a block a row (select_rows_kernel).
// Longer rows are sorted together: 32-bit keys get the row index in their upper 32 bits and one
// DeviceRadixSort covers all rows (fast for one long row as for many short ones); 64-bit keys
// (float64, int64) of several rows use DeviceSegmentedRadixSort.
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cub/device/device_radix_sort.cuh>
#include <cub/device/device_segmented_radix_sort.cuh>

#include "kernels/cuda/device_util.cuh"

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

__device__ __forceinline__ uint64_t key_of(const void* x, DType dt, int64_t i) {
  switch (dt) {
    case DType::kFloat64: {
      const double v = static_cast<const double*>(x)[i];
      if (v != v) return ~uint64_t{0};
      uint64_t u = static_cast<uint64_t>(__double_as_longlong(v == 0.0 ? 0.0 : v));
      return (u >> 63) ? ~u : (u | (uint64_t{1} << 63));
    }
    case DType::kInt64:
      return static_cast<uint64_t>(static_cast<const int64_t*>(x)[i]) ^ (uint64_t{1} << 63);
    case DType::kInt32:
      return static_cast<uint32_t>(static_cast<const int32_t*>(x)[i]) ^ 0x80000000u;
    case DType::kBool:
      return static_cast<const bool*>(x)[i] ? 1u : 0u;
    default: {  // float32, bfloat16, float16: through float (exact)
      const float v = load_as<float>(x, dt, i);
      if (v != v) return 0xffffffffu;
      uint32_t u = static_cast<uint32_t>(__float_as_int(v == 0.0f ? 0.0f : v));
      return (u >> 31) ? static_cast<uint32_t>(~u) : (u | 0x80000000u);
    }
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

// ---- Rows short enough for shared memory: one block a row keeps the row's sort keys there and
// finds the rank-th (key, index) by a radix select, 8 bits a round (4 rounds for 32-bit keys, 8
// for 64-bit), then the position of that key's occurrence in index order -- the element a stable
// sort would put at that rank, without sorting (the sort moved 24 bytes per element per 8 bits).
constexpr int kSelThreads = 256;
// The keys of a row: 10240 32-bit or 5120 64-bit; with the kernel's ~3 KiB of static shared
// memory this stays under the 48 KiB a launch gets without opting in (48 KiB of keys failed).
constexpr size_t kSelSharedBytes = 40 * 1024;

template <typename K>
__global__ void __launch_bounds__(kSelThreads)
    select_rows_kernel(SelectKind kind, int64_t k, const void* x, DType dt, size_t item, int64_t rows, int64_t n,
                       bool floating, void* values, int64_t* indices) {
  extern __shared__ unsigned char raw[];
  K* keys = reinterpret_cast<K*>(raw);
  __shared__ unsigned int hist[256];
  __shared__ int64_t part[kSelThreads];
  __shared__ int64_t shared_rem, shared_found, shared_nan;
  __shared__ K shared_prefix;
  constexpr int kBits = 8 * sizeof(K);
  const K nan_key = ~K{0};
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    int64_t nan = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const K key = static_cast<K>(key_of(x, dt, r * n + j));
      keys[j] = key;
      nan += floating && key == nan_key;
    }
    part[threadIdx.x] = nan;
    __syncthreads();
    if (threadIdx.x == 0) {
      int64_t total = 0;
      for (int t = 0; t < kSelThreads; ++t) total += part[t];
      shared_nan = total;
    }
    __syncthreads();
    nan = shared_nan;
    int64_t rem;  // the rank (0-based), as pick() chooses it
    switch (kind) {
      case SelectKind::kMedian:
        rem = nan > 0 ? n - nan : (n - 1) / 2;
        break;
      case SelectKind::kNanMedian:
        rem = n - nan == 0 ? 0 : (n - nan - 1) / 2;
        break;
      default:
        rem = k - 1;
        break;
    }
    K prefix = 0, mask = 0;
    for (int shift = kBits - 8; shift >= 0; shift -= 8) {
      hist[threadIdx.x] = 0;  // kSelThreads == 256 buckets
      __syncthreads();
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
        const K key = keys[j];
        if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xff], 1u);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        int b = 0;
        while (b < 255 && rem >= hist[b]) rem -= hist[b++];
        shared_rem = rem;
        shared_prefix = prefix | (static_cast<K>(b) << shift);
      }
      __syncthreads();
      rem = shared_rem;
      prefix = shared_prefix;
      mask |= static_cast<K>(0xff) << shift;
      __syncthreads();  // hist is cleared next round
    }
    // The rem-th (0-based) element with key == prefix in index order: each thread counts its
    // contiguous part, an exclusive prefix over the threads finds the part that holds it.
    const int64_t per = ceil_div(n, kSelThreads);
    const int64_t j0 = threadIdx.x * per < n ? threadIdx.x * per : n, j1 = j0 + per < n ? j0 + per : n;
    int64_t mine = 0;
    for (int64_t j = j0; j < j1; ++j) mine += keys[j] == prefix;
    part[threadIdx.x] = mine;
    __syncthreads();
    if (threadIdx.x == 0) {
      int64_t run = 0;
      for (int t = 0; t < kSelThreads; ++t) {
        const int64_t c = part[t];
        part[t] = run;
        run += c;
      }
    }
    __syncthreads();
    int64_t seen = part[threadIdx.x];
    if (rem >= seen && rem < seen + mine)
      for (int64_t j = j0; j < j1; ++j)
        if (keys[j] == prefix && seen++ == rem) {
          shared_found = j;
          break;
        }
    __syncthreads();
    if (threadIdx.x == 0) {
      const int64_t j = shared_found;
      const char* src = static_cast<const char*>(x) + (r * n + j) * item;
      char* dst = static_cast<char*>(values) + r * item;
      for (size_t b = 0; b < item; ++b) dst[b] = src[b];
      if (indices != nullptr) indices[r] = j;
    }
    __syncthreads();
  }
}

// Whether launch_select takes select_rows_kernel (no workspace) for rows of n elements.
bool rows_in_shared(DType dt, int64_t n) {
  return static_cast<size_t>(n) * (wide_keys(dt) ? 8 : 4) <= kSelSharedBytes;
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
    if (wide_keys(dtype))
      select_rows_kernel<uint64_t><<<blocks, kSelThreads, n * sizeof(uint64_t), stream>>>(
          kind, k, in, dtype, itemsize(dtype), rows, n, is_float_dtype(dtype), values, indices);
    else
      select_rows_kernel<uint32_t><<<blocks, kSelThreads, n * sizeof(uint32_t), stream>>>(
          kind, k, in, dtype, itemsize(dtype), rows, n, is_float_dtype(dtype), values, indices);
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
