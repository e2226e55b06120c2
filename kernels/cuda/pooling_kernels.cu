// Average / max pooling and their backward over contiguous [planes, D, H, W] planes (2-d pooling
// has D = 1, 1-d also H = 1), with the window rules of kernels/cpu/pooling.h (padding never read,
// ceil_mode windows clipped at the right padding for count_include_pad, max-pool NaN and tie rules,
// flat (d * H + h) * W + w indices).
//
// These kernels are memory-bound only if each thread's index arithmetic stays small: GPUs have no
// integer divide instruction (a 32-bit division is a routine of ~20 instructions, a 64-bit one
// more), and several int64 divisions per element made them instruction-bound (0.07-0.36 of copy
// bandwidth on an H100). So the kernels are templated on the index type I, int32_t whenever every
// index that can occur fits (index32_ok), and divide by the runtime sizes and strides through
// Div<I> (a multiply-high and shift for int32); they are also templated on the storage type S, so
// loads and stores need no runtime dtype switch.
//
// Two kernel kinds: 1-d and 2-d pooling whose tiles are filled enough run tiled (a block stages its
// tile's window in shared memory once; pooling_tiles.h, whose phases the host tests run on the
// CPU); 3-d pooling, large windows and small planes run per element (a thread a result).
// max-pool backward accumulates a group of planes in shared memory, or, for planes too large for
// it, adds into a zeroed accumulator with global atomics.
#include <type_traits>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/pooling_tiles.h"

