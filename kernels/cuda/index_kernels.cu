// Gathers along one dim (index_select, gather), scatter_add (one thread a column of the index, in
// its order: deterministic) and the scatter-add of embedding's backward (atomics: the
// order of the additions, and so the rounding, depends on scheduling).
#include "kernels/cuda/device_util.cuh"

namespace dtensor::kernels::cuda::detail {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ void report_bad(int64_t* bad, int64_t v) {
  bad[0] = 1;
  atomicExch(reinterpret_cast<unsigned long long*>(bad + 1), static_cast<unsigned long long>(v));
}

template <int kBytes>
struct Bytes {
  unsigned char b[kBytes];
};

// go(Bytes<elem_size>{}) for elements of 1, 2, 4 or 8 bytes (8: any other size, never sent).
template <typename F>
void by_element_size(size_t elem_size, F&& go) {
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

template <typename E>
__global__ void index_select_kernel(const E* in, int64_t outer, int64_t n, int64_t inner,
                                    const void* indices, DType index_dtype, int64_t count, E* out,
                                    int64_t* bad) {
  const int64_t total = outer * count * inner;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t % inner, j = (t / inner) % count, o = t / (inner * count);
    const int64_t idx = load_as<int64_t>(indices, index_dtype, j);
    if (idx >= 0 && idx < n)
      out[t] = in[(o * n + idx) * inner + i];
    else
      report_bad(bad, idx);
  }
}

template <typename T>
__global__ void embedding_backward_kernel(const void* grad, DType grad_dtype, const void* indices,
                                          DType index_dtype, int64_t count, int64_t dim,
                                          int64_t num_weights, int64_t padding_idx,
                                          int64_t row_start, int64_t row_count, T* acc,
                                          int64_t* bad) {
  const int64_t total = count * dim;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t i = t / dim, d = t % dim;
    const int64_t v = load_as<int64_t>(indices, index_dtype, i);
    if (v < 0 || v >= num_weights) {
      if (d == 0) report_bad(bad, v);
      continue;
    }
    if (v == padding_idx || v < row_start || v >= row_start + row_count) continue;
    atomicAdd(acc + (v - row_start) * dim + d, load_as<T>(grad, grad_dtype, t));
  }
}

__global__ void check_indices_kernel(const void* indices, DType index_dtype, int64_t count,
                                     int64_t hi, bool has_skip, int64_t skip, int64_t* bad) {
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < count;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t v = load_as<int64_t>(indices, index_dtype, t);
    if (has_skip && v == skip) continue;
    if (v < 0 || v >= hi) report_bad(bad, v);
  }
}

}  // namespace

void launch_check_indices(const void* indices, DType index_dtype, int64_t count, int64_t hi,
                          bool has_skip, int64_t skip, int64_t* bad_index, cudaStream_t stream) {
  if (count == 0) return;
  check_indices_kernel<<<grid_for(count, kThreads), kThreads, 0, stream>>>(
      indices, index_dtype, count, hi, has_skip, skip, bad_index);
}

void launch_index_select(const void* in, int64_t outer, int64_t n, int64_t inner, size_t elem_size,
                         const void* indices, DType index_dtype, int64_t count, void* out,
                         int64_t* bad_index, cudaStream_t stream) {
  const int64_t total = outer * count * inner;
  if (total == 0) return;
  const unsigned blocks = grid_for(total, kThreads);
  auto go = [&](auto e) {
    using E = decltype(e);
    index_select_kernel<E><<<blocks, kThreads, 0, stream>>>(static_cast<const E*>(in), outer, n,
                                                            inner, indices, index_dtype, count,
                                                            static_cast<E*>(out), bad_index);
  };
  by_element_size(elem_size, go);
}

void launch_embedding_backward(Compute c, const void* grad, DType grad_dtype, const void* indices,
                               DType index_dtype, int64_t count, int64_t dim, int64_t num_weights,
                               int64_t padding_idx, int64_t row_start, int64_t row_count, void* acc,
                               int64_t* bad_index, cudaStream_t stream) {
  const int64_t total = count * dim;
  if (total == 0) return;
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>) {
      embedding_backward_kernel<T><<<grid_for(total, kThreads), kThreads, 0, stream>>>(
          grad, grad_dtype, indices, index_dtype, count, dim, num_weights, padding_idx, row_start,
          row_count, static_cast<T*>(acc), bad_index);
    }
  });
}

