#include "kernels/cpu/scan.h"
#include "kernels/device_dispatch.h"

#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "kernels/cpu/loops.h"

namespace dtensor::kernels {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// x as contiguous [.., n] rows of T with `dim` moved last (a 0-d tensor is one row of one element).
template <typename T>
Tensor rows_of(const Tensor& x, int64_t dim) {
  Tensor t = x.dim() == 0 ? x.reshape({1}) : x.movedim(dim, -1);
  return t.to(DTypeOf<T>::value).contiguous();
}

// Undoes rows_of for a result of rank `rank` and casts it to dtype.
Tensor unrows(const Tensor& r, int64_t rank, int64_t dim, DType dtype) {
  Tensor t = rank == 0 ? r.reshape({}) : r.movedim(-1, dim);
  return t.to(dtype).contiguous();
}

// f(Tag<double>) for floating x, f(Tag<int64_t>) for integer/bool x.
template <typename F>
decltype(auto) by_kind(const Tensor& x, F&& f) {
  if (is_floating(x.dtype())) return f(detail::Tag<double>{});
  return f(detail::Tag<int64_t>{});
}

void check_floating(const char* op, const Tensor& t, const char* what) {
  DT_CHECK(is_floating(t.dtype()), op, ": ", what, " must be floating, got ", dtype_name(t.dtype()),
           " ", shape_str(t.sizes()), " (accepted: float32, float64, bfloat16, float16)");
}

void check_same_shape(const char* op, const Tensor& a, const char* an, const Shape& b,
                      const char* bn) {
  DT_CHECK(a.sizes() == b, op, ": ", an, " ", shape_str(a.sizes()), " and ", bn, " ", shape_str(b),
           " must have the same shape");
}

// Calls f(in_row, out_row, n, r) for every row r of x (rows of T along dim); the out rows are T
// and come back in x's layout cast to out_dtype.
template <typename T, typename F>
Tensor scan_rows(const Tensor& x, int64_t dim, DType out_dtype, F&& f) {
  Tensor in = rows_of<T>(x, dim);
  Tensor out = Tensor::empty(in.sizes(), DTypeOf<T>::value);
  const int64_t n = in.size(-1), rows = n == 0 ? 0 : in.numel() / n;
  const T* ip = in.data<T>();
  T* op = out.data<T>();
  for (int64_t r = 0; r < rows; ++r) f(ip + r * n, op + r * n, n, r);
  return unrows(out, x.dim(), dim, out_dtype);
}

// The per-row carry of a sharded scan as T values, in row order. It must be shaped like x with
// `dim` of size 1.
template <typename T>
std::vector<T> carry_rows(const char* op, const Tensor& x, int64_t dim, const Tensor& carry,
                          const char* what) {
  Shape want = x.sizes();
  if (!want.empty()) want[dim] = 1;
  DT_CHECK(carry.sizes() == want || (x.dim() == 0 && carry.numel() == 1), op, ": ", what, " ",
           shape_str(carry.sizes()), " must be shaped like the input ", shape_str(x.sizes()),
           " with dim ", dim, " of size 1, i.e. ", shape_str(want));
  return rows_of<T>(carry, x.dim() == 0 ? 0 : dim).template to_vector<T>();
}

// torch's logaddexp for scans: NaN propagates; equal infinities give themselves.
double log_add_exp(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::numeric_limits<double>::quiet_NaN();
  const double lo = std::min(a, b), hi = std::max(a, b);
  if (lo == hi && std::isinf(lo)) return a;
  return hi + std::log1p(std::exp(lo - hi));
}

template <typename T>
Tensor cumsum_impl(const char* op, const Tensor& x, int64_t dim, const Tensor* carry) {
  dim = wrap_dim(dim, x.dim(), op);
  std::vector<T> c = carry ? carry_rows<T>(op, x, dim, *carry, "carry") : std::vector<T>();
  return scan_rows<T>(x, dim, is_floating(x.dtype()) ? x.dtype() : DType::kInt64,
                      [&](const T* in, T* out, int64_t n, int64_t r) {
                        T s = carry ? c[r] : T(0);
                        for (int64_t i = 0; i < n; ++i) {
                          if constexpr (std::is_integral_v<T>)
                            s = detail::wrap_add(s, in[i]);
                          else
                            s += in[i];
                          out[i] = s;
                        }
                      });
}

template <typename T>
Tensor cumprod_impl(const char* op, const Tensor& x, int64_t dim, const Tensor* carry) {
  dim = wrap_dim(dim, x.dim(), op);
  std::vector<T> c = carry ? carry_rows<T>(op, x, dim, *carry, "carry") : std::vector<T>();
  return scan_rows<T>(x, dim, is_floating(x.dtype()) ? x.dtype() : DType::kInt64,
                      [&](const T* in, T* out, int64_t n, int64_t r) {
                        T s = carry ? c[r] : T(1);
                        for (int64_t i = 0; i < n; ++i) {
                          if constexpr (std::is_integral_v<T>)
                            s = detail::wrap_mul(s, in[i]);
                          else
                            s *= in[i];
                          out[i] = s;
                        }
                      });
}

Tensor logcumsumexp_impl(const char* op, const Tensor& x, int64_t dim, const Tensor* carry) {
  check_floating(op, x, "input");
  dim = wrap_dim(dim, x.dim(), op);
  std::vector<double> c =
      carry ? carry_rows<double>(op, x, dim, *carry, "carry") : std::vector<double>();
  return scan_rows<double>(x, dim, x.dtype(),
                           [&](const double* in, double* out, int64_t n, int64_t r) {
                             double s = carry ? c[r] : -kInf;
                             for (int64_t i = 0; i < n; ++i) out[i] = s = log_add_exp(in[i], s);
                           });
}

// cummax (kMax) / cummin with an optional carry (value, global index).
template <bool kMax>
std::pair<Tensor, Tensor> cum_extreme(const char* op, const Tensor& x, int64_t dim,
                                      const Tensor* carry_v, const Tensor* carry_i,
                                      int64_t offset) {
  dim = wrap_dim(dim, x.dim(), op);
  return by_kind(x, [&]<typename T>(detail::Tag<T>) {
    std::vector<T> cv;
    std::vector<int64_t> ci;
    if (carry_v) {
      DT_CHECK(carry_i->dtype() == DType::kInt64 || carry_i->dtype() == DType::kInt32, op,
               ": carry_indices must be int64 or int32, got ", dtype_name(carry_i->dtype()));
      cv = carry_rows<T>(op, x, dim, *carry_v, "carry_values");
      ci = carry_rows<int64_t>(op, x, dim, *carry_i, "carry_indices");
    }
    Tensor in = rows_of<T>(x, dim);
    Tensor vals = Tensor::empty(in.sizes(), DTypeOf<T>::value);
    Tensor idx = Tensor::empty(in.sizes(), DType::kInt64);
    const int64_t n = in.size(-1), rows = n == 0 ? 0 : in.numel() / n;
    const T* ip = in.data<T>();
    T* vp = vals.data<T>();
    int64_t* xp = idx.data<int64_t>();
    for (int64_t r = 0; r < rows; ++r, ip += n, vp += n, xp += n) {
      T v = carry_v ? cv[r] : ip[0];
      int64_t at = carry_v ? ci[r] : offset;
      for (int64_t i = 0; i < n; ++i) {
        const T e = ip[i];
        bool take = kMax ? e >= v : e <= v;
        if constexpr (std::is_floating_point_v<T>) take = std::isnan(e) || (!std::isnan(v) && take);
        if (take) {
          v = e;
          at = offset + i;
        }
        vp[i] = v;
        xp[i] = at;
      }
    }
    return std::make_pair(unrows(vals, x.dim(), dim, x.dtype()),
                          unrows(idx, x.dim(), dim, DType::kInt64));
  });
}

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim) {
  DT_KERNEL_ON_DEVICE(cumsum, x, dim);
  return by_kind(
      x, [&]<typename T>(detail::Tag<T>) { return cumsum_impl<T>("cumsum", x, dim, nullptr); });
}
Tensor cumprod(const Tensor& x, int64_t dim) {
  DT_KERNEL_ON_DEVICE(cumprod, x, dim);
  return by_kind(
      x, [&]<typename T>(detail::Tag<T>) { return cumprod_impl<T>("cumprod", x, dim, nullptr); });
}
Tensor logcumsumexp(const Tensor& x, int64_t dim) {
  DT_KERNEL_ON_DEVICE(logcumsumexp, x, dim);
  return logcumsumexp_impl("logcumsumexp", x, dim, nullptr);
}
std::pair<Tensor, Tensor> cummax(const Tensor& x, int64_t dim) {
  DT_KERNEL_ON_DEVICE(cummax, x, dim);
  return cum_extreme<true>("cummax", x, dim, nullptr, nullptr, 0);
}
std::pair<Tensor, Tensor> cummin(const Tensor& x, int64_t dim) {
  DT_KERNEL_ON_DEVICE(cummin, x, dim);
  return cum_extreme<false>("cummin", x, dim, nullptr, nullptr, 0);
}

