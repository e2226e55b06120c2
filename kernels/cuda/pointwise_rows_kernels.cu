// Device kernels of the pointwise rows (ops/pointwise/rows.h): each row's f becomes a functor, and
// one strided grid-stride kernel per (row, compute type) applies it. Only the compute types the row's
// dtype rule allows are instantiated (the host wrapper, pointwise_rows.cc, rejects the others).
#include <cmath>

#include "kernels/cuda/device_util.cuh"
#include "kernels/scalar_math.h"

namespace dtensor::kernels::cuda::detail {
namespace {

constexpr int kThreads = 256;

template <RowDTypes kRule, typename T>
constexpr bool kAllowed = !((kRule == RowDTypes::kFloat || kRule == RowDTypes::kFloatOnly) &&
                            std::is_integral_v<T>) &&
                          !(kRule == RowDTypes::kIntegral && !std::is_integral_v<T>);

// The result in T; an integral row's bool result keeps the low bit (bitwise_not of a bool).
template <RowDTypes kRule, typename T, typename R>
__device__ __forceinline__ T row_result(R r, DType out) {
  if constexpr (kRule == RowDTypes::kIntegral) {
    return out == DType::kBool ? static_cast<T>(static_cast<T>(r) & 1) : static_cast<T>(r);
  } else {
    return static_cast<T>(r);
  }
}

// fn: the row's functor (the rows with parameters carry them).
template <RowDTypes kRule, typename T, typename Fn>
__global__ void unary_row_kernel(LoopShape shape, Operand out, Operand in, Fn fn) {
  const Operand* const ops[2] = {&out, &in};
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < shape.numel;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    offsets<2>(shape, i, ops, off);
    const T x = operand_value<T>(in, off[1]);
    store_as<T>(const_cast<void*>(out.data), out.dtype, off[0], row_result<kRule, T>(fn(x), out.dtype));
  }
}

template <RowDTypes kRule, typename T, typename Fn>
__global__ void binary_row_kernel(LoopShape shape, Operand out, Operand a, Operand b) {
  const Operand* const ops[3] = {&out, &a, &b};
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < shape.numel;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    offsets<3>(shape, i, ops, off);
    const T x = operand_value<T>(a, off[1]);
    const T y = operand_value<T>(b, off[2]);
    store_as<T>(const_cast<void*>(out.data), out.dtype, off[0], row_result<kRule, T>(Fn{}(x, y), out.dtype));
  }
}

// The rows' f as functors (the same expressions the CPU kernels compile).
#define DT_UNARY_FUNCTOR(name, onnx, dtypes, cost, domain, order, f, grad) \
  struct UnaryFn_##name {                                            \
    template <typename T>                                            \
    __device__ auto operator()(T x) const {                          \
      return f;                                                      \
    }                                                                \
  };
DT_POINTWISE_UNARY_ROWS(DT_UNARY_FUNCTOR)
#undef DT_UNARY_FUNCTOR
#define DT_BINARY_FUNCTOR(name, onnx, dtypes, cost, other, f, grad_a, grad_b) \
  struct BinaryFn_##name {                                                \
    template <typename T>                                                 \
    __device__ auto operator()(T a, T b) const {                          \
      return f;                                                           \
    }                                                                     \
  };
DT_POINTWISE_BINARY_ROWS(DT_BINARY_FUNCTOR)
#undef DT_BINARY_FUNCTOR

#define DT_PARAM_FUNCTOR(name, params, dtypes, cost, order, sample, valid, f, grad) \
  struct ParamFn_##name {                                                          \
    double p0, p1, p2;                                                             \
    template <typename T>                                                          \
    __device__ T operator()(T x) const {                                           \
      return static_cast<T>(f);                                                    \
    }                                                                              \
  };
DT_POINTWISE_PARAM_ROWS(DT_PARAM_FUNCTOR)
#undef DT_PARAM_FUNCTOR

template <RowDTypes kRule, typename Fn>
void unary_row(Compute c, const LoopShape& shape, const Operand& out, const Operand& in, Fn fn, cudaStream_t stream) {
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kAllowed<kRule, T>)
      unary_row_kernel<kRule, T, Fn><<<grid_for(shape.numel, kThreads), kThreads, 0, stream>>>(shape, out, in, fn);
  });
}

template <RowDTypes kRule, typename Fn>
void binary_row(Compute c, const LoopShape& shape, const Operand& out, const Operand& a, const Operand& b,
                cudaStream_t stream) {
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (kAllowed<kRule, T>)
      binary_row_kernel<kRule, T, Fn><<<grid_for(shape.numel, kThreads), kThreads, 0, stream>>>(shape, out, a, b);
  });
}

}  // namespace

void launch_param_row(ParamRow row, Compute c, const LoopShape& shape, const Operand& out,
                      const Operand& in, const RowParams& p, cudaStream_t stream) {
  if (shape.numel == 0) return;
  switch (row) {
#define DT_PARAM_CASE(name, params, dtypes, cost, order, sample, valid, f, grad) \
  case ParamRow::name:                                                         \
    return unary_row<RowDTypes::dtypes>(c, shape, out, in, ParamFn_##name{p.p[0], p.p[1], p.p[2]}, stream);
    DT_POINTWISE_PARAM_ROWS(DT_PARAM_CASE)
#undef DT_PARAM_CASE
  }
}

void launch_unary_row(UnaryRow row, Compute c, const LoopShape& shape, const Operand& out,
                      const Operand& in, cudaStream_t stream) {
  if (shape.numel == 0) return;
  switch (row) {
#define DT_UNARY_CASE(name, onnx, dtypes, cost, domain, order, f, grad) \
  case UnaryRow::name:                                            \
    return unary_row<RowDTypes::dtypes>(c, shape, out, in, UnaryFn_##name{}, stream);
    DT_POINTWISE_UNARY_ROWS(DT_UNARY_CASE)
#undef DT_UNARY_CASE
  }
}

void launch_binary_row(BinaryRow row, Compute c, const LoopShape& shape, const Operand& out,
                       const Operand& a, const Operand& b, cudaStream_t stream) {
  if (shape.numel == 0) return;
  switch (row) {
#define DT_BINARY_CASE(name, onnx, dtypes, cost, other, f, grad_a, grad_b) \
  case BinaryRow::name:                                                \
    return binary_row<RowDTypes::dtypes, BinaryFn_##name>(c, shape, out, a, b, stream);
    DT_POINTWISE_BINARY_ROWS(DT_BINARY_CASE)
#undef DT_BINARY_CASE
  }
}

}  // namespace dtensor::kernels::cuda::detail
