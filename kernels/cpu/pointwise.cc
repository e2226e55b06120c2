#include "kernels/cpu/pointwise.h"
#include "kernels/device_dispatch.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "kernels/cpu/complex.h"
#include "kernels/cpu/loops.h"
#include "kernels/cpu/tanh_exp.h"
#include "kernels/cpu/vec_math.h"
#include "kernels/scalar_math.h"

namespace dtensor::kernels {

using detail::broadcast_op;
using detail::compute_dtype;

Tensor Scalar::to_tensor() const {
  if (dtype_ == DType::kInt64) return Tensor::from_vector<int64_t>({i_}, {});
  return Tensor::full({}, d_, dtype_);
}

namespace {

std::string dtypes_str(const Tensor& a, const Tensor& b) {
  return absl::StrCat(dtype_name(a.dtype()), " ", shape_str(a.sizes()), " and ",
                      dtype_name(b.dtype()), " ", shape_str(b.sizes()));
}

// f applied to a and b broadcast together, computed in compute_dtype(common); the result has dtype
// `common`, or bool when kBoolOut (comparisons).
template <bool kBoolOut = false, typename F>
Tensor binary(const char* op, const Tensor& a, const Tensor& b, DType common, F f) {
  Shape shape = broadcast_op(op, a.sizes(), b.sizes());
  const DType c = compute_dtype(common);
  return detail::dispatch_compute(c, [&](auto tag) {
    using T = typename decltype(tag)::type;
    using R = std::conditional_t<kBoolOut, bool, T>;
    std::array<Tensor, 2> in{a.to(c).expand(shape), b.to(c).expand(shape)};
    Tensor out = Tensor::empty(shape, kBoolOut ? DType::kBool : c);
    detail::map<R, T>(out, in, f);
    return kBoolOut ? out : out.to(common);
  });
}

// f applied to x, computed in compute_dtype(out_dtype), result in out_dtype.
template <typename F>
Tensor unary(const Tensor& x, DType out_dtype, F f) {
  const DType c = compute_dtype(out_dtype);
  return detail::dispatch_compute(c, [&](auto tag) {
    using T = typename decltype(tag)::type;
    Tensor out = Tensor::empty(x.sizes(), c);
    detail::map<T, T>(out, std::array<Tensor, 1>{x.to(c)}, f);
    return out.to(out_dtype);
  });
}

// Unary ops of the float family: integer and bool inputs give float32, like torch.
template <typename F>
Tensor unary_float(const char* op, const Tensor& x, bool ints_ok, F f) {
  if (is_complex(x.dtype())) dispatch_unsupported(op, x.dtype(), "real and bool dtypes");
  DT_CHECK(ints_ok || is_floating(x.dtype()), op, ": expected a floating tensor, got ",
           dtype_name(x.dtype()), " ", shape_str(x.sizes()),
           " (accepted: float32, float64, bfloat16, float16)");
  return unary(x, is_floating(x.dtype()) ? x.dtype() : DType::kFloat32, [&](auto v) {
    using T = decltype(v);
    if constexpr (std::is_floating_point_v<T>)
      return f(v);
    else
      return v;  // not reached: integer inputs were converted to float32
  });
}

Tensor add_impl(const char* op, const Tensor& a, const Tensor& b, DType common, const Scalar& alpha,
                bool subtract) {
  DT_CHECK(!(subtract && common == DType::kBool), op,
           ": subtracting bool tensors is not supported (", dtypes_str(a, b),
           "; accepted: numeric dtypes)");
  DT_CHECK(is_floating(common) || !alpha.is_floating(), op, ": alpha ", alpha.to_double(),
           " must be an integer for a ", dtype_name(common), " result (", dtypes_str(a, b), ")");
  const int64_t ai = alpha.is_floating() ? 0 : alpha.to_int();
  const double ad = alpha.to_double();
  // alpha 1 on floats (residuals, gradient sums): a loop without the scale and the subtract branch,
  // which vectorizes; 1 * y is y exactly, so the values are the same.
  if (is_floating(common) && ad == 1.0)
    return subtract ? binary(op, a, b, common, [](auto x, auto y) { return x - y; })
                    : binary(op, a, b, common, [](auto x, auto y) { return x + y; });
  return binary(op, a, b, common, [=](auto x, auto y) {
    using T = decltype(x);
    if constexpr (std::is_integral_v<T>) {
      int64_t s = detail::wrap_mul(ai, y);
      return subtract ? detail::wrap_sub(x, s) : detail::wrap_add(x, s);
    } else {
      T s = static_cast<T>(ad) * y;
      return subtract ? x - s : x + s;
    }
  });
}

Tensor mul_impl(const Tensor& a, const Tensor& b, DType common) {
  return binary("mul", a, b, common, [](auto x, auto y) {
    if constexpr (std::is_integral_v<decltype(x)>)
      return detail::wrap_mul(x, y);
    else
      return x * y;
  });
}

Tensor div_impl(const Tensor& a, const Tensor& b, DType common, const std::string& mode) {
  if (mode.empty()) {
    DType out = is_floating(common) ? common : DType::kFloat32;
    return binary("div", a, b, out, [](auto x, auto y) { return x / y; });
  }
  DT_CHECK(mode == "trunc" || mode == "floor", "div: unknown rounding_mode '", mode,
           "' (accepted: \"\" for true division, \"trunc\", \"floor\")");
  DT_CHECK(common != DType::kBool, "div: rounding_mode '", mode, "' is not supported for bool (",
           dtypes_str(a, b), ")");
  const bool floor_mode = mode == "floor";
  return binary("div", a, b, common, [=](auto x, auto y) {
    using T = decltype(x);
    if constexpr (std::is_integral_v<T>) {
      DT_CHECK(y != 0, "div: integer division by zero (", dtypes_str(a, b), ")");
      if (y == -1) return detail::wrap_sub(0, x);  // avoids INT64_MIN / -1
      T q = x / y;
      if (floor_mode && x % y != 0 && ((x < 0) != (y < 0))) --q;
      return q;
    } else if (!floor_mode) {
      return std::trunc(x / y);
    } else {
      return sm::div_floor(x, y);  // through fmod, so that 1.0 // 0.1 is 9 (kernels/scalar_math.h)
    }
  });
}

template <bool kMax>
Tensor minmax(const char* op, const Tensor& a, const Tensor& b) {
  return binary(op, a, b, result_type(a, b), [](auto x, auto y) {
    if constexpr (std::is_floating_point_v<decltype(x)>) {
      if (std::isnan(x)) return x;
      if (std::isnan(y)) return y;
    }
    return kMax ? std::max(x, y) : std::min(x, y);
  });
}

// Exact integer power by repeated squaring (wrapping); negative exponents follow torch's powi.
int64_t pow_int(int64_t base, int64_t e) {
  if (e < 0) {
    if (base == 1) return 1;
    if (base == -1) return (e & 1) ? -1 : 1;
    return 0;
  }
  int64_t r = 1;
  while (e > 0) {
    if (e & 1) r = detail::wrap_mul(r, base);
    base = detail::wrap_mul(base, base);
    e >>= 1;
  }
  return r;
}

Tensor pow_impl(const Tensor& a, const Tensor& b, DType common) {
  return binary("pow", a, b, common, [](auto x, auto y) {
    if constexpr (std::is_integral_v<decltype(x)>)
      return pow_int(x, y);
    else
      return std::pow(x, y);
  });
}

int category(DType t) { return t == DType::kBool ? 0 : is_complex(t) ? 3 : is_floating(t) ? 2 : 1; }

// torch's combine_categories: the `higher` priority class (dimensioned tensors) keeps its dtype
// unless `lower` is of a higher category.
DType combine(DType higher, DType lower) {
  if (category(lower) > category(higher)) return promote_types(higher, lower);
  return higher;
}

}  // namespace

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  return broadcast_op("broadcast_shapes", a, b);
}

