#include "kernels/cpu/selection.h"
#include "kernels/device_dispatch.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>
#include <vector>

#include "kernels/cpu/loops.h"

namespace dtensor::kernels {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <typename T>
bool is_nan(T v) {
  if constexpr (std::is_floating_point_v<T>) return std::isnan(v);
  return false;
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

// The contiguous [R, n] rows of x along dim as T (a 0-d tensor is one row of one element).
template <typename T>
struct Rows {
  Tensor t;
  int64_t rows = 0, n = 1;
  const T* row(int64_t r) const { return t.data<T>() + r * n; }
};
template <typename T>
Rows<T> rows_of(const Tensor& x, int64_t dim) {
  Tensor t = x.dim() == 0 ? x.reshape({1}) : x.movedim(dim, -1);
  Rows<T> r{t.to(DTypeOf<T>::value).contiguous()};
  r.n = r.t.size(-1);
  r.rows = r.n == 0 ? numel(Shape(r.t.sizes().begin(), r.t.sizes().end() - 1)) : r.t.numel() / r.n;
  return r;
}

Shape reduced_shape(const Tensor& x, int64_t dim, bool keepdim) {
  Shape s = x.sizes();
  if (s.empty()) return s;
  if (keepdim)
    s[dim] = 1;
  else
    s.erase(s.begin() + dim);
  return s;
}

// Wraps dim and checks that the reduced dim is not empty.
int64_t checked_dim(const char* op, const Tensor& x, int64_t dim) {
  dim = wrap_dim(dim, x.dim(), op);
  DT_CHECK(x.dim() == 0 || x.size(dim) > 0, op, ": cannot reduce dim ", dim, " of size 0 in ",
           shape_str(x.sizes()), " (no identity; accepted: a reduced dim of non-zero size)");
  return dim;
}

// Per-row vectors -> tensors of the given shape and dtype.
template <typename T>
Tensor make(const std::vector<T>& v, const Shape& s, DType dtype) {
  return Tensor::from_vector(v, s).to(dtype);
}

// The value-selecting reduction skeleton: f(row, n) -> (value, index) per row.
template <typename T, typename F>
std::pair<Tensor, Tensor> select_rows(const Tensor& x, int64_t dim, bool keepdim, F f) {
  Rows<T> in = rows_of<T>(x, dim);
  std::vector<T> vals(in.rows);
  std::vector<int64_t> idx(in.rows);
  for (int64_t r = 0; r < in.rows; ++r) std::tie(vals[r], idx[r]) = f(in.row(r), in.n);
  const Shape s = reduced_shape(x, dim, keepdim);
  return {make(vals, s, x.dtype()), make(idx, s, DType::kInt64)};
}

// First NaN wins; otherwise the first of the strictly best values.
template <bool kMax, typename T>
std::pair<T, int64_t> extreme(const T* p, int64_t n) {
  T best = p[0];
  int64_t at = 0;
  if (is_nan(best)) return {best, 0};
  for (int64_t i = 1; i < n; ++i) {
    if (is_nan(p[i])) return {p[i], i};
    if (kMax ? p[i] > best : p[i] < best) {
      best = p[i];
      at = i;
    }
  }
  return {best, at};
}

template <bool kMax>
std::pair<Tensor, Tensor> extreme_dim(const char* op, const Tensor& x, int64_t dim, bool keepdim) {
  dim = checked_dim(op, x, dim);
  return by_kind(x, [&]<typename T>(detail::Tag<T>) {
    return select_rows<T>(x, dim, keepdim, extreme<kMax, T>);
  });
}

template <bool kMax>
Tensor arg_extreme(const char* op, const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  if (dim.has_value()) return extreme_dim<kMax>(op, x, *dim, keepdim).second;
  DT_CHECK(x.numel() > 0, op, ": cannot reduce an empty tensor ", shape_str(x.sizes()),
           " without a dim (accepted: a non-empty tensor, or a dim of non-zero size)");
  Tensor i = extreme_dim<kMax>(op, x.reshape({-1}), 0, false).second;
  return keepdim ? i.reshape(Shape(x.dim(), 1)) : i;
}

// kthvalue's order with ties broken by position: numbers ascending, NaN after all numbers, equal
// values (and NaNs) by index. A strict total order on positions, so nth_element is deterministic.
template <typename T>
struct StableLess {
  const T* p;
  bool operator()(int64_t i, int64_t j) const {
    const bool ni = is_nan(p[i]), nj = is_nan(p[j]);
    if (ni != nj) return nj;
    if (!ni && p[i] != p[j]) return p[i] < p[j];
    return i < j;
  }
};

// The position of the element of 0-based rank k in StableLess order.
template <typename T>
int64_t rank_index(const T* p, int64_t n, int64_t k) {
  std::vector<int64_t> idx(n);
  std::iota(idx.begin(), idx.end(), 0);
  std::nth_element(idx.begin(), idx.begin() + k, idx.end(), StableLess<T>{p});
  return idx[k];
}

// Whole-tensor median of the numbers (NaN ignored); NaN when there is none.
double median_all(const Tensor& x, bool ignore_nan) {
  std::vector<double> v = x.to_vector<double>();
  const size_t total = v.size();
  std::erase_if(v, [](double e) { return std::isnan(e); });
  if (v.empty() || (!ignore_nan && v.size() != total)) return kNaN;
  auto mid = v.begin() + (v.size() - 1) / 2;
  std::nth_element(v.begin(), mid, v.end());
  return *mid;
}

Tensor median_whole(const char* op, const Tensor& x, bool ignore_nan) {
  DT_CHECK(is_floating(x.dtype()) || x.numel() > 0, op, ": the median of an empty ",
           dtype_name(x.dtype()), " tensor is undefined (floating empty tensors give NaN)");
  if (is_floating(x.dtype())) return Tensor::full({}, median_all(x, ignore_nan), x.dtype());
  // Integer dtypes: exact in int64.
  std::vector<int64_t> v = x.to_vector<int64_t>();
  auto mid = v.begin() + (v.size() - 1) / 2;
  std::nth_element(v.begin(), mid, v.end());
  return Tensor::from_vector(std::vector<int64_t>{*mid}, {}).to(x.dtype());
}

template <typename T>
std::pair<T, int64_t> median_row(const T* p, int64_t n, bool ignore_nan) {
  int64_t m = n;
  if (!ignore_nan) {
    for (int64_t i = 0; i < n; ++i)
      if (is_nan(p[i])) return {p[i], i};
  } else {
    m = n - std::count_if(p, p + n, [](T e) { return is_nan(e); });
    if (m == 0) return {p[0], 0};
  }
  const int64_t i = rank_index(p, n, (m - 1) / 2);
  return {p[i], i};
}

std::pair<Tensor, Tensor> median_dim_impl(const char* op, const Tensor& x, int64_t dim,
                                          bool keepdim, bool ignore_nan) {
  dim = checked_dim(op, x, dim);
  return by_kind(x, [&]<typename T>(detail::Tag<T>) {
    return select_rows<T>(x, dim, keepdim,
                          [&](const T* p, int64_t n) { return median_row(p, n, ignore_nan); });
  });
}

// A per-row parameter: shaped like x with dim of size 1, or like x without dim.
template <typename T>
std::vector<T> row_param(const char* op, const Tensor& x, int64_t dim, const Tensor& t,
                         const char* what) {
  const bool ok = x.dim() == 0 ? t.numel() == 1
                               : (t.sizes() == reduced_shape(x, dim, true) ||
                                  t.sizes() == reduced_shape(x, dim, false));
  DT_CHECK(ok, op, ": ", what, " ", shape_str(t.sizes()), " must hold one value per row: shaped ",
           shape_str(reduced_shape(x, dim, true)), " or ", shape_str(reduced_shape(x, dim, false)),
           " for the input ", shape_str(x.sizes()), " and dim ", dim);
  return t.to_vector<T>();  // row-major over the non-reduced dims: the row order of rows_of
}

// n(row, param, count) -> int64 per row, shaped like `param`.
template <typename F>
Tensor count_rows(const char* op, const Tensor& x, int64_t dim, const Tensor& param, F f) {
  dim = wrap_dim(dim, x.dim(), op);
  return by_kind(x, [&]<typename T>(detail::Tag<T>) {
    const std::vector<T> pv = row_param<T>(op, x, dim, param, "pivots");
    Rows<T> in = rows_of<T>(x, dim);
    std::vector<int64_t> out(in.rows);
    for (int64_t r = 0; r < in.rows; ++r) {
      const T* p = in.row(r);
      out[r] = std::count_if(p, p + in.n, [&](T e) { return f(e, pv[r]); });
    }
    return make(out, param.sizes(), DType::kInt64);
  });
}

// Integer dtypes' (max, min) as int64: the identities of min / max.
std::pair<int64_t, int64_t> int_limits(DType t) {
  if (t == DType::kInt32)
    return {std::numeric_limits<int32_t>::max(), std::numeric_limits<int32_t>::min()};
  if (t == DType::kBool) return {1, 0};
  return {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()};
}

}  // namespace

std::pair<Tensor, Tensor> max_dim(const Tensor& x, int64_t dim, bool keepdim) {
  DT_KERNEL_ON_DEVICE(max_dim, x, dim, keepdim);
  return extreme_dim<true>("max_dim", x, dim, keepdim);
}
std::pair<Tensor, Tensor> min_dim(const Tensor& x, int64_t dim, bool keepdim) {
  DT_KERNEL_ON_DEVICE(min_dim, x, dim, keepdim);
  return extreme_dim<false>("min_dim", x, dim, keepdim);
}
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  DT_KERNEL_ON_DEVICE(argmax, x, dim, keepdim);
  return arg_extreme<true>("argmax", x, dim, keepdim);
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  DT_KERNEL_ON_DEVICE(argmin, x, dim, keepdim);
  return arg_extreme<false>("argmin", x, dim, keepdim);
}

