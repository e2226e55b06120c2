// Reductions along the middle dim of a contiguous [outer, n, inner] tensor: sum / mean / max / min,
// and max / min with their index. Long reductions are split over several blocks (partial results in
// a workspace, then a second pass), so a whole-tensor sum uses the whole GPU.
#include "kernels/cuda/device_util.cuh"

namespace dtensor::kernels::cuda::detail {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kTargetBlocks = 512;  // enough to fill any current GPU
constexpr int64_t kMinRowChunk = 4096;  // elements a block reduces at least (inner == 1)
constexpr int64_t kMinColChunk = 64;    // elements a thread reduces at least (inner > 1)

// How many pieces each reduction of n elements is split into (1: a single pass).
int64_t splits_for(int64_t outer, int64_t n, int64_t inner) {
  if (outer * inner == 0 || n == 0) return 1;
  int64_t want, most;
  if (inner == 1) {
    want = ceil_div(kTargetBlocks, outer);
    most = ceil_div(n, kMinRowChunk);
  } else {
    want = ceil_div(kTargetBlocks * kThreads, outer * inner);
    most = ceil_div(n, kMinColChunk);
  }
  int64_t s = want < most ? want : most;
  if (s > 1024) s = 1024;
  return s < 1 ? 1 : s;
}

DType acc_dtype(Compute c) {
  return c == Compute::kFloat    ? DType::kFloat32
         : c == Compute::kDouble ? DType::kFloat64
                                 : DType::kInt64;
}

template <typename T>
struct ValueOp {
  ReduceKind kind;
  __device__ T identity() const {
    if (kind == ReduceKind::kMax) return neg_inf<T>();
    if (kind == ReduceKind::kMin) return pos_inf<T>();
    if (kind == ReduceKind::kProd) return T(1);
    return T(0);
  }
  __device__ T operator()(T a, T b) const {
    switch (kind) {
      case ReduceKind::kSum:
      case ReduceKind::kMean:
      case ReduceKind::kVar:  // the second pass adds squared deviations / shifted exponentials
      case ReduceKind::kStd:
      case ReduceKind::kLogSumExp:
        if constexpr (std::is_integral_v<T>) {
          return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
        } else {
          return a + b;
        }
      case ReduceKind::kProd:
        if constexpr (std::is_integral_v<T>) {
          return static_cast<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
        } else {
          return a * b;
        }
      case ReduceKind::kMax:
        if (is_nan(a)) return a;
        if (is_nan(b)) return b;
        return a > b ? a : b;
      case ReduceKind::kMin:
        if (is_nan(a)) return a;
        if (is_nan(b)) return b;
        return a < b ? a : b;
    }
    return a;
  }
};

// The second pass of the two-pass reductions: `center` (one value per (o, i)) is the mean (var,
// std) or the max (logsumexp; an infinite max shifts by 0, as the CPU kernel).
struct Center {
  const void* values = nullptr;  // null: one-pass reduction (no transform)
  double correction = 0;         // var / std
};

template <typename T>
__device__ __forceinline__ T center_at(ReduceKind kind, const Center& c, int64_t k) {
  T m = static_cast<const T*>(c.values)[k];
  if constexpr (std::is_floating_point_v<T>) {
    if (kind == ReduceKind::kLogSumExp && isinf(m)) m = T(0);
  }
  return m;
}

// The element fed to the accumulation: x itself, or its squared deviation / shifted exponential.
template <typename T>
__device__ __forceinline__ T pre(ReduceKind kind, T x, T m) {
  if constexpr (std::is_floating_point_v<T>) {
    if (kind == ReduceKind::kVar || kind == ReduceKind::kStd) return (x - m) * (x - m);
    if (kind == ReduceKind::kLogSumExp) return exp(x - m);
  }
  return x;
}

template <typename T>
__device__ __forceinline__ T finish_value(ReduceKind kind, T acc, int64_t n, const Center& c,
                                          int64_t k) {
  if constexpr (std::is_floating_point_v<T>) {
    switch (kind) {
      case ReduceKind::kMean:
        return acc / static_cast<T>(n);
      case ReduceKind::kVar:
      case ReduceKind::kStd: {
        const double d = static_cast<double>(n) - c.correction;
        const T v = acc / static_cast<T>(d > 0 ? d : 0.0);
        return kind == ReduceKind::kStd ? sqrt(v) : v;
      }
      case ReduceKind::kLogSumExp:
        return log(acc) + center_at<T>(kind, c, k);
      default:
        return acc;
    }
  } else {
    if (kind == ReduceKind::kMean) return acc / static_cast<T>(n);
    return acc;
  }
}

// Reduces in[o, chunk of n, i] for every (o, i); writes out[o, split, i] (out has `splits` entries
// per (o, i)), finishing (mean / var / std / logsumexp with `total_n` elements, convert to
// out_dtype) when `finish`. `transform`: apply pre() to the input elements (first pass).
template <typename T>
__global__ void reduce_rows_kernel(ValueOp<T> op, const void* in, DType in_dtype, void* out,
                                   DType out_dtype, int64_t outer, int64_t n, int64_t splits,
                                   bool finish, int64_t total_n, Center center, bool transform) {
  __shared__ T shared[32];
  const int64_t chunk = ceil_div(n, splits);
  for (int64_t r = blockIdx.x; r < outer * splits; r += gridDim.x) {
    const int64_t o = r / splits, s = r % splits;
    const int64_t begin = s * chunk, end = begin + chunk < n ? begin + chunk : n;
    const T m = transform ? center_at<T>(op.kind, center, o) : T(0);
    T acc = op.identity();
    for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
      const T x = load_as<T>(in, in_dtype, o * n + j);
      acc = op(acc, transform ? pre<T>(op.kind, x, m) : x);
    }
    acc = block_reduce(acc, op, shared, op.identity());
    if (threadIdx.x == 0) {
      if (finish) acc = finish_value<T>(op.kind, acc, total_n, center, o);
      store_as<T>(out, out_dtype, r, acc);
    }
  }
}