Tensor cumsum_with_carry(const Tensor& x, int64_t dim, const Tensor& carry) {
  DT_KERNEL_ON_DEVICE(cumsum_with_carry, x, dim, carry);
  return by_kind(x, [&]<typename T>(detail::Tag<T>) {
    return cumsum_impl<T>("cumsum_with_carry", x, dim, &carry);
  });
}
Tensor cumprod_with_carry(const Tensor& x, int64_t dim, const Tensor& carry) {
  DT_KERNEL_ON_DEVICE(cumprod_with_carry, x, dim, carry);
  return by_kind(x, [&]<typename T>(detail::Tag<T>) {
    return cumprod_impl<T>("cumprod_with_carry", x, dim, &carry);
  });
}
Tensor logcumsumexp_with_carry(const Tensor& x, int64_t dim, const Tensor& carry) {
  DT_KERNEL_ON_DEVICE(logcumsumexp_with_carry, x, dim, carry);
  return logcumsumexp_impl("logcumsumexp_with_carry", x, dim, &carry);
}
std::pair<Tensor, Tensor> cummax_with_carry(const Tensor& x, int64_t dim,
                                            const Tensor& carry_values, const Tensor& carry_indices,
                                            int64_t index_offset) {
  DT_KERNEL_ON_DEVICE(cummax_with_carry, x, dim, carry_values, carry_indices, index_offset);
  return cum_extreme<true>("cummax_with_carry", x, dim, &carry_values, &carry_indices,
                           index_offset);
}
std::pair<Tensor, Tensor> cummin_with_carry(const Tensor& x, int64_t dim,
                                            const Tensor& carry_values, const Tensor& carry_indices,
                                            int64_t index_offset) {
  DT_KERNEL_ON_DEVICE(cummin_with_carry, x, dim, carry_values, carry_indices, index_offset);
  return cum_extreme<false>("cummin_with_carry", x, dim, &carry_values, &carry_indices,
                            index_offset);
}

