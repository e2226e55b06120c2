// Scans along the rows of a contiguous [rows, n] tensor: sums, products and logcumsumexp of 256
// rows or more a block each (CUB's BlockScan, tile by tile); the rest through CUB's DeviceScan: a
// single row by InclusiveScan, several by InclusiveScanByKey keyed by the row index, so a few long
// rows still use the whole GPU. Sums use ::cuda::std::plus so that CUB takes its tuned policy.
// cummax / cummin, any number of rows, are one InclusiveScan with cuda::maximum over packed
// (row, value code, position) keys (scan_key.h): one read of the values, one write of values and
// int64 indices, no pair and no row key loaded. Values are in the compute type (the host converts
// 16-bit floats and small integers first).
//
// Rows and in-row positions are computed per element, so their arithmetic is 32-bit, with a
// multiply-high for i / n, whenever rows * n < 2^31: GPUs have no integer divide instruction, and
// an int64 division per element weighed on these memory-bound scans.
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/tabulate_output_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cub/block/block_load.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/block/block_store.cuh>
#include <cub/device/device_scan.cuh>
#include <cuda/functional>
#include <cuda/std/functional>
#include <math_constants.h>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/scan_key.h"

namespace dtensor::kernels::cuda::detail {
namespace {

// i / n and i % n for flat indices i >= 0 in the index type K.
template <typename K>
struct RowDiv;

template <>
struct RowDiv<int64_t> {
  int64_t n;
  explicit RowDiv(int64_t n) : n(n) {}
  __host__ __device__ int64_t row(int64_t i) const { return i / n; }
};

template <>
struct RowDiv<uint32_t> {  // FastDiv32: exact for 0 <= i < 2^31 and 1 <= n < 2^31
  uint32_t n;
  FastDiv32 fast;
  explicit RowDiv(int64_t v) : n(static_cast<uint32_t>(v)), fast(v) {}
  __host__ __device__ uint32_t row(uint32_t i) const { return fast(i); }
};

template <typename K>
struct RowOf {
  RowDiv<K> div;
  __host__ __device__ K operator()(K i) const { return div.row(i); }
};
template <typename K>
using KeyIt = thrust::transform_iterator<RowOf<K>, thrust::counting_iterator<K>>;

template <typename T>
struct SumOp {
  __device__ T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    } else {
      return a + b;
    }
  }
};

template <typename T>
struct ProdOp {
  __device__ T operator()(T a, T b) const {
    if constexpr (std::is_integral_v<T>) {
      return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
    } else {
      return a * b;
    }
  }
};

// The sum for CUB's device scans: ::cuda::std::plus, which CUB recognizes and runs with its tuned
// policy for the architecture (on sm_90 for float: 128 threads x 24 items and a tuned look-back
// delay; SumOp got the generic 128 x 15). Integers add as uint64_t: the same bits as SumOp's
// wrapping sum, and no signed overflow.
template <typename T>
using DeviceSum = std::conditional_t<std::is_integral_v<T>, ::cuda::std::plus<uint64_t>, ::cuda::std::plus<T>>;

// torch's logaddexp helper (see kernels/cpu/scan.h).
template <typename T>
struct LogAddExpOp {
  __device__ T operator()(T a, T b) const {
    if (is_nan(a) || is_nan(b)) return a + b;
    const T hi = a > b ? a : b, lo = a > b ? b : a;
    if (lo == hi && isinf(hi)) return a;
    return hi + log1p(exp(lo - hi));
  }
};

// cummax / cummin as one max-scan of packed keys over all rows (scan_key.h): element i's key from
// its value, row and position (computed, not loaded), ...
template <typename T, typename K, typename Key>
struct MakeKey {
  const T* x;
  RowDiv<K> div;
  bool one_row;  // with 64-bit indices: skip the division (a 32-bit i / n is a multiply-high)
  scan_key::Layout<T, Key> layout;
  bool is_max;
  __host__ __device__ Key operator()(K i) const {
    K row;
    if constexpr (std::is_same_v<K, uint32_t>) {
      row = div.row(i);  // no branch: the loads of a thread's items issue back to back
    } else {
      row = one_row ? K(0) : div.row(i);
    }
    const K pos = static_cast<K>(i - row * static_cast<K>(div.n));
    return layout.pack(static_cast<uint64_t>(row), scan_key::code_of<T>(x[i], is_max),
                       static_cast<uint64_t>(pos));
  }
};

