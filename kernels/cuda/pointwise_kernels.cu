// Elementwise kernels: strided unary / binary maps with dtype conversion, broadcasting through
// zero strides. One kernel per compute type; the op and the operand dtypes are runtime values
// (uniform branches), which keeps the number of instantiations, and nvcc's time, small.
#include <cmath>

#include "kernels/cuda/device_util.cuh"

namespace dtensor::kernels::cuda::detail {
namespace {

constexpr int kThreads = 256;

template <typename T>
__device__ __forceinline__ T apply_unary(UnaryOp op, T x) {
  if constexpr (std::is_integral_v<T>) {
    switch (op) {
      case UnaryOp::kNeg:
        return static_cast<T>(0ull - static_cast<uint64_t>(x));
      case UnaryOp::kAbs:
        return x < 0 ? static_cast<T>(0ull - static_cast<uint64_t>(x)) : x;
      case UnaryOp::kRelu:
        return x < 0 ? T(0) : x;
      default:
        return x;  // kCopy; the float ops never run on integers (the host casts first)
    }
  } else {
    switch (op) {
      case UnaryOp::kCopy:
        return x;
      case UnaryOp::kNeg:
        return -x;
      case UnaryOp::kAbs:
        return fabs(x);
      case UnaryOp::kRelu:
        return x < T(0) ? T(0) : x;  // NaN stays NaN
      case UnaryOp::kExp:
        return exp(x);
      case UnaryOp::kLog:
        return log(x);
      case UnaryOp::kSqrt:
        return sqrt(x);
      case UnaryOp::kRsqrt:
        return T(1) / sqrt(x);
      case UnaryOp::kTanh:
        return tanh(x);
      case UnaryOp::kSigmoid:
        return T(1) / (T(1) + exp(-x));
      case UnaryOp::kGelu:
        return T(0.5) * x * (T(1) + erf(x * T(0.70710678118654752440)));
      case UnaryOp::kGeluTanh: {
        const T k = T(0.79788456080286535588);  // sqrt(2 / pi)
        return T(0.5) * x * (T(1) + tanh(k * (x + T(0.044715) * x * x * x)));
      }
      case UnaryOp::kSilu:
        return x / (T(1) + exp(-x));
    }
    return x;
  }
}

// Exact integer power by repeated squaring (wrapping); negative exponents follow torch's powi, as
// the CPU kernel: 0 unless the base is 1 or -1.
__device__ __forceinline__ int64_t pow_int(int64_t base, int64_t e) {
  if (e < 0) {
    if (base == 1) return 1;
    if (base == -1) return (e & 1) ? -1 : 1;
    return 0;
  }
  uint64_t r = 1, b = static_cast<uint64_t>(base);
  while (e > 0) {
    if (e & 1) r *= b;
    b *= b;
    e >>= 1;
  }
  return static_cast<int64_t>(r);
}

template <typename T>
__device__ __forceinline__ T apply_binary(BinaryOp op, T x, T y, T alpha, int* error_flag) {
  if constexpr (std::is_integral_v<T>) {
    const uint64_t ux = static_cast<uint64_t>(x), uy = static_cast<uint64_t>(y);
    switch (op) {
      case BinaryOp::kAdd:
        return static_cast<T>(ux + static_cast<uint64_t>(alpha) * uy);
      case BinaryOp::kSub:
        return static_cast<T>(ux - static_cast<uint64_t>(alpha) * uy);
      case BinaryOp::kMul:
        return static_cast<T>(ux * uy);
      case BinaryOp::kDiv:
      case BinaryOp::kDivTrunc:
      case BinaryOp::kDivFloor: {
        if (y == 0) {
          if (error_flag != nullptr) atomicExch(error_flag, 1);
          return 0;
        }
        if (y == -1) return static_cast<T>(0ull - ux);  // avoids INT64_MIN / -1
        T q = x / y;
        if (op == BinaryOp::kDivFloor && x % y != 0 && ((x < 0) != (y < 0))) --q;
        return q;
      }
      case BinaryOp::kMaximum:
        return x > y ? x : y;
      case BinaryOp::kMinimum:
        return x < y ? x : y;
      case BinaryOp::kPow:
        return pow_int(x, y);
      case BinaryOp::kEq:
        return x == y;
      case BinaryOp::kNe:
        return x != y;
      case BinaryOp::kLt:
        return x < y;
      case BinaryOp::kLe:
        return x <= y;
      case BinaryOp::kGt:
        return x > y;
      case BinaryOp::kGe:
        return x >= y;
      case BinaryOp::kGeluBackward:
      case BinaryOp::kGeluTanhBackward:
        return x;  // floating only (the host checks)
    }
    return x;
  } else {
    switch (op) {
      case BinaryOp::kAdd:
        return x + alpha * y;
      case BinaryOp::kSub:
        return x - alpha * y;
      case BinaryOp::kMul:
        return x * y;
      case BinaryOp::kDiv:
        return x / y;
      case BinaryOp::kDivTrunc:
        return trunc(x / y);
      case BinaryOp::kDivFloor: {
        // As the CPU kernel: through fmod, so that 1.0 // 0.1 is 9 (torch's and Python's rule).
        if (y == 0) return x / y;
        T mod = fmod(x, y);
        T q = (x - mod) / y;
        if (mod != 0 && ((y < 0) != (mod < 0))) q -= 1;
        if (q == 0) return copysign(T(0), x / y);
        T f = floor(q);
        return q - f > T(0.5) ? f + T(1) : f;
      }
      case BinaryOp::kMaximum:
        if (x != x) return x;
        if (y != y) return y;
        return x > y ? x : y;
      case BinaryOp::kMinimum:
        if (x != x) return x;
        if (y != y) return y;
        return x < y ? x : y;
      case BinaryOp::kPow:
        return pow(x, y);
      case BinaryOp::kEq:
        return T(x == y);
      case BinaryOp::kNe:
        return T(x != y);
      case BinaryOp::kLt:
        return T(x < y);
      case BinaryOp::kLe:
        return T(x <= y);
      case BinaryOp::kGt:
        return T(x > y);
      case BinaryOp::kGe:
        return T(x >= y);
      case BinaryOp::kGeluBackward: {  // x = grad, y = self
        const T cdf = T(0.5) * (T(1) + erf(y * T(0.70710678118654752440)));
        const T pdf = T(0.39894228040143267794) * exp(T(-0.5) * y * y);  // 1 / sqrt(2 pi)
        return x * (cdf + y * pdf);
      }
      case BinaryOp::kGeluTanhBackward: {
        const T k = T(0.79788456080286535588);  // sqrt(2 / pi)
        const T kappa = T(0.044715);
        const T y2 = y * y;
        const T t = tanh(k * (y + kappa * y2 * y));
        const T d =
            T(0.5) * (T(1) + t) + T(0.5) * y * (T(1) - t * t) * k * (T(1) + T(3) * kappa * y2);
        return x * d;
      }
    }
    return x;
  }
}

template <typename T>
__global__ void unary_kernel(UnaryOp op, LoopShape shape, Operand out, Operand in) {
  const Operand* const ops[2] = {&out, &in};
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < shape.numel;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[2];
    offsets<2>(shape, i, ops, off);
    T x = operand_value<T>(in, off[1]);
    store_as<T>(const_cast<void*>(out.data), out.dtype, off[0], apply_unary<T>(op, x));
  }
}

template <typename T>
__global__ void binary_kernel(BinaryOp op, LoopShape shape, Operand out, Operand a, Operand b,
                              T alpha, int* error_flag) {
  const Operand* const ops[3] = {&out, &a, &b};
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < shape.numel;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[3];
    offsets<3>(shape, i, ops, off);
    T x = operand_value<T>(a, off[1]);
    T y = operand_value<T>(b, off[2]);
    store_as<T>(const_cast<void*>(out.data), out.dtype, off[0],
                apply_binary<T>(op, x, y, alpha, error_flag));
  }
}

