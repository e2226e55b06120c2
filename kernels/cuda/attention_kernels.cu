// Scaled dot-product attention in float32 (float64 for float64 inputs, as the CPU kernel), forward
// and backward: the plain CUDA path (any head dims up to 512, optional bool / additive masks,
// causal). One warp per query row (forward, dq) or per key row (dk, dv), keys / queries in tiles
// of 32 -- one per lane -- with the online softmax of FlashAttention (Dao et al., 2022) for the
// forward. O(L * S * E) work and no L x S buffer; not tuned (the bfloat16 / float16 path goes
// through cuDNN's fused kernels, attention_cudnn.cc).
#include "kernels/cuda/device_util.cuh"

namespace dtensor::kernels::cuda::detail {
namespace {

constexpr int kWarps = 4;               // rows per block
constexpr int kPer = kMaxHeadDim / 32;  // head-dim elements a lane owns

template <typename T>
__device__ __forceinline__ T warp_max(T v) {
  for (int o = 16; o > 0; o >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}
template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The scaled, masked score of query i and key j of batch b (its dot product given); -inf when
// masked.
template <typename T>
__device__ __forceinline__ T masked_score(const Attention& a, int64_t b, int64_t i, int64_t j,
                                          T dot) {
  if (a.causal && j > a.query_offset + i) return -INFINITY;
  T s = dot * static_cast<T>(a.scale);
  if (a.mask_kind != 0) {
    int64_t off = i * a.mask_stride_l + j * a.mask_stride_s, rest = b;
    for (int d = a.nbatch - 1; d >= 0; --d) {
      off += (rest % a.batch_sizes[d]) * a.mask_batch_strides[d];
      rest /= a.batch_sizes[d];
    }
    if (a.mask_kind == 1) {
      if (!static_cast<const bool*>(a.mask)[off]) return -INFINITY;
    } else {
      s += static_cast<const T*>(a.mask)[off];  // converted to T by the caller
    }
  }
  return s;
}

// Last key any query row may see (exclusive), for causal masks.
__device__ __forceinline__ int64_t key_end(const Attention& a, int64_t i) {
  if (!a.causal) return a.S;
  const int64_t e = a.query_offset + i + 1;
  return e < 0 ? 0 : (e < a.S ? e : a.S);
}

template <typename T>
__global__ void attention_forward_kernel(Attention a, const T* q, const T* k,
                                         const T* v, T* out, T* lse) {
  __shared__ T qs[kWarps][kMaxHeadDim];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = blockIdx.x * int64_t(kWarps) + warp;  // b * L + i
  if (row >= a.batch * a.L) return;                         // whole warp leaves together
  const int64_t b = row / a.L, i = row % a.L;
  const T* qi = q + row * a.E;
  for (int64_t e = lane; e < a.E; e += 32) qs[warp][e] = qi[e];
  __syncwarp();
  const T* kb = k + b * a.S * a.E;
  const T* vb = v + b * a.S * a.Ev;
  T m = -INFINITY, l = 0, acc[kPer];
#pragma unroll
  for (int t = 0; t < kPer; ++t) acc[t] = 0;
  const int64_t end = key_end(a, i);
  for (int64_t j0 = 0; j0 < end; j0 += 32) {
    const int64_t j = j0 + lane;
    T s = -INFINITY;
    if (j < end) {
      const T* kj = kb + j * a.E;
      T dot = 0;
      for (int64_t e = 0; e < a.E; ++e) dot += qs[warp][e] * kj[e];
      s = masked_score<T>(a, b, i, j, dot);
    }
    const T nm = fmax(m, warp_max(s));
    if (nm == -INFINITY) continue;  // everything so far is masked
    const T p = s == -INFINITY ? T(0) : exp(s - nm);
    const T corr = m == -INFINITY ? T(0) : exp(m - nm);
    l = l * corr + warp_sum(p);
#pragma unroll
    for (int t = 0; t < kPer; ++t) acc[t] *= corr;
    const int64_t tile = end - j0 < 32 ? end - j0 : 32;
    for (int jj = 0; jj < tile; ++jj) {
      const T pj = __shfl_sync(0xffffffffu, p, jj);
      if (pj == T(0)) continue;
      const T* vj = vb + (j0 + jj) * a.Ev;
#pragma unroll
      for (int t = 0; t < kPer; ++t) {
        const int64_t d = t * 32 + lane;
        if (d < a.Ev) acc[t] += pj * vj[d];
      }
    }
    m = nm;
  }
  T* oi = out + row * a.Ev;
#pragma unroll
  for (int t = 0; t < kPer; ++t) {
    const int64_t d = t * 32 + lane;
    if (d < a.Ev) oi[d] = l > T(0) ? acc[t] / l : T(0);  // a fully masked row gives zeros
  }
  if (lane == 0) lse[row] = m + log(l);
}

// delta[row] = dout[row, :] . out[row, :]
template <typename T>
__global__ void attention_delta_kernel(Attention a, const T* out, const T* dout,
                                       T* delta) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = blockIdx.x * int64_t(kWarps) + warp;
  if (row >= a.batch * a.L) return;
  T s = 0;
  for (int64_t d = lane; d < a.Ev; d += 32) s += dout[row * a.Ev + d] * out[row * a.Ev + d];
  s = warp_sum(s);
  if (lane == 0) delta[row] = s;
}

template <typename T>
__global__ void attention_dq_kernel(Attention a, const T* q, const T* k, const T* v,
                                    const T* lse, const T* dout, const T* delta,
                                    T* dq) {
  __shared__ T qs[kWarps][kMaxHeadDim];
  __shared__ T gs[kWarps][kMaxHeadDim];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row = blockIdx.x * int64_t(kWarps) + warp;
  if (row >= a.batch * a.L) return;
  const int64_t b = row / a.L, i = row % a.L;
  for (int64_t e = lane; e < a.E; e += 32) qs[warp][e] = q[row * a.E + e];
  for (int64_t d = lane; d < a.Ev; d += 32) gs[warp][d] = dout[row * a.Ev + d];
  __syncwarp();
  const T li = lse[row], di = delta[row];
  const T* kb = k + b * a.S * a.E;
  const T* vb = v + b * a.S * a.Ev;
  T acc[kPer];
#pragma unroll
  for (int t = 0; t < kPer; ++t) acc[t] = 0;
  const int64_t end = li == -INFINITY ? 0 : key_end(a, i);
  for (int64_t j0 = 0; j0 < end; j0 += 32) {
    const int64_t j = j0 + lane;
    T ds = 0;
    if (j < end) {
      const T* kj = kb + j * a.E;
      const T* vj = vb + j * a.Ev;
      T dot = 0, dp = 0;
      for (int64_t e = 0; e < a.E; ++e) dot += qs[warp][e] * kj[e];
      for (int64_t d = 0; d < a.Ev; ++d) dp += gs[warp][d] * vj[d];
      const T s = masked_score<T>(a, b, i, j, dot);
      const T p = s == -INFINITY ? T(0) : exp(s - li);
      ds = p * (dp - di);
    }
    const int64_t tile = end - j0 < 32 ? end - j0 : 32;
    for (int jj = 0; jj < tile; ++jj) {
      const T g = __shfl_sync(0xffffffffu, ds, jj);
      if (g == T(0)) continue;
      const T* kj = kb + (j0 + jj) * a.E;
#pragma unroll
      for (int t = 0; t < kPer; ++t) {
        const int64_t e = t * 32 + lane;
        if (e < a.E) acc[t] += g * kj[e];
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kPer; ++t) {
    const int64_t e = t * 32 + lane;
    if (e < a.E) dq[row * a.E + e] = acc[t] * static_cast<T>(a.scale);
  }
}

template <typename T>
__global__ void attention_dkv_kernel(Attention a, const T* q, const T* k, const T* v,
                                     const T* lse, const T* dout, const T* delta,
                                     T* dk, T* dv) {
  __shared__ T ks[kWarps][kMaxHeadDim];
  __shared__ T vs[kWarps][kMaxHeadDim];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t col = blockIdx.x * int64_t(kWarps) + warp;  // b * S + j
  if (col >= a.batch * a.S) return;
  const int64_t b = col / a.S, j = col % a.S;
  for (int64_t e = lane; e < a.E; e += 32) ks[warp][e] = k[col * a.E + e];
  for (int64_t d = lane; d < a.Ev; d += 32) vs[warp][d] = v[col * a.Ev + d];
  __syncwarp();
  const T* qb = q + b * a.L * a.E;
  const T* gb = dout + b * a.L * a.Ev;
  T dka[kPer], dva[kPer];
#pragma unroll
  for (int t = 0; t < kPer; ++t) dka[t] = dva[t] = 0;
  // Causal: only queries with query_offset + i >= j see key j.
  int64_t begin = a.causal ? j - a.query_offset : 0;
  begin = begin < 0 ? 0 : (begin < a.L ? begin : a.L);
  for (int64_t i0 = begin; i0 < a.L; i0 += 32) {
    const int64_t i = i0 + lane;
    T p = 0, ds = 0;
    if (i < a.L) {
      const T li = lse[b * a.L + i];
      if (li != -INFINITY) {
        const T* qi = qb + i * a.E;
        const T* gi = gb + i * a.Ev;
        T dot = 0, dp = 0;
        for (int64_t e = 0; e < a.E; ++e) dot += qi[e] * ks[warp][e];
        for (int64_t d = 0; d < a.Ev; ++d) dp += gi[d] * vs[warp][d];
        const T s = masked_score<T>(a, b, i, j, dot);
        p = s == -INFINITY ? T(0) : exp(s - li);
        ds = p * (dp - delta[b * a.L + i]);
      }
    }
    const int64_t tile = a.L - i0 < 32 ? a.L - i0 : 32;
    for (int ii = 0; ii < tile; ++ii) {
      const T pi = __shfl_sync(0xffffffffu, p, ii);
      const T gi = __shfl_sync(0xffffffffu, ds, ii);
      if (pi == T(0) && gi == T(0)) continue;
      const T* qrow = qb + (i0 + ii) * a.E;
      const T* grow = gb + (i0 + ii) * a.Ev;
#pragma unroll
      for (int t = 0; t < kPer; ++t) {
        const int64_t e = t * 32 + lane;
        if (e < a.E) dka[t] += gi * qrow[e];
        if (e < a.Ev) dva[t] += pi * grow[e];
      }
    }
  }
#pragma unroll
  for (int t = 0; t < kPer; ++t) {
    const int64_t e = t * 32 + lane;
    if (e < a.E) dk[col * a.E + e] = dka[t] * static_cast<T>(a.scale);
    if (e < a.Ev) dv[col * a.Ev + e] = dva[t];
  }
}

// Ring attention's merge: one thread per output element (its row's factors from the old lse), then
// one per row for the new lse. A block row with lse_b = -inf adds nothing (copied through).
template <typename T>
__global__ void merge_out_kernel(const T* out, const T* lse, const T* out_b, const T* lse_b,
                                 T* out_new, int64_t rows, int64_t ev) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < rows * ev;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t / ev;
    const T l = lse[i], lb = lse_b[i];
    if (lb == -INFINITY) {
      out_new[t] = out[t];
      continue;
    }
    const T m = l > lb ? l : lb;
    const T a = exp(l - m), b = exp(lb - m);  // a = 0 when l = -inf
    out_new[t] = (a * out[t] + b * out_b[t]) / (a + b);
  }
}

template <typename T>
__global__ void merge_lse_kernel(const T* lse, const T* lse_b, T* lse_new, int64_t rows) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < rows;
       i += int64_t(gridDim.x) * blockDim.x) {
    const T l = lse[i], lb = lse_b[i];
    if (lb == -INFINITY) {
      lse_new[i] = l;
      continue;
    }
    const T m = l > lb ? l : lb;
    lse_new[i] = m + log(exp(l - m) + exp(lb - m));
  }
}

