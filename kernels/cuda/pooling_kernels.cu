// Average / max pooling and their backward over contiguous [planes, D, H, W] planes (2-d pooling
// has D = 1, 1-d also H = 1), with the window rules of kernels/cpu/pooling.h (padding never read,
// ceil_mode windows clipped at the right padding for count_include_pad, max-pool NaN and tie rules,
// flat (d * H + h) * W + w indices).
#include "kernels/cuda/device_util.cuh"

namespace dtensor::kernels::cuda::detail {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }
__device__ __forceinline__ int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

// The divisor of output (od, oh, ow) of an average pool (K3: a depth dim; else od = 0, depth 1).
template <bool K3>
__device__ __forceinline__ int64_t avg_divisor(const Pool2d& p, int64_t od, int64_t oh, int64_t ow) {
  if (p.divisor_override != 0) return p.divisor_override;
  const int64_t hs = oh * p.sH - p.pH, ws = ow * p.sW - p.pW;
  const int64_t he = imin(hs + p.kH, p.H + p.pH), we = imin(ws + p.kW, p.W + p.pW);
  int64_t depth_full = 1, depth_in = 1;
  if (K3) {
    const int64_t ds = od * p.sD - p.pD, de = imin(ds + p.kD, p.D + p.pD);
    depth_full = de - ds;
    depth_in = imin(de, p.D) - imax(ds, 0);
  }
  if (p.count_include_pad) return depth_full * (he - hs) * (we - ws);
  return depth_in * (imin(he, p.H) - imax(hs, 0)) * (imin(we, p.W) - imax(ws, 0));
}

// Outputs [o0, o1] along one dim whose window [o * s - pad, o * s - pad + k) holds position x.
__device__ __forceinline__ void outputs_of(int64_t x, int64_t k, int64_t s, int64_t pad, int64_t out,
                                           int64_t* o0, int64_t* o1) {
  const int64_t n = x + pad - k + 1;
  *o0 = n <= 0 ? 0 : ceil_div(n, s);
  *o1 = imin((x + pad) / s, out - 1);
}

template <typename T, bool K3>
__global__ void avg_pool_kernel(Pool2d p, const void* in, DType dt, void* out) {
  const int64_t total = p.planes * p.OD * p.OH * p.OW;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t OD = K3 ? p.OD : 1;  // a compile-time 1 without a depth dim
    const int64_t ow = t % p.OW, oh = (t / p.OW) % p.OH, od = K3 ? (t / (p.OW * p.OH)) % OD : 0;
    const int64_t plane = t / (p.OW * p.OH * OD);
    const int64_t ds = K3 ? od * p.sD - p.pD : 0, hs = oh * p.sH - p.pH, ws = ow * p.sW - p.pW;
    const int64_t d0 = K3 ? imax(ds, 0) : 0, d1 = K3 ? imin(ds + p.kD, p.D) : 1;
    const int64_t h0 = imax(hs, 0), h1 = imin(hs + p.kH, p.H);
    const int64_t w0 = imax(ws, 0), w1 = imin(ws + p.kW, p.W);
    T sum = 0;
    const int64_t base = plane * (K3 ? p.D : 1) * p.H * p.W;
    for (int64_t d = d0; d < d1; ++d)
      for (int64_t h = h0; h < h1; ++h)
        for (int64_t w = w0; w < w1; ++w) sum += load_as<T>(in, dt, base + (d * p.H + h) * p.W + w);
    const bool any = d1 > d0 && h1 > h0 && w1 > w0;
    store_as<T>(out, dt, t, any ? sum / static_cast<T>(avg_divisor<K3>(p, od, oh, ow)) : T(0));
  }
}

template <typename T, bool K3>
__global__ void avg_pool_backward_kernel(Pool2d p, const void* grad_out, DType dt, void* grad_in) {
  const int64_t total = p.planes * p.D * p.H * p.W;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t D = K3 ? p.D : 1;
    const int64_t w = t % p.W, h = (t / p.W) % p.H, d = K3 ? (t / (p.W * p.H)) % D : 0;
    const int64_t plane = t / (p.W * p.H * D);
    int64_t od0 = 0, od1 = 0, oh0, oh1, ow0, ow1;
    if (K3) outputs_of(d, p.kD, p.sD, p.pD, p.OD, &od0, &od1);
    outputs_of(h, p.kH, p.sH, p.pH, p.OH, &oh0, &oh1);
    outputs_of(w, p.kW, p.sW, p.pW, p.OW, &ow0, &ow1);
    T g = 0;
    const int64_t base = plane * (K3 ? p.OD : 1) * p.OH * p.OW;
    for (int64_t od = od0; od <= od1; ++od)
      for (int64_t oh = oh0; oh <= oh1; ++oh)
        for (int64_t ow = ow0; ow <= ow1; ++ow)
          g += load_as<T>(grad_out, dt, base + (od * p.OH + oh) * p.OW + ow) /
               static_cast<T>(avg_divisor<K3>(p, od, oh, ow));
    store_as<T>(grad_in, dt, t, g);
  }
}

