// Pointwise CPU reference kernels with torch's broadcasting and type promotion.
// Every op returns a new contiguous tensor; inputs may be any strided views. Errors are
// dtensor::Error naming the op, the shapes/dtypes and what is accepted. Compute types: float for
// float32/bfloat16/float16 (results rounded to the output dtype), double for float64, wrapping
// int64 arithmetic for int32/int64/bool.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "dtensor/core/tensor.h"

namespace dtensor::kernels {

// A number argument, promoted like a Python number in torch: a C++ integral value counts as int64,
// a floating value as float (float32 against integer tensors), bool as bool.
class Scalar {
 public:
  template <typename T>
    requires std::is_arithmetic_v<T>
  Scalar(T v)  // NOLINT: implicit, like at::Scalar
      : d_(static_cast<double>(v)),
        i_(std::is_integral_v<T> ? static_cast<int64_t>(v) : 0),
        dtype_(std::is_same_v<T, bool> ? DType::kBool
               : std::is_integral_v<T> ? DType::kInt64
                                       : DType::kFloat64) {}
  double to_double() const { return d_; }
  int64_t to_int() const { return dtype_ == DType::kFloat64 ? static_cast<int64_t>(d_) : i_; }
  DType dtype() const { return dtype_; }  // kBool, kInt64 or kFloat64
  bool is_floating() const { return dtype_ == DType::kFloat64; }
  // A 0-d tensor holding the value (int64, float64 or bool).
  Tensor to_tensor() const;

 private:
  double d_;
  int64_t i_;
  DType dtype_;
};

// ---- Shapes and dtypes.
// torch.broadcast_shapes for two shapes; throws naming both when a dim is neither equal nor 1.
Shape broadcast_shapes(const Shape& a, const Shape& b);
// torch.promote_types: bool < int32 < int64 < float16, bfloat16 < float32 < float64; bf16 + fp16 ->
// float32.
DType promote_types(DType a, DType b);
// torch.result_type: 0-d tensors only raise the dtype of dimensioned ones across a category
// (bool < integer < floating); Scalars likewise, with a floating Scalar counting as float32.
DType result_type(const Tensor& a, const Tensor& b);
// The same from dtypes and ranks alone (op metadata has no tensors).
DType result_type(DType a, int64_t a_dim, DType b, int64_t b_dim);
DType result_type(const Tensor& a, const Scalar& b);

// ---- Binary arithmetic, broadcasting a and b; result dtype = result_type(a, b).
// add/sub: a + alpha * b. alpha must be integral for integer results; sub rejects bool.
Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor add(const Tensor& a, const Scalar& b, const Scalar& alpha = 1);
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha = 1);
Tensor sub(const Tensor& a, const Scalar& b, const Scalar& alpha = 1);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Scalar& b);
// rounding_mode "" (true division; integer results become float32), "trunc" or "floor" (keep
// the dtype; integer division by zero throws).
Tensor div(const Tensor& a, const Tensor& b, const std::string& rounding_mode = "");
Tensor div(const Tensor& a, const Scalar& b, const std::string& rounding_mode = "");
// Elementwise max/min; NaN in either input gives NaN.
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// a ** b. Integer results are exact (repeated squaring, wrapping); an integer tensor exponent < 0
// gives 0 unless the base is 1 or -1. pow(int tensor, negative int Scalar) throws, like torch.
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Scalar& exponent);

// ---- Comparisons -> bool, compared in result_type(a, b).
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Scalar& b);
Tensor ne(const Tensor& a, const Scalar& b);
Tensor lt(const Tensor& a, const Scalar& b);
Tensor le(const Tensor& a, const Scalar& b);
Tensor gt(const Tensor& a, const Scalar& b);
Tensor ge(const Tensor& a, const Scalar& b);

// ---- Selection. cond/mask must be bool.
// cond ? a : b, all three broadcast; dtype result_type(a, b).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// x with value where mask is true; mask broadcasts to x's shape; keeps x's dtype.
Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value);

// ---- Unary. neg/abs/relu keep the dtype (neg rejects bool; abs and relu accept int and float).
// exp/log/sqrt/rsqrt/tanh/sigmoid turn integer/bool inputs into float32. gelu and silu need a
// floating input.
Tensor neg(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor relu(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
// approximate: "none" (exact, erf) or "tanh".
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
Tensor silu(const Tensor& x);

}  // namespace dtensor::kernels