namespace {

// The offset in self of index position p's target (dim replaced by v - offset), and of p in src.
__device__ __forceinline__ void along_offsets(const IndexAlong& g, int64_t p, int64_t v, int64_t* self_at,
                                              int64_t* src_at) {
  int64_t s = 0, r = 0;
  for (int d = g.rank - 1; d >= 0; --d) {
    const int64_t c = p % g.index_sizes[d];
    p /= g.index_sizes[d];
    s += (d == g.dim ? v - g.offset : c) * g.self_strides[d];
    r += c * g.src_strides[d];
  }
  *self_at = s;
  *src_at = r;
}

template <typename E>
__global__ void gather_kernel(IndexAlong g, const E* __restrict__ self, const int64_t* __restrict__ index,
                              int64_t count, E* __restrict__ out, int64_t* bad) {
  for (int64_t p = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; p < count;
       p += int64_t(gridDim.x) * blockDim.x) {
    const int64_t v = index[p];
    if (v < 0 || v >= g.full) {
      report_bad(bad, v);
      continue;
    }
    if (v < g.offset || v >= g.offset + g.block) continue;  // another block's row: stays 0
    int64_t at, unused;
    along_offsets(g, p, v, &at, &unused);
    out[p] = self[at];
  }
}

template <typename T>
__device__ __forceinline__ T add_wrapping(T a, T b) {
  if constexpr (std::is_integral_v<T>)
    return static_cast<T>(static_cast<unsigned long long>(a) + static_cast<unsigned long long>(b));
  else
    return a + b;
}

// One thread per column of index: the positions q with q[dim] = 0, walked along dim in order.
template <typename T>
__global__ void scatter_add_kernel(IndexAlong g, T* __restrict__ acc, const int64_t* __restrict__ index,
                                   const T* __restrict__ src, int64_t columns, int64_t* bad) {
  const int64_t len = g.index_sizes[g.dim];
  int64_t inner = 1;  // index elements per step along dim
  for (int d = g.dim + 1; d < g.rank; ++d) inner *= g.index_sizes[d];
  for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < columns;
       c += int64_t(gridDim.x) * blockDim.x) {
    const int64_t first = (c / inner) * len * inner + c % inner;  // q with q[dim] = 0
    for (int64_t j = 0; j < len; ++j) {
      const int64_t p = first + j * inner;
      const int64_t v = index[p];
      if (v < 0 || v >= g.full) {
        report_bad(bad, v);
        continue;
      }
      if (v < g.offset || v >= g.offset + g.block) continue;
      int64_t at, from;
      along_offsets(g, p, v, &at, &from);
      acc[at] = add_wrapping(acc[at], src[from]);
    }
  }
}

}  // namespace

void launch_gather(const IndexAlong& g, const void* self, size_t elem_size, const int64_t* index,
                   void* out, int64_t* bad_index, cudaStream_t stream) {
  int64_t count = 1;
  for (int d = 0; d < g.rank; ++d) count *= g.index_sizes[d];
  if (count == 0) return;
  const unsigned blocks = grid_for(count, kThreads);
  auto go = [&](auto e) {
    using E = decltype(e);
    gather_kernel<E><<<blocks, kThreads, 0, stream>>>(g, static_cast<const E*>(self), index, count,
                                                      static_cast<E*>(out), bad_index);
  };
  by_element_size(elem_size, go);
}

void launch_scatter_add(const IndexAlong& g, Compute c, void* acc, const int64_t* index,
                        const void* src, int64_t* bad_index, cudaStream_t stream) {
  int64_t columns = 1;
  for (int d = 0; d < g.rank; ++d) columns *= d == g.dim ? 1 : g.index_sizes[d];
  if (columns == 0 || g.index_sizes[g.dim] == 0) return;
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    scatter_add_kernel<T><<<grid_for(columns, kThreads), kThreads, 0, stream>>>(
        g, static_cast<T*>(acc), index, static_cast<const T*>(src), columns, bad_index);
  });
}

}  // namespace dtensor::kernels::cuda::detail
