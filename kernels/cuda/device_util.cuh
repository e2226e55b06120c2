// Internal to //kernels/cuda: device-side helpers shared by the .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "kernels/cuda/launch.h"

namespace dtensor::kernels::cuda::detail {

// Element i of a buffer of dtype `dt`, converted to Acc (bfloat16/float16 through float).
template <typename Acc>
__device__ __forceinline__ Acc load_as(const void* base, DType dt, int64_t i) {
  switch (dt) {
    case DType::kFloat32:
      return static_cast<Acc>(static_cast<const float*>(base)[i]);
    case DType::kFloat64:
      return static_cast<Acc>(static_cast<const double*>(base)[i]);
    case DType::kBFloat16:
      return static_cast<Acc>(__bfloat162float(static_cast<const __nv_bfloat16*>(base)[i]));
    case DType::kFloat16:
      return static_cast<Acc>(__half2float(static_cast<const __half*>(base)[i]));
    case DType::kInt64:
      return static_cast<Acc>(static_cast<const int64_t*>(base)[i]);
    case DType::kInt32:
      return static_cast<Acc>(static_cast<const int32_t*>(base)[i]);
    case DType::kInt16:
      return static_cast<Acc>(static_cast<const int16_t*>(base)[i]);
    case DType::kInt8:
      return static_cast<Acc>(static_cast<const int8_t*>(base)[i]);
    case DType::kUInt8:
      return static_cast<Acc>(static_cast<const uint8_t*>(base)[i]);
    case DType::kBool:
      return static_cast<Acc>(static_cast<const bool*>(base)[i] ? 1 : 0);
    case DType::kComplex64:
    case DType::kComplex128:
      __trap();  // no real-valued kernel reads complex (ops refuse it first): fail loudly, never silently
  }
  return Acc(0);
}

// Stores v into element i of a buffer of dtype `dt` (16-bit floats round to nearest even from
// float, as the CPU BFloat16/Float16 constructors do; bool is v != 0).
template <typename Acc>
__device__ __forceinline__ void store_as(void* base, DType dt, int64_t i, Acc v) {
  switch (dt) {
    case DType::kFloat32:
      static_cast<float*>(base)[i] = static_cast<float>(v);
      break;
    case DType::kFloat64:
      static_cast<double*>(base)[i] = static_cast<double>(v);
      break;
    case DType::kBFloat16:
      static_cast<__nv_bfloat16*>(base)[i] = __float2bfloat16_rn(static_cast<float>(v));
      break;
    case DType::kFloat16:
      static_cast<__half*>(base)[i] = __float2half_rn(static_cast<float>(v));
      break;
    case DType::kInt64:
      static_cast<int64_t*>(base)[i] = static_cast<int64_t>(v);
      break;
    case DType::kInt32:
      static_cast<int32_t*>(base)[i] = static_cast<int32_t>(static_cast<int64_t>(v));
      break;
    case DType::kInt16:  // through int64, as the CPU's cast back from the int64 compute type: wraps
      static_cast<int16_t*>(base)[i] = static_cast<int16_t>(static_cast<int64_t>(v));
      break;
    case DType::kInt8:
      static_cast<int8_t*>(base)[i] = static_cast<int8_t>(static_cast<int64_t>(v));
      break;
    case DType::kUInt8:
      static_cast<uint8_t*>(base)[i] = static_cast<uint8_t>(static_cast<int64_t>(v));
      break;
    case DType::kBool:
      static_cast<bool*>(base)[i] = v != Acc(0);
      break;
    case DType::kComplex64:
    case DType::kComplex128:
      __trap();  // as in load_as
  }
}

// A value of storage type S (float, double, __nv_bfloat16, __half) as T, and back, for kernels
// templated on the storage type: load_as / store_as's conversions without their dtype switch
// (16-bit floats through float, exactly; to them by rounding to nearest even).
template <typename T, typename S>
__device__ __forceinline__ T from_storage(S v) {
  if constexpr (std::is_same_v<S, __nv_bfloat16>)
    return static_cast<T>(__bfloat162float(v));
  else if constexpr (std::is_same_v<S, __half>)
    return static_cast<T>(__half2float(v));
  else
    return static_cast<T>(v);
}
template <typename S, typename T>
__device__ __forceinline__ S to_storage(T v) {
  if constexpr (std::is_same_v<S, __nv_bfloat16>)
    return __float2bfloat16_rn(static_cast<float>(v));
  else if constexpr (std::is_same_v<S, __half>)
    return __float2half_rn(static_cast<float>(v));
  else
    return static_cast<S>(v);
}

template <typename T>
__device__ __forceinline__ bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) {
    return v != v;
  } else {
    return false;
  }
}