DType promote_types(DType a, DType b) {
  if (a == b) return a;
  if (is_complex(a) || is_complex(b)) {  // torch: the complex type of the promoted parts
    const DType r = promote_types(is_complex(a) ? real_of_complex(a) : a, is_complex(b) ? real_of_complex(b) : b);
    return complex_of(is_floating(r) ? r : DType::kFloat32);
  }
  // torch's promoteTypes table (c10/core/ScalarType.cpp): uint8 and int8 share a rank and meet at
  // int16; bfloat16 and float16 meet at float32; otherwise the wider of the two.
  auto rank = [](DType t) {
    switch (t) {
      case DType::kBool:
        return 0;
      case DType::kUInt8:
      case DType::kInt8:
        return 1;
      case DType::kInt16:
        return 2;
      case DType::kInt32:
        return 3;
      case DType::kInt64:
        return 4;
      case DType::kFloat16:
      case DType::kBFloat16:
        return 5;
      case DType::kFloat32:
        return 6;
      case DType::kFloat64:
        return 7;
      case DType::kComplex64:
      case DType::kComplex128:
        break;  // handled above
    }
    return 0;
  };
  if (rank(a) == 1 && rank(b) == 1) return DType::kInt16;    // uint8 with int8
  if (rank(a) == 5 && rank(b) == 5) return DType::kFloat32;  // bfloat16 with float16
  return rank(a) >= rank(b) ? a : b;
}