Tensor median(const Tensor& x) {
  DT_KERNEL_ON_DEVICE(median, x);
  return median_whole("median", x, false);
}
Tensor nanmedian(const Tensor& x) {
  DT_KERNEL_ON_DEVICE(nanmedian, x);
  return median_whole("nanmedian", x, true);
}

std::pair<Tensor, Tensor> median_dim(const Tensor& x, int64_t dim, bool keepdim) {
  DT_KERNEL_ON_DEVICE(median_dim, x, dim, keepdim);
  return median_dim_impl("median_dim", x, dim, keepdim, false);
}
std::pair<Tensor, Tensor> nanmedian_dim(const Tensor& x, int64_t dim, bool keepdim) {
  DT_KERNEL_ON_DEVICE(nanmedian_dim, x, dim, keepdim);
  return median_dim_impl("nanmedian_dim", x, dim, keepdim, true);
}

std::pair<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim, bool keepdim) {
  DT_KERNEL_ON_DEVICE(kthvalue, x, k, dim, keepdim);
  dim = checked_dim("kthvalue", x, dim);
  const int64_t n = x.dim() == 0 ? 1 : x.size(dim);
  DT_CHECK(k >= 1 && k <= n, "kthvalue: k = ", k, " out of range for dim ", dim, " of size ", n,
           " in ", shape_str(x.sizes()), " (accepted: 1 <= k <= ", n, ")");
  return by_kind(x, [&]<typename T>(detail::Tag<T>) {
    return select_rows<T>(x, dim, keepdim, [&](const T* p, int64_t len) {
      const int64_t i = rank_index(p, len, k - 1);
      return std::make_pair(p[i], i);
    });
  });
}