namespace dtensor::kernels::cuda::detail {
namespace {

namespace tl = ::dtensor::kernels::cuda::tiles;
using tl::avg_extent;
using tl::imax;
using tl::imin;
using tl::outputs_of;

constexpr int kThreads = 256;

// Division by a positive runtime constant, for dividends n >= 0 (every division here: flat indices,
// and outputs_of's non-negative numerators).
template <typename I>
struct Div;

template <>
struct Div<int64_t> {
  int64_t d = 1;
  Div() = default;
  explicit Div(int64_t v) : d(v) {}
  __device__ __forceinline__ int64_t div(int64_t n) const { return n / d; }
};

template <>
struct Div<int32_t> {  // FastDiv32: exact for 0 <= n < 2^31 and 1 <= d < 2^31
  FastDiv32 fast;
  Div() = default;
  explicit Div(int64_t v) : fast(v) {}
  __device__ __forceinline__ int32_t div(int32_t n) const {
    return static_cast<int32_t>(fast(static_cast<uint32_t>(n)));
  }
};

// Pool2d in the index type, with dividers for the sizes and strides the kernels divide by.
template <typename I>
struct Geo {
  I planes, D, H, W, OD, OH, OW, kD, kH, kW, sD, sH, sW, pD, pH, pW, dD, dH, dW;
  bool count_include_pad;
  int64_t divisor_override;  // only converted to T, never part of the index arithmetic
  Div<I> by_D, by_H, by_W, by_OD, by_OH, by_OW, by_sD, by_sH, by_sW;
};

template <typename I>
Geo<I> geo_of(const Pool2d& p) {
  Geo<I> g;
  g.planes = I(p.planes), g.D = I(p.D), g.H = I(p.H), g.W = I(p.W);
  g.OD = I(p.OD), g.OH = I(p.OH), g.OW = I(p.OW);
  g.kD = I(p.kD), g.kH = I(p.kH), g.kW = I(p.kW), g.sD = I(p.sD), g.sH = I(p.sH), g.sW = I(p.sW);
  g.pD = I(p.pD), g.pH = I(p.pH), g.pW = I(p.pW), g.dD = I(p.dD), g.dH = I(p.dH), g.dW = I(p.dW);
  g.count_include_pad = p.count_include_pad;
  g.divisor_override = p.divisor_override;
  g.by_D = Div<I>(p.D), g.by_H = Div<I>(p.H), g.by_W = Div<I>(p.W);
  g.by_OD = Div<I>(p.OD), g.by_OH = Div<I>(p.OH), g.by_OW = Div<I>(p.OW);
  g.by_sD = Div<I>(p.sD), g.by_sH = Div<I>(p.sH), g.by_sW = Div<I>(p.sW);
  return g;
}

// Indices below this bound leave int32 headroom for the grid-stride loop's t + stride (stride <
// 2^28 under grid_for's block cap) and the windows' overhangs.
constexpr int64_t kIndex32Limit = int64_t{1} << 30;

// Whether every index the kernels form fits in int32: planes times, per dim, size + 2 * pad +
// stride + kernel * dilation - 2 (1 for a dim of size 1 that 2-d / 1-d pooling leaves trivial)
// bounds the element counts, window positions (start = o * stride - pad, its end, outputs_of's
// numerators), divisors and flat offsets.
bool index32_ok(const Pool2d& p) {
  const int64_t L = kIndex32Limit;
  if (p.planes < 0 || p.planes > L) return false;
  const int64_t dims[3][6] = {{p.D, p.OD, p.kD, p.sD, p.pD, p.dD},
                              {p.H, p.OH, p.kH, p.sH, p.pH, p.dH},
                              {p.W, p.OW, p.kW, p.sW, p.pW, p.dW}};
  int64_t bound = p.planes;
  for (const auto& d : dims) {
    const int64_t x = d[0], o = d[1], k = d[2], s = d[3], pad = d[4], dil = d[5];
    if (x < 1 || x > L || o < 1 || o > L || k < 1 || k > L || s < 1 || s > L || pad < 0 ||
        pad > L || dil < 1 || dil > L)
      return false;
    const int64_t extent = (x > o ? x : o) + 2 * pad + s + k * dil - 2;  // < 2^62: no overflow
    if (extent > L) return false;
    bound *= extent;  // both factors <= 2^30
    if (bound > L) return false;
  }
  return true;
}

template <typename T, typename S, typename I>
__device__ __forceinline__ T ld(const S* __restrict__ p, I i) {
  return from_storage<T>(p[i]);
}

template <typename T, typename S, typename I>
__device__ __forceinline__ void st(S* __restrict__ p, I i, T v) {
  p[i] = to_storage<S>(v);
}

// t's (o0, o1, o2) over (D0, D1, D2) slowest to fastest and its plane (K3: the depth dim is real;
// else o0 = 0 and D0 = 1).
template <bool K3, typename I>
__device__ __forceinline__ void decompose(I t, const Div<I>& by2, I n2, const Div<I>& by1, I n1,
                                          const Div<I>& by0, I n0, I* o0, I* o1, I* o2, I* plane) {
  const I q2 = by2.div(t), q1 = by1.div(q2);
  *o2 = t - q2 * n2;
  *o1 = q2 - q1 * n1;
  if (K3) {
    const I q0 = by0.div(q1);
    *o0 = q1 - q0 * n0;
    *plane = q0;
  } else {
    *o0 = 0;
    *plane = q1;
  }
}

template <typename I>
__device__ __forceinline__ I first_thread() {
  return I(blockIdx.x) * I(blockDim.x) + I(threadIdx.x);
}
template <typename I>
__device__ __forceinline__ I thread_stride() {
  return I(gridDim.x) * I(blockDim.x);
}

template <typename T, typename S, typename I, bool K3>
__global__ void __launch_bounds__(kThreads)
    avg_pool_kernel(Geo<I> p, I total, const S* __restrict__ in, S* __restrict__ out) {
  for (I t = first_thread<I>(); t < total; t += thread_stride<I>()) {
    I od, oh, ow, plane;
    decompose<K3>(t, p.by_OW, p.OW, p.by_OH, p.OH, p.by_OD, p.OD, &od, &oh, &ow, &plane);
    const I ds = K3 ? od * p.sD - p.pD : 0, hs = oh * p.sH - p.pH, ws = ow * p.sW - p.pW;
    const I d0 = K3 ? imax(ds, I(0)) : 0, d1 = K3 ? imin(ds + p.kD, p.D) : 1;
    const I h0 = imax(hs, I(0)), h1 = imin(hs + p.kH, p.H);
    const I w0 = imax(ws, I(0)), w1 = imin(ws + p.kW, p.W);
    T sum = 0;
    const I base = plane * (K3 ? p.D : 1) * p.H * p.W;
    for (I d = d0; d < d1; ++d)
      for (I h = h0; h < h1; ++h)
        for (I w = w0; w < w1; ++w) sum += ld<T>(in, base + (d * p.H + h) * p.W + w);
    T v = 0;
    if (d1 > d0 && h1 > h0 && w1 > w0) {
      // The divisor's integer value is the one of kernels/cpu/pooling.h, so its conversion to T,
      // and the quotient, are too.
      if (p.divisor_override != 0) {
        v = sum / static_cast<T>(p.divisor_override);
      } else {
        const bool inc = p.count_include_pad;
        const I fd = K3 ? avg_extent(ds, p.kD, p.D, p.pD, inc) : 1;
        v = sum / static_cast<T>(fd * avg_extent(hs, p.kH, p.H, p.pH, inc) *
                                 avg_extent(ws, p.kW, p.W, p.pW, inc));
      }
    }
    st(out, t, v);
  }
}

template <typename T, typename S, typename I, bool K3>
__global__ void __launch_bounds__(kThreads)
    avg_pool_backward_kernel(Geo<I> p, I total, const S* __restrict__ grad_out,
                             S* __restrict__ grad_in) {
  const bool inc = p.count_include_pad, has_override = p.divisor_override != 0;
  const T fixed = static_cast<T>(p.divisor_override);
  for (I t = first_thread<I>(); t < total; t += thread_stride<I>()) {
    I d, h, w, plane;
    decompose<K3>(t, p.by_W, p.W, p.by_H, p.H, p.by_D, p.D, &d, &h, &w, &plane);
    I od0 = 0, od1 = 0, oh0, oh1, ow0, ow1;
    if (K3) outputs_of(d, p.kD, p.sD, p.by_sD, p.pD, p.OD, &od0, &od1);
    outputs_of(h, p.kH, p.sH, p.by_sH, p.pH, p.OH, &oh0, &oh1);
    outputs_of(w, p.kW, p.sW, p.by_sW, p.pW, p.OW, &ow0, &ow1);
    T g = 0;
    const I base = plane * (K3 ? p.OD : 1) * p.OH * p.OW;
    // Each output's g / divisor in (od, oh, ow) ascending order, as before; the divisor's per-dim
    // factors are hoisted out of the inner loops (an exact integer product in any order).
    for (I od = od0; od <= od1; ++od) {
      const I fd = K3 ? avg_extent(od * p.sD - p.pD, p.kD, p.D, p.pD, inc) : 1;
      for (I oh = oh0; oh <= oh1; ++oh) {
        const I fdh = fd * avg_extent(oh * p.sH - p.pH, p.kH, p.H, p.pH, inc);
        const I row = base + (od * p.OH + oh) * p.OW;
        for (I ow = ow0; ow <= ow1; ++ow) {
          const T div =
              has_override
                  ? fixed
                  : static_cast<T>(fdh * avg_extent(ow * p.sW - p.pW, p.kW, p.W, p.pW, inc));
          g += ld<T>(grad_out, row + ow) / div;
        }
      }
    }
    st(grad_in, t, g);
  }
}

template <typename T, typename S, typename I, bool K3>
__global__ void __launch_bounds__(kThreads)
    max_pool_kernel(Geo<I> p, I total, const S* __restrict__ in, S* __restrict__ out,
                    int64_t* __restrict__ indices) {
  for (I t = first_thread<I>(); t < total; t += thread_stride<I>()) {
    I od, oh, ow, plane;
    decompose<K3>(t, p.by_OW, p.OW, p.by_OH, p.OH, p.by_OD, p.OD, &od, &oh, &ow, &plane);
    const I ds = K3 ? od * p.sD - p.pD : 0, hs = oh * p.sH - p.pH, ws = ow * p.sW - p.pW;
    const I base = plane * (K3 ? p.D : 1) * p.H * p.W;
    T best = neg_inf<T>();
    I arg = -1;
    for (I a = 0; a < (K3 ? p.kD : 1); ++a) {
      const I d = K3 ? ds + a * p.dD : 0;
      if (d < 0 || d >= p.D) continue;
      for (I i = 0; i < p.kH; ++i) {
        const I h = hs + i * p.dH;
        if (h < 0 || h >= p.H) continue;
        for (I j = 0; j < p.kW; ++j) {
          const I w = ws + j * p.dW;
          if (w < 0 || w >= p.W) continue;
          const I idx = (d * p.H + h) * p.W + w;
          if (arg < 0) arg = idx;  // the first in-input position
          const T x = ld<T>(in, base + idx);
          if (x > best || is_nan(x)) {
            best = x;
            arg = idx;
          }
        }
      }
    }
    st(out, t, best);
    indices[t] = static_cast<int64_t>(arg);
  }
}

template <typename T, typename S, typename I>
__global__ void __launch_bounds__(kThreads)
    max_pool_backward_kernel(const S* __restrict__ grad_out, const int64_t* __restrict__ indices,
                             I total, Div<I> by_out_plane, I in_plane, T* acc, int64_t* bad) {
  for (I t = first_thread<I>(); t < total; t += thread_stride<I>()) {
    const int64_t idx = indices[t];
    if (idx < 0 || idx >= in_plane) {
      bad[0] = 1;
      atomicExch(reinterpret_cast<unsigned long long*>(bad + 1),
                 static_cast<unsigned long long>(idx));
      continue;
    }
    atomicAdd(acc + by_out_plane.div(t) * in_plane + static_cast<I>(idx), ld<T>(grad_out, t));
  }
}

// ---- Tiled 1-d / 2-d kernels (pooling_tiles.h): stage a tile's window, barrier, compute.

// Loads and stores of the storage type S as the compute type T, for pooling_tiles.h's functions.
struct DeviceIo {
  template <typename T, typename S, typename I>
  __device__ __forceinline__ static T ld(const S* __restrict__ p, I i) {
    return from_storage<T>(p[i]);
  }
  template <typename S, typename I, typename T>
  __device__ __forceinline__ static void st(S* __restrict__ p, I i, T v) {
    p[i] = to_storage<S>(v);
  }
  template <typename T>
  __device__ __forceinline__ static void add(T* p, T v) {
    atomicAdd(p, v);
  }
  // An index outside its plane: flagged, with one such index kept (read back by the host).
  __device__ __forceinline__ static void bad(int64_t* record, int64_t idx) {
    record[0] = 1;
    atomicExch(reinterpret_cast<unsigned long long*>(record + 1), static_cast<unsigned long long>(idx));
  }
};

extern __shared__ __align__(16) unsigned char tile_smem[];

template <typename T, typename S, typename I>
__global__ void __launch_bounds__(tl::kTileThreads)
    avg_pool_tiled_kernel(tl::TileGeo g, tl::TilePlan tp, const S* __restrict__ in,
                          S* __restrict__ out) {
  T* stage = reinterpret_cast<T*>(tile_smem);
  for (int64_t t = blockIdx.x; t < tp.tiles; t += gridDim.x) {
    const tl::Tile<I> tile = tl::tile_at<I>(tp, t);
    tl::stage_forward<T, S, I, DeviceIo>(g, tp, tile, threadIdx.x, in, stage);
    __syncthreads();
    tl::compute_avg_forward<T, S, I, DeviceIo>(g, tp, tile, threadIdx.x, stage, out);
    __syncthreads();  // the next tile's staging overwrites this one's window
  }
}

template <typename T, typename S, typename I>
__global__ void __launch_bounds__(tl::kTileThreads)
    max_pool_tiled_kernel(tl::TileGeo g, tl::TilePlan tp, const S* __restrict__ in,
                          S* __restrict__ out, int64_t* __restrict__ indices) {
  T* stage = reinterpret_cast<T*>(tile_smem);
  for (int64_t t = blockIdx.x; t < tp.tiles; t += gridDim.x) {
    const tl::Tile<I> tile = tl::tile_at<I>(tp, t);
    tl::stage_forward<T, S, I, DeviceIo>(g, tp, tile, threadIdx.x, in, stage);
    __syncthreads();
    tl::compute_max_forward<T, S, I, DeviceIo>(g, tp, tile, threadIdx.x, stage, out, indices);
    __syncthreads();
  }
}

template <typename T, typename S, typename I>
__global__ void __launch_bounds__(tl::kTileThreads)
    avg_pool_backward_tiled_kernel(tl::TileGeo g, tl::TilePlan tp, Div<I> by_sH, Div<I> by_sW,
                                   const S* __restrict__ grad_out, S* __restrict__ grad_in) {
  T* stage = reinterpret_cast<T*>(tile_smem);
  I* ranges = reinterpret_cast<I*>(tile_smem + tp.ranges_offset);
  for (int64_t t = blockIdx.x; t < tp.tiles; t += gridDim.x) {
    const tl::Tile<I> tile = tl::tile_at<I>(tp, t);
    tl::stage_avg_backward_ranges<T, S, I, DeviceIo>(g, tp, tile, threadIdx.x, by_sH, by_sW,
                                                     ranges);
    __syncthreads();
    tl::stage_avg_backward_values<T, S, I, DeviceIo>(g, tp, tile, threadIdx.x, ranges, grad_out,
                                                     stage);
    __syncthreads();
    tl::compute_avg_backward<T, S, I, DeviceIo>(g, tp, tile, threadIdx.x, ranges, stage, grad_in);
    __syncthreads();
  }
}

// Pool2d's 2-d part (D = OD = 1) as the tiles' geometry.
tl::TileGeo tile_geo(const Pool2d& p) {
  tl::TileGeo g;
  g.planes = p.planes, g.H = p.H, g.W = p.W, g.OH = p.OH, g.OW = p.OW;
  g.kH = p.kH, g.kW = p.kW, g.sH = p.sH, g.sW = p.sW, g.pH = p.pH, g.pW = p.pW;
  g.dH = p.dH, g.dW = p.dW;
  g.count_include_pad = p.count_include_pad;
  g.divisor_override = p.divisor_override;
  return g;
}

// Blocks for a loop over tiles (one tile a block at a time).
unsigned grid_for_tiles(int64_t tiles) { return grid_for(tiles, 1); }

// max-pool backward, a block per group of planes: their gradient accumulates in shared memory
// (atomics there are cheap), then is written once. The global-atomics kernel above needs a zeroed
// accumulator (a write of the input's size), read-modify-writes it in L2 (the input's size twice
// more once it exceeds L2) and a conversion pass: about twice the traffic (0.33 of the device copy
// on an H200). Small planes are grouped (tl::plane_group) so that a block has a few thousand
// elements to write.
constexpr int kPlaneThreads = 512;

template <typename T, typename S, typename I>
__global__ void __launch_bounds__(kPlaneThreads)
    max_pool_backward_plane_kernel(const S* __restrict__ grad_out,
                                   const int64_t* __restrict__ indices, I planes, I group, I in_plane,
                                   I out_plane, Div<I> by_out_plane, S* __restrict__ grad_in,
                                   int64_t* bad) {
  T* acc = reinterpret_cast<T*>(tile_smem);
  for (I p0 = I(blockIdx.x) * group; p0 < planes; p0 += I(gridDim.x) * group) {
    const I n = imin(group, planes - p0), in_n = n * in_plane;
    for (I i = threadIdx.x; i < in_n; i += kPlaneThreads) acc[i] = T(0);
    __syncthreads();
    tl::plane_group_accumulate<T, S, I, DeviceIo>(p0, n, in_plane, out_plane, by_out_plane,
                                                  threadIdx.x, kPlaneThreads, grad_out, indices,
                                                  acc, bad);
    __syncthreads();
    const I out_base = p0 * in_plane;
    for (I i = threadIdx.x; i < in_n; i += kPlaneThreads) st(grad_in, out_base + i, acc[i]);
    __syncthreads();  // the next group's zeroing overwrites acc
  }
}

// Whether the depth dim is real (3-d pooling): otherwise the kernels' 2-d instantiation, whose
// index arithmetic is the 2-d kernels' (a runtime depth of 1 cost 1.3-1.5x on an H200).
bool has_depth(const Pool2d& p) { return p.D != 1 || p.OD != 1 || p.kD != 1; }

// f(T{}, std::type_identity<S>{}) for the (compute type, storage type) pairs the host sends
// (compute_of): float over float32 / bfloat16 / float16, double over float64. Others (integer
// compute) launch nothing, as before.
template <typename F>
void dispatch_storage(Compute c, DType dt, F&& f) {
  if (c == Compute::kFloat) {
    switch (dt) {
      case DType::kFloat32:
        f(float{}, std::type_identity<float>{});
        break;
      case DType::kBFloat16:
        f(float{}, std::type_identity<__nv_bfloat16>{});
        break;
      case DType::kFloat16:
        f(float{}, std::type_identity<__half>{});
        break;
      default:
        break;
    }
  } else if (c == Compute::kDouble && dt == DType::kFloat64) {
    f(double{}, std::type_identity<double>{});
  }
}

// f(I{}) with I = int32_t when `small`, else int64_t.
template <typename F>
void dispatch_index(bool small, F&& f) {
  if (small)
    f(int32_t{});
  else
    f(int64_t{});
}

}  // namespace

void launch_avg_pool2d(const Pool2d& p, Compute c, const void* in, DType dtype, void* out,
                       cudaStream_t stream) {
  const int64_t total = p.planes * p.OD * p.OH * p.OW;
  if (total == 0) return;
  const unsigned grid = grid_for(total, kThreads);
  dispatch_storage(c, dtype, [&](auto tag, auto stag) {
    using T = decltype(tag);
    using S = typename decltype(stag)::type;
    dispatch_index(index32_ok(p), [&](auto itag) {
      using I = decltype(itag);
      const S* x = static_cast<const S*>(in);
      S* y = static_cast<S*>(out);
      tl::TilePlan tp;
      if (has_depth(p))
        avg_pool_kernel<T, S, I, true><<<grid, kThreads, 0, stream>>>(geo_of<I>(p), I(total), x, y);
      else if (tl::plan_forward(tile_geo(p), sizeof(T), &tp))
        avg_pool_tiled_kernel<T, S, I><<<grid_for_tiles(tp.tiles), tl::kTileThreads,
                                         tp.smem_bytes, stream>>>(tile_geo(p), tp, x, y);
      else
        avg_pool_kernel<T, S, I, false>
            <<<grid, kThreads, 0, stream>>>(geo_of<I>(p), I(total), x, y);
    });
  });
}

void launch_avg_pool2d_backward(const Pool2d& p, Compute c, const void* grad_out, DType dtype,
                                void* grad_in, cudaStream_t stream) {
  const int64_t total = p.planes * p.D * p.H * p.W;
  if (total == 0) return;
  const unsigned grid = grid_for(total, kThreads);
  dispatch_storage(c, dtype, [&](auto tag, auto stag) {
    using T = decltype(tag);
    using S = typename decltype(stag)::type;
    dispatch_index(index32_ok(p), [&](auto itag) {
      using I = decltype(itag);
      const S* g = static_cast<const S*>(grad_out);
      S* gi = static_cast<S*>(grad_in);
      tl::TilePlan tp;
      if (has_depth(p))
        avg_pool_backward_kernel<T, S, I, true>
            <<<grid, kThreads, 0, stream>>>(geo_of<I>(p), I(total), g, gi);
      else if (tl::plan_avg_backward(tile_geo(p), sizeof(T), sizeof(I), &tp))
        avg_pool_backward_tiled_kernel<T, S, I>
            <<<grid_for_tiles(tp.tiles), tl::kTileThreads, tp.smem_bytes, stream>>>(
                tile_geo(p), tp, Div<I>(p.sH), Div<I>(p.sW), g, gi);
      else
        avg_pool_backward_kernel<T, S, I, false>
            <<<grid, kThreads, 0, stream>>>(geo_of<I>(p), I(total), g, gi);
    });
  });
}

void launch_max_pool2d(const Pool2d& p, Compute c, const void* in, DType dtype, void* out,
                       int64_t* indices, cudaStream_t stream) {
  const int64_t total = p.planes * p.OD * p.OH * p.OW;
  if (total == 0) return;
  const unsigned grid = grid_for(total, kThreads);
  dispatch_storage(c, dtype, [&](auto tag, auto stag) {
    using T = decltype(tag);
    using S = typename decltype(stag)::type;
    dispatch_index(index32_ok(p), [&](auto itag) {
      using I = decltype(itag);
      const S* x = static_cast<const S*>(in);
      S* y = static_cast<S*>(out);
      tl::TilePlan tp;
      if (has_depth(p))
        max_pool_kernel<T, S, I, true>
            <<<grid, kThreads, 0, stream>>>(geo_of<I>(p), I(total), x, y, indices);
      else if (tl::plan_forward(tile_geo(p), sizeof(T), &tp))
        max_pool_tiled_kernel<T, S, I><<<grid_for_tiles(tp.tiles), tl::kTileThreads,
                                         tp.smem_bytes, stream>>>(tile_geo(p), tp, x, y, indices);
      else
        max_pool_kernel<T, S, I, false>
            <<<grid, kThreads, 0, stream>>>(geo_of<I>(p), I(total), x, y, indices);
    });
  });
}

void launch_max_pool_backward(Compute c, const void* grad_out, DType dtype, const int64_t* indices,
                              int64_t planes, int64_t in_plane, int64_t out_plane, void* grad_acc,
                              int64_t* bad_index, cudaStream_t stream) {
  const int64_t total = planes * out_plane;
  if (total == 0) return;
  const int64_t L = kIndex32Limit;
  // planes * in_plane bounds the accumulator offsets, planes * out_plane the grid-stride loop.
  const bool small = planes <= L && in_plane <= L && out_plane <= L && planes * in_plane <= L &&
                     planes * out_plane <= L;
  const unsigned grid = grid_for(total, kThreads);
  dispatch_storage(c, dtype, [&](auto tag, auto stag) {
    using T = decltype(tag);
    using S = typename decltype(stag)::type;
    dispatch_index(small, [&](auto itag) {
      using I = decltype(itag);
      max_pool_backward_kernel<T, S, I><<<grid, kThreads, 0, stream>>>(
          static_cast<const S*>(grad_out), indices, I(total), Div<I>(out_plane), I(in_plane),
          static_cast<T*>(grad_acc), bad_index);
    });
  });
}

namespace {
// Bytes of one compute-type value of the plane kernel (float or double).
int64_t compute_bytes(Compute c) { return c == Compute::kDouble ? 8 : 4; }
}  // namespace

int64_t max_pool_backward_plane_group(Compute c, int64_t planes, int64_t in_plane, int64_t out_plane) {
  int device = 0, optin = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) !=
          cudaSuccess) {
    (void)cudaGetLastError();  // the caller's fallback runs; its launch check must not see this
    return 0;
  }
  return out_plane <= 0 ? 0 : tl::plane_group(planes, in_plane, optin / compute_bytes(c));
}