DType result_type(DType a, int64_t a_dim, DType b, int64_t b_dim) {
  if ((a_dim == 0) == (b_dim == 0)) return promote_types(a, b);
  return a_dim > 0 ? combine(a, b) : combine(b, a);
}

DType result_type(const Tensor& a, const Tensor& b) {
  return result_type(a.dtype(), a.dim(), b.dtype(), b.dim());
}

DType result_type(const Tensor& a, const Scalar& b) {
  // A floating Python number counts as the default dtype, float32.
  return combine(a.dtype(), b.is_floating() ? DType::kFloat32 : b.dtype());
}

namespace {

// Complex operands go to kernels/cpu/complex.h (host only) before the device routing: the device
// kernels are real-valued.
bool any_complex(const Tensor& a, const Tensor& b) { return is_complex(a.dtype()) || is_complex(b.dtype()); }

Tensor complex_true_div(const Tensor& a, const Tensor& b, const std::string& rounding_mode) {
  DT_CHECK(rounding_mode.empty(), "div: rounding_mode '", rounding_mode, "' is not defined for complex (",
           dtypes_str(a, b), "); accepted for complex: true division (\"\")");
  return complex_div(a, b);
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  if (any_complex(a, b)) return complex_add(a, b, alpha.to_double());
  DT_KERNEL_ON_DEVICE(add, a, b, alpha);
  return add_impl("add", a, b, result_type(a, b), alpha, false);
}
Tensor add(const Tensor& a, const Scalar& b, const Scalar& alpha) {
  if (is_complex(a.dtype())) return complex_add(a, b.to_tensor(), alpha.to_double());
  DT_KERNEL_ON_DEVICE(add_s, a, b, alpha);
  return add_impl("add", a, b.to_tensor(), result_type(a, b), alpha, false);
}
Tensor sub(const Tensor& a, const Tensor& b, const Scalar& alpha) {
  if (any_complex(a, b)) return complex_add(a, b, -alpha.to_double());
  DT_KERNEL_ON_DEVICE(sub, a, b, alpha);
  return add_impl("sub", a, b, result_type(a, b), alpha, true);
}
Tensor sub(const Tensor& a, const Scalar& b, const Scalar& alpha) {
  if (is_complex(a.dtype())) return complex_add(a, b.to_tensor(), -alpha.to_double());
  DT_KERNEL_ON_DEVICE(sub_s, a, b, alpha);
  return add_impl("sub", a, b.to_tensor(), result_type(a, b), alpha, true);
}
Tensor mul(const Tensor& a, const Tensor& b) {
  if (any_complex(a, b)) return complex_mul(a, b);
  DT_KERNEL_ON_DEVICE(mul, a, b);
  return mul_impl(a, b, result_type(a, b));
}
Tensor mul(const Tensor& a, const Scalar& b) {
  if (is_complex(a.dtype())) return complex_mul(a, b.to_tensor());
  DT_KERNEL_ON_DEVICE(mul_s, a, b);
  return mul_impl(a, b.to_tensor(), result_type(a, b));
}
Tensor div(const Tensor& a, const Tensor& b, const std::string& rounding_mode) {
  if (any_complex(a, b)) return complex_true_div(a, b, rounding_mode);
  DT_KERNEL_ON_DEVICE(div, a, b, rounding_mode);
  return div_impl(a, b, result_type(a, b), rounding_mode);
}
Tensor div(const Tensor& a, const Scalar& b, const std::string& rounding_mode) {
  if (is_complex(a.dtype())) return complex_true_div(a, b.to_tensor(), rounding_mode);
  DT_KERNEL_ON_DEVICE(div_s, a, b, rounding_mode);
  return div_impl(a, b.to_tensor(), result_type(a, b), rounding_mode);
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  DT_KERNEL_ON_DEVICE(maximum, a, b);
  return minmax<true>("maximum", a, b);
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  DT_KERNEL_ON_DEVICE(minimum, a, b);
  return minmax<false>("minimum", a, b);
}
Tensor pow(const Tensor& a, const Tensor& b) {
  DT_KERNEL_ON_DEVICE(pow, a, b);
  return pow_impl(a, b, result_type(a, b));
}
Tensor pow(const Tensor& a, const Scalar& exponent) {
  DT_KERNEL_ON_DEVICE(pow_s, a, exponent);
  DType common = result_type(a, exponent);
  DT_CHECK(is_floating(common) || exponent.to_int() >= 0,
           "pow: integers to negative integer powers "
           "are not allowed (",
           dtype_name(a.dtype()), " ", shape_str(a.sizes()), " ** ", exponent.to_int(),
           "; accepted: exponent >= 0 or a floating tensor/exponent)");
  return pow_impl(a, exponent.to_tensor(), common);
}

#define DTK_COMPARISON(name, expr)                                                            \
  Tensor name(const Tensor& a, const Tensor& b) {                                             \
    DT_KERNEL_ON_DEVICE(name, a, b);                                                          \
    return binary<true>(#name, a, b, result_type(a, b), [](auto x, auto y) { return expr; }); \
  }                                                                                           \
  Tensor name(const Tensor& a, const Scalar& b) {                                             \
    DT_KERNEL_ON_DEVICE(name##_s, a, b);                                                      \
    return binary<true>(#name, a, b.to_tensor(), result_type(a, b),                           \
                        [](auto x, auto y) { return expr; });                                 \
  }
DTK_COMPARISON(eq, x == y)
DTK_COMPARISON(ne, x != y)
DTK_COMPARISON(lt, x < y)
DTK_COMPARISON(le, x <= y)
DTK_COMPARISON(gt, x > y)
DTK_COMPARISON(ge, x >= y)
#undef DTK_COMPARISON

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  DT_KERNEL_ON_DEVICE(where, cond, a, b);
  DT_CHECK(cond.dtype() == DType::kBool, "where: condition must be bool, got ",
           dtype_name(cond.dtype()), " ", shape_str(cond.sizes()));
  Shape shape = broadcast_op("where", cond.sizes(), broadcast_op("where", a.sizes(), b.sizes()));
  const DType common = result_type(a, b);
  const DType c = compute_dtype(common);
  return detail::dispatch_compute(c, [&](auto tag) {
    using T = typename decltype(tag)::type;
    // The condition travels as 0/1 in the compute type.
    std::array<Tensor, 3> in{cond.to(c).expand(shape), a.to(c).expand(shape),
                             b.to(c).expand(shape)};
    Tensor out = Tensor::empty(shape, c);
    detail::map<T, T>(out, in, [](T k, T x, T y) { return k != 0 ? x : y; });
    return out.to(common);
  });
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, const Scalar& value) {
  DT_KERNEL_ON_DEVICE(masked_fill, x, mask, value);
  DT_CHECK(mask.dtype() == DType::kBool, "masked_fill: mask must be bool, got ",
           dtype_name(mask.dtype()), " ", shape_str(mask.sizes()));
  DT_CHECK(broadcast_op("masked_fill", x.sizes(), mask.sizes()) == x.sizes(), "masked_fill: mask ",
           shape_str(mask.sizes()), " does not broadcast to the input's shape ",
           shape_str(x.sizes()));
  return where(mask, value.to_tensor().to(x.dtype()), x);
}

Tensor neg(const Tensor& x) {
  if (is_complex(x.dtype())) return complex_neg(x);
  DT_KERNEL_ON_DEVICE(neg, x);
  DT_CHECK(x.dtype() != DType::kBool, "neg: negating a bool tensor ", shape_str(x.sizes()),
           " is not supported (accepted: numeric dtypes)");
  return unary(x, x.dtype(), [](auto v) {
    if constexpr (std::is_integral_v<decltype(v)>)
      return detail::wrap_sub(0, v);
    else
      return -v;
  });
}

Tensor abs(const Tensor& x) {
  DT_KERNEL_ON_DEVICE(abs, x);
  DT_CHECK(x.dtype() != DType::kBool, "abs: bool tensor ", shape_str(x.sizes()),
           " is not supported (accepted: numeric dtypes)");
  return unary(x, x.dtype(), [](auto v) {
    if constexpr (std::is_integral_v<decltype(v)>)
      return v < 0 ? detail::wrap_sub(0, v) : v;
    else
      return std::abs(v);
  });
}

Tensor relu(const Tensor& x) {
  DT_KERNEL_ON_DEVICE(relu, x);
  DT_CHECK(x.dtype() != DType::kBool, "relu: bool tensor ", shape_str(x.sizes()),
           " is not supported (accepted: numeric dtypes)");
  return unary(x, x.dtype(), [](auto v) { return v < 0 ? decltype(v)(0) : v; });  // NaN stays NaN
}

Tensor exp(const Tensor& x) {
  DT_KERNEL_ON_DEVICE(exp, x);
  return unary_float("exp", x, true, [](auto v) { return std::exp(v); });
}
Tensor log(const Tensor& x) {
  DT_KERNEL_ON_DEVICE(log, x);
  return unary_float("log", x, true, [](auto v) { return std::log(v); });
}
Tensor sqrt(const Tensor& x) {
  DT_KERNEL_ON_DEVICE(sqrt, x);
  return unary_float("sqrt", x, true, [](auto v) { return std::sqrt(v); });
}
Tensor rsqrt(const Tensor& x) {
  DT_KERNEL_ON_DEVICE(rsqrt, x);
  return unary_float("rsqrt", x, true, [](auto v) { return 1 / std::sqrt(v); });
}
Tensor tanh(const Tensor& x) {
  DT_KERNEL_ON_DEVICE(tanh, x);
  return unary_float("tanh", x, true, [](auto v) { return std::tanh(v); });
}
Tensor sigmoid(const Tensor& x) {
  if (is_complex(x.dtype())) return complex_sigmoid(x);
  DT_KERNEL_ON_DEVICE(sigmoid, x);
  return unary_float("sigmoid", x, true, [](auto v) { return 1 / (1 + std::exp(-v)); });
}
Tensor silu(const Tensor& x) {
  if (is_complex(x.dtype())) return complex_silu(x);
  DT_KERNEL_ON_DEVICE(silu, x);
  return unary_float("silu", x, false, [](auto v) { return v / (1 + std::exp(-v)); });
}

Tensor gelu(const Tensor& x, const std::string& approximate) {
  DT_KERNEL_ON_DEVICE(gelu, x, approximate);
  DT_CHECK(approximate == "none" || approximate == "tanh", "gelu: unknown approximate '",
           approximate, "' (accepted: \"none\", \"tanh\")");
  if (x.dtype() == DType::kFloat32 && x.is_contiguous()) {  // the training step's hot path
    Tensor y = Tensor::empty(x.sizes(), DType::kFloat32);
    vec::gelu(x.data<float>(), y.data<float>(), x.numel(), approximate == "tanh");
    return y;
  }
  if (approximate == "tanh") {
    return unary_float("gelu", x, false, [](auto v) {
      using T = decltype(v);
      const T k = static_cast<T>(std::sqrt(2 / std::numbers::pi));
      return T(0.5) * v * (1 + detail::tanh_exp(k * (v + T(0.044715) * v * v * v)));
    });
  }
  return unary_float("gelu", x, false, [](auto v) {
    using T = decltype(v);
    return T(0.5) * v * (1 + std::erf(v * static_cast<T>(std::numbers::sqrt2 / 2)));
  });
}

}  // namespace dtensor::kernels
