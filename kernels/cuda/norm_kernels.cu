// Softmax / log-softmax, layer norm / RMS norm and embedding lookups.
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/softmax_math.h"

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

// 16-byte vectors of S (float, __nv_bfloat16, __half) for softmax_rows_vec_kernel: the elements
// as floats and back, and their max, in as few instructions as the types allow. bfloat16 widens
// by a shift (low half) or a mask (high half) of its 32-bit word, float16 by HADD2.F32, each one
// instruction per element (where __bfloat162float element by element took a PRMT and a shift for
// every high half); pairs narrow with one F2FP.*.PACK_AB, rounding to nearest even like
// to_storage. The 16-bit types take their max on the packed pairs (HMNMX2: half an instruction
// per element, no conversion first).
template <typename S>
struct Vec16 {
  static constexpr int kN = 16 / sizeof(S);
  __device__ __forceinline__ static uint32_t word(const uint4& v, int k) {
    return k == 0 ? v.x : k == 1 ? v.y : k == 2 ? v.z : v.w;
  }
  // Elementwise max of two words. NaN-dropping (IEEE maxNum, like fmaxf): a NaN element still
  // makes its row all NaN through its exp, which enters the sum; this is what the CPU kernel
  // gives too, whose std::max keeps or drops a NaN depending on its position.
  __device__ __forceinline__ static uint32_t max_word(uint32_t a, uint32_t b) {
    if constexpr (std::is_same_v<S, float>) {
      return __float_as_uint(fmaxf(__uint_as_float(a), __uint_as_float(b)));
    } else if constexpr (std::is_same_v<S, __nv_bfloat16>) {
      __nv_bfloat162 r = __hmax2(*reinterpret_cast<const __nv_bfloat162*>(&a),
                                 *reinterpret_cast<const __nv_bfloat162*>(&b));
      return *reinterpret_cast<const uint32_t*>(&r);
    } else {
      __half2 r = __hmax2(*reinterpret_cast<const __half2*>(&a), *reinterpret_cast<const __half2*>(&b));
      return *reinterpret_cast<const uint32_t*>(&r);
    }
  }
  // The max of a word's elements, as float.
  __device__ __forceinline__ static float word_max(uint32_t w) {
    if constexpr (std::is_same_v<S, float>) {
      return __uint_as_float(w);
    } else {
      float x[2];
      unpack_word(w, x);
      return fmaxf(x[0], x[1]);
    }
  }
  // The elements of one word as floats (exact).
  __device__ __forceinline__ static void unpack_word(uint32_t w, float* x) {
    if constexpr (std::is_same_v<S, float>) {
      x[0] = __uint_as_float(w);
    } else if constexpr (std::is_same_v<S, __nv_bfloat16>) {
      x[0] = __uint_as_float(w << 16);
      x[1] = __uint_as_float(w & 0xffff0000u);
    } else {
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&w));
      x[0] = f.x;
      x[1] = f.y;
    }
  }
  __device__ __forceinline__ static void unpack(const uint4& v, float (&x)[kN]) {
    constexpr int kPerWord = kN / 4;
#pragma unroll
    for (int k = 0; k < 4; ++k) unpack_word(word(v, k), x + k * kPerWord);
  }
  __device__ __forceinline__ static uint4 pack(const float (&y)[kN]) {
    uint32_t w[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      if constexpr (std::is_same_v<S, float>) {
        w[k] = __float_as_uint(y[k]);
      } else if constexpr (std::is_same_v<S, __nv_bfloat16>) {
        const __nv_bfloat162 p = __floats2bfloat162_rn(y[2 * k], y[2 * k + 1]);  // .x: low half
        w[k] = *reinterpret_cast<const uint32_t*>(&p);
      } else {
        const __half2 p = __floats2half2_rn(y[2 * k], y[2 * k + 1]);
        w[k] = *reinterpret_cast<const uint32_t*>(&p);
      }
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
};

// op over the values of a block of kWarps warps, returned to every thread, with one barrier:
// warp shuffles, then each warp's lane 0 writes its result to slot[warp] and every thread combines
// all warps' slots (block_reduce takes three barriers and a second warp pass). No barrier before
// the write is needed because the row's two reductions use different slots: a warp rewrites
// slot[w] for the next row only after the other reduction's barrier, which every thread reaches
// after reading this one's slots. A one-warp block needs no shared memory.
template <int kWarps, typename Op>
__device__ __forceinline__ float block_allreduce(float v, Op op, float* slot) {
  v = warp_reduce(v, op);
  if constexpr (kWarps == 1) {
    return v;
  } else {
    if ((threadIdx.x & 31) == 0) slot[threadIdx.x >> 5] = v;
    __syncthreads();
    float r = slot[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) r = op(r, slot[w]);
    return r;
  }
}

// softmax_rows_kernel's function for float32 / bfloat16 / float16 rows short enough to live in
// registers (kThreads threads a row, up to kIters 16-byte vectors each), with the arithmetic of
// kernels/cuda/softmax_math.h. kLog: log_softmax. The row is read once with 16-byte loads and kept
// packed for the max, then exp is taken once per element (an FFMA and a MUFU.EX2) and kept as
// float for the output. It was instruction-bound (see softmax_math.h); per element bfloat16
// softmax now takes half a max, one conversion, an FFMA, an EX2, an add, a multiply, half a pack
// and an eighth of a load and of a store, and the per-row work (reductions, reciprocal, index
// arithmetic: 32-bit, with the block size a constant) is shared by more elements. A thread's
// vectors past the row's end load the row's last vector again (a repeat changes no max) and drop
// their partial sum and their store, so the arithmetic runs without branches or padding. Only
// the sums' order and the formulas' rounding differ from the CPU kernel (within the GPU tests'
// tolerances).
template <typename S, int kThreads, int kIters, bool kLog>
__global__ void __launch_bounds__(kThreads)
    softmax_rows_vec_kernel(const S* in, S* out, int64_t rows, int64_t n) {
  namespace sm = softmax_math;
  using V = Vec16<S>;
  constexpr int kVec = V::kN;
  constexpr int kWarps = kThreads / 32;
  __shared__ float red_max[kWarps], red_sum[kWarps];
  const int nvec = static_cast<int>(n / kVec);  // <= kThreads * kIters
  const int tid = threadIdx.x;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const uint4* src = reinterpret_cast<const uint4*>(in + r * n);
    uint4* dst = reinterpret_cast<uint4*>(out + r * n);
    uint4 raw[kIters];
#pragma unroll
    for (int it = 0; it < kIters; ++it) raw[it] = src[min(it * kThreads + tid, nvec - 1)];
    uint32_t mw[4] = {raw[0].x, raw[0].y, raw[0].z, raw[0].w};
#pragma unroll
    for (int it = 1; it < kIters; ++it)
#pragma unroll
      for (int k = 0; k < 4; ++k) mw[k] = V::max_word(mw[k], V::word(raw[it], k));
    const float m = block_allreduce<kWarps>(
        V::word_max(V::max_word(V::max_word(mw[0], mw[1]), V::max_word(mw[2], mw[3]))),
        [](float a, float b) { return fmaxf(a, b); }, red_max);
    // e[it][u]: exp(x - m) (softmax) or x - m (log_softmax); one partial sum per vector, so the
    // adds of a thread form kIters short chains rather than one long one; a repeated vector's sum
    // is dropped.
    float e[kIters][kVec];
    float part[kIters];
    auto exps = [&](auto pre) {
      const float c = sm::prescaled_shift(m);
#pragma unroll
      for (int it = 0; it < kIters; ++it) {
        float x[kVec];
        V::unpack(raw[it], x);
#pragma unroll
        for (int u = 0; u < kVec; ++u) {
          float ex;
          if constexpr (kLog) {
            e[it][u] = x[u] - m;
            ex = sm::ex2(sm::exp2_arg(e[it][u]));
          } else if constexpr (decltype(pre)::value) {
            ex = e[it][u] = sm::ex2(sm::exp2_arg_prescaled(x[u], c));
          } else {
            ex = e[it][u] = sm::ex2(sm::exp2_arg(x[u] - m));
          }
          part[it] = u == 0 ? ex : part[it] + ex;
        }
        if (it * kThreads + tid >= nvec) part[it] = 0.f;
      }
    };
    // m is the same in the whole block: a uniform branch, no divergence.
    if (!kLog && sm::prescaled(m))
      exps(std::true_type{});
    else
      exps(std::false_type{});
    float s = part[0];
#pragma unroll
    for (int it = 1; it < kIters; ++it) s += part[it];
    s = block_allreduce<kWarps>(s, [](float a, float b) { return a + b; }, red_sum);
    const float k = kLog ? sm::log_of_sum(s) : sm::reciprocal(s);
#pragma unroll
    for (int it = 0; it < kIters; ++it) {
      float y[kVec];
#pragma unroll
      for (int u = 0; u < kVec; ++u) y[u] = kLog ? e[it][u] - k : e[it][u] * k;
      const int vi = it * kThreads + tid;
      if (vi < nvec) dst[vi] = V::pack(y);
    }
  }
}