bool launch_max_pool_backward_planes(Compute c, const void* grad_out, DType dtype,
                                     const int64_t* indices, int64_t planes, int64_t group,
                                     int64_t in_plane, int64_t out_plane, void* grad_in,
                                     int64_t* bad_index, cudaStream_t stream) {
  const int64_t elem = compute_bytes(c);
  const int64_t L = kIndex32Limit;
  const bool small = planes <= L && in_plane <= L && out_plane <= L && planes * in_plane <= L &&
                     planes * out_plane <= L;
  const size_t bytes = static_cast<size_t>(group * in_plane * elem);
  const unsigned grid = grid_for(ceil_div(planes, group), 1);
  bool launched = false;
  dispatch_storage(c, dtype, [&](auto tag, auto stag) {
    using T = decltype(tag);
    using S = typename decltype(stag)::type;
    dispatch_index(small, [&](auto itag) {
      using I = decltype(itag);
      auto* kernel = max_pool_backward_plane_kernel<T, S, I>;
      // Over 48 KiB a kernel must ask for its dynamic shared memory.
      if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                               static_cast<int>(bytes)) != cudaSuccess) {
        (void)cudaGetLastError();  // as above: the fallback runs
        return;
      }
      kernel<<<grid, kPlaneThreads, bytes, stream>>>(
          static_cast<const S*>(grad_out), indices, I(planes), I(group), I(in_plane), I(out_plane),
          Div<I>(out_plane), static_cast<S*>(grad_in), bad_index);
      launched = true;
    });
  });
  return launched;
}

}  // namespace dtensor::kernels::cuda::detail