Tensor cumsum_backward(const Tensor& grad, int64_t dim) {
  check_floating("cumsum_backward", grad, "grad");
  dim = wrap_dim(dim, grad.dim(), "cumsum_backward");
  DT_KERNEL_ON_DEVICE(cumsum_backward, grad, dim);
  return scan_rows<double>(grad, dim, grad.dtype(),
                           [](const double* g, double* out, int64_t n, int64_t) {
                             double s = 0;
                             for (int64_t i = n - 1; i >= 0; --i) out[i] = s += g[i];
                           });
}

Tensor cumprod_backward(const Tensor& grad, const Tensor& x, const Tensor& out, int64_t dim) {
  const char* op = "cumprod_backward";
  check_floating(op, grad, "grad");
  check_same_shape(op, x, "input", grad.sizes(), "grad");
  check_same_shape(op, out, "result", grad.sizes(), "grad");
  dim = wrap_dim(dim, grad.dim(), op);
  DT_KERNEL_ON_DEVICE(cumprod_backward, grad, x, out, dim);
  Tensor xr = rows_of<double>(x, dim), pr = rows_of<double>(out, dim);
  const double* xp = xr.data<double>();
  const double* pp = pr.data<double>();
  return scan_rows<double>(grad, dim, grad.dtype(),
                           [&](const double* g, double* dx, int64_t n, int64_t r) {
                             const double* xs = xp + r * n;
                             const double* ps = pp + r * n;
                             double s = 0;  // S_k = g_k + x_{k+1} * S_{k+1}
                             for (int64_t k = n - 1; k >= 0; --k) {
                               s = k + 1 < n ? g[k] + xs[k + 1] * s : g[k];
                               dx[k] = (k > 0 ? ps[k - 1] : 1.0) * s;
                             }
                           });
}

