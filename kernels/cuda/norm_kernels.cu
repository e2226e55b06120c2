// Softmax / log-softmax, layer norm / RMS norm and embedding lookups.
#include "kernels/cuda/device_util.cuh"

namespace dtensor::kernels::cuda::detail {
namespace {

constexpr int kRowThreads = 256;
constexpr int kColThreads = 256;
constexpr size_t kMaxRowCacheBytes = 32 * 1024;  // rows up to this size are read once

template <typename T>
struct MaxOp {
  __device__ T operator()(T a, T b) const { return a > b || is_nan(a) ? a : b; }
};
template <typename T>
struct SumOp {
  __device__ T operator()(T a, T b) const { return a + b; }
};

// One block per row of a [rows, n] view; the row is cached in shared memory when it fits.
template <typename T>
__global__ void softmax_rows_kernel(bool log_out, const void* in, void* out, DType dtype,
                                    int64_t rows, int64_t n, bool cached) {
  extern __shared__ unsigned char smem_raw[];
  T* cache = reinterpret_cast<T*>(smem_raw);
  __shared__ T red[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * n;
    T m = neg_inf<T>();
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      T x = load_as<T>(in, dtype, base + j);
      if (cached) cache[j] = x;
      m = MaxOp<T>()(m, x);
    }
    m = block_reduce(m, MaxOp<T>(), red, neg_inf<T>());
    T s = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      T x = cached ? cache[j] : load_as<T>(in, dtype, base + j);
      s += exp(x - m);
    }
    s = block_reduce(s, SumOp<T>(), red, T(0));
    const T log_s = log(s);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      T x = cached ? cache[j] : load_as<T>(in, dtype, base + j);
      store_as<T>(out, dtype, base + j, log_out ? x - m - log_s : exp(x - m) / s);
    }
  }
}

// softmax_rows_kernel's arithmetic for float32 / bfloat16 / float16 rows short enough to live in
// registers (up to kIters 16-byte vectors per thread): the row is read once with 16-byte loads and
// exp is taken once per element, where the generic kernel reads through a per-element dtype
// switch (0.28 of the device copy for bfloat16 on an H100). Only the sums' order differs.
template <typename S, int kIters>
__global__ void __launch_bounds__(kRowThreads)
    softmax_rows_vec_kernel(bool log_out, const S* in, S* out, int64_t rows, int64_t n) {
  constexpr int kVec = 16 / sizeof(S);
  __shared__ float red[32];
  const int64_t nvec = n / kVec;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const uint4* src = reinterpret_cast<const uint4*>(in + r * n);
    uint4* dst = reinterpret_cast<uint4*>(out + r * n);
    float x[kIters][kVec];
    float m = neg_inf<float>();
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int64_t vi = it * int64_t(blockDim.x) + threadIdx.x;
      if (vi < nvec) {
        const uint4 raw = src[vi];
        const S* e = reinterpret_cast<const S*>(&raw);
#pragma unroll
        for (int u = 0; u < kVec; ++u) {
          x[it][u] = from_storage<float>(e[u]);
          m = MaxOp<float>()(m, x[it][u]);
        }
      }
    }
    m = block_reduce(m, MaxOp<float>(), red, neg_inf<float>());
    float s = 0;
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      if (it * int64_t(blockDim.x) + threadIdx.x < nvec) {
#pragma unroll
        for (int u = 0; u < kVec; ++u) {
          const float e = exp(x[it][u] - m);
          s += e;
          if (!log_out) x[it][u] = e;
        }
      }
    }
    s = block_reduce(s, SumOp<float>(), red, 0.f);
    const float log_s = log(s);
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      const int64_t vi = it * int64_t(blockDim.x) + threadIdx.x;
      if (vi < nvec) {
        uint4 raw;
        S* e = reinterpret_cast<S*>(&raw);
#pragma unroll
        for (int u = 0; u < kVec; ++u) e[u] = to_storage<S>(log_out ? x[it][u] - m - log_s : x[it][u] / s);
        dst[vi] = raw;
      }
    }
  }
}