template <typename T>
__global__ void block_weight_kernel(const T* lse_b, const T* lse, T* w, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    w[i] = (lse_b[i] == -INFINITY || lse[i] == -INFINITY) ? T(0) : exp(lse_b[i] - lse[i]);
}

template <typename T>
void merge(const T* out, const T* lse, const T* out_b, const T* lse_b, T* out_new, T* lse_new,
           int64_t rows, int64_t ev, cudaStream_t stream) {
  constexpr int kThreads = 256;
  if (rows * ev > 0)
    merge_out_kernel<T><<<grid_for(rows * ev, kThreads), kThreads, 0, stream>>>(
        out, lse, out_b, lse_b, out_new, rows, ev);
  if (rows > 0)
    merge_lse_kernel<T><<<grid_for(rows, kThreads), kThreads, 0, stream>>>(lse, lse_b, lse_new,
                                                                           rows);
}

template <typename T>
void block_weight(const T* lse_b, const T* lse, T* w, int64_t n, cudaStream_t stream) {
  constexpr int kThreads = 256;
  if (n > 0) block_weight_kernel<T><<<grid_for(n, kThreads), kThreads, 0, stream>>>(lse_b, lse, w, n);
}

template <typename T>
void forward(const Attention& a, const T* q, const T* k, const T* v, T* out, T* lse,
             cudaStream_t stream) {
  const int64_t rows = a.batch * a.L;
  if (rows == 0) return;
  attention_forward_kernel<T><<<static_cast<unsigned>(ceil_div(rows, kWarps)), kWarps * 32, 0,
                             stream>>>(a, q, k, v, out, lse);
}