template <typename T, bool K3>
__global__ void max_pool_kernel(Pool2d p, const void* in, DType dt, void* out, int64_t* indices) {
  const int64_t total = p.planes * p.OD * p.OH * p.OW;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t OD = K3 ? p.OD : 1;  // a compile-time 1 without a depth dim
    const int64_t ow = t % p.OW, oh = (t / p.OW) % p.OH, od = K3 ? (t / (p.OW * p.OH)) % OD : 0;
    const int64_t plane = t / (p.OW * p.OH * OD);
    const int64_t ds = K3 ? od * p.sD - p.pD : 0, hs = oh * p.sH - p.pH, ws = ow * p.sW - p.pW;
    const int64_t base = plane * (K3 ? p.D : 1) * p.H * p.W;
    T best = neg_inf<T>();
    int64_t arg = -1;
    for (int64_t a = 0; a < (K3 ? p.kD : 1); ++a) {
      const int64_t d = K3 ? ds + a * p.dD : 0;
      if (d < 0 || d >= p.D) continue;
      for (int64_t i = 0; i < p.kH; ++i) {
        const int64_t h = hs + i * p.dH;
        if (h < 0 || h >= p.H) continue;
        for (int64_t j = 0; j < p.kW; ++j) {
          const int64_t w = ws + j * p.dW;
          if (w < 0 || w >= p.W) continue;
          const int64_t idx = (d * p.H + h) * p.W + w;
          if (arg < 0) arg = idx;  // the first in-input position
          const T x = load_as<T>(in, dt, base + idx);
          if (x > best || is_nan(x)) {
            best = x;
            arg = idx;
          }
        }
      }
    }
    store_as<T>(out, dt, t, best);
    indices[t] = arg;
  }
}

template <typename T>
__global__ void max_pool_backward_kernel(const void* grad_out, DType dt, const int64_t* indices,
                                         int64_t planes, int64_t in_plane, int64_t out_plane,
                                         T* acc, int64_t* bad) {
  const int64_t total = planes * out_plane;
  for (int64_t t = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; t < total;
       t += int64_t(gridDim.x) * blockDim.x) {
    const int64_t idx = indices[t];
    if (idx < 0 || idx >= in_plane) {
      bad[0] = 1;
      atomicExch(reinterpret_cast<unsigned long long*>(bad + 1),
                 static_cast<unsigned long long>(idx));
      continue;
    }
    atomicAdd(acc + (t / out_plane) * in_plane + idx, load_as<T>(grad_out, dt, t));
  }
}

// Whether the depth dim is real (3-d pooling): otherwise the kernels' 2-d instantiation, whose
// index arithmetic is the 2-d kernels' (a runtime depth of 1 cost 1.3-1.5x on an H200).
bool has_depth(const Pool2d& p) { return p.D != 1 || p.OD != 1 || p.kD != 1; }

}  // namespace

void launch_avg_pool2d(const Pool2d& p, Compute c, const void* in, DType dtype, void* out,
                       cudaStream_t stream) {
  const int64_t total = p.planes * p.OD * p.OH * p.OW;
  if (total == 0) return;
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>)
    {
      if (has_depth(p))
        avg_pool_kernel<T, true><<<grid_for(total, kThreads), kThreads, 0, stream>>>(p, in, dtype, out);
      else
        avg_pool_kernel<T, false><<<grid_for(total, kThreads), kThreads, 0, stream>>>(p, in, dtype, out);
    }
  });
}

void launch_avg_pool2d_backward(const Pool2d& p, Compute c, const void* grad_out, DType dtype,
                                void* grad_in, cudaStream_t stream) {
  const int64_t total = p.planes * p.D * p.H * p.W;
  if (total == 0) return;
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>)
    {
      if (has_depth(p))
        avg_pool_backward_kernel<T, true>
            <<<grid_for(total, kThreads), kThreads, 0, stream>>>(p, grad_out, dtype, grad_in);
      else
        avg_pool_backward_kernel<T, false>
            <<<grid_for(total, kThreads), kThreads, 0, stream>>>(p, grad_out, dtype, grad_in);
    }
  });
}

void launch_max_pool2d(const Pool2d& p, Compute c, const void* in, DType dtype, void* out,
                       int64_t* indices, cudaStream_t stream) {
  const int64_t total = p.planes * p.OD * p.OH * p.OW;
  if (total == 0) return;
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>)
    {
      if (has_depth(p))
        max_pool_kernel<T, true>
            <<<grid_for(total, kThreads), kThreads, 0, stream>>>(p, in, dtype, out, indices);
      else
        max_pool_kernel<T, false>
            <<<grid_for(total, kThreads), kThreads, 0, stream>>>(p, in, dtype, out, indices);
    }
  });
}

void launch_max_pool_backward(Compute c, const void* grad_out, DType dtype, const int64_t* indices,
                              int64_t planes, int64_t in_plane, int64_t out_plane, void* grad_acc,
                              int64_t* bad_index, cudaStream_t stream) {
  const int64_t total = planes * out_plane;
  if (total == 0) return;
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_floating_point_v<T>)
      max_pool_backward_kernel<T><<<grid_for(total, kThreads), kThreads, 0, stream>>>(
          grad_out, dtype, indices, planes, in_plane, out_plane, static_cast<T*>(grad_acc),
          bad_index);
  });
}

}  // namespace dtensor::kernels::cuda::detail