// Launches softmax_rows_vec_kernel when the rows fit its registers and 16-byte loads (row bytes a
// multiple of 16, 16-byte aligned buffers); returns false otherwise.
template <typename S>
bool launch_softmax_rows_vec(bool log, const void* in, void* out, int64_t rows, int64_t n, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(S);
  if (n % kVec != 0 || reinterpret_cast<uintptr_t>(in) % 16 != 0 || reinterpret_cast<uintptr_t>(out) % 16 != 0)
    return false;
  const int64_t per_thread = ceil_div(n / kVec, kRowThreads);
  const unsigned blocks = grid_for(rows, 1, 65535LL * 32);
  const S* x = static_cast<const S*>(in);
  S* y = static_cast<S*>(out);
  if (per_thread <= 1)
    softmax_rows_vec_kernel<S, 1><<<blocks, kRowThreads, 0, stream>>>(log, x, y, rows, n);
  else if (per_thread <= 2)
    softmax_rows_vec_kernel<S, 2><<<blocks, kRowThreads, 0, stream>>>(log, x, y, rows, n);
  else if (per_thread <= 4)
    softmax_rows_vec_kernel<S, 4><<<blocks, kRowThreads, 0, stream>>>(log, x, y, rows, n);
  else if (per_thread <= 8)
    softmax_rows_vec_kernel<S, 8><<<blocks, kRowThreads, 0, stream>>>(log, x, y, rows, n);
  else
    return false;
  return true;
}

// One thread per (o, i) column of an [outer, n, inner] tensor (inner > 1): online max and sum in
// one pass, then the outputs.
template <typename T>
__global__ void softmax_cols_kernel(bool log_out, const void* in, void* out, DType dtype,
                                    int64_t outer, int64_t n, int64_t inner) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < outer * inner;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = t / inner, i = t % inner, base = o * n * inner + i;
    T m = neg_inf<T>(), s = 0;
    bool nan = false;
    for (int64_t j = 0; j < n; ++j) {
      T x = load_as<T>(in, dtype, base + j * inner);
      if (is_nan(x)) nan = true;
      if (x > m) {
        s = s * exp(m - x) + exp(x - x);  // exp(x - x): NaN for x = +inf, as the CPU's sum
        m = x;
      } else if (x != neg_inf<T>()) {
        // -inf adds nothing; skipped, since exp(-inf - m) is NaN while m is still -inf.
        s += exp(x - m);
      }
    }
    // Rows of -inf only (or with a NaN) give NaN, as on the CPU.
    if (nan || m == neg_inf<T>()) m = s = static_cast<T>(__int_as_float(0x7fc00000));
    const T log_s = log(s);
    for (int64_t j = 0; j < n; ++j) {
      T x = load_as<T>(in, dtype, base + j * inner);
      store_as<T>(out, dtype, base + j * inner, log_out ? x - m - log_s : exp(x - m) / s);
    }
  }
}

template <typename T>
__global__ void norm_kernel(bool rms, const void* x, DType dtype, const T* weight, const T* bias,
                            void* out, int64_t rows, int64_t n, T eps) {
  __shared__ T red[32];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * n;
    T mean = 0;
    if (!rms) {
      T s = 0;
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += load_as<T>(x, dtype, base + j);
      mean = block_reduce(s, SumOp<T>(), red, T(0)) / static_cast<T>(n);
    }
    T q = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      T d = load_as<T>(x, dtype, base + j) - mean;
      q += d * d;
    }
    const T var = block_reduce(q, SumOp<T>(), red, T(0)) / static_cast<T>(n);
    const T inv = T(1) / sqrt(var + eps);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      T y = (load_as<T>(x, dtype, base + j) - mean) * inv;
      if (weight != nullptr) y = y * weight[j];
      if (bias != nullptr) y = y + bias[j];
      store_as<T>(out, dtype, base + j, y);
    }
  }
}