// ... and the scanned key written straight into the value and the int64 index (no pair workspace,
// no split pass). NaN and zero are read again at the kept index (scan_key::needs_reload).
template <typename T, typename Key>
struct WriteKey {
  const T* x;
  T* values;
  int64_t* indices;
  int64_t n;
  scan_key::Layout<T, Key> layout;
  bool is_max;
  __host__ __device__ void operator()(ptrdiff_t t, Key k) const {
    const uint64_t pos = layout.pos(k);
    const scan_key::Code<T> code = layout.code(k);
    T v = scan_key::value_of<T>(code, is_max);
    if (scan_key::needs_reload<T>(code, is_max))
      v = x[static_cast<int64_t>(layout.row(k)) * n + static_cast<int64_t>(pos)];
    values[t] = v;
    indices[t] = static_cast<int64_t>(pos);
  }
};

// The key type of T's keys when flat indices are K: 64 bits for float with 32-bit indices (row and
// position then take at most 32 bits: bit_width(rows - 1) + bit_width(n - 1) <= 32 when rows * n
// < 2^31), else 128.
template <typename T, typename K>
using KeyOf = std::conditional_t<sizeof(T) == 4 && std::is_same_v<K, uint32_t>, uint64_t, scan_key::u128>;

// One inclusive scan of `count` items: plain for a single row, else keyed by the row.
template <typename K, typename In, typename Out, typename Op>
cudaError_t scan_rows(bool one_row, const RowDiv<K>& div, In in, Out out, Op op, K count,
                      void* temp, size_t& bytes, cudaStream_t stream) {
  if constexpr (std::is_same_v<K, uint32_t>) {
    if (one_row) return cub::DeviceScan::InclusiveScan(temp, bytes, in, out, op, count, stream);
  }
  // A single row of >= 2^31 items is scanned keyed (one key), sparing another instantiation.
  const KeyIt<K> keys(thrust::counting_iterator<K>(0), RowOf<K>{div});
  return cub::DeviceScan::InclusiveScanByKey(temp, bytes, keys, in, out, op, count,
                                             ::cuda::std::equal_to<>(), stream);
}

// Runs (or sizes, when temp is null) the scan; returns CUB's temp bytes in `bytes`.
template <typename T, typename K>
cudaError_t run_scan(ScanKind kind, const T* in, T* out, int64_t* indices, int64_t rows, int64_t n,
                     void* temp, size_t& bytes, cudaStream_t stream) {
  const K count = static_cast<K>(rows * n);
  const RowDiv<K> div(n);
  const bool one_row = rows == 1;
  switch (kind) {
    case ScanKind::kSum:
      return scan_rows(one_row, div, in, out, DeviceSum<T>(), count, temp, bytes, stream);
    case ScanKind::kProd:
      return scan_rows(one_row, div, in, out, ProdOp<T>(), count, temp, bytes, stream);
    case ScanKind::kLogSumExp:
      if constexpr (std::is_floating_point_v<T>) {
        return scan_rows(one_row, div, in, out, LogAddExpOp<T>(), count, temp, bytes, stream);
      }
      return cudaErrorInvalidValue;
    case ScanKind::kMax:
    case ScanKind::kMin: {  // one flat max-scan: the row is part of the key
      using Key = KeyOf<T, K>;  // uint64_t only where fits_64 holds (scan_key_test checks the bound)
      const bool is_max = kind == ScanKind::kMax;
      const scan_key::Layout<T, Key> layout(n);
      const thrust::transform_iterator<MakeKey<T, K, Key>, thrust::counting_iterator<K>> keys(
          thrust::counting_iterator<K>(0), MakeKey<T, K, Key>{in, div, one_row, layout, is_max});
      const thrust::tabulate_output_iterator<WriteKey<T, Key>> write(
          WriteKey<T, Key>{in, out, indices, n, layout, is_max});
      return cub::DeviceScan::InclusiveScan(temp, bytes, keys, write, ::cuda::maximum<>(), count, stream);
    }
  }
  return cudaErrorInvalidValue;
}

// ---- Many rows: one block a row, tile by tile (kRowTile elements), the tile's aggregate carried
// into the next, so each element is read and written once (the keyed device scan also reads
// keys and writes tile states). Pads past the row's end only reach the last tile's aggregate,
// which nothing uses.
constexpr int kRowThreads = 256;
constexpr int kRowItems = 8;
constexpr int64_t kRowTile = kRowThreads * kRowItems;