Tensor value_index_backward(const Tensor& grad_values, const Tensor& indices,
                            const Shape& input_shape, int64_t dim, bool keepdim) {
  const char* op = "value_index_backward";
  check_floating(op, grad_values, "grad_values");
  DT_CHECK(indices.dtype() == DType::kInt64 || indices.dtype() == DType::kInt32, op,
           ": indices must be int64 or int32, got ", dtype_name(indices.dtype()));
  const int64_t rank = static_cast<int64_t>(input_shape.size());
  dim = wrap_dim(dim, rank, op);
  Tensor like = Tensor::empty(input_shape, DType::kBool);  // for the shapes only
  const Shape want = reduced_shape(like, dim, keepdim);
  DT_CHECK(grad_values.sizes() == want && indices.sizes() == want, op, ": grad_values ",
           shape_str(grad_values.sizes()), " and indices ", shape_str(indices.sizes()),
           " must have the reduced shape ", shape_str(want), " of input ", shape_str(input_shape),
           " (dim ", dim, ", keepdim ", keepdim, ")");
  DT_KERNEL_ON_DEVICE(value_index_backward, grad_values, indices, input_shape, dim, keepdim);
  const std::vector<double> g = grad_values.to_vector<double>();
  const std::vector<int64_t> ix = indices.to_vector<int64_t>();
  const int64_t n = rank == 0 ? 1 : input_shape[dim];
  Shape rows_shape = rank == 0 ? Shape{1} : like.movedim(dim, -1).sizes();
  std::vector<double> out(numel(rows_shape), 0.0);
  for (size_t r = 0; r < g.size(); ++r) {
    DT_CHECK(ix[r] >= 0 && ix[r] < n, op, ": index ", ix[r], " out of range for dim ", dim,
             " of size ", n, " (accepted: 0 <= index < ", n, ")");
    out[r * n + ix[r]] = g[r];
  }
  Tensor t = Tensor::from_vector(out, rows_shape);
  return (rank == 0 ? t.reshape({}) : t.movedim(-1, dim)).to(grad_values.dtype()).contiguous();
}