template <typename T>
__global__ void reduce_cols_kernel(ValueOp<T> op, const void* in, DType in_dtype, void* out,
                                   DType out_dtype, int64_t outer, int64_t n, int64_t inner,
                                   int64_t splits, bool finish, int64_t total_n, Center center,
                                   bool transform) {
  const int64_t chunk = ceil_div(n, splits);
  const int64_t total = outer * splits * inner;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t % inner, s = (t / inner) % splits, o = t / (inner * splits);
    const int64_t begin = s * chunk, end = begin + chunk < n ? begin + chunk : n;
    const T m = transform ? center_at<T>(op.kind, center, o * inner + i) : T(0);
    T acc = op.identity();
    for (int64_t j = begin; j < end; ++j) {
      const T x = load_as<T>(in, in_dtype, (o * n + j) * inner + i);
      acc = op(acc, transform ? pre<T>(op.kind, x, m) : x);
    }
    if (finish) acc = finish_value<T>(op.kind, acc, total_n, center, o * inner + i);
    store_as<T>(out, out_dtype, t, acc);
  }
}

// ---- Value and index.
template <typename T>
struct Arg {
  T v;
  int64_t i;
};

template <typename T>
struct ArgOp {
  bool is_max;
  __device__ Arg<T> identity() const { return {is_max ? neg_inf<T>() : pos_inf<T>(), INT64_MAX}; }
  // Order-independent: NaN beats numbers, the better value wins, ties go to the lower index.
  __device__ Arg<T> operator()(const Arg<T>& a, const Arg<T>& b) const {
    const bool na = is_nan(a.v), nb = is_nan(b.v);
    if (na || nb) {
      if (na && nb) return a.i <= b.i ? a : b;
      return na ? a : b;
    }
    if (a.v == b.v) return a.i <= b.i ? a : b;
    return (is_max ? a.v > b.v : a.v < b.v) ? a : b;
  }
};

template <typename T>
__device__ Arg<T> block_reduce_arg(Arg<T> v, const ArgOp<T>& op, T* sv, int64_t* si) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  for (int o = 16; o > 0; o >>= 1) {
    Arg<T> other{__shfl_xor_sync(0xffffffffu, v.v, o), __shfl_xor_sync(0xffffffffu, v.i, o)};
    v = op(v, other);
  }
  __syncthreads();
  if (lane == 0) {
    sv[warp] = v.v;
    si[warp] = v.i;
  }
  __syncthreads();
  if (warp == 0) {
    Arg<T> w = lane < warps ? Arg<T>{sv[lane], si[lane]} : op.identity();
    for (int o = 16; o > 0; o >>= 1) {
      Arg<T> other{__shfl_xor_sync(0xffffffffu, w.v, o), __shfl_xor_sync(0xffffffffu, w.i, o)};
      w = op(w, other);
    }
    if (lane == 0) {
      sv[0] = w.v;
      si[0] = w.i;
    }
  }
  __syncthreads();
  return {sv[0], si[0]};
}