// The running total of the tiles before: cub calls it once a tile with the tile's aggregate and
// applies what it returns as the tile's prefix.
template <typename V, typename Op>
struct Carry {
  V total;
  Op op;
  __device__ V operator()(const V& tile) {
    const V before = total;
    total = op(total, tile);
    return before;
  }
};

// Element j of a row.
template <typename T>
struct RowValue {
  const T* row;
  __device__ T operator()(int64_t j) const { return row[j]; }
};

template <typename T, typename V, typename Make, typename Op>
__global__ void __launch_bounds__(kRowThreads)
    scan_rows_kernel(const T* in, void* out, int64_t rows, int64_t n, Op op) {
  using Load = cub::BlockLoad<V, kRowThreads, kRowItems, cub::BLOCK_LOAD_WARP_TRANSPOSE>;
  using Scan = cub::BlockScan<V, kRowThreads>;
  using Store = cub::BlockStore<V, kRowThreads, kRowItems, cub::BLOCK_STORE_WARP_TRANSPOSE>;
  __shared__ union {
    typename Load::TempStorage load;
    typename Scan::TempStorage scan;
    typename Store::TempStorage store;
  } temp;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* row = in + r * n;
    Carry<V, Op> carry{V{}, op};
    for (int64_t t0 = 0; t0 < n; t0 += kRowTile) {
      const int valid = static_cast<int>(n - t0 < kRowTile ? n - t0 : kRowTile);
      const thrust::transform_iterator<Make, thrust::counting_iterator<int64_t>> src(
          thrust::counting_iterator<int64_t>(t0), Make{row});
      V items[kRowItems];
      Load(temp.load).Load(src, items, valid, src[0]);  // pads repeat the tile's first element
      __syncthreads();
      if (t0 == 0) {
        V aggregate;
        Scan(temp.scan).InclusiveScan(items, items, op, aggregate);
        carry.total = aggregate;
      } else {
        Scan(temp.scan).InclusiveScan(items, items, op, carry);
      }
      __syncthreads();
      Store(temp.store).Store(static_cast<T*>(out) + r * n + t0, items, valid);
      __syncthreads();
    }
  }
}

// Whether launch_scan takes scan_rows_kernel: enough rows to fill the GPU a block each. Not for
// cummax / cummin: their (value, index) pairs stored from the blocked layout ran at 350 us on
// [4096, 4096] float32 on an H200, against 187 us for the keyed device scan (the path before the
// packed keys); they now take the flat max-scan of packed keys for every shape.
bool rows_path(ScanKind kind, int64_t rows) {
  return rows >= 256 && kind != ScanKind::kMax && kind != ScanKind::kMin;
}

template <typename T>
void launch_scan_rows(ScanKind kind, const T* in, void* out, int64_t rows, int64_t n, cudaStream_t stream) {
  const unsigned blocks = grid_for(rows, 1, 65535LL * 8);
  switch (kind) {
    case ScanKind::kSum:
      scan_rows_kernel<T, T, RowValue<T>, SumOp<T>>
          <<<blocks, kRowThreads, 0, stream>>>(in, out, rows, n, SumOp<T>());
      return;
    case ScanKind::kProd:
      scan_rows_kernel<T, T, RowValue<T>, ProdOp<T>>
          <<<blocks, kRowThreads, 0, stream>>>(in, out, rows, n, ProdOp<T>());
      return;
    case ScanKind::kLogSumExp:
      if constexpr (std::is_floating_point_v<T>)
        scan_rows_kernel<T, T, RowValue<T>, LogAddExpOp<T>>
            <<<blocks, kRowThreads, 0, stream>>>(in, out, rows, n, LogAddExpOp<T>());
      return;
    case ScanKind::kMax:
    case ScanKind::kMin:
      break;  // not taken (rows_path)
  }
}

// Whether flat indices, row keys and in-row positions fit the 32-bit path.
bool index32(int64_t rows, int64_t n) { return rows * n < (int64_t{1} << 31); }

}  // namespace

