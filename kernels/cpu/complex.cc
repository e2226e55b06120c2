#include "kernels/cpu/complex.h"

#include <complex>

#include "kernels/cpu/loops.h"
#include "kernels/cpu/pointwise.h"
#include "kernels/device_dispatch.h"

namespace dtensor::kernels {
namespace {

// f over a and b broadcast together, both converted to `common` (complex).
template <typename F>
Tensor complex_binary(const char* op, const Tensor& a, const Tensor& b, DType common, F f) {
  DT_CHECK(is_complex(common), op, ": internal: ", dtype_name(common), " is not complex");
  const Shape shape = detail::broadcast_op(op, a.sizes(), b.sizes());
  Tensor out = Tensor::empty(shape, common);
  DT_DISPATCH_COMPLEX(common, {
    std::array<Tensor, 2> in{a.to(common).expand(shape), b.to(common).expand(shape)};
    detail::map<scalar_t, scalar_t>(out, in, f);
  });
  return out;
}

DType complex_common(const char* op, const Tensor& a, const Tensor& b) {
  const DType c = result_type(a, b);
  DT_CHECK(is_complex(c), op, ": internal: ", a.str(), " and ", b.str(), " promote to ", dtype_name(c));
  return c;
}

}  // namespace

Tensor complex_add(const Tensor& a, const Tensor& b, double alpha) {
  DT_KERNEL_HOST_ONLY(complex_add, a, b, alpha);
  return complex_binary("add", a, b, complex_common("add", a, b), [alpha](auto x, auto y) {
    using T = typename decltype(x)::value_type;
    return x + static_cast<T>(alpha) * y;
  });
}

Tensor complex_mul(const Tensor& a, const Tensor& b) {
  DT_KERNEL_HOST_ONLY(complex_mul, a, b);
  return complex_binary("mul", a, b, complex_common("mul", a, b), [](auto x, auto y) { return x * y; });
}

Tensor complex_div(const Tensor& a, const Tensor& b) {
  DT_KERNEL_HOST_ONLY(complex_div, a, b);
  return complex_binary("div", a, b, complex_common("div", a, b), [](auto x, auto y) { return x / y; });
}

Tensor complex_neg(const Tensor& x) {
  DT_KERNEL_HOST_ONLY(complex_neg, x);
  Tensor out = Tensor::empty(x.sizes(), x.dtype());
  DT_DISPATCH_COMPLEX(x.dtype(), {
    detail::map<scalar_t, scalar_t>(out, std::array<Tensor, 1>{x}, [](auto v) { return -v; });
  });
  return out;
}

namespace {
template <typename F>
Tensor complex_unary(const Tensor& x, F f) {
  Tensor out = Tensor::empty(x.sizes(), x.dtype());
  DT_DISPATCH_COMPLEX(x.dtype(), { detail::map<scalar_t, scalar_t>(out, std::array<Tensor, 1>{x}, f); });
  return out;
}
}  // namespace

Tensor complex_sigmoid(const Tensor& x) {
  DT_KERNEL_HOST_ONLY(complex_sigmoid, x);
  return complex_unary(x, [](auto v) { return decltype(v)(1) / (decltype(v)(1) + std::exp(-v)); });
}

Tensor complex_silu(const Tensor& x) {
  DT_KERNEL_HOST_ONLY(complex_silu, x);
  return complex_unary(x, [](auto v) { return v / (decltype(v)(1) + std::exp(-v)); });
}

Tensor conj_physical(const Tensor& x) {
  DT_KERNEL_HOST_ONLY(conj_physical, x);
  if (!is_complex(x.dtype())) return x.clone();
  Tensor out = Tensor::empty(x.sizes(), x.dtype());
  DT_DISPATCH_COMPLEX(x.dtype(), {
    detail::map<scalar_t, scalar_t>(out, std::array<Tensor, 1>{x}, [](auto v) { return std::conj(v); });
  });
  return out;
}

Tensor view_as_real(const Tensor& x) {
  DT_CHECK(is_complex(x.dtype()), "view_as_real: input ", x.str(), " is not complex; accepted: complex64, complex128");
  Shape sizes = x.sizes(), strides = x.strides();
  for (int64_t& s : strides) s *= 2;
  sizes.push_back(2);
  strides.push_back(1);
  return Tensor::from_storage(x.storage(), 2 * x.storage_offset(), sizes, strides, real_of_complex(x.dtype()));
}

Tensor view_as_complex(const Tensor& x) {
  DT_CHECK(x.dtype() == DType::kFloat32 || x.dtype() == DType::kFloat64, "view_as_complex: input ", x.str(),
           " has dtype ", dtype_name(x.dtype()), "; accepted: float32, float64");
  DT_CHECK(x.dim() >= 1 && x.size(x.dim() - 1) == 2, "view_as_complex: input ", x.str(),
           " must have a last dim of size 2 (the real and imaginary parts)");
  DT_CHECK(x.stride(x.dim() - 1) == 1, "view_as_complex: input ", x.str(), " has last-dim stride ",
           x.stride(x.dim() - 1), "; accepted: 1");
  Shape sizes(x.sizes().begin(), x.sizes().end() - 1), strides(x.strides().begin(), x.strides().end() - 1);
  for (size_t d = 0; d < strides.size(); ++d) {
    DT_CHECK(strides[d] % 2 == 0 || sizes[d] <= 1, "view_as_complex: input ", x.str(), " has an odd stride ",
             strides[d], " in dim ", d, "; accepted: even strides (call contiguous() first)");
    strides[d] /= 2;
  }
  DT_CHECK(x.storage_offset() % 2 == 0, "view_as_complex: input ", x.str(), " starts at the odd storage offset ",
           x.storage_offset(), "; accepted: even (call contiguous() first)");
  return Tensor::from_storage(x.storage(), x.storage_offset() / 2, sizes, strides, complex_of(x.dtype()));
}

Tensor real_part(const Tensor& x) {
  if (!is_complex(x.dtype())) return x;
  return view_as_real(x).select(x.dim(), 0);
}

Tensor imag_part(const Tensor& x) {
  DT_CHECK(is_complex(x.dtype()), "imag: input ", x.str(), " is not complex; accepted: complex64, complex128");
  return view_as_real(x).select(x.dim(), 1);
}

Tensor complex_from_parts(const Tensor& real, const Tensor& imag) {
  DT_KERNEL_HOST_ONLY(complex_from_parts, real, imag);
  DT_CHECK(real.dtype() == imag.dtype() && (real.dtype() == DType::kFloat32 || real.dtype() == DType::kFloat64),
           "complex: real ", real.str(), " and imag ", imag.str(),
           "; accepted: both float32 or both float64");
  const Shape shape = detail::broadcast_op("complex", real.sizes(), imag.sizes());
  Tensor out = Tensor::empty(shape, complex_of(real.dtype()));
  Tensor pairs = view_as_real(out);
  pairs.select(static_cast<int64_t>(shape.size()), 0).copy_(real.expand(shape));
  pairs.select(static_cast<int64_t>(shape.size()), 1).copy_(imag.expand(shape));
  return out;
}

}  // namespace dtensor::kernels