// Stage 1 (from the input) or stage 2 (from partial pairs: pv / pi of `splits` entries per row).
// Writes pairs to (ov, oi) when !finish, else values (of out_dtype, may be null) and indices.
template <typename T>
__global__ void arg_rows_kernel(ArgOp<T> op, const void* in, DType in_dtype, const T* pv,
                                const int64_t* pi, int64_t outer, int64_t n, int64_t splits,
                                bool finish, T* ov, int64_t* oi, void* values, DType out_dtype,
                                int64_t* indices) {
  __shared__ T sv[32];
  __shared__ int64_t si[32];
  const int64_t chunk = ceil_div(n, splits);
  for (int64_t r = blockIdx.x; r < outer * splits; r += gridDim.x) {
    const int64_t o = r / splits, s = r % splits;
    const int64_t begin = s * chunk, end = begin + chunk < n ? begin + chunk : n;
    Arg<T> acc = op.identity();
    for (int64_t j = begin + threadIdx.x; j < end; j += blockDim.x) {
      Arg<T> x = pv != nullptr ? Arg<T>{pv[o * n + j], pi[o * n + j]}
                               : Arg<T>{load_as<T>(in, in_dtype, o * n + j), j};
      acc = op(acc, x);
    }
    acc = block_reduce_arg(acc, op, sv, si);
    if (threadIdx.x == 0) {
      if (finish) {
        if (values != nullptr) store_as<T>(values, out_dtype, r, acc.v);
        indices[r] = acc.i;
      } else {
        ov[r] = acc.v;
        oi[r] = acc.i;
      }
    }
  }
}

template <typename T>
__global__ void arg_cols_kernel(ArgOp<T> op, const void* in, DType in_dtype, int64_t outer,
                                int64_t n, int64_t inner, void* values, DType out_dtype,
                                int64_t* indices) {
  const int64_t total = outer * inner;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t % inner, o = t / inner;
    Arg<T> acc = op.identity();
    for (int64_t j = 0; j < n; ++j)
      acc = op(acc, Arg<T>{load_as<T>(in, in_dtype, (o * n + j) * inner + i), j});
    if (values != nullptr) store_as<T>(values, out_dtype, t, acc.v);
    indices[t] = acc.i;
  }
}

size_t acc_size(Compute c) { return c == Compute::kFloat ? 4 : 8; }

}  // namespace

size_t reduce_workspace_bytes(Compute c, int64_t outer, int64_t n, int64_t inner, bool arg) {
  if (arg && inner > 1) return 0;  // column arg-reductions run in one pass
  const int64_t splits = splits_for(outer, n, inner);
  if (splits == 1) return 0;
  const int64_t items = outer * splits * inner;
  return static_cast<size_t>(items) * (arg ? acc_size(c) + 8 : acc_size(c)) + 16;
}

namespace {

// One reduction pass (split over blocks when long): kind over n into out; with center.values set,
// the input elements are transformed by pre() first (second pass of var / std / logsumexp).
void reduce_pass(ReduceKind kind, Compute c, const void* in, DType in_dtype, void* out,
                 DType out_dtype, int64_t outer, int64_t n, int64_t inner, const Center& center,
                 void* workspace, cudaStream_t stream) {
  const int64_t splits = splits_for(outer, n, inner);
  const bool tr = center.values != nullptr;
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    const ValueOp<T> op{kind};
    const DType acc = acc_dtype(c);
    if (inner == 1) {
      const unsigned blocks = grid_for(outer * splits, 1, 65535LL * 16);
      if (splits == 1) {
        reduce_rows_kernel<T><<<blocks, kThreads, 0, stream>>>(op, in, in_dtype, out, out_dtype,
                                                               outer, n, 1, true, n, center, tr);
      } else {
        reduce_rows_kernel<T><<<blocks, kThreads, 0, stream>>>(
            op, in, in_dtype, workspace, acc, outer, n, splits, false, n, center, tr);
        reduce_rows_kernel<T><<<grid_for(outer, 1, 65535LL * 16), kThreads, 0, stream>>>(
            op, workspace, acc, out, out_dtype, outer, splits, 1, true, n, center, false);
      }
    } else {
      if (splits == 1) {
        reduce_cols_kernel<T><<<grid_for(outer * inner, kThreads), kThreads, 0, stream>>>(
            op, in, in_dtype, out, out_dtype, outer, n, inner, 1, true, n, center, tr);
      } else {
        reduce_cols_kernel<T><<<grid_for(outer * splits * inner, kThreads), kThreads, 0, stream>>>(
            op, in, in_dtype, workspace, acc, outer, n, inner, splits, false, n, center, tr);
        reduce_cols_kernel<T><<<grid_for(outer * inner, kThreads), kThreads, 0, stream>>>(
            op, workspace, acc, out, out_dtype, outer, splits, inner, 1, true, n, center, false);
      }
    }
  });
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

}  // namespace