size_t scan_workspace_bytes(ScanKind kind, Compute c, int64_t rows, int64_t n) {
  if (rows * n == 0 || rows_path(kind, rows)) return 0;
  size_t bytes = 0;
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    // Only CUB's temp storage: cummax / cummin write their values and indices directly.
    if (index32(rows, n))
      run_scan<T, uint32_t>(kind, nullptr, nullptr, nullptr, rows, n, nullptr, bytes, nullptr);
    else
      run_scan<T, int64_t>(kind, nullptr, nullptr, nullptr, rows, n, nullptr, bytes, nullptr);
  });
  return bytes;
}

void launch_scan(ScanKind kind, Compute c, const void* in, void* out, int64_t* indices,
                 int64_t rows, int64_t n, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream) {
  if (rows * n == 0) return;
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    size_t bytes = workspace_bytes;  // scan_workspace_bytes' size for the same path
    const T* x = static_cast<const T*>(in);
    T* y = static_cast<T*>(out);
    if (rows_path(kind, rows)) {
      launch_scan_rows<T>(kind, x, y, rows, n, stream);
      return;
    }
    if (index32(rows, n))
      run_scan<T, uint32_t>(kind, x, y, indices, rows, n, workspace, bytes, stream);
    else
      run_scan<T, int64_t>(kind, x, y, indices, rows, n, workspace, bytes, stream);
  });
}

namespace {

// kernels/cpu/scan.cc's log_add_exp: NaN propagates; equal infinities give themselves.
__device__ double log_add_exp_d(double a, double b) {
  if (isnan(a) || isnan(b)) return CUDART_NAN;
  const double lo = fmin(a, b), hi = fmax(a, b);
  if (lo == hi && isinf(lo)) return a;
  return hi + log1p(exp(lo - hi));
}

__global__ void scan_backward_kernel(ScanBackwardKind kind, const double* __restrict__ g,
                                     const double* __restrict__ x, const double* __restrict__ out,
                                     const int64_t* __restrict__ indices, int64_t index_offset,
                                     int64_t rows, int64_t n, double* __restrict__ dx, int64_t* bad) {
  for (int64_t r = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; r < rows;
       r += int64_t(gridDim.x) * blockDim.x) {
    const double* gr = g + r * n;
    double* d = dx + r * n;
    switch (kind) {
      case ScanBackwardKind::kSum: {
        double s = 0;
        for (int64_t i = n - 1; i >= 0; --i) d[i] = s += gr[i];
        break;
      }
      case ScanBackwardKind::kProd: {  // S_k = g_k + x_{k+1} * S_{k+1}; dx_k = out_{k-1} * S_k
        const double* xs = x + r * n;
        const double* ps = out + r * n;
        double s = 0;
        for (int64_t k = n - 1; k >= 0; --k) {
          s = k + 1 < n ? gr[k] + xs[k + 1] * s : gr[k];
          d[k] = (k > 0 ? ps[k - 1] : 1.0) * s;
        }
        break;
      }
      case ScanBackwardKind::kLogSumExp: {
        const double* xs = x + r * n;
        const double* os = out + r * n;
        double pos = -CUDART_INF, neg = -CUDART_INF;
        for (int64_t j = n - 1; j >= 0; --j) {
          if (gr[j] > 0) pos = log_add_exp_d(pos, log(gr[j]) - os[j]);
          if (gr[j] < 0) neg = log_add_exp_d(neg, log(-gr[j]) - os[j]);
          d[j] = exp(pos + xs[j]) - exp(neg + xs[j]);
        }
        break;
      }
      case ScanBackwardKind::kMaxMin: {
        const int64_t* is = indices + r * n;
        for (int64_t i = 0; i < n; ++i) d[i] = 0;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t at = is[i] - index_offset;
          if (is[i] >= 0 && at < 0) continue;  // an earlier shard's carry
          if (at < 0 || at >= n) {
            bad[0] = 1;
            atomicExch(reinterpret_cast<unsigned long long*>(bad + 1), static_cast<unsigned long long>(is[i]));
            continue;
          }
          d[at] += gr[i];
        }
        break;
      }
    }
  }
}

}  // namespace

void launch_scan_backward(ScanBackwardKind kind, const double* g, const double* x, const double* out,
                          const int64_t* indices, int64_t index_offset, int64_t rows, int64_t n,
                          double* dx, int64_t* bad_index, cudaStream_t stream) {
  if (rows == 0 || n == 0) return;
  scan_backward_kernel<<<grid_for(rows, 128), 128, 0, stream>>>(kind, g, x, out, indices, index_offset, rows,
                                                                n, dx, bad_index);
}

}  // namespace dtensor::kernels::cuda::detail