Tensor logcumsumexp_backward(const Tensor& grad, const Tensor& x, const Tensor& out, int64_t dim) {
  const char* op = "logcumsumexp_backward";
  check_floating(op, grad, "grad");
  check_same_shape(op, x, "input", grad.sizes(), "grad");
  check_same_shape(op, out, "result", grad.sizes(), "grad");
  dim = wrap_dim(dim, grad.dim(), op);
  DT_KERNEL_ON_DEVICE(logcumsumexp_backward, grad, x, out, dim);
  Tensor xr = rows_of<double>(x, dim), orr = rows_of<double>(out, dim);
  const double* xp = xr.data<double>();
  const double* op_ = orr.data<double>();
  return scan_rows<double>(grad, dim, grad.dtype(),
                           [&](const double* g, double* dx, int64_t n, int64_t r) {
                             const double* xs = xp + r * n;
                             const double* os = op_ + r * n;
                             double pos = -kInf, neg = -kInf;  // log sum_{i>=j} |g_i| exp(-out_i)
                             for (int64_t j = n - 1; j >= 0; --j) {
                               if (g[j] > 0) pos = log_add_exp(pos, std::log(g[j]) - os[j]);
                               if (g[j] < 0) neg = log_add_exp(neg, std::log(-g[j]) - os[j]);
                               dx[j] = std::exp(pos + xs[j]) - std::exp(neg + xs[j]);
                             }
                           });
}

Tensor cummaxmin_backward(const Tensor& grad, const Tensor& indices, const Shape& input_shape,
                          int64_t dim, int64_t index_offset) {
  const char* op = "cummaxmin_backward";
  check_floating(op, grad, "grad");
  check_same_shape(op, grad, "grad", input_shape, "input_shape");
  check_same_shape(op, indices, "indices", input_shape, "input_shape");
  DT_CHECK(indices.dtype() == DType::kInt64 || indices.dtype() == DType::kInt32, op,
           ": indices must be int64 or int32, got ", dtype_name(indices.dtype()));
  dim = wrap_dim(dim, grad.dim(), op);
  DT_KERNEL_ON_DEVICE(cummaxmin_backward, grad, indices, input_shape, dim, index_offset);
  Tensor ir = rows_of<int64_t>(indices, dim);
  const int64_t* ip = ir.data<int64_t>();
  return scan_rows<double>(
      grad, dim, grad.dtype(), [&](const double* g, double* dx, int64_t n, int64_t r) {
        const int64_t* is = ip + r * n;
        for (int64_t i = 0; i < n; ++i) dx[i] = 0;
        for (int64_t i = 0; i < n; ++i) {
          const int64_t at = is[i] - index_offset;
          if (is[i] >= 0 && at < 0) continue;  // an earlier shard's carry
          DT_CHECK(at >= 0 && at < n, op, ": index ", is[i], " out of range for a dim of size ", n,
                   " at offset ", index_offset, " (accepted: 0 <= index < ", index_offset + n, ")");
          dx[at] += g[i];
        }
      });
}

}  // namespace dtensor::kernels