// layer_norm_backward, in double as the CPU kernel. Pass 1, one block per row: mean and rstd, the
// row's sums of gw = g * w and gw * x_hat, and dx = rstd * (gw - mean(gw) - x_hat * mean(gw x_hat));
// mean and rstd are kept for pass 2.
__global__ void layer_norm_backward_rows_kernel(const void* x, DType xdt, const void* g, DType gdt,
                                                const void* w, DType wdt, void* dx,
                                                double* mean_out, double* rstd_out, int64_t rows,
                                                int64_t n, double eps) {
  __shared__ double red[32];
  const double inv_n = 1.0 / static_cast<double>(n);
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const int64_t base = r * n;
    double s = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += load_as<double>(x, xdt, base + j);
    const double mean = block_reduce(s, SumOp<double>(), red, 0.0) * inv_n;
    double q = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const double d = load_as<double>(x, xdt, base + j) - mean;
      q += d * d;
    }
    const double rstd = 1.0 / sqrt(block_reduce(q, SumOp<double>(), red, 0.0) * inv_n + eps);
    double sgw = 0, sgwx = 0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const double gw = load_as<double>(g, gdt, base + j) * (w ? load_as<double>(w, wdt, j) : 1.0);
      sgw += gw;
      sgwx += gw * (load_as<double>(x, xdt, base + j) - mean) * rstd;
    }
    const double a = block_reduce(sgw, SumOp<double>(), red, 0.0) * inv_n;
    const double b = block_reduce(sgwx, SumOp<double>(), red, 0.0) * inv_n;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const double xh = (load_as<double>(x, xdt, base + j) - mean) * rstd;
      const double gw = load_as<double>(g, gdt, base + j) * (w ? load_as<double>(w, wdt, j) : 1.0);
      store_as<double>(dx, xdt, base + j, rstd * (gw - a - xh * b));
    }
    if (threadIdx.x == 0) {
      mean_out[r] = mean;
      rstd_out[r] = rstd;
    }
  }
}

// Pass 2: column sums of g * x_hat (dw) and g (db) over a chunk of rows each (blockIdx.y), into
// partial[chunk][2][n]; pass 3 adds the chunks in order (deterministic, no atomics).
__global__ void layer_norm_backward_cols_kernel(const void* x, DType xdt, const void* g, DType gdt,
                                                const double* mean, const double* rstd,
                                                double* partial, int64_t rows, int64_t n,
                                                int64_t rows_per_chunk) {
  const int64_t c = blockIdx.y, r0 = c * rows_per_chunk;
  const int64_t r1 = r0 + rows_per_chunk < rows ? r0 + rows_per_chunk : rows;
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < n;
       j += int64_t(gridDim.x) * blockDim.x) {
    double sw = 0, sb = 0;
    for (int64_t r = r0; r < r1; ++r) {
      const double gv = load_as<double>(g, gdt, r * n + j);
      sw += gv * (load_as<double>(x, xdt, r * n + j) - mean[r]) * rstd[r];
      sb += gv;
    }
    partial[(c * 2) * n + j] = sw;
    partial[(c * 2 + 1) * n + j] = sb;
  }
}

__global__ void layer_norm_backward_sum_kernel(const double* partial, int64_t chunks, int64_t n,
                                               double* dw, double* db) {
  for (int64_t j = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; j < n;
       j += int64_t(gridDim.x) * blockDim.x) {
    double sw = 0, sb = 0;
    for (int64_t c = 0; c < chunks; ++c) {
      sw += partial[(c * 2) * n + j];
      sb += partial[(c * 2 + 1) * n + j];
    }
    dw[j] = sw;
    db[j] = sb;
  }
}

template <typename E>
__global__ void embedding_kernel(const E* weight, int64_t rows, int64_t dim, const void* indices,
                                 DType index_dtype, int64_t count, bool masked, int64_t row_start,
                                 int64_t row_end, E* out, int64_t* bad) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < count * dim;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t / dim, d = t % dim;
    const int64_t idx = load_as<int64_t>(indices, index_dtype, i);
    if (masked) {
      out[t] = idx >= row_start && idx < row_end ? weight[(idx - row_start) * dim + d] : E{};
    } else if (idx >= 0 && idx < rows) {
      out[t] = weight[idx * dim + d];
    } else {
      bad[0] = 1;
      atomicExch(reinterpret_cast<unsigned long long*>(bad + 1),
                 static_cast<unsigned long long>(idx));
    }
  }
}

template <int kBytes>
struct Bytes {
  unsigned char b[kBytes];
};

}  // namespace

