// Scans along a dim (host side; kernels in scan_kernels.cu). The scanned dim is moved last and
// the rows converted to the compute type (float for float32/16-bit floats, double, int64), scanned,
// and moved back.
#include "kernels/cuda/common.h"
#include "kernels/cuda/kernels.h"

namespace dtensor::kernels::cuda {

using namespace detail;  // NOLINT
using ::dtensor::cuda::DeviceGuard;

namespace {

struct Scanned {
  Tensor values;   // out_dtype, x's shape
  Tensor indices;  // int64 (cummax / cummin)
};

Scanned scan(const char* op, ScanKind kind, const Tensor& x, int64_t dim, DType out_dtype) {
  check_cuda(op, x);
  dim = wrap_dim(dim, x.dim(), op);
  DeviceGuard guard(x.device().index);
  const Compute c = compute_of(out_dtype);
  const Tensor moved = x.dim() == 0 ? x.view({1}) : x.movedim(dim, -1);
  const Tensor rows = contiguous(to(moved, dtype_of(c)));
  const int64_t n = rows.size(-1), count = rows.numel();
  const int64_t nrows = n == 0 ? 0 : count / n;
  const bool pairs = kind == ScanKind::kMax || kind == ScanKind::kMin;
  Tensor out = Tensor::empty(rows.sizes(), dtype_of(c), x.device());
  Tensor idx = pairs ? Tensor::empty(rows.sizes(), DType::kInt64, x.device()) : Tensor();
  if (count > 0) {
    const size_t bytes = scan_workspace_bytes(kind, c, nrows, n);
    Tensor ws = workspace(bytes, x.device());
    launch_scan(kind, c, rows.data_ptr(), out.data_ptr(),
                pairs ? static_cast<int64_t*>(idx.data_ptr()) : nullptr, nrows, n, ws.data_ptr(),
                bytes, stream_of(x));
    check_launch(op);
  }
  auto back = [&](const Tensor& t, DType dtype) {
    Tensor r = x.dim() == 0 ? t.view({}) : t.movedim(-1, dim);
    return contiguous(to(r, dtype));
  };
  Scanned s;
  s.values = back(out, out_dtype);
  if (pairs) s.indices = back(idx, DType::kInt64);
  return s;
}

void check_floating_scan(const char* op, const Tensor& x) { check_floating(op, x, "input"); }

}  // namespace

Tensor cumsum(const Tensor& x, int64_t dim) {
  check_cuda("cumsum", x);
  return scan("cumsum", ScanKind::kSum, x, dim, is_floating(x.dtype()) ? x.dtype() : DType::kInt64)
      .values;
}

Tensor cumprod(const Tensor& x, int64_t dim) {
  check_cuda("cumprod", x);
  return scan("cumprod", ScanKind::kProd, x, dim,
              is_floating(x.dtype()) ? x.dtype() : DType::kInt64)
      .values;
}

Tensor logcumsumexp(const Tensor& x, int64_t dim) {
  check_cuda("logcumsumexp", x);
  check_floating_scan("logcumsumexp", x);
  return scan("logcumsumexp", ScanKind::kLogSumExp, x, dim, x.dtype()).values;
}

std::pair<Tensor, Tensor> cummax(const Tensor& x, int64_t dim) {
  Scanned s = scan("cummax", ScanKind::kMax, x, dim, x.dtype());
  return {s.values, s.indices};
}

std::pair<Tensor, Tensor> cummin(const Tensor& x, int64_t dim) {
  Scanned s = scan("cummin", ScanKind::kMin, x, dim, x.dtype());
  return {s.values, s.indices};
}

namespace {

// [carry, x] along dim in `dtype`, after checking the carry's shape (x's with dim of size 1).
Tensor with_carry_first(const char* op, const Tensor& x, int64_t dim, const Tensor& carry, DType dtype) {
  check_cuda(op, x);
  check_same_device(op, x, carry, "carry");
  Shape want = x.sizes();
  want[dim] = 1;
  DT_CHECK(carry.sizes() == want, op, ": carry ", shape_str(carry.sizes()), " for input ", shape_str(x.sizes()),
           " along dim ", dim, "; accepted: ", shape_str(want));
  return cat({to(carry, dtype), to(x, dtype)}, dim);
}

// x of dim >= 1 (a 0-d x is scanned as one element).
template <typename Scan>
Tensor carried(const char* op, const Tensor& x, int64_t dim, const Tensor& carry, DType dtype, Scan scan) {
  if (x.dim() == 0) return carried(op, x.view({1}), 0, carry.reshape({1}), dtype, scan).view({});
  dim = wrap_dim(dim, x.dim(), op);
  const Tensor s = scan(with_carry_first(op, x, dim, carry, dtype), dim);
  return contiguous(s.narrow(dim, 1, x.size(dim)));
}

// cummax / cummin over [carry, x]: position 0 is the carry (its index is carry_indices), position
// p > 0 is x's element p - 1, global index index_offset + p - 1.
template <typename Scan>
std::pair<Tensor, Tensor> carried_extreme(const char* op, const Tensor& x, int64_t dim, const Tensor& cv,
                                          const Tensor& ci, int64_t offset, Scan scan) {
  if (x.dim() == 0) {
    auto [v, i] = carried_extreme(op, x.view({1}), 0, cv.reshape({1}), ci.reshape({1}), offset, scan);
    return {v.view({}), i.view({})};
  }
  dim = wrap_dim(dim, x.dim(), op);
  DT_CHECK(ci.dtype() == DType::kInt64 && ci.sizes() == cv.sizes(), op, ": carry indices ", ci.str(),
           " for carry values ", shape_str(cv.sizes()), "; accepted: int64 of the same shape");
  check_same_device(op, x, ci, "carry indices");
  auto [v, i] = scan(with_carry_first(op, x, dim, cv, x.dtype()), dim);
  const int64_t n = x.size(dim);
  const Tensor local = contiguous(i.narrow(dim, 1, n));
  namespace kc = ::dtensor::kernels::cuda;
  const Tensor global = kc::where(kc::eq(local, Scalar(0)), ci, kc::add(local, Scalar(offset - 1), 1));
  return {contiguous(v.narrow(dim, 1, n)), global};
}

DType sum_dtype(const Tensor& x) { return is_floating(x.dtype()) ? x.dtype() : DType::kInt64; }

}  // namespace

Tensor cumsum_with_carry(const Tensor& x, int64_t dim, const Tensor& carry) {
  return carried("cumsum_with_carry", x, dim, carry, sum_dtype(x),
                 [](const Tensor& t, int64_t d) { return cumsum(t, d); });
}

Tensor cumprod_with_carry(const Tensor& x, int64_t dim, const Tensor& carry) {
  return carried("cumprod_with_carry", x, dim, carry, sum_dtype(x),
                 [](const Tensor& t, int64_t d) { return cumprod(t, d); });
}

Tensor logcumsumexp_with_carry(const Tensor& x, int64_t dim, const Tensor& carry) {
  check_cuda("logcumsumexp_with_carry", x);
  check_floating_scan("logcumsumexp_with_carry", x);
  return carried("logcumsumexp_with_carry", x, dim, carry, x.dtype(),
                 [](const Tensor& t, int64_t d) { return logcumsumexp(t, d); });
}

std::pair<Tensor, Tensor> cummax_with_carry(const Tensor& x, int64_t dim, const Tensor& carry_values,
                                            const Tensor& carry_indices, int64_t index_offset) {
  return carried_extreme("cummax_with_carry", x, dim, carry_values, carry_indices, index_offset,
                         [](const Tensor& t, int64_t d) { return cummax(t, d); });
}

std::pair<Tensor, Tensor> cummin_with_carry(const Tensor& x, int64_t dim, const Tensor& carry_values,
                                            const Tensor& carry_indices, int64_t index_offset) {
  return carried_extreme("cummin_with_carry", x, dim, carry_values, carry_indices, index_offset,
                         [](const Tensor& t, int64_t d) { return cummin(t, d); });
}

namespace {

// The scans' backward: grad (and x, out, indices where the kind uses them) as float64 rows along
// dim, one thread a row (launch_scan_backward), back to grad's dtype and shape. Shapes, dtypes and
// dim were checked by the CPU kernel before it sent the call here (kernels/cpu/scan.cc).
Tensor scan_backward(const char* op, ScanBackwardKind kind, const Tensor& grad, const Tensor* x,
                     const Tensor* out, const Tensor* indices, int64_t index_offset, int64_t dim) {
  check_cuda(op, grad, "grad");
  if (x) check_same_device(op, grad, *x, "input");
  if (out) check_same_device(op, grad, *out, "result");
  if (indices) check_same_device(op, grad, *indices, "indices");
  dim = wrap_dim(dim, grad.dim(), op);
  DeviceGuard guard(grad.device().index);
  auto rows = [&](const Tensor& t, DType dt) {
    return contiguous(to(grad.dim() == 0 ? t.view({1}) : t.movedim(dim, -1), dt));
  };
  const Tensor g = rows(grad, DType::kFloat64);
  const Tensor xr = x ? rows(*x, DType::kFloat64) : Tensor();
  const Tensor orr = out ? rows(*out, DType::kFloat64) : Tensor();
  const Tensor ir = indices ? rows(*indices, DType::kInt64) : Tensor();
  const int64_t n = g.size(-1), nrows = n == 0 ? 0 : g.numel() / n;
  Tensor dx = Tensor::empty(g.sizes(), DType::kFloat64, grad.device());
  Tensor record = zeros({2}, DType::kInt64, grad.device());
  auto ptr = [](const Tensor& t) { return t.defined() ? static_cast<const double*>(t.data_ptr()) : nullptr; };
  launch_scan_backward(kind, ptr(g), ptr(xr), ptr(orr),
                       ir.defined() ? static_cast<const int64_t*>(ir.data_ptr()) : nullptr, index_offset, nrows, n,
                       static_cast<double*>(dx.data_ptr()), static_cast<int64_t*>(record.data_ptr()),
                       stream_of(grad));
  check_launch(op);
  if (kind == ScanBackwardKind::kMaxMin) {
    const auto [bad, v] = read_error_record(record);
    DT_CHECK(bad == 0, op, ": index ", v, " out of range for a dim of size ", n, " at offset ", index_offset,
             " (accepted: 0 <= index < ", index_offset + n, ")");
  }
  return contiguous(to(grad.dim() == 0 ? dx.view({}) : dx.movedim(-1, dim), grad.dtype()));
}

}  // namespace

Tensor cumsum_backward(const Tensor& grad, int64_t dim) {
  return scan_backward("cumsum_backward", ScanBackwardKind::kSum, grad, nullptr, nullptr, nullptr, 0, dim);
}

Tensor cumprod_backward(const Tensor& grad, const Tensor& x, const Tensor& out, int64_t dim) {
  return scan_backward("cumprod_backward", ScanBackwardKind::kProd, grad, &x, &out, nullptr, 0, dim);
}

Tensor logcumsumexp_backward(const Tensor& grad, const Tensor& x, const Tensor& out, int64_t dim) {
  return scan_backward("logcumsumexp_backward", ScanBackwardKind::kLogSumExp, grad, &x, &out, nullptr, 0, dim);
}

Tensor cummaxmin_backward(const Tensor& grad, const Tensor& indices, const Shape& input_shape, int64_t dim,
                          int64_t index_offset) {
  (void)input_shape;  // grad's shape (checked by the CPU kernel)
  return scan_backward("cummaxmin_backward", ScanBackwardKind::kMaxMin, grad, nullptr, nullptr, &indices,
                       index_offset, dim);
}

}  // namespace dtensor::kernels::cuda