Tensor median_backward(const Tensor& grad, const Tensor& x, const Tensor& result) {
  const char* op = "median_backward";
  check_floating(op, grad, "grad");
  DT_CHECK(grad.numel() == 1 && result.numel() == 1, op, ": grad ", shape_str(grad.sizes()),
           " and result ", shape_str(result.sizes()), " must hold one element");
  DT_KERNEL_ON_DEVICE(median_backward, grad, x, result);
  const double g = grad.item(), v = result.item();
  std::vector<double> xv = x.to_vector<double>(), out(xv.size(), 0.0);
  auto hit = [&](double e) { return std::isnan(v) ? std::isnan(e) : e == v; };
  const auto count = std::count_if(xv.begin(), xv.end(), hit);
  for (size_t i = 0; i < xv.size(); ++i)
    if (hit(xv[i])) out[i] = g / static_cast<double>(count);
  return Tensor::from_vector(out, x.sizes()).to(grad.dtype());
}

Tensor count_less(const Tensor& x, int64_t dim, const Tensor& pivots) {
  DT_KERNEL_HOST_ONLY(count_less, x, dim, pivots);
  return count_rows("count_less", x, dim, pivots,
                    [](auto e, auto p) { return !is_nan(e) && (is_nan(p) || e < p); });
}

Tensor count_less_equal(const Tensor& x, int64_t dim, const Tensor& pivots) {
  DT_KERNEL_HOST_ONLY(count_less_equal, x, dim, pivots);
  return count_rows("count_less_equal", x, dim, pivots,
                    [](auto e, auto p) { return is_nan(p) || (!is_nan(e) && e <= p); });
}

Tensor count_nan(const Tensor& x, int64_t dim, bool keepdim) {
  DT_KERNEL_HOST_ONLY(count_nan, x, dim, keepdim);
  dim = wrap_dim(dim, x.dim(), "count_nan");
  Rows<double> in = rows_of<double>(x, dim);
  std::vector<int64_t> out(in.rows);
  for (int64_t r = 0; r < in.rows; ++r)
    out[r] = std::count_if(in.row(r), in.row(r) + in.n, [](double e) { return std::isnan(e); });
  return make(out, reduced_shape(x, dim, keepdim), DType::kInt64);
}

