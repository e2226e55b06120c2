#include "kernels/cpu/reduction.h"

#include "kernels/cpu/complex.h"
#include "kernels/device_dispatch.h"

#include <cmath>
#include <limits>
#include <optional>

#include "kernels/cpu/loops.h"

namespace dtensor::kernels {
namespace {

// The generic reduction: the reduced dims of x are moved last and x becomes contiguous
// [outer, inner] rows in `c` (float64 or int64); out[r] = f(row r, inner), cast to `out_dtype`.
// f receives a `const T*` (T = double or int64_t) and returns a T.
template <typename T, typename F>
Tensor reduce(const char* op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
              DType out_dtype, F f) {
  // x.to(c) would drop a complex tensor's imaginary part: complex reductions have their own paths.
  if (is_complex(x.dtype())) dispatch_unsupported(op, x.dtype(), "real and bool dtypes");
  const DType c = DTypeOf<T>::value;
  const std::vector<bool> mask = detail::reduction_mask(op, x.sizes(), dims);
  std::vector<int64_t> perm;
  Shape out_shape;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (mask[d]) continue;
    perm.push_back(d);
    out_shape.push_back(x.size(d));
    outer *= x.size(d);
  }
  for (int64_t d = 0; d < x.dim(); ++d) {
    if (!mask[d]) continue;
    perm.push_back(d);
    inner *= x.size(d);
    if (keepdim) out_shape.insert(out_shape.begin() + d, 1);
  }
  Tensor rows = x.permute(perm).to(c).contiguous();
  Tensor out = Tensor::empty({outer}, c);
  const T* in = rows.data<T>();
  T* o = out.data<T>();
  for (int64_t r = 0; r < outer; ++r) o[r] = f(in + r * inner, inner);
  return out.view(out_shape).to(out_dtype);
}

// reduce() accumulating floating inputs in double and the others in int64; f is generic.
template <typename F>
Tensor reduce_any(const char* op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim,
                  DType out_dtype, F f) {
  if (is_complex(x.dtype())) dispatch_unsupported(op, x.dtype(), "real and bool dtypes");
  if (is_floating(x.dtype())) return reduce<double>(op, x, dims, keepdim, out_dtype, f);
  return reduce<int64_t>(op, x, dims, keepdim, out_dtype, f);
}

void check_floating(const char* op, const Tensor& x, const char* hint) {
  DT_CHECK(is_floating(x.dtype()), op, ": expected a floating tensor, got ", dtype_name(x.dtype()),
           " ", shape_str(x.sizes()), " (accepted: float32, float64, bfloat16, float16", hint, ")");
}

template <bool kMax>
Tensor extremum(const char* op, const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  const std::vector<bool> mask = detail::reduction_mask(op, x.sizes(), dims);
  for (int64_t d = 0; d < x.dim(); ++d)
    DT_CHECK(!mask[d] || x.size(d) > 0, op, ": cannot reduce dim ", d, " of size 0 in ",
             shape_str(x.sizes()), " (accepted: reduced dims of non-zero size)");
  return reduce_any(op, x, dims, keepdim, x.dtype(), [](const auto* p, int64_t n) {
    auto m = p[0];
    for (int64_t i = 1; i < n; ++i) {
      if constexpr (std::is_floating_point_v<decltype(m)>) {
        if (std::isnan(m)) break;
        if (std::isnan(p[i])) {
          m = p[i];
          break;
        }
      }
      m = kMax ? std::max(m, p[i]) : std::min(m, p[i]);
    }
    return m;
  });
}

double row_mean(const double* p, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += p[i];
  return s / static_cast<double>(n);
}

// Two-pass variance of one row.
double row_var(const double* p, int64_t n, double correction) {
  const double m = row_mean(p, n);
  double ss = 0;
  for (int64_t i = 0; i < n; ++i) ss += (p[i] - m) * (p[i] - m);
  return ss / std::max(0.0, static_cast<double>(n) - correction);
}

// sum of a contiguous float32 x over its leading dims only (bias gradients: [B, T, C] -> [C]).
// reduce() would first copy x transposed into float64; adding row after row into float64
// accumulators does the same additions in the same order without that copy. Empty when x is not
// of that form.
std::optional<Tensor> sum_leading_dims(const Tensor& x, const std::vector<bool>& mask, bool keepdim) {
  const int64_t nd = x.dim();
  int64_t k = 0;
  while (k < nd && mask[k]) ++k;
  for (int64_t d = k; d < nd; ++d)
    if (mask[d]) return std::nullopt;
  if (k == 0 || k == nd || x.dtype() != DType::kFloat32 || !x.is_contiguous() || x.numel() == 0)
    return std::nullopt;
  Shape out_shape;
  int64_t rows = 1, cols = 1;
  for (int64_t d = 0; d < nd; ++d) {
    if (d < k) {
      rows *= x.size(d);
      if (keepdim) out_shape.push_back(1);
    } else {
      cols *= x.size(d);
      out_shape.push_back(x.size(d));
    }
  }
  Tensor acc = Tensor::zeros(out_shape, DType::kFloat64);
  double* a = acc.data<double>();
  const float* p = x.data<float>();
  for (int64_t r = 0; r < rows; ++r, p += cols)
    for (int64_t j = 0; j < cols; ++j) a[j] += p[j];
  return acc.to(DType::kFloat32);
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  if (is_complex(x.dtype())) {
    // The sum of the real pairs over the same dims of x (a complex sum is the sum of its parts);
    // dims are normalized against x, so that -1 and "all" never reach the pairs' dim.
    if (x.dim() == 0) return x.clone();
    std::vector<int64_t> d;
    for (int64_t k : dims) d.push_back(wrap_dim(k, x.dim(), "sum"));
    if (d.empty())
      for (int64_t k = 0; k < x.dim(); ++k) d.push_back(k);
    return view_as_complex(sum(view_as_real(x), d, keepdim).contiguous());
  }
  DT_KERNEL_ON_DEVICE(sum, x, dims, keepdim);
  if (auto fast = sum_leading_dims(x, detail::reduction_mask("sum", x.sizes(), dims), keepdim)) return *fast;
  return reduce_any("sum", x, dims, keepdim, is_floating(x.dtype()) ? x.dtype() : DType::kInt64,
                    [](const auto* p, int64_t n) {
                      std::remove_cvref_t<decltype(*p)> s = 0;
                      for (int64_t i = 0; i < n; ++i) {
                        if constexpr (std::is_integral_v<decltype(s)>)
                          s = detail::wrap_add(s, p[i]);
                        else
                          s += p[i];
                      }
                      return s;
                    });
}

Tensor prod(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  DT_KERNEL_ON_DEVICE(prod, x, dims, keepdim);
  return reduce_any("prod", x, dims, keepdim, is_floating(x.dtype()) ? x.dtype() : DType::kInt64,
                    [](const auto* p, int64_t n) {
                      std::remove_cvref_t<decltype(*p)> s = 1;
                      for (int64_t i = 0; i < n; ++i) {
                        if constexpr (std::is_integral_v<decltype(s)>)
                          s = detail::wrap_mul(s, p[i]);
                        else
                          s *= p[i];
                      }
                      return s;
                    });
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  DT_KERNEL_ON_DEVICE(mean, x, dims, keepdim);
  check_floating("mean", x, "; convert integer tensors first");
  return reduce<double>("mean", x, dims, keepdim, x.dtype(),
                        [](const double* p, int64_t n) { return row_mean(p, n); });
}

Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  DT_KERNEL_ON_DEVICE(amax, x, dims, keepdim);
  return extremum<true>("amax", x, dims, keepdim);
}
Tensor amin(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  DT_KERNEL_ON_DEVICE(amin, x, dims, keepdim);
  return extremum<false>("amin", x, dims, keepdim);
}