template <typename T>
__global__ void where_kernel(LoopShape shape, Operand out, Operand cond, Operand a, Operand b) {
  const Operand* const ops[4] = {&out, &cond, &a, &b};
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < shape.numel;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t off[4];
    offsets<4>(shape, i, ops, off);
    // The condition converts to the compute type, as on the CPU (cond.to(c) != 0).
    const T k = operand_value<T>(cond, off[1]);
    const T v = k != T(0) ? operand_value<T>(a, off[2]) : operand_value<T>(b, off[3]);
    store_as<T>(const_cast<void*>(out.data), out.dtype, off[0], v);
  }
}

}  // namespace

void launch_where(Compute c, const LoopShape& shape, const Operand& out, const Operand& cond,
                  const Operand& a, const Operand& b, cudaStream_t stream) {
  if (shape.numel == 0) return;
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    where_kernel<T>
        <<<grid_for(shape.numel, kThreads), kThreads, 0, stream>>>(shape, out, cond, a, b);
  });
}

void launch_unary(UnaryOp op, Compute c, const LoopShape& shape, const Operand& out,
                  const Operand& in, cudaStream_t stream) {
  if (shape.numel == 0) return;
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    unary_kernel<T><<<grid_for(shape.numel, kThreads), kThreads, 0, stream>>>(op, shape, out, in);
  });
}

void launch_binary(BinaryOp op, Compute c, const LoopShape& shape, const Operand& out,
                   const Operand& a, const Operand& b, double alpha_d, int64_t alpha_i,
                   int* error_flag, cudaStream_t stream) {
  if (shape.numel == 0) return;
  dispatch_compute(c, [&](auto tag) {
    using T = decltype(tag);
    const T alpha = std::is_integral_v<T> ? static_cast<T>(alpha_i) : static_cast<T>(alpha_d);
    binary_kernel<T><<<grid_for(shape.numel, kThreads), kThreads, 0, stream>>>(op, shape, out, a, b,
                                                                               alpha, error_flag);
  });
}

}  // namespace dtensor::kernels::cuda::detail
