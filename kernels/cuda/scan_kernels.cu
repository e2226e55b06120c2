// Scans along the rows of a contiguous [rows, n] tensor through CUB's DeviceScan::
// InclusiveScanByKey, keyed by the row index: one device-wide scan covers every row, so a single
// long row and many short rows both use the whole GPU. Values are in the compute type (the host
// converts 16-bit floats and small integers first).
#include <thrust/iterator/counting_iterator.h>
#include <thrust/iterator/transform_iterator.h>

#include <cub/device/device_scan.cuh>

#include "kernels/cuda/device_util.cuh"

namespace dtensor::kernels::cuda::detail {
namespace {

struct RowOf {
  int64_t n;
  __host__ __device__ int64_t operator()(int64_t i) const { return i / n; }
};
using KeyIt = thrust::transform_iterator<RowOf, thrust::counting_iterator<int64_t>>;

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

template <typename T>
struct Pair {
  T v;
  int64_t i;
};

// b (the later element or segment) replaces a when it is NaN, or when neither is NaN and b >= a
// (cummax) / b <= a (cummin): associative, so it scans in parallel.
template <typename T>
struct CumMaxMinOp {
  bool is_max;
  __device__ Pair<T> operator()(const Pair<T>& a, const Pair<T>& b) const {
    if (is_nan(b.v)) return b;
    if (is_nan(a.v)) return a;
    return (is_max ? b.v >= a.v : b.v <= a.v) ? b : a;
  }
};

template <typename T>
struct MakePair {
  const T* x;
  int64_t n;
  __host__ __device__ Pair<T> operator()(int64_t i) const { return {x[i], i % n}; }
};

template <typename T>
__global__ void split_pairs(const Pair<T>* p, T* values, int64_t* indices, int64_t count) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < count;
       t += int64_t(gridDim.x) * blockDim.x) {
    values[t] = p[t].v;
    indices[t] = p[t].i;
  }
}

size_t align16(size_t b) { return (b + 15) / 16 * 16; }

// Runs (or sizes, when temp is null) the scan; returns CUB's temp bytes in `bytes`.
template <typename T>
cudaError_t run_scan(ScanKind kind, const T* in, T* out, Pair<T>* pairs, int64_t rows, int64_t n,
                     void* temp, size_t& bytes, cudaStream_t stream) {
  const int64_t count = rows * n;
  KeyIt keys(thrust::counting_iterator<int64_t>(0), RowOf{n});
  switch (kind) {
    case ScanKind::kSum:
      return cub::DeviceScan::InclusiveScanByKey(temp, bytes, keys, in, out, SumOp<T>(), count,
                                                 ::cuda::std::equal_to<>(), stream);
    case ScanKind::kProd:
      return cub::DeviceScan::InclusiveScanByKey(temp, bytes, keys, in, out, ProdOp<T>(), count,
                                                 ::cuda::std::equal_to<>(), stream);
    case ScanKind::kLogSumExp:
      if constexpr (std::is_floating_point_v<T>) {
        return cub::DeviceScan::InclusiveScanByKey(temp, bytes, keys, in, out, LogAddExpOp<T>(),
                                                   count, ::cuda::std::equal_to<>(), stream);
      }
      return cudaErrorInvalidValue;
    case ScanKind::kMax:
    case ScanKind::kMin: {
      thrust::transform_iterator<MakePair<T>, thrust::counting_iterator<int64_t>> values(
          thrust::counting_iterator<int64_t>(0), MakePair<T>{in, n});
      return cub::DeviceScan::InclusiveScanByKey(temp, bytes, keys, values, pairs,
                                                 CumMaxMinOp<T>{kind == ScanKind::kMax}, count,
                                                 ::cuda::std::equal_to<>(), stream);
    }
  }
  return cudaErrorInvalidValue;
}

}  // namespace

size_t scan_workspace_bytes(ScanKind kind, Compute c, int64_t rows, int64_t n) {
  if (rows * n == 0) return 0;
  size_t total = 0;
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    size_t bytes = 0;
    run_scan<T>(kind, nullptr, nullptr, nullptr, rows, n, nullptr, bytes, nullptr);
    const bool pairs = kind == ScanKind::kMax || kind == ScanKind::kMin;
    // CUB's temp storage first (the workspace itself is 512-byte aligned), then the pairs.
    total = align16(bytes) + (pairs ? align16(static_cast<size_t>(rows * n) * sizeof(Pair<T>)) : 0);
  });
  return total;
}

void launch_scan(ScanKind kind, Compute c, const void* in, void* out, int64_t* indices,
                 int64_t rows, int64_t n, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream) {
  if (rows * n == 0) return;
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    const bool pairs = kind == ScanKind::kMax || kind == ScanKind::kMin;
    const size_t pair_bytes = pairs ? align16(static_cast<size_t>(rows * n) * sizeof(Pair<T>)) : 0;
    size_t bytes = workspace_bytes - pair_bytes;
    void* temp = workspace;
    Pair<T>* p =
        pairs ? reinterpret_cast<Pair<T>*>(static_cast<char*>(workspace) + bytes) : nullptr;
    run_scan<T>(kind, static_cast<const T*>(in), static_cast<T*>(out), p, rows, n, temp, bytes,
                stream);
    if (pairs) {
      split_pairs<T>
          <<<grid_for(rows * n, 256), 256, 0, stream>>>(p, static_cast<T*>(out), indices, rows * n);
    }
  });
}

}  // namespace dtensor::kernels::cuda::detail