// Launches softmax_rows_vec_kernel when the rows fit its registers and 16-byte loads (row bytes a
// multiple of 16, 16-byte aligned buffers, at most 2048 vectors) in the shape of
// softmax_math::vec_shape; returns false otherwise.
template <typename S>
bool launch_softmax_rows_vec(bool log, const void* in, void* out, int64_t rows, int64_t n, cudaStream_t stream) {
  constexpr int kVec = 16 / sizeof(S);
  constexpr int kTarget = 32 / kVec;  // vec_shape's vectors a thread
  if (n % kVec != 0 || reinterpret_cast<uintptr_t>(in) % 16 != 0 || reinterpret_cast<uintptr_t>(out) % 16 != 0)
    return false;
  const softmax_math::VecShape shape = softmax_math::vec_shape(n / kVec, kVec);
  const unsigned blocks = grid_for(rows, 1, 65535LL * 32);
  const S* x = static_cast<const S*>(in);
  S* y = static_cast<S*>(out);
  auto go = [&](auto threads, auto iters) {
    constexpr int kThreads = decltype(threads)::value, kIters = decltype(iters)::value;
    static_assert(kThreads <= kRowThreads && kIters <= 8);
    if (shape.threads != kThreads || shape.iters != kIters) return false;
    if (log)
      softmax_rows_vec_kernel<S, kThreads, kIters, true><<<blocks, kThreads, 0, stream>>>(x, y, rows, n);
    else
      softmax_rows_vec_kernel<S, kThreads, kIters, false><<<blocks, kThreads, 0, stream>>>(x, y, rows, n);
    return true;
  };
  using T32 = std::integral_constant<int, 32>;
  using Target = std::integral_constant<int, kTarget>;
  return go(T32{}, std::integral_constant<int, 1>{}) || go(T32{}, std::integral_constant<int, 2>{}) ||
         go(T32{}, Target{}) || go(std::integral_constant<int, 64>{}, Target{}) ||
         go(std::integral_constant<int, 128>{}, Target{}) || go(std::integral_constant<int, 256>{}, Target{}) ||
         (kTarget != 8 && go(std::integral_constant<int, 256>{}, std::integral_constant<int, 8>{}));
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