template <typename T>
__device__ __forceinline__ T pos_inf() {
  if constexpr (std::is_same_v<T, float>)
    return __int_as_float(0x7f800000);
  else if constexpr (std::is_same_v<T, double>)
    return __longlong_as_double(0x7ff0000000000000ll);
  else
    return static_cast<T>(0x7fffffffffffffffll);
}

template <typename T>
__device__ __forceinline__ T neg_inf() {
  if constexpr (std::is_floating_point_v<T>)
    return -pos_inf<T>();
  else
    return static_cast<T>(-0x7fffffffffffffffll - 1);
}

// Element offsets of linear index i over `shape` for N operands.
template <int N>
__device__ __forceinline__ void offsets(const LoopShape& shape, int64_t i,
                                        const Operand* const (&ops)[N], int64_t (&off)[N]) {
  if (shape.contiguous) {
    for (int k = 0; k < N; ++k) off[k] = i;
    return;
  }
  for (int k = 0; k < N; ++k) off[k] = 0;
  for (int d = shape.ndim - 1; d >= 0; --d) {
    const int64_t size = shape.sizes[d];
    const int64_t idx = i % size;
    i /= size;
    for (int k = 0; k < N; ++k) off[k] += idx * ops[k]->strides[d];
  }
}

// The value of an operand at element offset `off` (its scalar when it has no data), as T.
template <typename T>
__device__ __forceinline__ T operand_value(const Operand& o, int64_t off) {
  if (o.data == nullptr) {
    if constexpr (std::is_integral_v<T>)
      return static_cast<T>(o.scalar_i);
    else
      return static_cast<T>(o.scalar_d);
  }
  return load_as<T>(o.data, o.dtype, off);
}

// The C++ type of a Compute value, for dispatch: f(Acc{}) with Acc = float, double or int64_t.
template <typename F>
__host__ void dispatch_compute(Compute c, F&& f) {
  switch (c) {
    case Compute::kFloat:
      f(float{});
      break;
    case Compute::kDouble:
      f(double{});
      break;
    case Compute::kInt64:
      f(int64_t{});
      break;
  }
}

// Warp / block reductions for blockDim.x a multiple of 32 (<= 1024). `shared` holds 32 values;
// `identity` is op's neutral element. Every thread gets the result.
template <typename T, typename Op>
__device__ __forceinline__ T warp_reduce(T v, Op op) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

template <typename T, typename Op>
__device__ T block_reduce(T v, Op op, T* shared, T identity) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  v = warp_reduce(v, op);
  __syncthreads();  // `shared` may still be read by a previous call
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < warps ? shared[lane] : identity;
    w = warp_reduce(w, op);
    if (lane == 0) shared[0] = w;
  }
  __syncthreads();
  return shared[0];
}

__host__ __device__ inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// n / d for 0 <= n < 2^31 and 1 <= d < 2^31 by the round-up multiply-high method (Granlund &
// Montgomery, 1994; ATen's IntDivider): a multiply and a shift where a 64-bit division is a
// routine of dozens of instructions on a GPU.
struct FastDiv32 {
  uint32_t magic = 1, shift = 0;
  FastDiv32() = default;
  explicit FastDiv32(int64_t d) {
    while ((int64_t{1} << shift) < d) ++shift;  // shift = ceil(log2(d)) <= 31
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }
  __host__ __device__ __forceinline__ uint32_t operator()(uint32_t n) const {
    return static_cast<uint32_t>(((static_cast<uint64_t>(n) * magic >> 32) + n) >> shift);
  }
};

// Blocks for a grid-stride loop over n items with `threads` per block.
inline unsigned grid_for(int64_t n, int threads, int64_t max_blocks = 65535LL * 8) {
  int64_t b = ceil_div(n, threads);
  if (b < 1) b = 1;
  return static_cast<unsigned>(b < max_blocks ? b : max_blocks);
}

}  // namespace dtensor::kernels::cuda::detail