template <typename T>
void backward(const Attention& a, const T* q, const T* k, const T* v, const T* out, const T* lse,
              const T* dout, T* dq, T* dk, T* dv, T* delta, cudaStream_t stream) {
  const int64_t rows = a.batch * a.L, cols = a.batch * a.S;
  if (rows > 0) {
    const unsigned blocks = static_cast<unsigned>(ceil_div(rows, kWarps));
    attention_delta_kernel<T><<<blocks, kWarps * 32, 0, stream>>>(a, out, dout, delta);
    attention_dq_kernel<T><<<blocks, kWarps * 32, 0, stream>>>(a, q, k, v, lse, dout, delta, dq);
  }
  if (cols > 0) {
    attention_dkv_kernel<T><<<static_cast<unsigned>(ceil_div(cols, kWarps)), kWarps * 32, 0, stream>>>(
        a, q, k, v, lse, dout, delta, dk, dv);
  }
}

}  // namespace

void launch_attention_forward(const Attention& a, const float* q, const float* k, const float* v,
                              float* out, float* lse, cudaStream_t stream) {
  forward(a, q, k, v, out, lse, stream);
}
void launch_attention_forward(const Attention& a, const double* q, const double* k,
                              const double* v, double* out, double* lse, cudaStream_t stream) {
  forward(a, q, k, v, out, lse, stream);
}
void launch_attention_backward(const Attention& a, const float* q, const float* k, const float* v,
                               const float* out, const float* lse, const float* dout, float* dq,
                               float* dk, float* dv, float* delta, cudaStream_t stream) {
  backward(a, q, k, v, out, lse, dout, dq, dk, dv, delta, stream);
}
void launch_attention_backward(const Attention& a, const double* q, const double* k,
                               const double* v, const double* out, const double* lse,
                               const double* dout, double* dq, double* dk, double* dv,
                               double* delta, cudaStream_t stream) {
  backward(a, q, k, v, out, lse, dout, dq, dk, dv, delta, stream);
}

void launch_merge_attention(const float* out, const float* lse, const float* out_b,
                            const float* lse_b, float* out_new, float* lse_new, int64_t rows,
                            int64_t ev, cudaStream_t stream) {
  merge(out, lse, out_b, lse_b, out_new, lse_new, rows, ev, stream);
}
void launch_merge_attention(const double* out, const double* lse, const double* out_b,
                            const double* lse_b, double* out_new, double* lse_new, int64_t rows,
                            int64_t ev, cudaStream_t stream) {
  merge(out, lse, out_b, lse_b, out_new, lse_new, rows, ev, stream);
}
void launch_attention_block_weight(const float* lse_b, const float* lse, float* w, int64_t n,
                                   cudaStream_t stream) {
  block_weight(lse_b, lse, w, n, stream);
}
void launch_attention_block_weight(const double* lse_b, const double* lse, double* w, int64_t n,
                                   cudaStream_t stream) {
  block_weight(lse_b, lse, w, n, stream);
}

}  // namespace dtensor::kernels::cuda::detail