std::pair<Tensor, Tensor> min_max(const Tensor& x, int64_t dim, bool keepdim) {
  DT_KERNEL_HOST_ONLY(min_max, x, dim, keepdim);
  dim = wrap_dim(dim, x.dim(), "min_max");
  return by_kind(x, [&]<typename T>(detail::Tag<T>) {
    T lo_id, hi_id;
    if constexpr (std::is_floating_point_v<T>) {
      lo_id = std::numeric_limits<T>::infinity();
      hi_id = -lo_id;
    } else {
      std::tie(lo_id, hi_id) = int_limits(x.dtype());
    }
    Rows<T> in = rows_of<T>(x, dim);
    std::vector<T> lo(in.rows, lo_id), hi(in.rows, hi_id);
    for (int64_t r = 0; r < in.rows; ++r)
      for (const T* p = in.row(r); p != in.row(r) + in.n; ++p) {
        if (is_nan(*p)) continue;
        lo[r] = std::min(lo[r], *p);
        hi[r] = std::max(hi[r], *p);
      }
    const Shape s = reduced_shape(x, dim, keepdim);
    return std::make_pair(make(lo, s, x.dtype()), make(hi, s, x.dtype()));
  });
}

std::pair<Tensor, Tensor> median_between(const Tensor& x, int64_t dim, const Tensor& lo,
                                         const Tensor& hi) {
  DT_KERNEL_HOST_ONLY(median_between, x, dim, lo, hi);
  const char* op = "median_between";
  dim = wrap_dim(dim, x.dim(), op);
  DT_CHECK(lo.sizes() == hi.sizes(), op, ": lo ", shape_str(lo.sizes()), " and hi ",
           shape_str(hi.sizes()), " must have the same shape");
  return by_kind(x, [&]<typename T>(detail::Tag<T>) {
    const std::vector<T> lv = row_param<T>(op, x, dim, lo, "lo");
    const std::vector<T> hv = row_param<T>(op, x, dim, hi, "hi");
    Rows<T> in = rows_of<T>(x, dim);
    std::vector<T> med(in.rows);
    std::vector<int64_t> cnt(in.rows);
    std::vector<T> cand;
    for (int64_t r = 0; r < in.rows; ++r) {
      cand.clear();
      for (const T* p = in.row(r); p != in.row(r) + in.n; ++p)
        if (*p > lv[r] && *p < hv[r]) cand.push_back(*p);  // false for NaN
      cnt[r] = static_cast<int64_t>(cand.size());
      if (cand.empty()) {
        if constexpr (std::is_floating_point_v<T>)
          med[r] = kNaN;
        else
          med[r] = 0;
        continue;
      }
      auto mid = cand.begin() + (cand.size() - 1) / 2;
      std::nth_element(cand.begin(), mid, cand.end());
      med[r] = *mid;
    }
    return std::make_pair(make(med, lo.sizes(), x.dtype()), make(cnt, lo.sizes(), DType::kInt64));
  });
}

Tensor index_of_occurrence(const Tensor& x, int64_t dim, const Tensor& values,
                           const Tensor& occurrence, int64_t index_offset) {
  DT_KERNEL_ON_DEVICE(index_of_occurrence, x, dim, values, occurrence, index_offset);
  const char* op = "index_of_occurrence";
  dim = wrap_dim(dim, x.dim(), op);
  DT_CHECK(values.sizes() == occurrence.sizes(), op, ": values ", shape_str(values.sizes()),
           " and occurrence ", shape_str(occurrence.sizes()), " must have the same shape");
  return by_kind(x, [&]<typename T>(detail::Tag<T>) {
    const std::vector<T> vv = row_param<T>(op, x, dim, values, "values");
    const std::vector<int64_t> ov = row_param<int64_t>(op, x, dim, occurrence, "occurrence");
    Rows<T> in = rows_of<T>(x, dim);
    std::vector<int64_t> out(in.rows, -1);
    for (int64_t r = 0; r < in.rows; ++r) {
      int64_t seen = 0;
      const T* p = in.row(r);
      for (int64_t i = 0; i < in.n && ov[r] >= 1; ++i) {
        const bool eq = is_nan(vv[r]) ? is_nan(p[i]) : p[i] == vv[r];
        if (eq && ++seen == ov[r]) {
          out[r] = index_offset + i;
          break;
        }
      }
    }
    return make(out, values.sizes(), DType::kInt64);
  });
}

}  // namespace dtensor::kernels