void launch_softmax(bool log, Compute c, const void* in, void* out, DType dtype, int64_t outer,
                    int64_t n, int64_t inner, cudaStream_t stream) {
  if (outer * n * inner == 0) return;
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      if (inner == 1 && std::is_same_v<T, float>) {
        bool done = false;
        if (dtype == DType::kFloat32) done = launch_softmax_rows_vec<float>(log, in, out, outer, n, stream);
        if (dtype == DType::kBFloat16) done = launch_softmax_rows_vec<__nv_bfloat16>(log, in, out, outer, n, stream);
        if (dtype == DType::kFloat16) done = launch_softmax_rows_vec<__half>(log, in, out, outer, n, stream);
        if (done) return;
      }
      if (inner == 1) {
        const bool cached = static_cast<size_t>(n) * sizeof(T) <= kMaxRowCacheBytes;
        const size_t smem = cached ? static_cast<size_t>(n) * sizeof(T) : 0;
        softmax_rows_kernel<T><<<grid_for(outer, 1, 65535LL * 32), kRowThreads, smem, stream>>>(
            log, in, out, dtype, outer, n, cached);
      } else {
        softmax_cols_kernel<T><<<grid_for(outer * inner, kColThreads), kColThreads, 0, stream>>>(
            log, in, out, dtype, outer, n, inner);
      }
    }
  });
}

void launch_norm(bool rms, Compute c, const void* x, DType dtype, const void* weight,
                 const void* bias, void* out, int64_t rows, int64_t n, double eps,
                 cudaStream_t stream) {
  if (rows * n == 0) return;
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      norm_kernel<T><<<grid_for(rows, 1, 65535LL * 32), kRowThreads, 0, stream>>>(
          rms, x, dtype, static_cast<const T*>(weight), static_cast<const T*>(bias), out, rows, n,
          static_cast<T>(eps));
    }
  });
}

int64_t layer_norm_backward_chunks(int64_t rows) {
  // Up to 64 chunks of at least 64 rows: enough blocks for the column pass on wide GPUs.
  const int64_t c = ceil_div(rows, 64);
  return c < 1 ? 1 : (c > 64 ? 64 : c);
}

void launch_layer_norm_backward(const void* x, DType xdt, const void* g, DType gdt, const void* w,
                                DType wdt, void* dx, double* dw, double* db, double* workspace,
                                int64_t rows, int64_t n, double eps, cudaStream_t stream) {
  if (n == 0) return;
  double* mean = workspace;
  double* rstd = workspace + rows;
  double* partial = workspace + 2 * rows;
  const int64_t chunks = layer_norm_backward_chunks(rows);
  if (rows > 0)
    layer_norm_backward_rows_kernel<<<grid_for(rows, 1, 65535LL * 32), kRowThreads, 0, stream>>>(
        x, xdt, g, gdt, w, wdt, dx, mean, rstd, rows, n, eps);
  const int64_t per = ceil_div(rows, chunks);
  if (rows > 0) {
    dim3 grid(grid_for(n, 256, 65535), static_cast<unsigned>(chunks));
    layer_norm_backward_cols_kernel<<<grid, 256, 0, stream>>>(x, xdt, g, gdt, mean, rstd, partial,
                                                              rows, n, per);
  }
  layer_norm_backward_sum_kernel<<<grid_for(n, 256), 256, 0, stream>>>(partial, rows > 0 ? chunks : 0,
                                                                        n, dw, db);
}

void launch_embedding(const void* weight, int64_t rows, int64_t dim, size_t elem_size,
                      const void* indices, DType index_dtype, int64_t count, bool masked,
                      int64_t row_start, int64_t row_end, void* out, int64_t* bad_index,
                      cudaStream_t stream) {
  if (count * dim == 0) return;
  const unsigned blocks = grid_for(count * dim, 256);
  auto go = [&](auto e) {
    using E = decltype(e);
    embedding_kernel<E><<<blocks, 256, 0, stream>>>(static_cast<const E*>(weight), rows, dim,
                                                    indices, index_dtype, count, masked, row_start,
                                                    row_end, static_cast<E*>(out), bad_index);
  };
  switch (elem_size) {
    case 1:
      go(Bytes<1>{});
      break;
    case 2:
      go(Bytes<2>{});
      break;
    case 4:
      go(Bytes<4>{});
      break;
    default:
      go(Bytes<8>{});
      break;
  }
}

}  // namespace dtensor::kernels::cuda::detail