void launch_reduce(ReduceKind kind, Compute c, const void* in, DType in_dtype, void* out,
                   DType out_dtype, int64_t outer, int64_t n, int64_t inner, void* workspace,
                   cudaStream_t stream) {
  if (outer * inner == 0) return;
  reduce_pass(kind, c, in, in_dtype, out, out_dtype, outer, n, inner, Center{}, workspace, stream);
}

size_t reduce_two_pass_workspace_bytes(Compute c, int64_t outer, int64_t n, int64_t inner) {
  return align256(static_cast<size_t>(outer * inner) * acc_size(c)) +
         reduce_workspace_bytes(c, outer, n, inner, false) + 256;
}

void launch_reduce_two_pass(ReduceKind kind, Compute c, const void* in, DType in_dtype, void* out,
                            DType out_dtype, int64_t outer, int64_t n, int64_t inner,
                            double correction, void* workspace, cudaStream_t stream) {
  if (outer * inner == 0 || c == Compute::kInt64) return;
  // [outer * inner] centers of the compute type, then the partials of the passes.
  void* centers = workspace;
  void* partials =
      static_cast<char*>(workspace) + align256(static_cast<size_t>(outer * inner) * acc_size(c));
  const ReduceKind first = kind == ReduceKind::kLogSumExp ? ReduceKind::kMax : ReduceKind::kMean;
  reduce_pass(first, c, in, in_dtype, centers, acc_dtype(c), outer, n, inner, Center{}, partials,
              stream);
  reduce_pass(kind, c, in, in_dtype, out, out_dtype, outer, n, inner, Center{centers, correction},
              partials, stream);
}

void launch_arg_reduce(bool is_max, Compute c, const void* in, DType dtype, void* values,
                       int64_t* indices, int64_t outer, int64_t n, int64_t inner, void* workspace,
                       cudaStream_t stream) {
  if (outer * inner == 0) return;
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    const ArgOp<T> op{is_max};
    if (inner > 1) {
      arg_cols_kernel<T><<<grid_for(outer * inner, kThreads), kThreads, 0, stream>>>(
          op, in, dtype, outer, n, inner, values, dtype, indices);
      return;
    }
    const int64_t splits = splits_for(outer, n, 1);
    if (splits == 1) {
      arg_rows_kernel<T><<<grid_for(outer, 1, 65535LL * 16), kThreads, 0, stream>>>(
          op, in, dtype, nullptr, nullptr, outer, n, 1, true, nullptr, nullptr, values, dtype,
          indices);
      return;
    }
    // Partial pairs: values first, then (8-byte aligned) indices.
    T* pv = static_cast<T*>(workspace);
    const size_t vbytes = (static_cast<size_t>(outer * splits) * sizeof(T) + 15) / 16 * 16;
    int64_t* pi = reinterpret_cast<int64_t*>(static_cast<char*>(workspace) + vbytes);
    arg_rows_kernel<T><<<grid_for(outer * splits, 1, 65535LL * 16), kThreads, 0, stream>>>(
        op, in, dtype, nullptr, nullptr, outer, n, splits, false, pv, pi, nullptr, dtype, nullptr);
    arg_rows_kernel<T><<<grid_for(outer, 1, 65535LL * 16), kThreads, 0, stream>>>(
        op, nullptr, dtype, pv, pi, outer, splits, 1, true, nullptr, nullptr, values, dtype,
        indices);
  });
}

}  // namespace dtensor::kernels::cuda::detail