Tensor var(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim) {
  DT_KERNEL_ON_DEVICE(var, x, dims, correction, keepdim);
  check_floating("var", x, "");
  return reduce<double>("var", x, dims, keepdim, x.dtype(),
                        [=](const double* p, int64_t n) { return row_var(p, n, correction); });
}

Tensor std(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim) {
  DT_KERNEL_ON_DEVICE(std, x, dims, correction, keepdim);
  check_floating("std", x, "");
  return reduce<double>("std", x, dims, keepdim, x.dtype(), [=](const double* p, int64_t n) {
    return std::sqrt(row_var(p, n, correction));
  });
}

Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  DT_KERNEL_ON_DEVICE(logsumexp, x, dims, keepdim);
  return reduce<double>("logsumexp", x, dims, keepdim,
                        is_floating(x.dtype()) ? x.dtype() : DType::kFloat32,
                        [](const double* p, int64_t n) {
                          double m = -std::numeric_limits<double>::infinity();
                          for (int64_t i = 0; i < n; ++i) m = std::max(m, p[i]);
                          if (std::isinf(m)) m = 0;  // all -inf, or some +inf: no shift needed
                          double s = 0;
                          for (int64_t i = 0; i < n; ++i) s += std::exp(p[i] - m);
                          return std::log(s) + m;
                        });
}

}  // namespace dtensor::kernels
