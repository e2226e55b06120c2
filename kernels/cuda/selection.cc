// max/min with indices, argmax/argmin (reduction_kernels.cu) and median / nanmedian / kthvalue
// (selection_kernels.cu): host side.
#include <limits>

#include "kernels/cpu/radix_select.h"
#include "kernels/cuda/common.h"
#include "kernels/cuda/kernels.h"

namespace dtensor::kernels::cuda {

using namespace detail;  // NOLINT
using ::dtensor::cuda::DeviceGuard;

namespace {

Shape reduced_shape(const Tensor& x, int64_t dim, bool keepdim) {
  Shape s = x.sizes();
  if (s.empty()) return s;
  if (keepdim)
    s[dim] = 1;
  else
    s.erase(s.begin() + dim);
  return s;
}

int64_t checked_dim(const char* op, const Tensor& x, int64_t dim) {
  check_cuda(op, x);
  dim = wrap_dim(dim, x.dim(), op);
  DT_CHECK(x.dim() == 0 || x.size(dim) > 0, op, ": cannot reduce dim ", dim, " of size 0 in ",
           shape_str(x.sizes()), " (no identity; accepted: a reduced dim of non-zero size)");
  return dim;
}

std::pair<Tensor, Tensor> extreme_dim(const char* op, bool is_max, const Tensor& x, int64_t dim,
                                      bool keepdim) {
  dim = checked_dim(op, x, dim);
  DeviceGuard guard(x.device().index);
  const Shape s = reduced_shape(x, dim, keepdim);
  Tensor values = Tensor::empty(s, x.dtype(), x.device());
  Tensor indices = Tensor::empty(s, DType::kInt64, x.device());
  if (indices.numel() == 0) return {values, indices};
  Blocked b = x.dim() == 0 ? blocked(x.view({1}), 0, 0) : blocked(x, dim, dim);
  const Compute c = compute_of(x.dtype());
  Tensor ws = workspace(reduce_workspace_bytes(c, b.outer, b.n, b.inner, true), x.device());
  launch_arg_reduce(is_max, c, b.t.data_ptr(), x.dtype(), values.data_ptr(),
                    static_cast<int64_t*>(indices.data_ptr()), b.outer, b.n, b.inner,
                    ws.numel() > 0 ? ws.data_ptr() : nullptr, stream_of(x));
  check_launch(op);
  return {values, indices};
}

Tensor arg_extreme(const char* op, bool is_max, const Tensor& x, std::optional<int64_t> dim,
                   bool keepdim) {
  check_cuda(op, x);
  if (dim.has_value()) return extreme_dim(op, is_max, x, *dim, keepdim).second;
  DT_CHECK(x.numel() > 0, op, ": cannot reduce an empty tensor ", shape_str(x.sizes()),
           " without a dim (accepted: a non-empty tensor, or a dim of non-zero size)");
  Tensor i = extreme_dim(op, is_max, contiguous(x).view({x.numel()}), 0, false).second;
  return keepdim ? i.view(Shape(x.dim(), 1)) : i;
}

// kind per row of x along dim: values (x's dtype) and int64 indices.
std::pair<Tensor, Tensor> select_dim(const char* op, SelectKind kind, int64_t k, const Tensor& x,
                                     int64_t dim, bool keepdim) {
  DeviceGuard guard(x.device().index);
  const Shape s = reduced_shape(x, dim, keepdim);
  Tensor values = Tensor::empty(s, x.dtype(), x.device());
  Tensor indices = Tensor::empty(s, DType::kInt64, x.device());
  if (indices.numel() == 0) return {values, indices};
  const Tensor rows = contiguous(x.dim() == 0 ? x.view({1}) : x.movedim(dim, -1));
  const int64_t n = rows.size(-1), nrows = rows.numel() / n;
  DT_CHECK(n < (int64_t{1} << 31), op,
           ": dims of 2^31 or more elements are not supported on CUDA (", shape_str(x.sizes()),
           ")");
  DT_CHECK(itemsize(x.dtype()) < 8 || nrows == 1 || rows.numel() < (int64_t{1} << 31), op, ": ",
           dtype_name(x.dtype()),
           " inputs of 2^31 or more elements in several rows are not "
           "supported on CUDA (",
           shape_str(x.sizes()), ")");
  const size_t bytes = select_workspace_bytes(x.dtype(), nrows, n);
  Tensor ws = workspace(bytes, x.device());
  launch_select(kind, k, rows.data_ptr(), x.dtype(), nrows, n, values.data_ptr(),
                static_cast<int64_t*>(indices.data_ptr()), ws.data_ptr(), bytes, stream_of(x));
  check_launch(op);
  return {values, indices};
}

Tensor median_whole(const char* op, SelectKind kind, const Tensor& x) {
  check_cuda(op, x);
  DT_CHECK(is_floating(x.dtype()) || x.numel() > 0, op, ": the median of an empty ",
           dtype_name(x.dtype()), " tensor is undefined (floating empty tensors give NaN)");
  if (x.numel() == 0)
    return full({}, std::numeric_limits<double>::quiet_NaN(), x.dtype(), x.device());
  const Tensor flat = contiguous(x).view({x.numel()});
  // Read about once (a sample brackets the median); the exact path where the data defeats it.
  if (const size_t bytes = median_whole_workspace_bytes(x.dtype(), x.numel()); bytes > 0) {
    DeviceGuard guard(x.device().index);
    Tensor value = Tensor::empty({}, x.dtype(), x.device());
    Tensor ws = workspace(bytes, x.device());
    const bool answered = launch_median_whole(kind == SelectKind::kNanMedian, flat.data_ptr(), x.dtype(),
                                              x.numel(), value.data_ptr(), ws.data_ptr(), stream_of(x));
    check_launch(op);
    if (answered) return value;
  }
  return select_dim(op, kind, 0, flat, 0, false).first;
}

}  // namespace

std::pair<Tensor, Tensor> max_dim(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim("max_dim", true, x, dim, keepdim);
}
std::pair<Tensor, Tensor> min_dim(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme_dim("min_dim", false, x, dim, keepdim);
}
Tensor argmax(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_extreme("argmax", true, x, dim, keepdim);
}
Tensor argmin(const Tensor& x, std::optional<int64_t> dim, bool keepdim) {
  return arg_extreme("argmin", false, x, dim, keepdim);
}

Tensor median(const Tensor& x) { return median_whole("median", SelectKind::kMedian, x); }
Tensor nanmedian(const Tensor& x) { return median_whole("nanmedian", SelectKind::kNanMedian, x); }

std::pair<Tensor, Tensor> median_dim(const Tensor& x, int64_t dim, bool keepdim) {
  dim = checked_dim("median_dim", x, dim);
  return select_dim("median_dim", SelectKind::kMedian, 0, x, dim, keepdim);
}

std::pair<Tensor, Tensor> nanmedian_dim(const Tensor& x, int64_t dim, bool keepdim) {
  dim = checked_dim("nanmedian_dim", x, dim);
  return select_dim("nanmedian_dim", SelectKind::kNanMedian, 0, x, dim, keepdim);
}

std::pair<Tensor, Tensor> kthvalue(const Tensor& x, int64_t k, int64_t dim, bool keepdim) {
  dim = checked_dim("kthvalue", x, dim);
  const int64_t n = x.dim() == 0 ? 1 : x.size(dim);
  DT_CHECK(k >= 1 && k <= n, "kthvalue: k = ", k, " out of range for dim ", dim, " of size ", n,
           " in ", shape_str(x.sizes()), " (accepted: 1 <= k <= ", n, ")");
  return select_dim("kthvalue", SelectKind::kKth, k, x, dim, keepdim);
}

namespace {

// x's contiguous [outer, n, inner] view along dim (a 0-d x is one row of one element); dim wrapped.
Blocked rows_along(const char* op, const Tensor& x, int64_t& dim) {
  if (x.dim() > 0) dim = wrap_dim(dim, x.dim(), op);
  return blocked(x, dim, dim);
}

}  // namespace

Tensor radix_histogram(const Tensor& x, int64_t dim, const std::vector<uint64_t>& prefix, int shift, int bits) {
  const char* op = "radix_histogram";
  check_cuda(op, x);
  const int width = kernels::radix_key_bits(x.dtype());
  DT_CHECK(shift >= 0 && bits >= 1 && bits <= 16 && shift + bits <= width, op, ": digit of ", bits, " bits at bit ",
           shift, " does not fit the ", width, "-bit keys of ", dtype_name(x.dtype()),
           " (accepted: 1 to 16 bits, shift + bits <= ", width, ")");
  DeviceGuard guard(x.device().index);
  const Blocked v = rows_along(op, x, dim);
  const int64_t rows = v.outer * v.inner;
  DT_CHECK(static_cast<int64_t>(prefix.size()) == rows, op, ": ", prefix.size(), " prefixes for the ", rows,
           " rows of ", shape_str(x.sizes()), " along dim ", dim);
  const int64_t cols = (int64_t{1} << bits) + 1;
  Tensor out = zeros({rows, cols}, DType::kInt64, x.device());
  if (rows == 0 || v.n == 0) return out;
  const bool whole = shift + bits == width;
  Tensor pre;  // the prefixes on the device (as int64 bits), unless every number counts
  if (!whole) {
    std::vector<int64_t> bits_of(prefix.size());
    for (size_t r = 0; r < prefix.size(); ++r) bits_of[r] = static_cast<int64_t>(prefix[r]);
    pre = Tensor::from_vector(bits_of, {rows}).to(x.device());
  }
  launch_radix_histogram(v.t.data_ptr(), x.dtype(), v.outer, v.n, v.inner,
                         whole ? nullptr : static_cast<const uint64_t*>(pre.data_ptr()), shift, bits, cols,
                         static_cast<int64_t*>(out.data_ptr()), stream_of(x));
  check_launch(op);
  return out;
}

Tensor index_of_occurrence(const Tensor& x, int64_t dim, const Tensor& values, const Tensor& occurrence,
                           int64_t index_offset) {
  const char* op = "index_of_occurrence";
  check_cuda(op, x);
  check_same_device(op, x, values, "values");
  check_same_device(op, x, occurrence, "occurrence");
  DT_CHECK(values.sizes() == occurrence.sizes(), op, ": values ", shape_str(values.sizes()), " and occurrence ",
           shape_str(occurrence.sizes()), " must have the same shape");
  DeviceGuard guard(x.device().index);
  const Blocked v = rows_along(op, x, dim);
  const int64_t rows = v.outer * v.inner;
  DT_CHECK(values.numel() == rows, op, ": ", values.numel(), " values for the ", rows, " rows of ",
           shape_str(x.sizes()), " along dim ", dim, " (accepted: x's shape with dim of size 1, or without dim)");
  Tensor out = empty(values.sizes(), DType::kInt64, x.device());
  if (rows == 0) return out;
  const Tensor vals = contiguous(to(values, x.dtype())), occ = contiguous(to(occurrence, DType::kInt64));
  launch_index_of_occurrence(v.t.data_ptr(), x.dtype(), v.outer, v.n, v.inner, vals.data_ptr(),
                             static_cast<const int64_t*>(occ.data_ptr()), index_offset,
                             static_cast<int64_t*>(out.data_ptr()), stream_of(x));
  check_launch(op);
  return out;
}

// The backward of the value-selecting reductions; shapes and dtypes were checked by the CPU
// kernels before they sent the call here (kernels/cpu/selection.cc).
Tensor value_index_backward(const Tensor& grad_values, const Tensor& indices, const Shape& input_shape,
                            int64_t dim, bool keepdim) {
  const char* op = "value_index_backward";
  (void)keepdim;  // the reduced positions are in the same order either way
  check_cuda(op, grad_values, "grad_values");
  check_same_device(op, grad_values, indices, "indices");
  const int64_t rank = static_cast<int64_t>(input_shape.size());
  dim = wrap_dim(dim, rank, op);
  DeviceGuard guard(grad_values.device().index);
  const int64_t n = rank == 0 ? 1 : input_shape[dim];
  Shape rows_shape{1};  // input_shape with dim moved last
  if (rank > 0) {
    rows_shape = input_shape;
    rows_shape.erase(rows_shape.begin() + dim);
    rows_shape.push_back(n);
  }
  const Tensor g = contiguous(to(grad_values, DType::kFloat64));
  const Tensor ix = contiguous(to(indices, DType::kInt64));
  Tensor dx = zeros(rows_shape, DType::kFloat64, grad_values.device());
  Tensor record = zeros({2}, DType::kInt64, grad_values.device());
  launch_value_index_backward(static_cast<const double*>(g.data_ptr()), static_cast<const int64_t*>(ix.data_ptr()),
                              g.numel(), n, static_cast<double*>(dx.data_ptr()),
                              static_cast<int64_t*>(record.data_ptr()), stream_of(g));
  check_launch(op);
  const auto [bad, v] = read_error_record(record);
  DT_CHECK(bad == 0, op, ": index ", v, " out of range for dim ", dim, " of size ", n, " (accepted: 0 <= index < ",
           n, ")");
  return contiguous(to(rank == 0 ? dx.view({}) : dx.movedim(-1, dim), grad_values.dtype()));
}

Tensor median_backward(const Tensor& grad, const Tensor& x, const Tensor& result) {
  const char* op = "median_backward";
  check_cuda(op, grad, "grad");
  check_same_device(op, grad, x, "input");
  check_same_device(op, grad, result, "result");
  DeviceGuard guard(grad.device().index);
  const Tensor xs = contiguous(to(x, DType::kFloat64));
  const Tensor g = contiguous(to(grad, DType::kFloat64)), v = contiguous(to(result, DType::kFloat64));
  Tensor dx = Tensor::empty(x.sizes(), DType::kFloat64, x.device());
  Tensor hits = zeros({1}, DType::kInt64, x.device());
  launch_median_backward(static_cast<const double*>(xs.data_ptr()), xs.numel(), static_cast<const double*>(g.data_ptr()),
                         static_cast<const double*>(v.data_ptr()), static_cast<double*>(dx.data_ptr()),
                         static_cast<int64_t*>(hits.data_ptr()), stream_of(x));
  check_launch(op);
  return contiguous(to(dx, grad.dtype()));
}

}  // namespace dtensor::kernels::cuda
